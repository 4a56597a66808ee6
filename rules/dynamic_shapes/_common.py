"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext


def single_index(node: ast.Subscript) -> ast.expr | None:
    """The one index of `x[i]` (or of `x[i,]`, the same index), None for slices, several or starred indices."""
    index = node.slice
    if isinstance(index, ast.Tuple):
        if len(index.elts) != 1:
            return None
        index = index.elts[0]
    return None if isinstance(index, (ast.Slice, ast.Starred)) else index


def shaped_out(ctx: FileContext, node: ast.AST) -> bool:
    """Code where shapes are irrelevant: not per step, or a branch that never runs on XLA."""
    return not ctx.runs_hot(node)
