"""`names.dotted_name`, the name of a `Name`/`Attribute` chain, kept on an attribute's node once asked."""

import ast

from xlalint.analysis.names import dotted_name


def _reference(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _reference(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None


def test_every_chain_is_named_the_same_when_asked_again():
    tree = ast.parse("a.b.c(x.y)\nf().g.h\nself.model.fc.weight[0].grad\nz = w\n'text'.join(p)\n")
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))]
    first = [dotted_name(n) for n in nodes]
    assert first == [_reference(n) for n in nodes] == [dotted_name(n) for n in nodes]
    assert {"a.b.c", "x.y", "self.model.fc", "w"} <= set(first) and None in first
    assert dotted_name(None) is None
