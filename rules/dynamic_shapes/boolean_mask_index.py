"""XLA302 boolean-mask-index: Flags reading a device tensor through a boolean mask, `y = x[mask]`, on a
per-step path, where the index is evidently a bool tensor."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.analysis.tensors import Kind, elementwise_of, is_bool_mask
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import shaped_out, single_index

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


def _torch_spelling(ctx: FileContext) -> tuple[str, list[ImportRequest]]:
    """The file's own name for the torch module (`torch`, `th`...), and the import a fix needs."""
    for local, binding in ctx.index.imports.items():
        if binding.qualified == "torch":
            return local, []
    return "torch", [ImportRequest("torch")]


# -- XLA302 ----------------------------------------------------------------------------------------


class BooleanMaskIndex(Rule):
    """## What it does
    Flags reading a device tensor through a boolean mask, `y = x[mask]`, on a per-step path, where
    the index is evidently a bool tensor: a comparison of tensors, `~m`, `m & n`, `torch.isnan(...)`,
    `.bool()`, `dtype=torch.bool`, a name assigned from one of those, or a tensor named like a mask
    that nothing shows to hold integer indices (`argmax`, `arange`, `topk(...).indices`, `.long()`,
    `nonzero`, `torch.where(c)`: a gather of static size; a `nonzero` is XLA301's).

    ## Why is this bad?
    The result has as many elements as the mask has `True` values, which only the data knows.
    torch_xla turns the mask into indices with `nonzero` (a CPU fallback: the graph executes and
    the mask is copied to the host), and every distinct count gives downstream code a new shape
    to compile.

    ## Example
    ```python
    def forward(self, logits, labels):
        valid = labels != -100
        return self.loss(logits[valid], labels[valid])
    ```

    Use instead:
    ```python
    def forward(self, logits, labels):
        return self.loss(logits, labels)  # ignore_index=-100 masks on the device
    ```

    For reductions keep all elements and mask them: `x[m].sum()` becomes
    `torch.where(m, x, 0).sum()`; `x[m].mean()`, `.max()` and `.min()` become the runtime's
    `masked_mean(x, m)`, `masked_max(x, m)` and `masked_min(x, m)`.

    ## Fix safety
    `x[m].sum()` is rewritten to `torch.where(m, x, 0).sum()` (`where`, not `x * m`: a NaN
    outside the mask must not leak into the sum). The result has the same dtype (int64 for integer
    and bool `x`, `x`'s own for floats) and adds the same terms; it is exact up to summation order:
    integer sums are equal, a float sum may differ in its last bits, as torch's own `sum()` does
    from one thread count to another (it fixes no order). The fix is safe when the mask is built
    elementwise from that same `x` (`x[x > 0].sum()`, `x[~torch.isnan(x)].sum()`; an earlier binding
    of the name does not count), so it has `x`'s shape. Otherwise it is unsafe: a row mask of shape
    `(N,)` over `x` of shape `(N, D)` selects whole rows, while `where` broadcasts it against the
    last dimension (a wrong result or an error).

    `x[m].mean()`, `x[m].max()` and `x[m].min()` are rewritten to `xlalint.runtime.masked_mean(x, m)`,
    `masked_max` and `masked_min`, always as unsafe fixes: the code then imports xlalint at run
    time, the mask's broadcasting applies as above, and where the original raises the runtime
    returns a value (an integer `x`'s mean; the max or min of an empty selection, which is the
    reduction's identity, `-inf` for a float max).
    """

    code, name, category = "XLA302", "boolean-mask-index", "dynamic_shape"
    evidence = ("step",)
    summary = "boolean-mask indexing of a device tensor has a data-dependent shape (`nonzero` fallback)"
    hint = "keep the full shape and mask instead: `torch.where(m, x, 0)`, loss `ignore_index`, masked reductions"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            def forward(self, x, idx):
                picked = x[idx]  # integer indices: a gather with a static shape
                first = x[:, 0]
                return picked, first
            """
        ),
        Valid(
            """
            def forward(self, x):
                x = torch.where(x > 0, x, torch.zeros_like(x))
                return x.sum()
            """
        ),
        Valid(
            """
            def forward(self, x):
                x[x < 0] = 0.0  # an assignment: XLA303's business
                return x
            """
        ),
        Valid(
            """
            arr = np.random.rand(10)
            for batch in loader:
                kept = arr[arr > 0.5]  # NumPy on the host
                loss = model(batch).loss
                loss.backward()
            """
        ),
        Valid(
            """
            def prepare(dataset):
                labels = torch.tensor(dataset.labels)
                return labels[labels >= 0]  # once, on CPU
            """
        ),
        Valid(
            """
            def forward(self, x):
                h = self.encoder(x)
                keep_mask = h.norm(dim=-1).topk(16).indices  # integer indices, whatever the name
                return h[keep_mask]
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def forward(self, logits, labels):
                valid = labels != -100
                kept = logits[valid]
                return self.loss(kept, labels.clamp_min(0))
            """,
            line=3,
        ),
        Invalid(
            """
            import torch

            def forward(self, x):
                h = self.encoder(x)
                return h[h > 0].sum()
            """,
            line=5,
            expected_replacement="""
            import torch

            def forward(self, x):
                h = self.encoder(x)
                return torch.where(h > 0, h, 0).sum()
            """,
        ),
        Invalid(
            """
            import torch as th

            def forward(self, x):
                h = self.encoder(x)
                finite = ~th.isnan(h)
                return h[finite].sum()
            """,
            line=6,
            expected_replacement="""
            import torch as th

            def forward(self, x):
                h = self.encoder(x)
                finite = ~th.isnan(h)
                return th.where(finite, h, 0).sum()
            """,
        ),
        Invalid(
            """
            def loss_fn(model, x, y, mask):
                pred = model(x)
                return ((pred - y) ** 2)[mask.bool()].mean()
            """,
            line=3,
            expected_replacement="""
            from xlalint.runtime import masked_mean

            def loss_fn(model, x, y, mask):
                pred = model(x)
                return masked_mean((pred - y) ** 2, mask.bool())
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            def forward(self, x):
                h = self.encoder(x)
                return h[h > 0].max()
            """,
            line=3,
            expected_replacement="""
            from xlalint.runtime import masked_max

            def forward(self, x):
                h = self.encoder(x)
                return masked_max(h, h > 0)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            def forward(self, x, row_mask):
                h = self.encoder(x)
                keep = row_mask.bool()
                return h[keep].sum()
            """,
            line=4,
            expected_replacement="""
            import torch

            def forward(self, x, row_mask):
                h = self.encoder(x)
                keep = row_mask.bool()
                return torch.where(keep, h, 0).sum()
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = single_index(node)
        if index is None or isinstance(node.ctx, (ast.Store, ast.Del)) or not is_bool_mask(self.ctx, index):
            return
        if self.ctx.tensor_kind(node.value) in (Kind.NOT_TENSOR, Kind.CPU) or shaped_out(self.ctx, node):
            return
        reduction = _reduced(self.ctx, node)
        if reduction is None:
            self.report(node)
        elif reduction == "sum":
            safe = elementwise_of(self.ctx, index, node.value)
            torch_name, imports = _torch_spelling(self.ctx)
            self.report(node, fix=lambda cctx: _sum_with_where(cctx, node, index, torch_name, safe, imports))
        else:
            self.report(node, fix=lambda cctx: _runtime_reduction(cctx, node, index, RUNTIME_REDUCTIONS[reduction]))


# `x[m].<reduction>()` -> the runtime function that computes it with a static shape
RUNTIME_REDUCTIONS = {"mean": "masked_mean", "max": "masked_max", "min": "masked_min"}


def _reduced(ctx: FileContext, node: ast.Subscript) -> str | None:
    """`sum`, `mean`, `max` or `min` when `node` is reduced whole: `node.sum()`, with no arguments."""
    attribute, call = ctx.parent(node), ctx.parent(ctx.parent(node))
    if (
        isinstance(attribute, ast.Attribute)
        and (attribute.attr == "sum" or attribute.attr in RUNTIME_REDUCTIONS)
        and isinstance(call, ast.Call)
        and call.func is attribute
        and not call.args
        and not call.keywords
    ):
        return attribute.attr
    return None


def _runtime_reduction(cctx: CstContext, node: ast.Subscript, mask: ast.expr, function: str) -> Fix:
    subscript = cctx.find(node, cst.Subscript)
    call = cctx.parent(cctx.parent(subscript))  # the `.mean()` around it
    spelled, request = cctx.importable("xlalint.runtime", function)
    value = subscript.value
    if getattr(value, "lpar", None):  # `((a - b) ** 2)[m]`: an argument needs no parentheses of its own
        value = value.with_changes(lpar=[], rpar=[])
    mask_code, base = cctx.code(cctx.find(mask)), cctx.code(value)
    new = cctx.parse_expression(f"{spelled}({base}, {mask_code})")
    return Fix.replace(call, new, title=f"Reduce with `{function}` (static shape)", safe=False, imports=[request])


def _sum_with_where(
    cctx: CstContext, node: ast.Subscript, mask: ast.expr, torch_name: str, safe: bool, imports: list[ImportRequest]
) -> Fix:
    subscript = cctx.find(node, cst.Subscript)
    call = cctx.parent(cctx.parent(subscript))  # the `.sum()` around it
    mask_code, base = cctx.code(cctx.find(mask)), cctx.code(subscript.value)
    new = cctx.parse_expression(f"{torch_name}.where({mask_code}, {base}, 0).sum()")
    return Fix.replace(
        call,
        new,
        title="Mask with `where` and reduce over the full tensor (exact up to summation order)",
        safe=safe,
        imports=imports,
    )
