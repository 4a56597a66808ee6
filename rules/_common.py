"""Small helpers shared by rule families."""

from __future__ import annotations

import libcst as cst

from xlalint.analysis.context import FileContext


def reportable_sync(ctx: FileContext, node: cst.CSTNode) -> bool:
    """A host sync at `node` costs something: it runs every step, may run on XLA, and is not
    building an error message (`raise ValueError(f"... {t}")` runs once, when failing)."""
    return ctx.is_per_step(node) and not ctx.in_non_xla_code(node) and not _in_raise(ctx, node)


def _in_raise(ctx: FileContext, node: cst.CSTNode) -> bool:
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, cst.Raise):
            return True
        if isinstance(anc, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    return False


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
