"""examples/compile_project: the DYN rules find its hazards, its fixed twin is clean, and Dynamo
agrees: the original breaks and recompiles, the fixed one compiles two graphs once, same numbers."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "compile_project"


def _codes(path: Path) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "xlalint", "check", "--no-cache", "--select", "DYN",
                           "--output-format", "json", str(path)], capture_output=True, text=True, cwd=ROOT)
    return {d["code"] for d in json.loads(proc.stdout)}


def test_the_rules_find_the_hazards_and_the_fixed_twin_is_clean():
    assert _codes(PROJECT / "train_compiled.py") == {"DYN101", "DYN104", "DYN105", "DYN106", "DYN113", "DYN121",
                                                     "DYN201", "DYN202", "DYN204"}
    assert _codes(PROJECT / "fixed" / "train_compiled.py") == set()


def _run(path: Path, steps: int):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent / "rules"))
    from dynamo_helpers import observe

    spec = importlib.util.spec_from_file_location(f"example_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.print = lambda *a, **k: None  # noqa: the scripts' progress lines
    result = {}
    run = observe(lambda backend: result.update(module.main(steps, backend=backend)))
    torch._dynamo.reset()
    return run, result


def test_dynamo_agrees_original_breaks_and_recompiles_fixed_compiles_once():
    _skip_without_dynamo()
    before, metrics_before = _run(PROJECT / "train_compiled.py", 18)
    after, metrics_after = _run(PROJECT / "fixed" / "train_compiled.py", 18)
    # the first breaks of each frame (after the recompile limit the rest runs eagerly, unseen)
    assert before.gb_ids >= {"GB0170", "GB0007", "GB0246"}, before.gb_ids
    assert len(before.recompiles) >= 8 and before.graphs > 8
    assert (after.graphs, after.breaks, after.recompiles) == (2, [], [])
    assert metrics_after["loss"] == pytest.approx(metrics_before["loss"], rel=1e-5)
    assert metrics_after["acc"] == pytest.approx(metrics_before["acc"], rel=1e-5)


def _skip_without_dynamo():
    torch = pytest.importorskip("torch")
    if torch._C._get_privateuse1_backend_name() != "privateuseone":
        pytest.skip("torchax was imported in this process (tests/rules/test_dynamo_rules.py reruns this in a fresh one)")
