"""The runtime is shipped into user training code: it may import only torch and the stdlib."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import xlalint.runtime

RUNTIME_DIR = pathlib.Path(xlalint.runtime.__file__).parent
FORBIDDEN = ("libcst", "click", "pathspec", "xlalint.cli", "torch_xla", "jax", "torchax")


def test_public_api():
    assert xlalint.runtime.__all__ == [
        "DeviceAccumulator",
        "bucket_size",
        "clip_grad_norm_",
        "masked_count",
        "masked_max",
        "masked_mean",
        "masked_min",
        "masked_sum",
        "nonzero_static",
        "optimizer_step",
        "pad_sequences",
        "pad_to_bucket",
        "sync",
    ]
    assert xlalint.runtime.__doc__ and "xlalint fix" in xlalint.runtime.__doc__
    for name in xlalint.runtime.__all__:
        assert callable(getattr(xlalint.runtime, name))
        assert name in xlalint.runtime.__doc__  # the package docstring lists every export


def test_fresh_import_loads_nothing_forbidden(tmp_path):
    code = (
        "import json, sys, xlalint.runtime\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('libcst', 'click', 'pathspec', 'torch_xla', 'jax', 'torchax', 'xlalint'))))"
    )
    # cwd=tmp_path: import the installed package, not whatever ./xlalint the cwd holds.
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.startswith(FORBIDDEN)], loaded
    assert "xlalint.runtime" in loaded
    # Beyond the package itself, only the parent package may load (Python imports it first).
    assert all(m == "xlalint" or m.startswith("xlalint.runtime") for m in loaded), loaded


def _imports(tree):
    """(module, at_module_level) for every import in a module's AST."""
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or ""), id(node) in top_level or node.level > 0


def test_source_imports_only_torch_and_stdlib():
    files = sorted(RUNTIME_DIR.glob("*.py"))
    assert len(files) >= 4
    for path in files:
        for module, top_level in _imports(ast.parse(path.read_text(), str(path))):
            root = module.split(".")[0]
            if module.startswith(".") or root in sys.stdlib_module_names or root == "torch":
                continue
            # torch_xla only inside a function (lazy), never at import time.
            assert root == "torch_xla" and not top_level, f"{path.name}: import {module}"
