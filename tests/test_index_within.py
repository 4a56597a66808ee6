"""`ModuleIndex.within`: the nodes of a kind in a subtree, found by their pre-order numbers, are
those `ast.walk` finds there; and `build_index` leaves the `Load()`/`Store()` singletons out."""

import ast
from pathlib import Path

from xlalint.analysis.index import build_index
from xlalint.source import SourceText

ROOT = Path(__file__).resolve().parents[1]

CODE = '''\
import torch


@decorator(t[0])
def outer(x, y=z[1]) -> r[2]:
    x[0] = 1
    x += 2
    x.add_(y)

    def inner(a):
        a[1] = [b[2] for b in a]
        return lambda q: q[3]

    class Local:
        field = x[4]
        def method(self):
            self.t[5] += 1
    return inner(x)[6]


if cond:
    rows[7] = f(g(h[8]))
else:
    while rows:
        rows.pop()[9]
'''


SINGLETONS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


def _walked(node, kind):
    return [n for n in ast.walk(node) if type(n) is kind]


def test_within_finds_what_a_walk_finds():
    sources = [CODE, *(p.read_text(encoding="utf-8") for p in sorted((ROOT / "xlalint" / "analysis").glob("*.py")))]
    for source in sources:
        tree = ast.parse(source)
        index = build_index(tree)
        for node in ast.walk(tree):
            if isinstance(node, SINGLETONS):  # one node in many places: no subtree of its own
                continue
            for kind in (ast.Subscript, ast.Call, ast.AugAssign, ast.Name):
                found = index.within(kind, node)
                assert sorted(map(id, found)) == sorted(map(id, _walked(node, kind)))
                assert found == sorted(found, key=index.order.__getitem__)


def test_expression_contexts_are_not_indexed():
    index = build_index(ast.parse(CODE))
    assert ast.Load not in index.by_type and ast.Store not in index.by_type
    assert not any(isinstance(node, ast.expr_context) for node in index.parents)


def _calls_walked(owner):
    """The calls of `owner`'s body (a loop's, function's or module's; else of `owner`), not inside
    a nested function, lambda or class: by walking, as `FileContext.calls_within` is specified."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    bodied = (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.AsyncFor, ast.While, ast.Module)
    stack = list(owner.body) if isinstance(owner, bodied) else [owner]
    found = []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            found.append(node)
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, scopes))
    return found


def test_calls_within_are_those_of_a_walk():
    from xlalint.analysis.context import FileContext

    sources = [CODE, *(p.read_text(encoding="utf-8") for p in sorted((ROOT / "xlalint" / "analysis").glob("*.py")))]
    for source in sources:
        tree = ast.parse(source)
        ctx = FileContext(Path("example.py"), tree, SourceText(source))
        for node in ast.walk(tree):
            if isinstance(node, SINGLETONS):
                continue
            found = ctx.calls_within(node)
            assert sorted(map(id, found)) == sorted(map(id, _calls_walked(node))), ast.dump(node)[:80]
            assert found == sorted(found, key=ctx.index.order.__getitem__)
