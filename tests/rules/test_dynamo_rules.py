"""torch.compile rules (DYN): every example runs under Dynamo on CPU, and Dynamo agrees.

Each INVALID example is run with a `CompileCounter` backend and the `graph_breaks`/`recompiles`
logs captured: a break rule's example breaks with one of the rule's graph-break ids (more than
one graph, or a `fullgraph=True` error naming the id); a recompile rule's example compiles more
than once. Each VALID example, and the fixed form of each INVALID example with a fix, compiles to
exactly one graph with no break and no recompile. The untraceable-call table is proven row by row.

The claims are proven on the torch releases each rule (`torch_proven`) and row (`proven`) states; an
example whose claim does not hold on one (`torch_not_held`), and a row that gives no id on one
(`no_break_on`), is skipped there with the reason. The running torch's release picks the row's id
(`gb_by_torch`). `scripts/dynamo_versions.sh` runs these proofs on torch 2.11 and 2.13.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from xlalint.rules.dynamo.untraceable_call_in_compiled import TABLE  # noqa: E402
from xlalint.rules import ALL_RULES  # noqa: E402
from xlalint.testing import fix_code  # noqa: E402

from dynamo_helpers import dynamo_usable, load, observe  # noqa: E402  (tests/rules/dynamo_helpers.py)

DYN = [r for r in ALL_RULES if r.code.startswith("DYN")]
ROOT = Path(__file__).resolve().parents[2]
FRESH = "XLALINT_DYNAMO_FRESH"  # set in the fresh process below


@pytest.fixture(autouse=True)
def _dynamo(request):
    if request.node.name.startswith("test_in_a_fresh_process"):
        return
    if not dynamo_usable():
        pytest.skip("torchax was imported in this process: Dynamo cannot compile here (run in a fresh process)")


def test_in_a_fresh_process_when_this_one_cannot_compile():
    """Where another test imported torchax first, the Dynamo proofs run in a fresh interpreter."""
    if dynamo_usable() or os.environ.get(FRESH):
        pytest.skip("Dynamo works in this process: the proofs run here")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
                           str(Path(__file__)), str(ROOT / "tests" / "test_compile_example.py"),
                           str(ROOT / "tests" / "test_compiled_analysis.py"),
                           str(ROOT / "tests" / "rules" / "test_recall_harms.py")],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, FRESH: "1"})
    assert proc.returncode == 0, proc.stdout[-4000:]


RELEASE = ".".join(torch.__version__.split(".")[:2])  # the running torch, "2.11"


def _cases(kind):
    for rule in DYN:
        for i, case in enumerate(getattr(rule, kind)):
            why = rule.torch_not_held.get(f"{kind}_{i}", {}).get(RELEASE)
            if kind == "INVALID" and rule.python_below and sys.version_info[:2] >= rule.python_below:
                why = f"no such hazard on Python {sys.version_info[0]}.{sys.version_info[1]}"
            marks = [pytest.mark.skip(reason=f"not on torch {RELEASE}: {why}")] if why else []
            yield pytest.param(rule, case, id=f"{rule.code}-{kind}_{i}", marks=marks)


def test_every_dyn_rule_states_the_releases_it_was_proven_on():
    assert all(r.torch_proven for r in DYN), [r.code for r in DYN if not r.torch_proven]
    for rule in DYN:  # an exception names an example the rule has, on a release it was proven on
        for case, releases in rule.torch_not_held.items():
            kind, _, i = case.rpartition("_")
            assert int(i) < len(getattr(rule, kind)) and set(releases) <= set(rule.torch_proven), (rule.code, case)


def _split_or_eager(run) -> bool:
    """The function's graph is split (two graphs or more), or, at a break Dynamo cannot resume from,
    no graph is compiled and the function runs eagerly (2.13 says "Failed to handle graph break
    gracefully"; 2.11 logs the break and compiles nothing). The caller checks the break's id."""
    return run.graphs >= 2 or (run.graphs == 0 and bool(run.breaks))


def _run(code: str):
    return observe(lambda backend: load(code, backend))


@pytest.mark.parametrize("rule, case", list(_cases("INVALID")))
def test_invalid_example_shows_the_harm_under_dynamo(rule, case):
    run = _run(case.code)
    if getattr(rule, "recompiles", False):
        assert run.graphs >= 2 and run.recompiles, (run.graphs, run.recompiles)
        assert not run.user_breaks, run.user_breaks
    else:
        expected = set(rule.gb_ids_by_torch().get(RELEASE, rule.gb_ids))  # the running release's ids
        assert run.gb_ids & expected, (expected, run.gb_ids, run.breaks)
        assert _split_or_eager(run), (run.graphs, run.breaks)


@pytest.mark.parametrize("rule, case", list(_cases("VALID")))
def test_valid_example_compiles_to_one_graph(rule, case):
    run = _run(case.code)
    assert (run.graphs, run.user_breaks, run.recompiles) == (1, [], []), (run.graphs, run.breaks, run.recompiles)


@pytest.mark.parametrize("rule, case", [p for p in _cases("INVALID") if p.values[1].expected_replacement])
def test_fixed_example_compiles_to_one_graph(rule, case):
    fixed = fix_code(case.code, [rule], unsafe=case.applicability.value == "unsafe")
    assert fixed == case.expected_replacement
    run = _run(fixed)
    assert (run.graphs, run.breaks, run.recompiles) == (1, [], [])


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.name)
def test_every_untraceable_row_breaks_with_its_id(row):
    if RELEASE in dict(row.no_break_on):
        pytest.skip(f"no break on torch {RELEASE}: {dict(row.no_break_on)[RELEASE]}")
    # a proven release prints its own id; another release, one of the ids the row knows
    expected = {row.gb_on(RELEASE)} if RELEASE in row.proven else set(row.ids_by_torch.values()) - {None}
    module = row.name.rpartition(".")[0] if row.method is None else ""
    imports = {"io", "os", "time", "random", "copy", "json", "torch", *([module.split(".")[0]] if module else [])}
    code = "\n".join(f"import {m}" for m in sorted(imports)) + f"\n{row.setup}" + textwrap.dedent(f"""

        @torch.compile
        def f(x):
            y = x * 2
            {row.example}
            return y + 1

        f(torch.ones(3, requires_grad=True))
        """)
    run = _run(code)
    assert expected & run.gb_ids, (expected, run.gb_ids, run.breaks)
    assert _split_or_eager(run), (run.graphs, run.breaks)


def test_a_method_row_needs_its_receiver_class():
    """`.step()` is flagged on an optimizer (not on a scheduler or an unknown object), and not as the
    whole body of a compiled function (torch's own compiled-optimizer pattern)."""
    from xlalint.testing import lint_code

    rule = next(r for r in DYN if r.code == "DYN121")
    code = textwrap.dedent("""
        import torch

        model = torch.nn.Linear(3, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1)

        @torch.compile
        def train(x):
            model(x).sum()
            sched.step()
            opt.step()
            return x

        @torch.compile
        def step_only():
            opt.step()
        """)
    assert [d.location.row for d in lint_code(code, [rule])] == [12]


@pytest.mark.parametrize("rule", [r for r in DYN if getattr(r, "gb_ids", ())], ids=lambda r: r.code)
def test_explain_links_the_graph_break_page_of_every_id(rule):
    from xlalint.rules.dynamo._common import gb_page
    from xlalint.explain import explain_text

    text = explain_text(rule)
    assert all(gb_page(gb) in text for gb in rule.gb_ids), [gb for gb in rule.gb_ids if gb_page(gb) not in text]
    assert ("--select DYN" in text) == rule.preview  # how to turn it on, for the rules off by default
