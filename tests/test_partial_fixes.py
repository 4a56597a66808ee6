"""Where only a fix's title, applicability and span are wanted (the text report), fixes are built on
the statements around their findings and the file's imports, parsed alone (`fixing.partial`): what
each fix is must be what it is on the whole file's tree."""

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from xlalint.rules import ALL_RULES

import xlalint.engine as engine
from xlalint.fixing.context import CstContext
from xlalint.fixing.cst_index import build_index
from xlalint.fixing.partial import WholeFileNeeded, cst_bare_names, partial_source
from xlalint.source import SourceText
from xlalint.testing import _examples_run_with, lint_code

# What libcst makes a `Name` of and `ast` does not (parameters, keyword arguments' names,
# `True`/`None`, `global` names, a handler's name, match captures...), and what neither counts
# (attributes' names, the dotted path of an import, a relative import's names)
NAMES = """\
from __future__ import annotations
import os.path as osp, numpy
import torch.nn.functional
from . import sibling
from .pkg import relative_name
from torch import *
from torch_xla.core import xla_model as xm, xla_env


@decorator(flag=True)
class Model(Base, metaclass=Meta):
    limit: int = None

    def forward(self, x, *args, scale=1.0, **kwargs):
        global counter
        counter += 1
        if (y := x.view(-1)) is not None:
            pass
        try:
            z = [w for w in args if w]
        except (ValueError, TypeError) as error:
            raise RuntimeError(str(error)) from None
        f = lambda q, /, r=False: q
        text = f"{x!r:>{width}} {scale=}"
        match kwargs:
            case {"a": [first, *rest], **others}:
                pass
            case Point(x=0, y=py) | other_shape:
                pass
            case _:
                pass
        return torch.nn.functional.relu(x, inplace=False).sum(dim=0)


def outer():
    value = 0

    def inner():
        nonlocal value
        import json
        with open("f") as handle, ctx():
            del handle
        return json
    return inner
"""


def test_bare_names_from_ast_are_libcsts():
    assert cst_bare_names(ast.parse(NAMES)) == build_index(cst.parse_module(NAMES)).bare_names


def test_bare_names_of_the_linters_own_modules_are_libcsts():
    root = Path(engine.__file__).parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert cst_bare_names(ast.parse(text)) == build_index(cst.parse_module(text)).bare_names, path


FILE = '''\
"""A module."""
import torch

LIMIT = 3


def helper(t):
  return t.sum()  # two spaces: the file's first indented block


class Trainer:
    """Many methods."""

    def first(self):
        return 1

    # a comment above `second`
    def second(self, batch):
        loss = self.model(batch)
        return loss.item()

    @property
    def third(self):
        import json
        return json


def main():
    pass
'''


def _imports(tree):
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _part(text: str, rows):
    tree = ast.parse(text)
    return partial_source(text.encode(), tree, rows, _imports(tree))


def test_the_part_keeps_the_statements_asked_for_the_imports_and_the_first_indented_block():
    raw, kept = _part(FILE, [20])  # `return loss.item()`
    lines, original = raw.decode().splitlines(), FILE.splitlines()
    assert len(lines) == len(original)
    kept_rows = {row for first, last in kept for row in range(first, last + 1)}
    for row, (new, old) in enumerate(zip(lines, original), 1):
        assert new in (old, ""), row
    assert lines[17:20] == original[17:20]  # `second`, whole
    assert lines[1] == "import torch" and lines[23:26] == original[23:26]  # every import's statement
    assert lines[7] == original[7]  # `helper`: where libcst reads the file's indentation
    assert lines[3] == "" and lines[28] == "" and lines[0] == ""  # the rest is blank
    assert "    # a comment above `second`" in lines  # comments stay where they were
    assert 20 in kept_rows and 4 not in kept_rows
    module = cst.parse_module(raw)
    assert module.default_indent == cst.parse_module(FILE).default_indent == "  "


def test_the_part_keeps_bytes_line_endings_and_the_byte_order_mark():
    text = "\ufeffimport torch\r\nx = 1\r\n\r\ndef f(t):\r\n    return t.item()\r\n"
    tree = ast.parse(text.lstrip("\ufeff"))
    raw, _ = partial_source(text.encode("utf-8"), tree, [5], _imports(tree))
    assert raw == "\ufeffimport torch\r\n\r\n\r\ndef f(t):\r\n    return t.item()\r\n".encode("utf-8")


def test_statements_sharing_a_line_are_kept_together():
    text = "a = f(\n    1); b = g()\nc = 2\n"
    raw, kept = _part(text, [2])
    assert raw.decode() == "a = f(\n    1); b = g()\n\n" and kept == [(1, 2)]


def test_nothing_left_out_is_no_part():
    assert _part("import torch\nx = torch.ones(2).item()\n", [2]) is None


def test_a_node_outside_the_part_asks_for_the_whole_file():
    raw, kept = _part(FILE, [20])
    tree = ast.parse(FILE)
    ctx = CstContext(cst.parse_module(raw), SourceText(FILE), kept=kept, bare_names=cst_bare_names(tree))
    trainer = tree.body[4]
    second, first = trainer.body[2], trainer.body[1]
    assert isinstance(ctx.locate(second.body[1].value), cst.Call)  # `loss.item()`, in the part
    with pytest.raises(WholeFileNeeded):
        ctx.locate(first.body[0])  # `return 1`: blanked
    with pytest.raises(WholeFileNeeded):
        ctx.locate(trainer)  # the class: only part of it is there
    assert "LIMIT" in ctx.index.bare_names  # the whole file's names, not the part's


PADDING = textwrap.dedent("""

    class _Padding:
        def a(self):
            return 1

        def b(self):
            return 2


    def _padding_function():
        return 3
""")


def _shown(found):
    return [(d.code, d.location, d.end_location, d.fix and (d.fix.title, d.fix.applicability)) for d in found]


def test_every_rule_example_gets_the_same_fixes_on_its_part(monkeypatch):
    """Each INVALID example with a fix, with code the part leaves out around it: findings and fixes
    (title, applicability, where) as on the whole file, whether built on the part or, where a
    builder looked beyond it, again on the whole file."""
    parts = []
    original = engine._partial_context

    def counted(*args, **kwargs):
        found = original(*args, **kwargs)
        parts.append(found is not None)
        return found

    monkeypatch.setattr(engine, "_partial_context", counted)
    compared = 0
    for rule in ALL_RULES:
        rules = _examples_run_with(rule)
        for case in rule.INVALID:
            if case.expected_replacement is None:
                continue
            code = PADDING + case.code + PADDING
            try:
                ast.parse(code)
            except SyntaxError:  # (a `from __future__` import must come first)
                code = case.code + PADDING
            whole = lint_code(code, rules, with_edits=True, modules=case.modules)
            part = lint_code(code, rules, with_edits=False, modules=case.modules)
            assert _shown(part) == _shown(whole), f"{rule.code}:\n{code}"
            compared += 1
    assert compared > 50
    assert sum(parts) > 0.8 * len(parts), (sum(parts), len(parts))  # the part was used, not the whole


def test_fixes_are_never_applied_on_a_part():
    from xlalint.fixing.apply import FixEdits, apply_fixes

    raw, kept = _part(FILE, [20])
    ctx = CstContext(cst.parse_module(raw), SourceText(FILE), kept=kept, bare_names=set())
    with pytest.raises(ValueError, match="whole file"):
        apply_fixes(ctx, [])
    with pytest.raises(ValueError, match="whole file"):
        FixEdits(ctx)
