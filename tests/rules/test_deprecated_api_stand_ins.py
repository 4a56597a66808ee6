"""XLA601/XLA602 in files that bind a CPU stand-in for the torch_xla module when it is missing: the
old call reaches the stand-in, the new spelling names a module that was never imported, so the fix
is no safe fix there (it stays available with `--unsafe-fixes`)."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from xlalint.diagnostics import Applicability
from xlalint.rules.deprecated_api.deprecated_xla_api import DeprecatedXlaApi
from xlalint.rules.deprecated_api.removed_xla_api import RemovedXlaApi
from xlalint.testing import fix_code, lint_code

RULES = [RemovedXlaApi, DeprecatedXlaApi]

STAND_INS = {
    "class": """
        class xm:  # CPU stand-in
            @staticmethod
            def mark_step():
                pass

            @staticmethod
            def get_ordinal():
                return 0
    """,
    "namespace": """
        from types import SimpleNamespace
        xm = SimpleNamespace(mark_step=lambda: None, get_ordinal=lambda: 0)
    """,
    "none": """
        xm = None
    """,
}


def script(stand_in: str) -> str:
    body = textwrap.indent(textwrap.dedent(STAND_INS[stand_in]).strip("\n"), "    ")
    return (
        "try:\n"
        "    import torch_xla.core.xla_model as xm\n"
        "except ImportError:\n"
        f"{body}\n"
        "\n"
        "def step():\n"
        "    xm.mark_step()\n"
        "    return xm.get_ordinal()\n"
    )


@pytest.mark.parametrize("stand_in", sorted(STAND_INS))
def test_a_stand_in_for_the_module_makes_the_fix_unsafe(stand_in):
    code = script(stand_in)
    found = lint_code(code, RULES, with_edits=True)
    assert sorted(d.code for d in found) == ["XLA601", "XLA602"]
    assert all(d.fix.applicability is Applicability.UNSAFE for d in found)
    assert all("stand-in" in d.fix.title for d in found)
    assert fix_code(code, RULES, unsafe=False) == code
    fixed = fix_code(code, RULES, unsafe=True)
    assert "torch_xla.sync()" in fixed and "xr.global_ordinal()" in fixed


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="needs a machine without torch_xla")
@pytest.mark.parametrize("stand_in", ["class", "namespace"])
def test_on_cpu_the_original_runs_and_the_unsafe_fix_raises_name_error(stand_in):
    code = script(stand_in)
    original: dict = {}
    exec(compile(code, "<original>", "exec"), original)
    assert original["step"]() == 0
    fixed: dict = {}
    exec(compile(fix_code(code, RULES, unsafe=True), "<fixed>", "exec"), fixed)
    with pytest.raises(NameError):
        fixed["step"]()


def test_a_none_stand_in_keeps_the_safe_fix_where_the_use_needs_the_module():
    code = textwrap.dedent("""
        try:
            import torch_xla.core.xla_model as xm
        except ImportError:
            xm = None

        def step():
            if xm is not None:
                xm.mark_step()
            return xm.get_ordinal() if xm else 0

        def rank():
            if xm is None:
                return 0
            return xm.get_ordinal()
    """).lstrip()
    found = lint_code(code, RULES, with_edits=True)
    assert len(found) == 3 and all(d.fix.applicability is Applicability.SAFE for d in found)
    fixed = fix_code(code, RULES, unsafe=False)
    assert "xm.mark_step" not in fixed and "xm.get_ordinal" not in fixed


def test_a_stand_in_imported_under_the_name_gets_no_safe_fix():
    code = script("none").replace("xm = None", "from cpu_stub import xla_model as xm")
    assert fix_code(code, RULES, unsafe=False) == code


def test_another_import_of_torch_xla_under_the_name_is_no_stand_in():
    code = textwrap.dedent("""
        try:
            import torch_xla.core.xla_model as xm
        except ImportError:
            from torch_xla.core import xla_model as xm

        xm.mark_step()
    """).lstrip()
    [found] = lint_code(code, RULES, with_edits=True)
    assert found.fix.applicability is Applicability.SAFE
