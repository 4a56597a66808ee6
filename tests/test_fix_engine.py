"""Applying fixes: overlaps, imports, validity, idempotence, and byte-exact preservation on disk."""

import os
import stat
from pathlib import Path

import ast

import libcst as cst

from xlalint.diagnostics import Fix, ImportRequest
from xlalint.engine import fix_source, lint_source
from xlalint.fixing.apply import text_edits
from xlalint.rule import Rule
from xlalint.source import decode_source, read_source, write_atomic


class RenameSync(Rule):
    """Test rule: `xm.mark_step()` -> `torch_xla.sync()` (safe), the import placed beside `xm`'s."""

    code, name, category, summary = "XLA990", "test-rename-sync", "other", "test"

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) == "torch_xla.core.xla_model.mark_step":
            self.report(node, fix=lambda cctx: self.fix(cctx, node))

    @staticmethod
    def fix(cctx, node):
        call = cctx.locate(node)
        new = call.with_changes(func=cst.parse_expression("torch_xla.sync"))
        return Fix.replace(call, new, title="use torch_xla.sync()", safe=True,
                           imports=[ImportRequest("torch_xla", beside="xm")])


class WrapInStep(Rule):
    """Test rule: `opt.step()` -> `optimizer_step(opt)` (unsafe), import from the runtime."""

    code, name, category, summary = "XLA991", "test-wrap-step", "other", "test"

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "step" and not node.args:
            self.report(node, fix=lambda cctx: self.fix(cctx, node))

    def fix(self, cctx, node):
        spelling, request = cctx.importable("xlalint.runtime", "optimizer_step")
        new = cst.parse_expression(f"{spelling}({self.ctx.code(node.func.value)}, barrier=True)")
        return Fix.replace(cctx.locate(node), new, title="barrier", safe=False, imports=[request])


class Outer(Rule):
    """Test rule whose fix replaces a whole statement that contains a RenameSync fix."""

    code, name, category, summary = "XLA992", "test-outer", "other", "test"

    def visit_Expr(self, node: ast.Expr) -> None:
        if "mark_step" in self.ctx.code(node):
            self.report(node, fix=lambda cctx: self.fix(cctx, node))

    @staticmethod
    def fix(cctx, node):
        line = cctx.locate(node, cst.SimpleStatementLine)
        new = cst.parse_statement("pass  # replaced\n")
        return Fix.replace(line, new, title="replace", safe=True)


GUARDED = """\
try:
    import torch_xla.core.xla_model as xm
except ImportError:  # CPU fallback
    xm = None


def train(opt):
    for _ in range(3):
        opt.step()
        if xm is not None:
            xm.mark_step()
"""


def fix(code, rules, unsafe=False, path="t.py"):
    result = fix_source(decode_source(Path(path), code if isinstance(code, bytes) else code.encode()), rules,
                        unsafe=unsafe, prefilter=False)
    return result


def test_safe_fix_keeps_guarded_import_under_its_guard():
    out = fix(GUARDED, [RenameSync]).fixed.decode()
    assert "    import torch_xla.core.xla_model as xm\n    import torch_xla\nexcept ImportError:" in out
    assert "torch_xla.sync()" in out and "mark_step" not in out
    assert fix(out, [RenameSync]).fixed is None  # a fixed point


def test_unsafe_fix_needs_opt_in_and_adds_top_level_import():
    assert fix(GUARDED, [WrapInStep]).fixed is None
    out = fix(GUARDED, [WrapInStep], unsafe=True).fixed.decode()
    assert out.startswith("from xlalint.runtime import optimizer_step\n")
    assert "optimizer_step(opt, barrier=True)" in out
    compile(out, "t.py", "exec")


def test_import_spelling_avoids_a_taken_name():
    code = GUARDED + "\n\ndef optimizer_step():\n    pass\n"
    out = fix(code, [WrapInStep], unsafe=True).fixed.decode()
    assert "import xlalint.runtime\n" in out
    assert "xlalint.runtime.optimizer_step(opt, barrier=True)" in out


def test_overlapping_fixes_converge_over_passes():
    out = fix(GUARDED, [RenameSync, Outer]).fixed.decode()
    compile(out, "t.py", "exec")
    assert "mark_step" not in out


def test_bytes_are_preserved_bom_crlf_latin1():
    crlf = GUARDED.replace("\n", "\r\n").encode()
    out = fix(crlf, [RenameSync]).fixed
    assert b"\r\n" in out and b"\n" not in out.replace(b"\r\n", b"")
    bom = b"\xef\xbb\xbf" + GUARDED.encode()
    assert fix(bom, [RenameSync]).fixed.startswith(b"\xef\xbb\xbftry:")
    latin = ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + GUARDED).encode("latin-1")
    out = fix(latin, [RenameSync]).fixed
    assert b"# caf\xe9\n" in out and b"torch_xla.sync()" in out


def test_edits_describe_the_fix_exactly():
    found = lint_source(decode_source(Path("t.py"), GUARDED.encode()), [RenameSync], with_edits=True,
                        prefilter=False)
    (diagnostic,) = found
    edits = diagnostic.fix.edits
    # applying the reported edits to the text gives the fixed file
    text = GUARDED
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for edit in sorted(edits, key=lambda e: e.location, reverse=True):
        start = offsets[edit.location.row - 1] + edit.location.column - 1
        end = offsets[edit.end_location.row - 1] + edit.end_location.column - 1
        text = text[:start] + edit.content + text[end:]
    assert text == fix(GUARDED, [RenameSync]).fixed.decode()


def test_text_edits_insertion_and_replacement():
    (edit,) = text_edits("a = 1\nb = 2\n", "a = 1\nb = 3\n")
    assert (edit.location.row, edit.location.column, edit.end_location.column, edit.content) == (2, 5, 6, "3")
    (edit,) = text_edits("x\n", "import y\nx\n")
    assert (edit.location.row, edit.location.column, edit.end_location.row, edit.content) == (1, 1, 1, "import y\n")


def test_write_atomic_keeps_mode_and_leaves_no_temp(tmp_path):
    target = tmp_path / "script.py"
    target.write_text("old\n")
    os.chmod(target, 0o755)
    write_atomic(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["script.py"]


def test_read_source_roundtrips_libcst(tmp_path):
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\r\n")
    source = read_source(path)
    assert source.encoding == "utf-8-sig" and source.text == "x = 1\r\n"
    assert cst.parse_module(source.raw).bytes == source.raw


class RenameAndDropImport(Rule):
    """Test rule: like RenameSync, and drops the `xm` import once unused."""

    code, name, category, summary = "XLA993", "test-drop-import", "other", "test"

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) == "torch_xla.core.xla_model.mark_step":
            self.report(node, fix=lambda cctx: self.fix(cctx, node))

    @staticmethod
    def fix(cctx, node):
        call = cctx.locate(node)
        new = call.with_changes(func=cst.parse_expression("torch_xla.sync"))
        return Fix.replace(call, new, title="use torch_xla.sync()", safe=True,
                           imports=[ImportRequest("torch_xla", beside="xm")],
                           removed_imports=[ImportRequest("torch_xla.core.xla_model", asname="xm")])


def test_unused_import_is_dropped_but_never_its_comments():
    plain = "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n"
    assert fix(plain, [RenameAndDropImport]).fixed.decode() == "import torch_xla\n\ntorch_xla.sync()\n"
    commented = "def launch():\n    # TPU support\n    import torch_xla.core.xla_model as xm\n\n    xm.mark_step()\n"
    out = fix(commented, [RenameAndDropImport]).fixed.decode()
    assert "    # TPU support\n    import torch_xla.core.xla_model as xm\n    import torch_xla\n" in out
    trailing = "import torch_xla.core.xla_model as xm  # keep for TPUs\n\nxm.mark_step()\n"
    assert "# keep for TPUs" in fix(trailing, [RenameAndDropImport]).fixed.decode()


# -- each fix's edits (JSON, SARIF): the same as diffing the whole module, in linear time --------------

def _edits_per_fix(source):
    """(the edits the engine gives each fix, what diffing the whole fixed module gives)."""
    from xlalint import engine
    from xlalint.fixing.apply import apply_fixes
    from xlalint.rules import ALL_RULES

    ctx = engine.analyse(source)
    found = engine._keep(source, engine._run_rules(ctx, ALL_RULES))
    cst_ctx = engine._build_fixes(source, ctx, found, with_edits=True)
    fixes = [item.fix for item in found if item.fix is not None]
    return ([f.edits for f in fixes],
            [text_edits(cst_ctx.module.code, apply_fixes(cst_ctx, [f]).code) for f in fixes])


EXAMPLES = sorted(Path(__file__).resolve().parent.parent.glob("examples/**/*.py"))


def test_each_fix_s_edits_are_those_of_the_whole_module_diff():
    header = '"""Doc."""\n# a comment\nimport torch\nimport torch_xla.core.xla_model as xm\n\n'
    sources = [read_source(p).text for p in EXAMPLES] + [
        header + "def f():\n    xm.mark_step()\n\n\ndef g():\n    xm.mark_step()",  # no final newline
        "import torch_xla.core.xla_model as xm\nxm.mark_step()\nx = 1\nxm.mark_step()\n",
        "# licence\n\nimport torch_xla.core.xla_model as xm\n\nclass T:\n    def s(self):\n        xm.mark_step()\n",
    ]
    checked = 0
    for text in sources:
        engine_edits, whole = _edits_per_fix(decode_source(Path("t.py"), text.encode()))
        assert engine_edits == whole
        checked += len(whole)
    assert checked > 20  # the examples have fixes of every kind (imports added, replaced, removed)


def test_the_edits_of_many_fixes_diff_each_statement_once(monkeypatch):
    from xlalint.fixing import apply

    text = "import torch\nimport torch_xla.core.xla_model as xm\n\n" + "".join(
        f"def f{i}():\n    xm.mark_step()\n\n" for i in range(400))
    diffed = []
    real = apply.text_edits

    def counting(before, after):
        diffed.append(len(before))
        return real(before, after)

    monkeypatch.setattr(apply, "text_edits", counting)
    from xlalint.rules import RULES_BY_CODE

    found = lint_source(decode_source(Path("t.py"), text.encode()), [RULES_BY_CODE["XLA602"]], with_edits=True)
    assert len(found) == 400 and all(d.fix.edits for d in found)
    # each fix diffs its own statement and the import block, never the whole file: linear in all
    assert sum(diffed) < 3 * len(text)
