"""What the TorchTPU rules share: the version they were checked against and how a fix names `torch`."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext
from xlalint.diagnostics import ImportRequest

CHECKED = "torch-tpu 0.2.0 (torch>=2.11,<=2.15)"
WHEEL = "torch_tpu-0.2.0 wheel"


def spell_module(ctx: FileContext, module: str, use: ast.AST) -> tuple[str, list[ImportRequest]] | None:
    """How fixed code names `module` (`torch`, `torch.distributed`) at `use`, and the import it needs.

    An import of the module itself (`import torch.distributed as dist`) is reused; else the dotted
    name, with `import <module>` when `torch` is not bound to something else. None: no safe spelling.
    """
    for binding in ctx.index.import_bindings:
        if binding.qualified == module and ctx.index.imports.get(binding.name) is binding:
            return binding.name, []
    top = module.split(".")[0]
    bound = ctx.index.imports.get(top)
    if bound is not None and bound.qualified != top:
        return None  # `torch` names something else here
    if bound is None and (top in ctx.index.bare_names or any(top in names for names in ctx.index.assignments.values())):
        return None
    return module, ([] if bound is not None and module == top else [ImportRequest(module)])
