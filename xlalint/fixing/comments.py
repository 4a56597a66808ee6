"""Fixes to comments: dropping codes from a `# noqa` directive (XLA901's fix)."""

from __future__ import annotations

import libcst as cst

from ..diagnostics import Fix
from ..noqa import without_codes
from .context import CstContext


def remove_noqa_codes(cctx: CstContext, row: int, directive: tuple[int, int], codes: list[str]) -> Fix | None:
    """Drop `codes` from the `noqa` directive (at columns `directive` of the comment) of the comment
    on `row`; the whole directive when none is left, the whole comment when nothing else is in it."""
    node = next(
        (n for n, where in cctx.positions.items() if isinstance(n, cst.Comment) and where.start.line == row), None
    )
    if node is None:
        return None
    text = without_codes(node.value, directive, codes)
    title = f"Remove unused `noqa` code{'s' if len(codes) > 1 else ''}"
    if text:
        return Fix.replace(node, node.with_changes(value=text), title=title, safe=True)
    parent = cctx.parent(node)
    if isinstance(parent, cst.TrailingWhitespace):
        return Fix.replace(
            parent, parent.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None), title=title, safe=True
        )
    if isinstance(parent, cst.EmptyLine):
        return Fix.replace(parent, parent.with_changes(comment=None), title=title, safe=True)
    return None
