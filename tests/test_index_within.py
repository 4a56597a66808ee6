"""`ModuleIndex.within`: the nodes of a kind in a subtree, found by their pre-order numbers, are
those `ast.walk` finds there; and `build_index` leaves the `Load()`/`Store()` singletons out."""

import ast
from pathlib import Path

from xlalint.analysis.index import build_index

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
