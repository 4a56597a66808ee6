"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import method_name, receiver
from xlalint.analysis.tensors import MAX_DEPTH, RUNTIME_TENSOR_FUNCTIONS


# Tensor methods whose result is a tensor when the receiver is one: evident tensor values.
_TENSOR_REDUCTIONS = {"any", "all", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_not",
                      "logical_and", "logical_or", "eq", "ne", "gt", "ge", "lt", "le", "greater", "less",
                      "greater_equal", "less_equal", "max", "min", "amax", "amin", "sum", "mean", "norm",
                      "abs", "count_nonzero", "prod", "std", "var"}


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


def evident_device_tensor(ctx: FileContext, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is a device tensor by what it computes, not only by its name.

    A bare parameter or loop variable (`if cache:`, `if dur > 0:`) is not enough: in a truth test
    such names are usually Optional/None checks, lists or Python numbers. A torch function, a
    tensor method or an elementwise comparison involving an evident tensor is.
    """
    if depth > MAX_DEPTH or not ctx.on_device(expr):
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Attribute):
        values = ctx.assigned_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        return evident_device_tensor(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Compare):
        operands = [expr.left, *expr.comparators]
        if any(_is_text(o) for o in operands):
            return False
        return any(evident_device_tensor(ctx, o, depth + 1) for o in operands)
    if isinstance(expr, ast.BinOp):
        return any(evident_device_tensor(ctx, o, depth + 1) for o in (expr.left, expr.right))
    if isinstance(expr, ast.UnaryOp):
        return evident_device_tensor(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.Call):
        qualified = ctx.qualified_name(expr.func) or ""
        if qualified.startswith("torch.") and not qualified.startswith("torch.Tensor") or \
                qualified in RUNTIME_TENSOR_FUNCTIONS:
            return True  # a torch (or xlalint.runtime) function that returns a tensor (kind already says which)
        method = method_name(expr)
        recv = receiver(expr)
        if method in _TENSOR_REDUCTIONS and recv is not None and ctx.on_device(recv):
            return True
        return method is not None and recv is not None and evident_device_tensor(ctx, recv, depth + 1)
    return False
