"""DYN104 tensor-branch-in-compiled: Flags `if`, `while` and conditional expressions whose test is a tensor
(`if loss > 0:`, `while err.max() > tol:`, `a if t.any() else b`) inside a function `torch.compile`
traces."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid


class TensorBranchInCompiled(Rule):
    """## What it does
    Flags `if`, `while` and conditional expressions whose test is a tensor (`if loss > 0:`,
    `while err.max() > tol:`, `a if t.any() else b`) inside a function `torch.compile` traces.
    An `assert` on a tensor is not flagged: Dynamo traces it into the graph (measured, one graph).

    ## Why is this bad?
    Which way the branch goes depends on the tensor's values, which do not exist while tracing:
    Dynamo breaks the graph ([GB0170](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html)
    "Data-dependent branching"), runs the test on the host and compiles each side as its own
    graph. `capture_scalar_outputs` does not help. With `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compile
    def relu_or_zero(x, t):
        if t.sum() > 0:
            return torch.relu(x)
        return torch.zeros_like(x)
    ```

    Use instead:
    ```python
    @torch.compile
    def relu_or_zero(x, t):
        return torch.where(t.sum() > 0, torch.relu(x), torch.zeros_like(x))  # both sides, on the device
    ```
    or `torch.cond(pred, true_fn, false_fn, (x,))` for branches with different work.

    ## References
    - [GB0170](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html)
    - PyTorch docs, `torch.cond`
    """

    code, name, category = "DYN104", "tensor-branch-in-compiled", "control_flow_on_tensor"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    torch_not_held = {"VALID_2": {"2.11": "torch 2.11 breaks the graph at `tensor == None` (GB0208): fixed in 2.13"}}
    # stable: right on 25 of 26 executed lines of the real-code oracle (benchmarks/compile_oracle)
    covers = ("XLA201",)  # the same hazard, in torch_xla's words
    summary = "Python branches on a tensor inside a compiled function: {consequence} (GB0170)"
    hint = "select on the device with `torch.where`, or use `torch.cond` for branches with different work"
    gb_ids = ("GB0170",)

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def relu_or_zero(x, t):
                y = x * 2
                return torch.where(t.sum() > 0, torch.relu(y), torch.zeros_like(y))

            relu_or_zero(torch.ones(3), torch.ones(3))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def checked(x, mask):
                assert (x == x).all()  # traced into the graph: no break
                if x.shape[0] > 2 and mask is not None:
                    return x * mask
                return x

            checked(torch.ones(3), torch.ones(3))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def gather_into(x, output=None):
                if output == None:  # a tensor is never equal to None: a Python bool, no break
                    output = torch.zeros_like(x)
                return output.add_(x)

            gather_into(torch.ones(3), torch.ones(3))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def relu_or_zero(x, t):
                y = x * 2
                if t.sum() > 0:
                    return torch.relu(y)
                return torch.zeros_like(y)

            relu_or_zero(torch.ones(3), torch.ones(3))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def halve_until_small(x):
                y = x * 2
                while y.max() > 1:
                    y = y / 2
                return y

            halve_until_small(torch.full((3,), 8.0))
            """,
            line=6,
        ),
    ]

    def visit_If(self, node: ast.If) -> None:
        self._test(node.test)

    def visit_While(self, node: ast.While) -> None:
        self._test(node.test)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._test(node.test)

    def _test(self, test: ast.expr) -> None:
        options = compiled_options(self.ctx, test)
        if options is None or not is_tensor(self.ctx, test):
            return
        self.report(test, self.summary.format(consequence=break_note(options)))
