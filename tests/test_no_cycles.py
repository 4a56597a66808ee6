"""A file's work leaves its trees in no cycle: with the collector paused for it (`deep.deep_stack`),
its trees, index and analyses are freed by reference counting when it returns (`FileContext.close`),
or they would pile up until the collector ran. (A few small cycles stay: `ast.dump` makes one per
call, a rule's fix builder may close over the rule.)"""

import ast
import gc
from pathlib import Path

import pytest

from xlalint.engine import analyse, fix_source, lint_source
from xlalint.analysis.project import summarize
from xlalint.rules import ALL_RULES
from xlalint.source import decode_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _cyclic_garbage(work) -> int:
    """Syntax nodes (`ast`'s and libcst's) that only the collector frees, of those `work` leaves."""
    import libcst

    gc.collect()
    gc.disable()
    try:
        work()
        gc.set_debug(gc.DEBUG_SAVEALL)  # the unreachable kept in gc.garbage, to be counted
        gc.collect()
        return sum(isinstance(o, (ast.AST, libcst.CSTNode)) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        gc.enable()


def _nodes(source) -> int:
    return sum(1 for _ in ast.walk(ast.parse(source.text)))


@pytest.mark.parametrize("name", ["xla_project/train_lm.py", "compile_project/train_compiled.py"])
def test_checking_and_fixing_a_file_leave_no_cycles(name):
    source = decode_source(EXAMPLES / name, (EXAMPLES / name).read_bytes())
    found = lint_source(source, list(ALL_RULES), with_edits=True)
    assert any(d.fix is not None for d in found)  # the fixes' libcst tree and index are built too
    few = _nodes(source) // 20
    assert _cyclic_garbage(lambda: lint_source(source, list(ALL_RULES), with_edits=True)) < few
    assert _cyclic_garbage(lambda: fix_source(source, list(ALL_RULES), unsafe=True)) < few


def test_a_closed_context_frees_what_its_analyses_built():
    source = decode_source(EXAMPLES / "xla_project/train_lm.py", (EXAMPLES / "xla_project/train_lm.py").read_bytes())

    def summary(close: bool) -> None:
        ctx = analyse(source)
        summarize(ctx, "train_lm")
        if close:
            ctx.close()

    few = _nodes(source) // 20
    assert _cyclic_garbage(lambda: summary(close=False)) > _nodes(source) // 2  # what `close` is for
    assert _cyclic_garbage(lambda: summary(close=True)) < few
