"""Dotted names and arguments of libcst expressions, for fix builders."""

from __future__ import annotations

import libcst as cst


def dotted_name(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for Name/Attribute chains, None for anything else (calls, subscripts...)."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def method_name(call: cst.Call) -> str | None:
    """`x.item()` -> "item" (the attribute called, whatever the receiver)."""
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    return call.func.value if isinstance(call.func, cst.Attribute) else None


def last_part(name: str | None) -> str:
    return name.rsplit(".", 1)[-1] if name else ""


def string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `name=value`: the existing keyword's value replaced, or the keyword appended in
    the call's layout (a multi-line call's trailing comma kept)."""
    existing = keyword(call, name)
    if existing is not None:
        return call.with_changes(args=[a.with_changes(value=value) if a is existing else a for a in call.args])
    args = list(call.args)
    new_arg = cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma (a call on several lines): keep its layout
        new_arg = new_arg.with_changes(comma=last.comma)
        indent = call.whitespace_before_args
        args[-1] = last.with_changes(
            comma=last.comma.with_changes(
                whitespace_after=indent
                if isinstance(indent, cst.ParenthesizedWhitespace)
                else cst.SimpleWhitespace(" ")
            )
        )
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new_arg])
