"""Shapes XLA cannot know ahead of time: data-dependent output shapes and step-varying input shapes."""

from __future__ import annotations

import ast
import math
import re
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, has_star_args, is_constant, keyword, keyword_value, last_part
from xlalint.analysis.names import method_name, positional, receiver, string_value
from xlalint.analysis.tensors import MAX_DEPTH, Kind
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import reportable_sync

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

# -- shared helpers ------------------------------------------------------------------------------

_BOOL_FUNCS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "isreal", "signbit", "logical_not",
               "logical_and", "logical_or", "logical_xor", "eq", "ne", "gt", "ge", "lt", "le", "greater",
               "greater_equal", "less", "less_equal", "not_equal", "isclose", "isin"}
_BOOL_METHODS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit", "logical_not", "logical_and",
                 "logical_or", "logical_xor", "eq", "ne", "gt", "ge", "lt", "le", "greater", "greater_equal",
                 "less", "less_equal", "not_equal", "bool", "isclose"}
# ops that keep the shape of their (single tensor) input, for "the mask is built from x itself"
_ELEMENTWISE_FUNCS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit", "logical_not", "abs"}
_ELEMENTWISE_METHODS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit", "logical_not", "abs", "bool",
                        "eq", "ne", "gt", "ge", "lt", "le", "greater", "greater_equal", "less", "less_equal",
                        "not_equal", "detach"}
_MASK_NAME = re.compile(r"mask", re.I)
_MEMBERSHIP = (ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _torch_spelling(ctx: FileContext) -> tuple[str, list[ImportRequest]]:
    """The file's own name for the torch module (`torch`, `th`...), and the import a fix needs."""
    for local, binding in ctx.index.imports.items():
        if binding.qualified == "torch":
            return local, []
    return "torch", [ImportRequest("torch")]


def _is_torch(ctx: FileContext, call: ast.Call, names: set[str]) -> str | None:
    qualified = ctx.qualified_name(call.func) or ""
    head, _, tail = qualified.rpartition(".")
    if head == "torch" and tail in names:
        return tail
    return None


def is_bool_mask(ctx: FileContext, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is evidently a boolean device tensor: a comparison of tensors, `~m`, `m & n`,
    `torch.isnan(x)`, `.bool()`, a name assigned from one of those, or a tensor named like a mask."""
    if depth > MAX_DEPTH or not ctx.on_device(expr):
        return False
    if isinstance(expr, ast.Compare):
        return not any(isinstance(op, _MEMBERSHIP) for op in expr.ops)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
        return is_bool_mask(ctx, expr.operand, depth + 1) or _mask_named(ctx, expr.operand)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return any(is_bool_mask(ctx, side, depth + 1) or _mask_named(ctx, side) for side in (expr.left, expr.right))
    if isinstance(expr, ast.Call):
        if _is_torch(ctx, expr, _BOOL_FUNCS):
            return True
        method = method_name(expr)
        if method in _BOOL_METHODS and not _is_torch(ctx, expr, _BOOL_FUNCS | {"bool"}):
            return True
        if method == "to" and any(dotted_name(a) in ("torch.bool", "bool")
                                  for a in (*expr.args, *(k.value for k in expr.keywords))):
            return True
        if method in ("any", "all") and (expr.args or expr.keywords) and ctx.on_device(receiver(expr)):
            return True  # a reduction over a dimension: still a mask
        if _is_torch(ctx, expr, {"any", "all"}) and (len(expr.args) > 1 or keyword(expr, "dim") is not None):
            return True  # `torch.all(x == 0, dim=-1)`
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if values:
            return all(is_bool_mask(ctx, v, depth + 1) for v in values) or _mask_named(ctx, expr)
        return _mask_named(ctx, expr)
    if isinstance(expr, ast.Attribute):
        return _mask_named(ctx, expr)
    return False


def _mask_named(ctx: FileContext, expr: ast.expr) -> bool:
    name = dotted_name(expr)
    return bool(name) and bool(_MASK_NAME.search(last_part(name))) and ctx.on_device(expr) and \
        "attention_mask" not in name and "padding_mask" not in name


def elementwise_of(ctx: FileContext, mask: ast.expr, base: ast.expr, depth: int = 0) -> bool:
    """`mask` is computed elementwise from the tensor `base` (and scalars), so it has exactly
    `base`'s shape: `x > 0`, `~torch.isnan(x)`, `(x > 0) & (x < 1)`, or a name bound to one. The `x`
    in the mask must be the same binding as `base`, not the same spelling: after
    `m = h > 0; h = h.repeat(3, 1)`, `m` has the old `h`'s shape."""
    return _elementwise(ctx, mask, base, depth) == "base"


def _elementwise(ctx: FileContext, expr: ast.expr, base: ast.expr, depth: int) -> str | None:
    """"base" (shaped like base), "scalar" (a Python number), or None (anything else)."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(expr, ast.Name) and isinstance(base, ast.Name) and expr.id == base.id:
        return "base" if ctx.same_binding(expr, base) else None
    if not isinstance(base, ast.Name) and ctx.code(expr) == ctx.code(base) and depth == 0:
        return "base"  # `self.h[self.h > 0]`: written in the index itself, read at the same time
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float):
        return "scalar"
    if isinstance(expr, ast.UnaryOp):
        if isinstance(expr.op, ast.Not):
            return None
        return _elementwise(ctx, expr.operand, base, depth + 1)
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if len(values) == 1:
            return _elementwise(ctx, values[0], base, depth + 1)
        if not values and ctx.tensor_kind(expr) == Kind.NOT_TENSOR:
            return "scalar"
        return None
    if isinstance(expr, ast.Attribute):
        values = ctx.attribute_values(dotted_name(expr) or "")
        if values and all(ctx.tensor_kind(v) == Kind.NOT_TENSOR for v in values):
            return "scalar"  # `self.threshold = 0.5` somewhere in the file
        return None
    if isinstance(expr, ast.Compare):
        if any(isinstance(op, _MEMBERSHIP) for op in expr.ops):
            return None
        return _combine([_elementwise(ctx, e, base, depth + 1) for e in (expr.left, *expr.comparators)])
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.MatMult):
            return None
        return _combine([_elementwise(ctx, expr.left, base, depth + 1), _elementwise(ctx, expr.right, base, depth + 1)])
    if isinstance(expr, ast.Call):
        if expr.keywords or any(isinstance(a, ast.Starred) for a in expr.args):
            return None
        func = _is_torch(ctx, expr, _ELEMENTWISE_FUNCS | {"logical_and", "logical_or", "logical_xor"})
        if func:
            return _combine([_elementwise(ctx, a, base, depth + 1) for a in expr.args])
        method = method_name(expr)
        if method in _ELEMENTWISE_METHODS and not dotted_name(expr.func) == f"torch.{method}":
            return _combine([_elementwise(ctx, receiver(expr), base, depth + 1),
                             *(_elementwise(ctx, a, base, depth + 1) for a in expr.args)])
    return None


def _combine(parts: list[str | None]) -> str | None:
    if any(p is None for p in parts):
        return None
    return "base" if "base" in parts else "scalar"


def _single_index(node: ast.Subscript) -> ast.expr | None:
    """The one index of `x[i]` (or of `x[i,]`, the same index), None for slices, several or starred indices."""
    index = node.slice
    if isinstance(index, ast.Tuple):
        if len(index.elts) != 1:
            return None
        index = index.elts[0]
    return None if isinstance(index, (ast.Slice, ast.Starred)) else index


def _shaped_out(ctx: FileContext, node: ast.AST) -> bool:
    """Code where shapes are irrelevant: not per step, or a branch that never runs on XLA."""
    return not reportable_sync(ctx, node)


def _tensorish(ctx: FileContext, expr: ast.expr) -> bool:
    """A receiver of a tensor-only method (`.masked_select()`, `.nonzero()`) that is not known to be
    host data: a device tensor, an unknown value, or a chain rooted in a torch function."""
    kind = ctx.tensor_kind(expr)
    if kind.on_device or kind == Kind.UNKNOWN:
        return True
    while isinstance(expr, (ast.Call, ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Call):
            qualified = ctx.qualified_name(expr.func) or ""
            if qualified.startswith("torch.") and qualified.rpartition(".")[2] in _LIKE:
                return True
            expr = expr.func
        else:
            expr = expr.value
    return False


_LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"}


# -- XLA301 ----------------------------------------------------------------------------------------


class DataDependentShapeOp(Rule):
    """## What it does
    Flags ops whose output shape depends on the values of a device tensor, on a per-step path:
    `nonzero` (also `as_tuple=True`), `argwhere`, one-argument `torch.where(cond)`,
    `masked_select`, `unique`/`unique_consecutive`, and `repeat_interleave` with tensor repeats.

    ## Why is this bad?
    XLA compiles programs for static shapes. These ops have no static-shape lowering: torch_xla
    runs them as CPU fallbacks (`aten::nonzero`, `aten::masked_select`, `aten::_unique2`,
    `repeat_interleave.Tensor` show up as `aten::` counters), which executes the pending graph,
    copies the input to the host and the result back. Every distinct output size then traces a new
    graph downstream, so the step can recompile again and again.

    ## Example
    ```python
    def forward(self, hidden, expert_mask):
        for e, expert in enumerate(self.experts):
            idx = torch.nonzero(expert_mask[e]).squeeze(-1)
            hidden[idx] = expert(hidden[idx])
        return hidden
    ```

    Use instead:
    ```python
    def forward(self, hidden, expert_mask):
        for e, expert in enumerate(self.experts):
            # every token through every expert, then select: static shapes
            hidden = torch.where(expert_mask[e].unsqueeze(-1), expert(hidden), hidden)
        return hidden
    ```

    When indices are really needed, bound their number: `torch.nonzero_static(m, size=K,
    fill_value=-1)` or `torch.topk` over the mask, and mask the padding slots.
    """

    code, name, category = "XLA301", "data-dependent-shape-op", "dynamic_shape"
    summary = "`{op}` on a device tensor has a data-dependent output shape: a CPU fallback and recompilations"
    hint = "use static-shape alternatives: 3-argument `torch.where`, masks, `nonzero_static(m, size=K)`, `unique` over a known range via `bincount(minlength=K)`"

    VALID = [
        Valid(
            """
            def forward(self, x, mask):
                x = torch.where(mask, x, torch.zeros_like(x))  # three arguments: static shape
                return x.repeat_interleave(self.n_rep, dim=1)  # integer repeats
            """
        ),
        Valid(
            """
            def forward(self, x, mask):
                idx = torch.nonzero_static(mask.flatten(), size=self.max_tokens, fill_value=-1)
                return x.flatten(0, 1)[idx.clamp_min(0).squeeze(-1)]
            """
        ),
        Valid(
            """
            classes = np.unique(labels)  # host data, at setup
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            """
        ),
        Valid(
            """
            vocab = torch.unique(torch.tensor(token_ids))  # CPU tensor, once
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
            """
        ),
        Valid(
            """
            def forward(self, x):
                if x.device.type == "cuda":
                    keep = x.abs().sum(-1).nonzero()
                    x = x[keep.squeeze(-1)]
                return self.layer(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def forward(self, hidden, router_logits):
                top = router_logits.argmax(-1)
                for e, expert in enumerate(self.experts):
                    idx = (top == e).nonzero(as_tuple=True)[0]
                    hidden[idx] = expert(hidden[idx])
                return hidden
            """,
            line=4,
        ),
        Invalid(
            """
            def update(self, preds, target):
                values = torch.unique(target)
                self.seen += values.numel()
            """,
            line=2,
        ),
        Invalid(
            """
            for x, y in loader:
                out = model(x)
                rows, cols = torch.where(out > 0.5)
                loss = loss_fn(out, y)
                loss.backward()
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, tokens, lengths):
                counts = lengths.clamp(min=1)
                return tokens.repeat_interleave(counts, dim=0)
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, pred, target, mask):
                picked = pred.masked_select(mask)
                return picked.var()
            """,
            line=2,
        ),
    ]

    FUNCS = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "repeat_interleave", "where"}

    def visit_Call(self, node: ast.Call) -> None:
        op = _is_torch(self.ctx, node, self.FUNCS)
        if op is not None:
            args = positional(node)
            if not args:
                return
            subject = args[0]
            if op == "where" and (len(node.args) + len(node.keywords) != 1 or isinstance(node.args[0], ast.Starred)):
                return
            if op == "repeat_interleave" and not self._tensor_repeats(node, args[1:], functional=True):
                return
            label = f"torch.{op}" if op != "where" else "torch.where(cond)"
        else:
            op = method_name(node)
            if op not in self.FUNCS or op == "where":
                return
            qualified = self.ctx.qualified_name(node.func) or ""
            if qualified.split(".")[0] in ("numpy", "np", "pandas", "pd") or qualified.startswith("torch."):
                return
            subject = receiver(node)
            if op == "repeat_interleave" and not self._tensor_repeats(node, positional(node), functional=False):
                return
            if op == "nonzero" and (node.args or node.keywords) and not keyword(node, "as_tuple"):
                return  # not Tensor.nonzero's signature
            label = f".{op}()"
        tensor = self.ctx.on_device(subject) if label.startswith("torch.") else _tensorish(self.ctx, subject)
        if not tensor or _shaped_out(self.ctx, node):
            return
        self.report(node, self.summary.format(op=label))

    def _tensor_repeats(self, node: ast.Call, rest: list[ast.expr], functional: bool) -> bool:
        value = keyword_value(node, "repeats")
        if value is None and rest:
            value = rest[0]
        if value is None:
            # torch.repeat_interleave(repeats): the one-argument form repeats indices by a tensor
            return functional
        # a literal is never a tensor; a name only when it is assigned one here
        return self.ctx.tensor_kind(value) >= Kind.CPU and \
            (not isinstance(value, ast.Name) or bool(self.ctx.reaching_values(value)))


# -- XLA302 ----------------------------------------------------------------------------------------


class BooleanMaskIndex(Rule):
    """## What it does
    Flags reading a device tensor through a boolean mask, `y = x[mask]`, on a per-step path, where
    the index is evidently a bool tensor: a comparison of tensors, `~m`, `m & n`, `torch.isnan(...)`,
    `.bool()`, a name assigned from one of those, or a tensor named like a mask.

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
    `torch.where(m, x, 0).sum()`; a mean is `where(m, x, 0).sum() / m.sum().clamp_min(1)`.

    ## Fix safety
    Only `x[m].sum()` is rewritten, to `torch.where(m, x, 0).sum()` (`where`, not `x * m`: a NaN
    outside the mask must not leak into the sum). The result has the same dtype (int64 for integer
    and bool `x`, `x`'s own for floats) and adds the same terms; it is exact up to summation order:
    integer sums are equal, a float sum may differ in its last bits, as torch's own `sum()` does
    from one thread count to another (it fixes no order). The fix is safe when the mask is built
    elementwise from that same `x` (`x[x > 0].sum()`, `x[~torch.isnan(x)].sum()`; an earlier binding
    of the name does not count), so it has `x`'s shape. Otherwise it is unsafe: a row mask of shape
    `(N,)` over `x` of shape `(N, D)` selects whole rows, while `where` broadcasts it against the
    last dimension (a wrong result or an error).
    """

    code, name, category = "XLA302", "boolean-mask-index", "dynamic_shape"
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
        index = _single_index(node)
        if index is None or isinstance(node.ctx, (ast.Store, ast.Del)) or not is_bool_mask(self.ctx, index):
            return
        if self.ctx.tensor_kind(node.value) in (Kind.NOT_TENSOR, Kind.CPU) or _shaped_out(self.ctx, node):
            return
        if not _summed(self.ctx, node):
            self.report(node)
            return
        safe = elementwise_of(self.ctx, index, node.value)
        torch_name, imports = _torch_spelling(self.ctx)
        self.report(node, fix=lambda cctx: _sum_with_where(cctx, node, index, torch_name, safe, imports))


def _summed(ctx: FileContext, node: ast.Subscript) -> bool:
    """`node.sum()`, with no arguments."""
    attribute, call = ctx.parent(node), ctx.parent(ctx.parent(node))
    return isinstance(attribute, ast.Attribute) and attribute.attr == "sum" and \
        isinstance(call, ast.Call) and call.func is attribute and not call.args and not call.keywords


def _sum_with_where(cctx: CstContext, node: ast.Subscript, mask: ast.expr, torch_name: str, safe: bool,
                    imports: list[ImportRequest]) -> Fix:
    subscript = cctx.locate(node)
    call = cctx.parent(cctx.parent(subscript))  # the `.sum()` around it
    mask_code, base = cctx.code(cctx.locate(mask)), cctx.code(subscript.value)
    new = cctx.parse_expression(f"{torch_name}.where({mask_code}, {base}, 0).sum()")
    return Fix.replace(call, new, title="Mask with `where` and reduce over the full tensor (exact up to summation "
                       "order)", safe=safe, imports=imports)


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
        mask = _single_index(target)
        if mask is None or not is_bool_mask(self.ctx, mask):
            return
        if self.ctx.tensor_kind(target.value) in (Kind.NOT_TENSOR, Kind.CPU) or _shaped_out(self.ctx, node):
            return
        if not _python_scalar(self.ctx, node.value):
            self.report(target)
            return
        safe = elementwise_of(self.ctx, mask, target.value) and _fits_every_float(_scalar_value(self.ctx, node.value))
        self.report(target, fix=lambda cctx: _masked_fill(cctx, node, mask, safe))


def _masked_fill(cctx: CstContext, node: ast.Assign, mask: ast.expr, safe: bool) -> Fix:
    assign = cctx.locate(node)
    base, value = cctx.code(assign.targets[0].target.value), cctx.code(assign.value)
    mask_code = cctx.code(cctx.locate(mask))
    new = cst.Expr(cctx.parse_expression(f"{base}.masked_fill_({mask_code}, {value})"))
    return Fix.replace(assign, new, title="Use `masked_fill_` (static shape)", safe=safe)


_CONSTANTS = {"math.inf": math.inf, "math.nan": math.nan, "math.pi": math.pi, "numpy.inf": math.inf,
              "numpy.nan": math.nan}
FLOAT16_MAX = 65504.0  # torch.finfo(torch.float16).max


def _scalar_value(ctx: FileContext, value: ast.expr) -> float | None:
    """The number a `_python_scalar` expression holds (None when it can't be told)."""
    if isinstance(value, ast.Constant) and type(value.value) in (int, float, bool):
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
    if isinstance(value, ast.Call) and dotted_name(value.func) == "float" and len(value.args) == 1 and \
            not value.keywords and string_value(value.args[0]) is not None:
        return True  # float("-inf")
    if isinstance(value, ast.Attribute) and ctx.qualified_name(value) in ("math.inf", "math.nan", "math.pi",
                                                                          "numpy.inf", "numpy.nan"):
        return True
    return False


# -- XLA311 ----------------------------------------------------------------------------------------

_TRAIN = re.compile(r"train", re.I)
_NOT_TRAIN = re.compile(r"(^|_|\b)(eval|evaluation|test|testing|val|valid|validation|dev|predict|prediction|"
                        r"inference|infer|calib|calibration)(_|$|\b|s\b)", re.I)


class TrainLoaderWithoutDropLast(Rule):
    """## What it does
    Flags a training `DataLoader(...)` built without `drop_last=True` in code that runs on XLA: a
    loader that shuffles, takes a training sampler, or is named for training, with a batch size
    other than 1.

    ## Why is this bad?
    When the dataset size is not a multiple of the batch size, the last batch of every epoch is
    smaller: a new input shape, so XLA traces and compiles the whole training step again (measured:
    a 6.9 s compile against a 38 ms step, 185x), and on multi-host TPU each host may compile at a
    different time.

    ## Example
    ```python
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
    ```

    Use instead:
    ```python
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, drop_last=True)
    ```

    Or pad the final batch to the full size and mask the padding.

    ## Fix safety
    Adding `drop_last=True` is unsafe: each epoch skips up to `batch_size - 1` samples (a different
    set each epoch when shuffling).
    """

    code, name, category = "XLA311", "train-loader-without-drop-last", "varying_shape"
    summary = "training `DataLoader` without `drop_last=True`: the last partial batch recompiles the step"
    hint = "pass `drop_last=True` (or pad the last batch to the full batch size)"
    xla_only = True
    fix_availability = "always"

    VALID = [
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            """
        ),
        Valid(
            """
            import torch_xla
            eval_loader = DataLoader(eval_set, batch_size=64, shuffle=False)
            val_loader = DataLoader(val_set, batch_size=64)
            """
        ),
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=1, shuffle=True)
            train_loader = DataLoader(train_set, batch_sampler=bucket_sampler)
            """
        ),
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=bs, shuffle=True, drop_last=args.drop_last)
            loader = DataLoader(train_set, **loader_kwargs)
            """
        ),
        Valid(
            """
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)  # no XLA in this file
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, drop_last=True)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=args.batch_size,
                sampler=train_sampler,
                drop_last=False,
            )
            """,
            line=2,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=args.batch_size,
                sampler=train_sampler,
                drop_last=True,
            )
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            def make_loader(dataset, batch_size, is_train):
                sampler = DistributedSampler(dataset, shuffle=is_train, drop_last=False)
                return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=False)
            """,
            line=4,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted_name(node.func)
        if last_part(name) != "DataLoader":
            return
        qualified = self.ctx.qualified_name(node.func) or ""
        if qualified.split(".")[0] not in ("torch", "DataLoader") and qualified != name:
            return
        if has_star_args(node) or keyword(node, "batch_sampler"):
            return
        drop_last = keyword_value(node, "drop_last")
        if drop_last is not None and not is_constant(drop_last, False):
            return
        args = positional(node)
        batch = keyword_value(node, "batch_size")
        if batch is None and len(args) > 1:
            batch = args[1]
        if batch is None or is_constant(batch, None) or \
                (isinstance(batch, ast.Constant) and type(batch.value) is int and batch.value <= 1):
            return
        if len(args) > 2:  # positional shuffle/sampler...: unusual, leave it
            return
        if not self._training(node) or self.ctx.in_non_xla_code(node):
            return
        self.report(node, fix=lambda cctx: _drop_last(cctx, node))

    def _training(self, node: ast.Call) -> bool:
        code = self.ctx.code
        words = [code(a) for a in node.args] + [code(k.value) for k in node.keywords if k.arg in ("dataset", "sampler")]
        target = self._target_name(node)
        if target:
            words.append(target)
        text = " ".join(words)
        if _NOT_TRAIN.search(text.replace(".", "_")):
            return False
        shuffle = keyword_value(node, "shuffle")
        if shuffle is not None:
            if self._shuffles(shuffle):
                return True
            if is_constant(shuffle, False):
                return bool(_TRAIN.search(text))
        sampler = keyword_value(node, "sampler")
        if sampler is not None and re.search(r"train|RandomSampler", code(sampler)):
            return True
        # `sampler = DistributedSampler(ds, shuffle=train)`: a sampler that shuffles feeds training
        for value in self.ctx.reaching_values(sampler) if isinstance(sampler, ast.Name) else ():
            if isinstance(value, ast.Call) and last_part(dotted_name(value.func)).endswith("Sampler"):
                sampler_shuffle = keyword_value(value, "shuffle")
                if sampler_shuffle is not None and self._shuffles(sampler_shuffle):
                    return True
        return bool(_TRAIN.search(text))

    def _shuffles(self, shuffle: ast.expr) -> bool:
        """`shuffle=True`, `shuffle=is_train`: order is shuffled for training."""
        return is_constant(shuffle, True) or bool(_TRAIN.search(self.ctx.code(shuffle)))

    def _target_name(self, node: ast.Call) -> str | None:
        parent = self.ctx.parent(node)
        while isinstance(parent, (ast.Call, ast.keyword)):  # accelerator.prepare(DataLoader(...))
            parent = self.ctx.parent(parent)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            return self.ctx.code(parent.targets[0])
        return None


def _drop_last(cctx: CstContext, node: ast.Call) -> Fix:
    call = cctx.locate(node)
    from xlalint.fixing.cst_names import with_keyword  # libcst-side helpers load with the fix

    new = with_keyword(call, "drop_last", cst.Name("True"))
    return Fix.replace(call, new, title="Add `drop_last=True`", safe=False)
