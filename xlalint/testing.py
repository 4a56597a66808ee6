"""Tests for free from each rule's VALID/INVALID examples (Fixit's model).

`rule_cases(rules)` yields pytest params; `check_case(rule, case)` asserts one of them:
VALID gives no finding; INVALID gives exactly one finding of the rule on its line, and when an
`expected_replacement` is given, fixing at its applicability yields exactly that code, which parses
and is a fixed point (fixing again changes nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .diagnostics import Applicability
from .engine import example_facts, fix_source, lint_source
from .rule import Invalid, Rule, Valid
from .source import decode_source


def rule_cases(rules: list[type[Rule]]):
    import pytest

    for rule in rules:
        for i, case in enumerate(rule.VALID):
            yield pytest.param(rule, case, id=f"{rule.code}-{rule.name}-VALID_{i}")
        below = rule.python_below
        marks = [pytest.mark.skip(reason=f"no such hazard on Python {sys.version_info[0]}.{sys.version_info[1]}")]
        for i, invalid in enumerate(rule.INVALID):
            skip = marks if below is not None and sys.version_info[:2] >= below else []
            yield pytest.param(rule, invalid, id=f"{rule.code}-{rule.name}-INVALID_{i}", marks=skip)


def lint_code(
    code: str,
    rules: list[type[Rule]],
    path: str = "example.py",
    with_edits: bool = False,
    modules: dict[str, str] | None = None,
):
    """Findings in `code` (its project: itself and `modules`, file name -> code)."""
    # rule examples are fragments that need not mention torch: no prefilter
    source = decode_source(Path(path), code.encode())
    return lint_source(source, rules, with_edits=with_edits, prefilter=False, project=_facts(source, modules))


def _facts(source, modules: dict[str, str] | None):
    return example_facts(source, [decode_source(Path(name), text.encode()) for name, text in (modules or {}).items()])


def fix_code(
    code: str, rules: list[type[Rule]], unsafe: bool, path: str = "example.py", modules: dict[str, str] | None = None
) -> str:
    source = decode_source(Path(path), code.encode())
    result = fix_source(source, rules, unsafe=unsafe, prefilter=False, project=_facts(source, modules))
    return (result.fixed or code.encode()).decode()


def _examples_run_with(rule: type[Rule]) -> list[type[Rule]]:
    """The rules an example runs: the rule alone, or every stable rule for one that judges the
    others' `noqa` comments (XLA901)."""
    if not getattr(rule, "judges_noqa", False):
        return [rule]
    from .rules import ALL_RULES

    return [r for r in ALL_RULES if not r.preview]


def check_case(rule: type[Rule], case: Valid | Invalid) -> None:
    rules = _examples_run_with(rule)
    found = lint_code(case.code, rules, with_edits=True, modules=case.modules)
    if isinstance(case, Valid):
        assert not found, f"{rule.code} reported valid code:\n{case.code}\n{[d.message for d in found]}"
        return
    assert len(found) == 1, f"{rule.code} expected 1 finding, got {len(found)}:\n{case.code}\n{found}"
    diagnostic = found[0]
    if case.line is not None:
        assert diagnostic.location.row <= case.line <= diagnostic.end_location.row, (
            f"{rule.code} reported rows {diagnostic.location.row}-{diagnostic.end_location.row}, expected {case.line}"
        )
    if case.expected_replacement is None:
        return
    assert diagnostic.fix is not None, f"{rule.code} offered no fix for:\n{case.code}"
    assert diagnostic.fix.applicability is case.applicability, diagnostic.fix.applicability
    assert diagnostic.fix.edits, "a fix must come with its text edits"
    unsafe = case.applicability is Applicability.UNSAFE
    if unsafe:
        assert fix_code(case.code, rules, unsafe=False, modules=case.modules) == case.code, (
            "an unsafe fix was applied without opt-in"
        )
    fixed = fix_code(case.code, rules, unsafe=unsafe, modules=case.modules)
    assert fixed == case.expected_replacement, (
        f"fix mismatch:\n--- got\n{fixed}\n--- expected\n{case.expected_replacement}"
    )
    compile(fixed, "fixed.py", "exec")
    assert fix_code(fixed, rules, unsafe=unsafe, modules=case.modules) == fixed, "fixing twice changed the code again"
