"""XLA901 unused-noqa: Flags xlalint codes in a `# noqa: CODES` comment that suppress no finding on
their line (Ruff's RUF100)."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid


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
    judges_noqa = True  # the engine reports it from the file's noqa comments, after the other rules

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
        Invalid(
            "import torch\nx = torch.ones(3)  # noqa: XLA101\n",
            line=2,
            expected_replacement="import torch\nx = torch.ones(3)\n",
        ),
        Invalid(
            "import torch\nx = torch.ones(3)  # type: ignore  # noqa: XLA101, E501\n",
            line=2,
            expected_replacement="import torch\nx = torch.ones(3)  # type: ignore  # noqa: E501\n",
        ),
        Invalid(
            "import torch\nx = torch.ones(3)  # noqa: XLA101 -- kept for the tracer\n",
            line=2,
            expected_replacement="import torch\nx = torch.ones(3)  # -- kept for the tracer\n",
        ),
    ]

    @classmethod
    def stale(cls, comment, codes: list[str]):
        """The message and the fix builder for `codes` of `comment` (an `xlalint.noqa.NoqaComment`)
        that suppress nothing."""
        message = cls.summary.format(codes=", ".join(f"`{c.upper()}`" for c in codes))

        def fix(cctx):
            from xlalint.fixing.comments import remove_noqa_codes  # loads libcst: only when a fix is built

            return remove_noqa_codes(cctx, comment.row, comment.directive, codes)

        return message, fix
