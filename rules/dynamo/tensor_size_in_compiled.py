"""DYN103 tensor-size-in-compiled: Flags a tensor used where a Python integer is needed inside a function
`torch.compile` traces: a slice bound (`x[:n]`), `range(n)`, or the size of
`torch.zeros`/`ones`/`empty`/`rand`/`randn`/ `arange`/`full`."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.analysis.names import positional
from xlalint.rule import Invalid, Rule, Valid

# torch factories whose leading arguments are sizes
SIZED = {"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn", "torch.arange", "torch.full"}


class TensorSizeInCompiled(Rule):
    """## What it does
    Flags a tensor used where a Python integer is needed inside a function `torch.compile` traces:
    a slice bound (`x[:n]`), `range(n)`, or the size of `torch.zeros`/`ones`/`empty`/`rand`/`randn`/
    `arange`/`full`.

    ## Why is this bad?
    The bound has to be a Python integer while tracing, so Dynamo reads the tensor's value
    ([GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html); a size
    computed by a reduction such as `lengths.max()`:
    [GB0033](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0033.html) "Data
    dependent operator"): a host read and a graph break. For a slice bound Dynamo cannot resume
    inside the expression, so the whole function runs eagerly (measured: no graph at all). Each
    distinct size would also be a new graph.

    ## Example
    ```python
    @torch.compile
    def head(x, n):  # n: a 0-d tensor
        return x[:n] * 2
    ```

    Use instead:
    ```python
    @torch.compile
    def head(x, n):
        keep = torch.arange(x.shape[0]) < n  # a mask of the same, static shape
        return torch.where(keep, x * 2, 0)
    ```

    ## References
    - [GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html)
    """

    code, name, category = "DYN103", "tensor-size-in-compiled", "varying_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    covers = ("XLA313",)  # the same hazard, in torch_xla's words
    summary = "a tensor as {what} inside a compiled function: {consequence} and a host read (GB0124/GB0033)"
    hint = "keep the static shape and mask (`torch.arange(L) < n` with `torch.where`), or pass the size as an int"
    gb_ids = ("GB0124", "GB0033")

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def head(x, n):
                keep = torch.arange(x.shape[0]) < n
                return torch.where(keep, x * 2, 0)

            head(torch.ones(5), torch.tensor(3))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def head(x):
                n = x.shape[0] // 2  # metadata: a Python int while tracing
                return torch.zeros(n) + x[:n]

            head(torch.ones(6))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def head(x, n):
                y = x * 2
                return y[:n] + 1

            head(torch.ones(5), torch.tensor(3))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def pad(x, lengths):
                y = x * 2
                return torch.cat([y, torch.zeros(lengths.max())])

            pad(torch.ones(3), torch.tensor([2, 4]))
            """,
            line=6,
        ),
    ]

    def visit_Slice(self, node: ast.Slice) -> None:
        for bound in (node.lower, node.upper, node.step):
            if bound is not None and self._tensor_size(bound):
                self.report(bound, self._message(bound, "a slice bound"))
                return

    def visit_Call(self, node: ast.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        args = positional(node)
        if name == "range" or (isinstance(node.func, ast.Name) and node.func.id == "range"):
            sizes, what = args, "a `range` bound"
        elif name in SIZED:
            first = args[:1] if name == "torch.full" else args
            sizes = [e for a in first for e in (a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a])]
            what = f"the size of `{name}`"
        else:
            return
        for size in sizes:
            if self._tensor_size(size):
                self.report(node, self._message(node, what))
                return

    def _tensor_size(self, expr: ast.expr) -> bool:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("int", "float"):
            return False  # `int(t)`: reported as a conversion (DYN102)
        return compiled_options(self.ctx, expr) is not None and is_tensor(self.ctx, expr)

    def _message(self, node: ast.AST, what: str) -> str:
        options = compiled_options(self.ctx, node)
        assert options is not None  # a finding is in compiled code (_tensor_size)
        return self.summary.format(what=what, consequence=break_note(options))
