"""xlalint's own comments: `# noqa` codes that suppress nothing (Ruff's RUF100)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlalint.diagnostics import Fix
from xlalint.fixing.lazy import cst
from xlalint.noqa import NoqaComment, without_codes
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


class UnusedNoqa(Rule):
    """## What it does
    Flags xlalint codes in a `# noqa: CODES` comment that suppress no finding on their line: the
    hazard was fixed or moved, or the code is wrong. Only codes of rules that ran on the file are
    judged (a `# noqa` for a rule not selected, a bare `# noqa` and other tools' codes such as
    `E501` are left alone), and never the file-wide `# xlalint: noqa`.

    ## Why is this bad?
    A stale suppression hides the next hazard written on that line, and a baseline made with
    `xlalint check --add-noqa` rots as the code changes: nobody can tell which comments still
    silence something.

    ## Example
    ```python
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        total += loss.detach()  # noqa: XLA101
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        total += loss.detach()
    ```

    ## Fix safety
    Safe: the fix removes the unused codes from the comment, or the whole `noqa` directive when
    none is left (text around it in the comment stays); no code changes.
    """

    code, name, category = "XLA901", "unused-noqa", "other"
    summary = "unused `noqa` code: {codes}"
    fix_availability = "always"
    judges_noqa = True  # the engine reports it from the file's `# noqa` comments after the other rules

    VALID = [
        Valid("import torch\nx = torch.ones(3)  # noqa: E501\n"),  # another tool's code
        Valid("import torch\nx = torch.ones(3)  # noqa\n"),  # bare: may serve another tool
        Valid("import torch\nx = torch.ones(3)  # noqa: XLA999\n"),  # no such rule ran: not judged
        Valid("""
            import torch_xla.core.xla_model as xm
            for x in loader:
                loss = model(x)
                loss.backward()
                xm.optimizer_step(opt, barrier=True)
                print(loss.item())  # noqa: XLA101
            """),
    ]
    INVALID = [
        Invalid("import torch\nx = torch.ones(3)  # noqa: XLA101\n", line=2,
                expected_replacement="import torch\nx = torch.ones(3)\n"),
        Invalid("import torch\nx = torch.ones(3)  # type: ignore  # noqa: XLA101, E501\n", line=2,
                expected_replacement="import torch\nx = torch.ones(3)  # type: ignore  # noqa: E501\n"),
        Invalid("import torch\nx = torch.ones(3)  # noqa: XLA101 -- kept for the tracer\n", line=2,
                expected_replacement="import torch\nx = torch.ones(3)  # -- kept for the tracer\n"),
    ]

    @classmethod
    def stale(cls, comment: NoqaComment, codes: list[str]):
        """The message and the fix builder for `codes` of `comment` that suppress nothing."""
        message = cls.summary.format(codes=", ".join(f"`{c.upper()}`" for c in codes))
        return message, lambda cctx: _fix(cctx, comment, codes)


def _fix(cctx: "CstContext", comment: NoqaComment, codes: list[str]) -> Fix | None:
    node = next((n for n, where in cctx.positions.items()
                 if isinstance(n, cst.Comment) and where.start.line == comment.row), None)
    if node is None:
        return None
    text = without_codes(node.value, comment.directive, codes)
    title = f"Remove unused `noqa` code{'s' if len(codes) > 1 else ''}"
    if text:
        return Fix.replace(node, node.with_changes(value=text), title=title, safe=True)
    parent = cctx.parent(node)
    if isinstance(parent, cst.TrailingWhitespace):
        return Fix.replace(parent, parent.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None),
                           title=title, safe=True)
    if isinstance(parent, cst.EmptyLine):
        return Fix.replace(parent, parent.with_changes(comment=None), title=title, safe=True)
    return None
