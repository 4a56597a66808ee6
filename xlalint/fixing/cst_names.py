"""Dotted names of libcst expressions, for fix builders."""

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
