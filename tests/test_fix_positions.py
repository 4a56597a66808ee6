"""Fix builders find a finding's libcst node from the innermost statement around it, positioned
alone (`CstContext._around`), not from the positions of the whole module: the node found and every
position given must be those the whole module's positions give."""

import ast
from pathlib import Path

import libcst as cst
import pytest

from xlalint.fixing.context import AST_TO_CST, CstContext
from xlalint.source import SourceText

ROOT = Path(__file__).resolve().parents[1]

# what positioning a statement alone could get wrong: tabs and mixed indentation, decorators,
# nested classes and functions, comments and blank lines between statements, a one-line body,
# strings spanning lines at column 0, continuation lines, async, a last line without a newline
TRICKY = '''\
import torch  # a comment
x = 1; y = 2


@decorator(arg=1)
class Outer(Base, metaclass=Meta):
\t"""A docstring."""

\t# a comment between statements
\tclass Inner:
\t\tdef method(self, t):   # trailing
\t\t\ttext = """a string
spanning lines at column 0
"""
\t\t\ttotal = (t.sum() +
      t.mean())
\t\t\treturn t.item() if text else total.item()

\t@staticmethod
\tasync def run(a, *, b=torch.ones(2)):
\t\tasync with ctx() as c:
\t\t\tawait c.step(a.cpu())
\tdef one_line(self): return self.x.item()


def outer(v):
    def inner(w):
        return w.tolist()
    if v: pass
    return inner(v[v > 0])


print(torch.zeros(3).item())'''


def _files() -> list[Path]:
    """Real modules of several shapes (classes, nested functions, decorators): this package's
    analysis, fixing and rules, and the bundled examples; small ones (the whole-module side of
    the comparison is quadratic where a span is not matched exactly)."""
    found = [*(ROOT / "xlalint" / "fixing").glob("*.py"), *(ROOT / "rules" / "quirks").glob("*.py")]
    found += [*(ROOT / "examples").rglob("*.py")]
    return sorted(p for p in found if p.stat().st_size < 12_000)


def _check(text: str) -> int:
    module = cst.parse_module(text)
    tree = ast.parse(text)
    source = SourceText(text)
    local = CstContext(module, source, tree)  # statement by statement
    whole = CstContext(module, source)  # the whole module's positions
    checked = 0
    for node in ast.walk(tree):
        if type(node) not in AST_TO_CST or not hasattr(node, "lineno"):
            continue
        found = local.locate(node)
        assert found is whole.locate(node), (type(node).__name__, node.lineno)
        if found is not None:
            assert local.position(found) == whole.positions[found]
            checked += 1
    return checked


def test_nodes_and_positions_of_tricky_code_are_the_whole_modules():
    assert _check(TRICKY) > 60
    assert _check(TRICKY.replace("\n", "\r\n")) > 60


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_nodes_and_positions_of_real_files_are_the_whole_modules(path):
    _check(path.read_text(encoding="utf-8"))


def _big_class():
    """A class of 200 methods, its context, and the `t.item()` call of method 66 (line 201)."""
    methods = "".join(f"    def m{i}(self, t):\n        return t.item() + {i}\n\n" for i in range(200))
    text = f"class Big:\n{methods}"
    tree = ast.parse(text)
    ctx = CstContext(cst.parse_module(text), SourceText(text), tree)
    return text, ctx, next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == 201)


def test_a_method_of_a_large_class_is_positioned_without_the_class():
    """The point of it: a fix in one method positions that method's statement only."""
    _, ctx, call = _big_class()
    found = ctx.locate(call)
    assert isinstance(found, cst.Call) and ctx.code(found) == "t.item()"
    assert len(ctx._of_statement) == 1  # the method alone, not the class
    positions, _ = next(iter(ctx._of_statement.values()))
    assert len(positions) < 40


def _applied(text: str, edits) -> str:
    """`text` with `edits` (1-based rows and character columns, none overlapping) made."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(location):
        return starts[location.row - 1] + location.column - 1 if location.row <= len(lines) else len(text)

    for edit in sorted(edits, key=lambda e: (e.location.row, e.location.column), reverse=True):
        text = text[: offset(edit.location)] + edit.content + text[offset(edit.end_location) :]
    return text


CHANGES = {
    "item": lambda node: cst.parse_expression("float(t)"),
    "grow": lambda node: cst.parse_expression("(\n    total\n    + 1\n)"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_fixs_text_edits_make_the_fixed_module(change, newline):
    """Each fix's edits, found from the statements inside a class or def that changed, turn the
    text into exactly the module the fix makes (`apply_fixes`), wherever the fix is."""
    from xlalint.diagnostics import Fix
    from xlalint.fixing.apply import FixEdits, apply_fixes

    text = TRICKY.replace("\n", newline) + newline
    module, tree = cst.parse_module(text), ast.parse(text)
    ctx = CstContext(module, SourceText(text), tree)
    edits = FixEdits(ctx)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert len(calls) > 10
    for call in calls:
        old = ctx.locate(call)
        fix = Fix.replace(old, CHANGES[change](old), title="t", safe=True)
        assert _applied(text, edits.of(fix)) == apply_fixes(ctx, [fix]).code, (call.lineno, ctx.code(old))


def test_the_edits_of_a_fix_in_one_method_span_that_method():
    from xlalint.diagnostics import Fix
    from xlalint.fixing.apply import FixEdits

    text, ctx, call = _big_class()
    old = ctx.locate(call)
    (edit,) = FixEdits(ctx).of(Fix.replace(old, cst.parse_expression("float(t)"), title="t", safe=True))
    assert (edit.location.row, edit.end_location.row) == (201, 201)
    assert _applied(text, [edit]) == text.replace("t.item() + 66\n", "float(t) + 66\n")


def _index_fields(index):
    """A module index as comparable values: nodes by identity, in their order."""
    from dataclasses import fields

    def plain(value):
        if isinstance(value, cst.CSTNode):
            return id(value)
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, set):
            return sorted(value)
        if hasattr(value, "__dataclass_fields__"):
            return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
        return value

    return {f.name: plain(getattr(index, f.name)) for f in fields(index)}


@pytest.mark.parametrize("path", _files()[:12], ids=lambda p: p.name)
def test_the_index_walk_meets_what_libcsts_visit_meets(path):
    """`cst_index.walk` (no node rebuilt) gives the index libcst's own `visit` gives: the same
    parents, order, imports, bindings and name uses, node for node."""
    from xlalint.fixing.cst_index import ModuleIndex, _Indexer, build_index

    for text in (path.read_text(encoding="utf-8"), TRICKY):
        module = cst.parse_module(text)
        visited = ModuleIndex()
        module.visit(_Indexer(visited))
        assert _index_fields(build_index(module)) == _index_fields(visited)
