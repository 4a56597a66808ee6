"""DYN111 dynamic-shape-op-in-compiled: Flags, inside a function `torch.compile` traces, operators whose
output size depends on the data: `nonzero`, `argwhere`, one-argument `torch.where(c)`, `unique`,
`unique_consecutive`, `masked_select`, and `repeat_interleave` with a tensor of repeats (function or
method form)."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.analysis.names import keyword, positional
from xlalint.rule import Invalid, Rule, Valid

OPS = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select"}


class DynamicShapeOpInCompiled(Rule):
    """## What it does
    Flags, inside a function `torch.compile` traces, operators whose output size depends on the
    data: `nonzero`, `argwhere`, one-argument `torch.where(c)`, `unique`, `unique_consecutive`,
    `masked_select`, and `repeat_interleave` with a tensor of repeats (function or method form).

    ## Why is this bad?
    The graph's shapes must be known while tracing, and these depend on values. By default Dynamo
    breaks the graph ([GB0036](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0036.html)
    "Dynamic shape operator") and runs them eagerly between two graphs, at every call. With
    `torch._dynamo.config.capture_dynamic_output_shape_ops = True` they are captured with
    unbacked sizes (not flagged then); with `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compile
    def positive_sum(x):
        y = x * 2
        idx = torch.nonzero(y > 0).squeeze(1)
        return y[idx].sum()
    ```

    Use instead:
    ```python
    @torch.compile
    def positive_sum(x):
        y = x * 2
        return torch.where(y > 0, y, 0).sum()  # same shape for all data
    ```
    or `torch.nonzero_static(m, size=K)` with a known bound.

    ## References
    - [GB0036](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0036.html)
    """

    code, name, category = "DYN111", "dynamic-shape-op-in-compiled", "dynamic_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    covers = ("XLA301",)  # the same hazard, in torch_xla's words
    summary = "`{op}` has a data-dependent output shape inside a compiled function: {consequence} (GB0036)"
    hint = "keep static shapes: three-argument `torch.where`, masks and masked reductions, `nonzero_static(size=K)`"
    gb_ids = ("GB0036",)

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def positive_sum(x):
                y = x * 2
                return torch.where(y > 0, y, 0).sum()

            positive_sum(torch.tensor([1.0, -2.0, 3.0]))
            """
        ),
        Valid(
            """
            import torch

            torch._dynamo.config.capture_dynamic_output_shape_ops = True

            @torch.compile
            def positive_count(x):
                y = x * 2
                return torch.nonzero(y > 0).shape[0] + y.sum()

            positive_count(torch.tensor([1.0, -2.0, 3.0]))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def positive_sum(x):
                y = x * 2
                idx = torch.nonzero(y > 0).squeeze(1)
                return y[idx].sum()

            positive_sum(torch.tensor([1.0, -2.0, 3.0]))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def classes(labels):
                y = labels + 1
                return y.unique() * 2

            classes(torch.tensor([0, 1, 1]))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def expand(x, counts):
                y = x * 2
                return torch.repeat_interleave(y, counts) + 1

            expand(torch.ones(3), torch.tensor([1, 2, 3]))
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        op = self._op(node)
        if op is None:
            return
        options = compiled_options(self.ctx, node)
        if options is None or self.ctx.compiled.captures("capture_dynamic_output_shape_ops"):
            return
        self.report(node, self.summary.format(op=op, consequence=break_note(options)))

    def _op(self, node: ast.Call) -> str | None:
        name = self.ctx.qualified_name(node.func) or ""
        args = positional(node)
        if name.startswith("torch.") and name.count(".") == 1:
            func, tensor, rest = name[6:], (args[0] if args else None), args[1:]
        elif isinstance(node.func, ast.Attribute) and not name.startswith("torch."):
            func, tensor, rest = node.func.attr, node.func.value, args
        else:
            return None
        if not is_tensor(self.ctx, tensor):
            return None
        if func in OPS:
            return func
        if func == "where" and not rest and not node.keywords and name == "torch.where":
            return "torch.where(cond)"
        if func == "repeat_interleave":
            written = keyword(node, "repeats")
            repeats = rest[0] if rest else (written.value if written else None)
            if repeats is not None and is_tensor(self.ctx, repeats):
                return "repeat_interleave"
        return None
