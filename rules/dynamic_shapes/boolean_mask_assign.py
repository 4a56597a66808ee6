"""XLA303 boolean-mask-assign: Flags assigning through a boolean mask, `x[mask] = v`, on a per-step
path, where `x` is a device tensor and the index is evidently a bool tensor."""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, cast

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, string_value
from xlalint.analysis.tensors import Kind, elementwise_of, is_bool_mask
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import shaped_out, single_index

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


# -- XLA303 ----------------------------------------------------------------------------------------


class BooleanMaskAssign(Rule):
    """## What it does
    Flags assigning through a boolean mask, `x[mask] = v`, on a per-step path, where `x` is a
    device tensor and the index is evidently a bool tensor.

    ## Why is this bad?
    On CUDA and CPU this looks free: ATen's `_index_put_impl_` kernel checks
    `canDispatchToMaskedFill` and turns a single bool mask with a one-element value into a
    `masked_fill_` (pytorch #57515 / PR #61612). That check lives inside the CPU/CUDA kernel.
    torch_xla registers its own `index_put_` and `_index_put_impl_` (torch_xla/csrc/aten_xla_type.cpp),
    and its index canonicalisation (`GetCanonicalIndexInfo` -> `ExpandByteTensors` in
    torch_xla/csrc/ops/index_ops.cpp) replaces every bool mask with `mask.nonzero()`. So on XLA,
    `x[m] = 0.0` runs `nonzero` (a CPU fallback: the pending graph executes and the mask goes to
    the host) and then an `index_put` whose index count is data dependent, a new graph for every
    distinct count (pytorch/xla #4248, still open, shows the early execution and the data-dependent
    `index_put`). Under torchax the same assignment is `x.at[m].set(v)`, which JAX rejects inside
    `jit` (`NonConcreteBooleanIndexError`). With a tensor value (`x[m] = y[m]`) the value's size is
    data dependent too.

    ## Example
    ```python
    def forward(self, scores):
        scores[scores < self.threshold] = float("-inf")
        return scores.softmax(-1)
    ```

    Use instead:
    ```python
    def forward(self, scores):
        scores = scores.masked_fill(scores < self.threshold, float("-inf"))
        return scores.softmax(-1)
    ```

    For a tensor value use `torch.where(m, y, x)` with `y` shaped like `x`.

    ## Fix safety
    `x[m] = v` with a Python scalar `v` becomes `x.masked_fill_(m, v)`, which stays in place like
    the original. It is safe when the mask is built elementwise from that same `x` (so it has `x`'s
    shape; the `x` in the mask must be the binding indexed, not an earlier one of the same name) and
    `v` fits every float dtype `x` may have: `|v| <= 65504` (float16's largest), inf or nan.
    Otherwise it is unsafe: a row mask of shape `(N,)` over `x` of shape `(N, D)` fills whole rows
    through indexing, but `masked_fill_` broadcasts it against the last dimension; and on a float16
    tensor (autocast) `x[m] = -1e9` saturates to `-inf` while `masked_fill_` raises ("value cannot
    be converted to type at::Half without overflow").
    """

    code, name, category = "XLA303", "boolean-mask-assign", "dynamic_shape"
    evidence = ("step",)
    summary = "boolean-mask assignment on XLA goes through `index_put` with `nonzero` indices: a fallback and data-dependent shapes"
    hint = "use `x.masked_fill_(m, v)` for a scalar, `torch.where(m, y, x)` for tensor values"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            def forward(self, scores, idx):
                scores[idx] = 0.0  # integer index tensor: a scatter, static shape
                scores[:, 0] = 1.0
                return scores
            """
        ),
        Valid(
            """
            def forward(self, scores):
                return scores.masked_fill(scores < 0, 0.0)
            """
        ),
        Valid(
            """
            def build_weights(counts):
                w = torch.ones(10)
                w[counts == 0] = 0.0  # setup, CPU
                return w
            """
        ),
        Valid(
            """
            for batch in loader:
                arr = batch["boxes"].numpy()
                arr[arr < 0] = 0  # NumPy
                loss = model(batch).loss
                loss.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            class Sparsify(nn.Module):
                def __init__(self, threshold: float = 0.1):
                    super().__init__()
                    self.threshold = threshold

                def forward(self, scores):
                    scores[scores < self.threshold] = float("-inf")
                    return scores.softmax(-1)
            """,
            line=7,
            expected_replacement="""
            class Sparsify(nn.Module):
                def __init__(self, threshold: float = 0.1):
                    super().__init__()
                    self.threshold = threshold

                def forward(self, scores):
                    scores.masked_fill_(scores < self.threshold, float("-inf"))
                    return scores.softmax(-1)
            """,
        ),
        Invalid(
            """
            def forward(self, x, pad_mask):
                h = self.encoder(x)
                h[pad_mask] = 0.0  # a (B, T) mask over (B, T, D) features
                return h
            """,
            line=3,
            expected_replacement="""
            def forward(self, x, pad_mask):
                h = self.encoder(x)
                h.masked_fill_(pad_mask, 0.0)  # a (B, T) mask over (B, T, D) features
                return h
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            def forward(self, x, y):
                out = self.layer(x)
                keep = torch.isfinite(y)
                out[keep] = y[keep]
                return out
            """,
            line=4,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            return
        target = node.targets[0]
        mask = single_index(target)
        if mask is None or not is_bool_mask(self.ctx, mask):
            return
        if self.ctx.tensor_kind(target.value) in (Kind.NOT_TENSOR, Kind.CPU) or shaped_out(self.ctx, node):
            return
        if not _python_scalar(self.ctx, node.value):
            self.report(target)
            return
        safe = elementwise_of(self.ctx, mask, target.value) and _fits_every_float(_scalar_value(self.ctx, node.value))
        self.report(target, fix=lambda cctx: _masked_fill(cctx, node, mask, safe))


def _masked_fill(cctx: CstContext, node: ast.Assign, mask: ast.expr, safe: bool) -> Fix:
    assign = cctx.find(node, cst.Assign)
    subscript = cast(cst.Subscript, assign.targets[0].target)  # `x[m] = v`, as the rule found
    base, value = cctx.code(subscript.value), cctx.code(assign.value)
    mask_code = cctx.code(cctx.find(mask))
    new = cst.Expr(cctx.parse_expression(f"{base}.masked_fill_({mask_code}, {value})"))
    return Fix.replace(assign, new, title="Use `masked_fill_` (static shape)", safe=safe)


_CONSTANTS = {
    "math.inf": math.inf,
    "math.nan": math.nan,
    "math.pi": math.pi,
    "numpy.inf": math.inf,
    "numpy.nan": math.nan,
}
FLOAT16_MAX = 65504.0  # torch.finfo(torch.float16).max


def _scalar_value(ctx: FileContext, value: ast.expr) -> float | None:
    """The number a `_python_scalar` expression holds (None when it can't be told)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):  # (bool is an int)
        return value.value
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        inner = _scalar_value(ctx, value.operand)
        return None if inner is None else -inner
    if isinstance(value, ast.Call) and dotted_name(value.func) == "float" and value.args:
        try:
            return float(string_value(value.args[0]) or "")
        except ValueError:
            return None
    return _CONSTANTS.get(ctx.qualified_name(value) or "")


def _fits_every_float(value: float | None) -> bool:
    """`masked_fill_` raises for a value its tensor's dtype overflows, where `x[m] = v` saturates to
    +-inf: `-1e9` (the attention-mask idiom) on a float16 tensor under autocast. Integer dtypes
    raise either way; every float dtype holds what float16 holds, and inf and nan."""
    return value is not None and (math.isinf(value) or math.isnan(value) or abs(value) <= FLOAT16_MAX)


def _python_scalar(ctx: FileContext, value: ast.expr) -> bool:
    if isinstance(value, ast.Constant) and type(value.value) in (int, float, bool):
        return True
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        return _python_scalar(ctx, value.operand)
    if (
        isinstance(value, ast.Call)
        and dotted_name(value.func) == "float"
        and len(value.args) == 1
        and not value.keywords
        and string_value(value.args[0]) is not None
    ):
        return True  # float("-inf")
    if isinstance(value, ast.Attribute) and ctx.qualified_name(value) in (
        "math.inf",
        "math.nan",
        "math.pi",
        "numpy.inf",
        "numpy.nan",
    ):
        return True
    return False
