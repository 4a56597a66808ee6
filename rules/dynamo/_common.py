"""What the torch.compile rules share: where a node is compiled and with which options, whether a
value is evidently a tensor there, and the wording a break or a recompile gets under those options."""

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
        return "an error at compile time (`fullgraph=True`)"
    return "a graph break"


def recompile_note(options: CompileOptions) -> str:
    """What a new value costs under these options."""
    if options.static:
        return f"a recompile per value{options.describe()}, eager after 8"
    return "a recompile per value"
