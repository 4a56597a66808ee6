"""Dotted names of expressions and small accessors over Python's `ast` nodes."""

from __future__ import annotations

import ast


def dotted_name(node: ast.AST | None) -> str | None:
    """`a.b.c` for Name/Attribute chains, None for anything else (calls, subscripts...)."""
    # asked about a million times in a cold run of a large project, half of them of attributes, each
    # by several rules and analyses: exact types (`ast.parse` makes no subclasses), a bare name
    # without building a list, an attribute's answer kept on the node (the trees are never changed)
    if type(node) is ast.Name:
        return node.id
    if type(node) is not ast.Attribute:
        return None
    try:
        return node._xlalint_dotted  # type: ignore[attr-defined]
    except AttributeError:
        pass
    parts: list[str] = []
    inner: ast.AST = node
    while type(inner) is ast.Attribute:
        parts.append(inner.attr)
        inner = inner.value
    found = ".".join(reversed([*parts, inner.id])) if type(inner) is ast.Name else None
    node._xlalint_dotted = found  # type: ignore[attr-defined]
    return found


def method_name(call: ast.Call) -> str | None:
    """`x.item()` -> "item" (the attribute called, whatever the receiver)."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def receiver(call: ast.Call) -> ast.expr | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def last_part(name: str | None) -> str:
    return name.rsplit(".", 1)[-1] if name else ""


def string_value(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def is_string(node: ast.AST | None) -> bool:
    return isinstance(node, (ast.JoinedStr,)) or string_value(node) is not None


def is_number(node: ast.AST | None) -> bool:
    """An int or float literal, signed or not (`3`, `-0.5`; not `True`)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def is_constant(node: ast.AST | None, value) -> bool:
    """`None`, `True`, `False`, or an int literal equal to `value` (never `True == 1`)."""
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    kw = keyword(call, name)
    return kw.value if kw is not None else None


def positional(call: ast.Call) -> list[ast.expr]:
    """Positional arguments up to the first `*args` (whose count is unknown)."""
    out = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            break
        out.append(arg)
    return out


def has_star_args(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def argument(call: ast.Call, index: int | None, name: str) -> ast.expr | None:
    """The argument passed as positional `index` or as keyword `name` (`index` None: keyword-only)."""
    value = keyword_value(call, name)
    if value is not None or index is None or index < 0:
        return value
    args = positional(call)
    return args[index] if index < len(args) else None


def function_params(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[ast.arg]:
    a = func.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs]


def subscript_indices(node: ast.Subscript) -> list[ast.expr]:
    """`x[a, b:c]` -> [a, b:c]; `x[a]` -> [a]."""
    return node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]


def param_default(func: ast.AST | None, param: ast.arg) -> ast.expr | None:
    """The default of `param` of `func` (a parameter's grandparent); None without one, or when `func`
    is not a function."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return None
    a = func.args
    positional_params = [*a.posonlyargs, *a.args]
    if param in positional_params:
        offset = len(positional_params) - len(a.defaults)
        i = positional_params.index(param)
        return a.defaults[i - offset] if i >= offset else None
    if param in a.kwonlyargs:
        return a.kw_defaults[a.kwonlyargs.index(param)]
    return None
