"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast
import re

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, keyword, last_part, method_name, receiver
from xlalint.analysis.tensors import MAX_DEPTH, Kind
from xlalint.rules._common import reportable_sync


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


def is_torch(ctx: FileContext, call: ast.Call, names: set[str]) -> str | None:
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
        if is_torch(ctx, expr, _BOOL_FUNCS):
            return True
        method = method_name(expr)
        if method in _BOOL_METHODS and not is_torch(ctx, expr, _BOOL_FUNCS | {"bool"}):
            return True
        if method == "to" and any(dotted_name(a) in ("torch.bool", "bool")
                                  for a in (*expr.args, *(k.value for k in expr.keywords))):
            return True
        if method in ("any", "all") and (expr.args or expr.keywords) and ctx.on_device(receiver(expr)):
            return True  # a reduction over a dimension: still a mask
        if is_torch(ctx, expr, {"any", "all"}) and (len(expr.args) > 1 or keyword(expr, "dim") is not None):
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
        func = is_torch(ctx, expr, _ELEMENTWISE_FUNCS | {"logical_and", "logical_or", "logical_xor"})
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


def single_index(node: ast.Subscript) -> ast.expr | None:
    """The one index of `x[i]` (or of `x[i,]`, the same index), None for slices, several or starred indices."""
    index = node.slice
    if isinstance(index, ast.Tuple):
        if len(index.elts) != 1:
            return None
        index = index.elts[0]
    return None if isinstance(index, (ast.Slice, ast.Starred)) else index


def shaped_out(ctx: FileContext, node: ast.AST) -> bool:
    """Code where shapes are irrelevant: not per step, or a branch that never runs on XLA."""
    return not reportable_sync(ctx, node)
