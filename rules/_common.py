"""Small helpers shared by rule families."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext


def reportable_sync(ctx: FileContext, node: ast.AST) -> bool:
    """A host sync at `node` costs something: it runs every step (or on every call of a loss or
    metric check), may run on XLA, and is not building an error message being raised."""
    return ctx.runs_hot(node)

