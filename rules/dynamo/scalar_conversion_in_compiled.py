"""DYN102 scalar-conversion-in-compiled: Flags `float(t)`, `int(t)` and `bool(t)` of a tensor inside a
function `torch.compile` traces."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid


class ScalarConversionInCompiled(Rule):
    """## What it does
    Flags `float(t)`, `int(t)` and `bool(t)` of a tensor inside a function `torch.compile` traces.

    ## Why is this bad?
    Converting a tensor to a Python number calls `Tensor.item()`: Dynamo breaks the graph
    ([GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html)), the host
    waits for the value, and the code after it is compiled as another graph (`range(int(t))`
    includes). With `fullgraph=True` compiling raises instead.

    ## Example
    ```python
    @torch.compile
    def scale(x, w):
        s = float(w.norm())
        return x * s
    ```

    Use instead:
    ```python
    @torch.compile
    def scale(x, w):
        return x * w.norm()  # stays a tensor
    ```

    ## References
    - [GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html)
    """

    code, name, category = "DYN102", "scalar-conversion-in-compiled", "item_sync"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    covers = ("XLA103",)  # the same hazard, in torch_xla's words
    summary = "`{func}()` of a tensor inside a compiled function: {consequence} and a host read (GB0124)"
    hint = "keep the value a tensor (arithmetic with 0-d tensors broadcasts); convert after the compiled call"
    gb_ids = ("GB0124",)

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def scale(x, w):
                y = x + 1
                return y * w.norm()

            scale(torch.ones(3), torch.ones(3))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def scale(x, factor):
                return x * float(factor)  # a Python number: no tensor read

            scale(torch.ones(3), 2)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def scale(x, w):
                y = x + 1
                s = float(w.norm())
                return y * s

            scale(torch.ones(3), torch.ones(3))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def repeat(x, n):
                y = x * 2
                for _ in range(int(n.sum())):
                    y = y + 1
                return y

            repeat(torch.ones(3), torch.ones(2))
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not (
            isinstance(node.func, ast.Name)
            and node.func.id in ("float", "int", "bool")
            and len(node.args) == 1
            and not node.keywords
        ):
            return
        options = compiled_options(self.ctx, node)
        if (
            options is None
            or not is_tensor(self.ctx, node.args[0])
            or self.ctx.compiled.captures("capture_scalar_outputs")
        ):
            return
        self.report(node, self.summary.format(func=node.func.id, consequence=break_note(options)))
