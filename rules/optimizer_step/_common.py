"""What the rules of this family share: the fix that adds a step barrier. (The step model itself is
analysis: `xlalint.analysis.barriers`, `FileContext.barriers`.)"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.diagnostics import Fix
from xlalint.fixing.lazy import cst

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


SIMPLE_STATEMENTS = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)


def simple_statement(ctx: FileContext, node: ast.AST) -> ast.stmt | None:
    """The simple statement whose evaluation runs `node` (not in a lambda or comprehension, whose
    body runs at another time or several times): a barrier goes right after it."""
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return None
        if isinstance(anc, ast.stmt):
            return anc if isinstance(anc, SIMPLE_STATEMENTS) else None
    return None


def insert_sync_after(cctx: CstContext, statement: ast.stmt) -> Fix | None:
    """`xlalint.runtime.sync()` right after `statement`, on a line of its own (or after a `;` when the
    statement shares its line)."""
    small = cctx.locate(statement)
    line = cctx.parent(small) if small is not None else None
    if not isinstance(small, cst.BaseSmallStatement) or not isinstance(
        line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)
    ):
        return None
    spelled, request = cctx.importable("xlalint.runtime", "sync")
    barrier = cst.Expr(cctx.parse_expression(f"{spelled}()"))
    title = f"Add `{spelled}()` (a step barrier) after it"
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        replacement = cst.FlattenSentinel([line, cst.SimpleStatementLine(body=[barrier])])
    else:
        body = list(line.body)
        position = next(i for i, s in enumerate(body) if s is small)
        if position == len(body) - 1 and isinstance(small.semicolon, cst.Semicolon):
            barrier = barrier.with_changes(semicolon=small.semicolon)  # keep a trailing `;` last
            body[position] = small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        body.insert(position + 1, barrier)
        replacement = line.with_changes(body=body)
    return Fix.replace(line, replacement, title=title, safe=True, imports=[request])
