"""Small helpers shared by rule families."""

from __future__ import annotations

import libcst as cst

from xlalint.analysis.context import FileContext


def reportable_sync(ctx: FileContext, node: cst.CSTNode) -> bool:
    """A host sync at `node` costs something: it runs every step (or on every call of a loss or
    metric check), may run on XLA, and is not building an error message being raised."""
    return ctx.runs_hot(node)


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
