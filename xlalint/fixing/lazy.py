"""`libcst`, loaded on first use. Importing it costs about 0.2 s, more than a warm run's whole work,
and most runs never build a fix: rule modules take `cst` from here and name `CstContext` only in
annotations, so the library loads when a fix builder first touches a libcst class."""

from __future__ import annotations

import importlib.util
import sys


def lazy_module(name: str):
    """The module `name`, executed on its first attribute access (`importlib.util.LazyLoader`)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - libcst is a dependency
        raise ModuleNotFoundError(f"No module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


cst = lazy_module("libcst")
