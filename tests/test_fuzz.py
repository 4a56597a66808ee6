"""Generated programs (hypothesmith) through check and fix: no crash, output parses, a second fix
changes nothing. Seeded (derandomized), a few hundred programs, in the default test run.

Each program is linted as it is and embedded in a training loop on an XLA device, where every rule
looks at it (a program alone rarely mentions torch, and would be skipped before parsing)."""

import ast
import textwrap
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from xlalint.engine import fix_source, lint_source  # noqa: E402
from xlalint.rules import ALL_RULES  # noqa: E402
from xlalint.source import SourceError, decode_source  # noqa: E402

# generated programs are odd on purpose (`1()`, `b""()`): Python warns when this test parses them
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")
FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

LOOP_HEAD = """\
import torch
import torch_xla.core.xla_model as xm

def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        print(loss.item())
        optimizer.step()
"""


def _embedded(program: str) -> str:
    return LOOP_HEAD + textwrap.indent(program, " " * 8) + "\n" if program.strip() else LOOP_HEAD


def _check_and_fix(text: str) -> None:
    source = decode_source(Path("fuzzed.py"), text.encode("utf-8"))
    try:
        lint_source(source, ALL_RULES, with_edits=True, assume_xla=True)
        result = fix_source(source, ALL_RULES, unsafe=True, assume_xla=True)
    except SourceError as exc:  # the only way out for a file xlalint cannot analyse: one line
        assert "\n" not in str(exc) and ("nesting too deep" in str(exc) or "syntax error" in str(exc)), exc
        return
    if result.fixed is None:
        return
    ast.parse(result.fixed)  # the fixed file is valid Python
    again = fix_source(decode_source(Path("fuzzed.py"), result.fixed), ALL_RULES, unsafe=True, assume_xla=True)
    assert again.fixed is None, "a second fix changed the file again"


def _valid(program: str) -> bool:
    try:
        ast.parse(_embedded(program))
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # e.g. `return` at module level becomes valid inside the function, or not


def _alone_and_in_a_loop(program: str) -> None:
    _check_and_fix(program)
    if _valid(program):
        _check_and_fix(_embedded(program))


@FUZZ
@given(hypothesmith.from_grammar())
def test_grammar_programs(program):
    _alone_and_in_a_loop(program)


@FUZZ
@given(hypothesmith.from_node())
def test_node_programs(program):
    _alone_and_in_a_loop(program)
