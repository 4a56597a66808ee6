"""DYN112 mask-index-in-compiled: Flags reading a tensor through a boolean mask (`x[x > 0]`,
`x[~torch.isnan(x)]`, `x[m]` with `m` a comparison) inside a function `torch.compile` traces."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.analysis.names import is_number
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid

BOOLEAN = {
    "torch.isnan",
    "torch.isinf",
    "torch.isfinite",
    "torch.logical_and",
    "torch.logical_or",
    "torch.logical_not",
    "torch.logical_xor",
    "torch.eq",
    "torch.ne",
    "torch.gt",
    "torch.lt",
    "torch.ge",
    "torch.le",
    "torch.isclose",
    "torch.signbit",
}
MAX_DEPTH = 8


ELEMENTWISE = {"torch.isnan", "torch.isinf", "torch.isfinite", "torch.isposinf", "torch.isneginf", "torch.signbit"}


def elementwise_of(ctx, mask: ast.expr, base: str, depth: int = 0) -> bool:
    """`mask` is evidently computed elementwise from the tensor named `base` alone (`base > 0`,
    `~torch.isnan(base)`, `(base > 0) & (base < 1)`, or a name holding one): it has its shape."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(mask, ast.Compare):
        operands = [mask.left, *mask.comparators]
        same = [o for o in operands if isinstance(o, ast.Name) and o.id == base]
        return len(same) == 1 and all(o in same or is_number(o) for o in operands)
    if isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert):
        return elementwise_of(ctx, mask.operand, base, depth + 1)
    if isinstance(mask, ast.BinOp) and isinstance(mask.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return elementwise_of(ctx, mask.left, base, depth + 1) and elementwise_of(ctx, mask.right, base, depth + 1)
    if isinstance(mask, ast.Name):
        values = ctx.reaching_values(mask)
        return len(values) == 1 and elementwise_of(ctx, values[0], base, depth + 1)
    if isinstance(mask, ast.Call) and len(mask.args) == 1 and not mask.keywords:
        arg = mask.args[0]
        return (ctx.qualified_name(mask.func) or "") in ELEMENTWISE and isinstance(arg, ast.Name) and arg.id == base
    return False


def is_mask(ctx, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is evidently a boolean tensor: a comparison of tensors, `~m`, `m & n`, `torch.isnan(t)`,
    `t.bool()`, or a name holding one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Compare):
        return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops) and is_tensor(
            ctx, expr
        )
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
        return is_mask(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return is_mask(ctx, expr.left, depth + 1) and is_mask(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return bool(values) and all(is_mask(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Call):
        if (ctx.qualified_name(expr.func) or "") in BOOLEAN:
            return True
        return (
            isinstance(expr.func, ast.Attribute)
            and expr.func.attr == "bool"
            and not expr.args
            and is_tensor(ctx, expr.func.value)
        )
    return False


class MaskIndexInCompiled(Rule):
    """## What it does
    Flags reading a tensor through a boolean mask (`x[x > 0]`, `x[~torch.isnan(x)]`, `x[m]` with `m`
    a comparison) inside a function `torch.compile` traces. Assigning through a mask
    (`x[m] = 0`) is not flagged: Dynamo traces it into the graph (measured, one graph).

    ## Why is this bad?
    The result has as many elements as the mask has `True`s: a data-dependent shape. Dynamo breaks
    the graph ([GB0036](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0036.html),
    through `nonzero`) and runs the read eagerly between two graphs, at every call. With
    `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compile
    def positive_mean(x):
        y = x * 2
        return y[y > 0].mean()
    ```

    Use instead:
    ```python
    @torch.compile
    def positive_mean(x):
        y = x * 2
        m = y > 0
        return torch.where(m, y, 0).sum() / m.sum()  # masked reduction, static shape
    ```
    (`xlalint.runtime.masked_mean(y, m)` does the same.)

    ## Fix safety
    `y[m].sum()` is rewritten to `torch.where(m, y, 0).sum()` (`where`, not `y * m`: a NaN outside
    the mask must not leak in) when the mask is evidently computed elementwise from `y` itself
    (`y > 0`, `~torch.isnan(y)`), so it has `y`'s shape: the same terms are added, the same dtype
    comes out, exact up to summation order. The fix is safe; other masks get no fix.

    ## References
    - [GB0036](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0036.html)
    """

    code, name, category = "DYN112", "mask-index-in-compiled", "dynamic_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    covers = ("XLA302",)  # the same hazard, in torch_xla's words
    summary = (
        "boolean-mask read of a tensor inside a compiled function has a data-dependent shape: {consequence} (GB0036)"
    )
    hint = "keep the full shape: `torch.where(m, x, 0)`, masked reductions (`xlalint.runtime.masked_mean`)"
    fix_availability = "sometimes"
    gb_ids = ("GB0036",)

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def positive_mean(x):
                y = x * 2
                m = y > 0
                return torch.where(m, y, 0).sum() / m.sum()

            positive_mean(torch.tensor([1.0, -2.0, 3.0]))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def clamp_negative(x):
                y = x * 2
                y[y < 0] = 0  # mask assignment: traced, no break
                return y + 1

            clamp_negative(torch.tensor([1.0, -2.0, 3.0]))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def positive_mean(x):
                y = x * 2
                return y[y > 0].mean()

            positive_mean(torch.tensor([1.0, -2.0, 3.0]))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def clean_sum(x):
                y = x * 2
                ok = ~torch.isnan(y)
                return y[ok].sum() + 1

            clean_sum(torch.tensor([1.0, float("nan"), 3.0]))
            """,
            line=7,
            expected_replacement="""
            import torch

            @torch.compile
            def clean_sum(x):
                y = x * 2
                ok = ~torch.isnan(y)
                return torch.where(ok, y, 0).sum() + 1

            clean_sum(torch.tensor([1.0, float("nan"), 3.0]))
            """,
        ),
    ]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load) or isinstance(node.slice, (ast.Slice, ast.Tuple)):
            return
        options = compiled_options(self.ctx, node)
        if options is None or not is_tensor(self.ctx, node.value) or not is_mask(self.ctx, node.slice):
            return
        if self.ctx.compiled.captures("capture_dynamic_output_shape_ops"):
            return
        fix = None
        if (
            isinstance(node.value, ast.Name)
            and elementwise_of(self.ctx, node.slice, node.value.id)
            and _summed(self.ctx, node)
        ):
            torch_name = next((k for k, b in self.ctx.index.imports.items() if b.qualified == "torch"), "torch")
            fix = lambda cctx: _sum_with_where(cctx, node, torch_name)  # noqa: E731
        self.report(node, self.summary.format(consequence=break_note(options)), fix=fix)


def _summed(ctx, node: ast.Subscript) -> bool:
    """`node.sum()`, with no arguments."""
    attribute, call = ctx.parent(node), ctx.parent(ctx.parent(node))
    return (
        isinstance(attribute, ast.Attribute)
        and attribute.attr == "sum"
        and isinstance(call, ast.Call)
        and call.func is attribute
        and not call.args
        and not call.keywords
    )


def _sum_with_where(cctx, node: ast.Subscript, torch_name: str):
    subscript, mask = cctx.locate(node), cctx.locate(node.slice)
    if subscript is None or mask is None:
        return None
    call = cctx.parent(cctx.parent(subscript))  # the `.sum()` around it
    mask, base = cctx.code(mask), cctx.code(subscript.value)
    return Fix.replace(
        call,
        cctx.parse_expression(f"{torch_name}.where({mask}, {base}, 0).sum()"),
        title="Mask with `where` and reduce over the full tensor (exact up to summation order)",
        safe=True,
    )
