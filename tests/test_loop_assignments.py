"""`steps.assignments_in_body`: a loop's assignments from one pass over the file, in the order a
walk of each statement of its body meets them, which `loop_data` propagates names in."""

import ast
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.analysis.steps import assignments_in_body
from xlalint.source import SourceText

ROOT = Path(__file__).resolve().parents[1]

NESTED = """\
step = 0
for epoch in range(3):
    total: float = 0.0
    for i, batch in enumerate(loader):
        x, y = batch
        if i % 2:
            z = x + 1
            def inner():
                w = z
                return w
        step += 1
        h = lambda q: q
    else:
        done = True
    while step < 10:
        step += 1
        [a := 1 for _ in range(2)]
    last = step
"""


def _walked(loop):
    kinds = (ast.Assign, ast.AnnAssign, ast.AugAssign)
    return [n for stmt in loop.body for n in ast.walk(stmt) if isinstance(n, kinds)]


def _check(text: str, path: str = "m.py") -> int:
    ctx = FileContext(path, ast.parse(text), SourceText(text))
    loops = [n for n in ast.walk(ctx.tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    for loop in loops:
        assert assignments_in_body(ctx, loop) == _walked(loop), loop.lineno
    return len(loops)


def test_nested_loops_see_their_bodies_assignments_in_walk_order():
    assert _check(NESTED) == 3  # the comprehension's `for` is no loop statement
    ctx = FileContext("m.py", ast.parse(NESTED), SourceText(NESTED))
    outer = ctx.tree.body[1]
    # statement by statement of its body, each by depth (the inner loop's `else:` is in that
    # statement; a nested function's body too); the outer loop's own `else:` is not its body
    names = [ast.unparse(n).split()[0] for n in assignments_in_body(ctx, outer)]
    assert names == ["total:", "x,", "step", "h", "done", "z", "w", "step", "last"]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.py")), ids=lambda p: p.name)
def test_real_loops_see_what_a_walk_sees(path):
    _check(path.read_text(encoding="utf-8"), str(path))
