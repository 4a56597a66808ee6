"""DYN113 one-hot-without-num-classes: Flags `F.one_hot(t)` without `num_classes` inside a function
`torch.compile` traces."""

from __future__ import annotations

import ast
from typing import cast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.analysis.names import dotted_name, keyword, positional
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid

ONE_HOT = {"torch.nn.functional.one_hot", "torch.one_hot"}
PASSING = {"float", "half", "bfloat16", "double", "long", "int", "to", "type_as"}  # keep the width


class OneHotWithoutNumClasses(Rule):
    """## What it does
    Flags `F.one_hot(t)` without `num_classes` inside a function `torch.compile` traces.

    ## Why is this bad?
    Without `num_classes` the width is `t.max() + 1`: a value read from the data, so the output
    shape is data-dependent. Dynamo breaks the graph
    ([GB0246](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0246.html)) at every
    call; with `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compile
    def nll(logits, labels):
        return -(F.one_hot(labels) * logits.log_softmax(-1)).sum(-1)
    ```

    Use instead:
    ```python
    @torch.compile
    def nll(logits, labels):
        return -(F.one_hot(labels, num_classes=logits.shape[-1]) * logits.log_softmax(-1)).sum(-1)
    ```

    ## Fix safety
    When the result is combined elementwise with a tensor in the same expression
    (`F.one_hot(y) * logits`, through `.float()` or `.to(...)`), the width must equal that tensor's
    last dimension for the code to run at all, so the safe fix passes
    `num_classes=<that tensor>.shape[-1]`: the same result, one graph.

    ## References
    - [GB0246](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0246.html)
    """

    code, name, category = "DYN113", "one-hot-without-num-classes", "dynamic_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = (
        "`one_hot` without `num_classes` inside a compiled function: a data-dependent width, {consequence} (GB0246)"
    )
    hint = "pass `num_classes=` (the number of classes, e.g. `logits.shape[-1]`)"
    fix_availability = "sometimes"
    gb_ids = ("GB0246",)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn.functional as F

            @torch.compile
            def nll(logits, labels):
                return -(F.one_hot(labels, num_classes=logits.shape[-1]) * logits.log_softmax(-1)).sum(-1)

            nll(torch.randn(2, 3), torch.tensor([0, 2]))
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F

            @torch.compile
            def encode(labels):
                return F.one_hot(labels, 10).float() * 2

            encode(torch.tensor([0, 2]))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            @torch.compile
            def nll(logits, labels):
                p = logits.log_softmax(-1)
                return -(F.one_hot(labels).float() * p).sum(-1)

            nll(torch.randn(2, 3), torch.tensor([0, 2]))
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch.nn.functional as F

            @torch.compile
            def nll(logits, labels):
                p = logits.log_softmax(-1)
                return -(F.one_hot(labels, num_classes=p.shape[-1]).float() * p).sum(-1)

            nll(torch.randn(2, 3), torch.tensor([0, 2]))
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            @torch.compile
            def encode(labels):
                y = labels + 0
                return F.one_hot(y).sum(0)

            encode(torch.tensor([0, 2]))
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if (
            (self.ctx.qualified_name(node.func) or "") not in ONE_HOT
            or keyword(node, "num_classes") is not None
            or len(positional(node)) != 1
            or len(node.args) != 1
        ):
            return
        options = compiled_options(self.ctx, node)
        if options is None:
            return
        width = self._width(node)
        fix = (lambda cctx: _with_num_classes(cctx, node, width)) if width is not None else None
        self.report(node, self.summary.format(consequence=break_note(options)), fix=fix)

    def _width(self, node: ast.Call) -> str | None:
        """`<t>.shape[-1]` for the tensor `t` the result is combined with elementwise, if evident."""
        current: ast.AST = node
        parent = self.ctx.parent(current)
        while (
            isinstance(parent, ast.Attribute)
            and parent.attr in PASSING
            and isinstance(self.ctx.parent(parent), ast.Call)
        ):
            current = cast(ast.Call, self.ctx.parent(parent))  # a Call: the loop's condition
            parent = self.ctx.parent(current)
        if not (isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Mult, ast.Add, ast.Sub))):
            return None
        other = parent.right if parent.left is current else parent.left
        name = dotted_name(other)
        return f"{name}.shape[-1]" if name and is_tensor(self.ctx, other) else None


def _with_num_classes(cctx, node: ast.Call, width: str):
    from xlalint.fixing.cst_names import with_keyword

    call = cctx.locate(node)
    if call is None:
        return None
    return Fix.replace(
        call,
        with_keyword(call, "num_classes", cctx.parse_expression(width)),
        title=f"Pass `num_classes={width}` (the width the expression needs)",
        safe=True,
    )
