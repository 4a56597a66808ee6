"""torch.compile rules (DYN1xx graph breaks, DYN2xx recompilations): hazards inside the functions
Dynamo traces (see `xlalint.analysis.compiled`), proven under Dynamo in tests/rules/test_dynamo_rules.py.

One rule per module; this module holds what they share: where a node is compiled and with which
options, whether a value is evidently a tensor there, and the wording a break or a recompile gets
under those options.
"""

from __future__ import annotations

import ast

from xlalint.analysis.compiled import CompileOptions
from xlalint.analysis.context import FileContext
from xlalint.analysis.tensors import Kind

GB_PAGE = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{id}.html"  # as Dynamo prints it


def gb_page(gb_id: str) -> str:
    """The graph-break registry's page for an id such as `GB0124`."""
    return GB_PAGE.format(id=gb_id.lower())


def compiled_options(ctx: FileContext, node: ast.AST) -> CompileOptions | None:
    """The options of the compiled region around `node`; None outside compiled code."""
    regions = ctx.compiled
    return regions.options(node) if regions.region(node) is not None else None


def is_tensor(ctx: FileContext, expr: ast.expr | None) -> bool:
    """`expr` is evidently a tensor: under compile a CPU tensor breaks the graph as a device one does."""
    return ctx.tensor_kind(expr) >= Kind.CPU


def break_note(options: CompileOptions) -> str:
    """What a graph break costs under these options."""
    if options.fullgraph:
        return "with `fullgraph=True` compiling raises `Unsupported`"
    return "a graph break: the graph is split and the code between runs eagerly"


def recompile_note(options: CompileOptions) -> str:
    """What a new value costs under these options."""
    if options.static:
        return f"a recompilation per value{options.describe()}, then eager after the limit of 8"
    return "a recompilation per value"


from . import (compile_in_loop, disabled_callee, dynamic_shape_op, host_read, logging_call,  # noqa: E402
               mask_index, module_counter, one_hot, print_call, scalar_argument, scalar_conversion,
               scheduled_lr, tensor_branch, tensor_size, untraceable_call, varying_shape)

MODULES = (host_read, scalar_conversion, tensor_size, tensor_branch, print_call, logging_call, dynamic_shape_op,
           mask_index, one_hot, untraceable_call, disabled_callee, scalar_argument, module_counter, scheduled_lr,
           varying_shape, compile_in_loop)
