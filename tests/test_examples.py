"""The bundled example project end to end: check finds every family; `fix --unsafe-fixes --write`
leaves code that parses, imports xlalint.runtime, runs on CPU with the same results, and is a
fixed point."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xlalint.diagnostics import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = sorted((EXAMPLES / "xla_project").glob("train_*.py"))
FAMILIES = set(CATEGORIES) - {"other"}


def xlalint(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def run_script(path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fixed_copy(tmp_path_factory):
    copy = tmp_path_factory.mktemp("examples") / "examples"
    shutil.copytree(EXAMPLES, copy)
    proc = xlalint("fix", "--unsafe-fixes", "--write", copy)
    assert proc.returncode in (0, 1), proc.stderr
    return copy


def test_check_finds_every_family():
    proc = xlalint("check", "--output-format", "json", "examples/")
    assert proc.returncode == 1, proc.stderr
    found = {d["category"] for d in json.loads(proc.stdout)}
    assert FAMILIES <= found, f"missing: {FAMILIES - found}"


def test_fixed_code_parses_and_imports_the_runtime(fixed_copy):
    changed = [p for p in fixed_copy.rglob("*.py")
               if p.read_bytes() != (EXAMPLES / p.relative_to(fixed_copy)).read_bytes()]
    assert changed, "fix --write changed nothing"
    for path in changed:
        compile(path.read_text(), str(path), "exec")
    runtime_users = [p for p in changed if "xlalint.runtime" in p.read_text()]
    assert runtime_users, "no fix targeted xlalint.runtime"


def test_second_fix_run_changes_nothing(fixed_copy):
    before = {p: p.read_bytes() for p in fixed_copy.rglob("*.py")}
    proc = xlalint("fix", "--unsafe-fixes", "--write", fixed_copy)
    assert proc.returncode in (0, 1), proc.stderr
    assert {p: p.read_bytes() for p in fixed_copy.rglob("*.py")} == before
    assert "Fixed 0 errors" in proc.stderr


def test_diff_mode_changes_nothing(tmp_path):
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy)
    before = {p: p.read_bytes() for p in copy.rglob("*.py")}
    proc = xlalint("fix", "--unsafe-fixes", copy)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/") and "+++ b/" in proc.stdout
    assert {p: p.read_bytes() for p in copy.rglob("*.py")} == before


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_fixed_scripts_compute_the_same_results_on_cpu(script, fixed_copy):
    before = run_script(script)
    after = run_script(fixed_copy / script.relative_to(EXAMPLES))
    assert before.keys() == after.keys()
    for key in before:
        # the clipping rewrite computes the coefficient as torch does (eps, clamp): last digits only
        assert math.isclose(before[key], after[key], rel_tol=1e-5, abs_tol=1e-7), (key, before[key], after[key])


def test_the_readme_tour_shows_what_check_prints():
    readme = (ROOT / "README.md").read_text()
    tour = readme[readme.index("$ xlalint check --preview examples/"):]
    tour = tour[: tour.index("\n$ ", 1)]
    proc = xlalint("check", "--no-cache", "--preview", "examples/")
    assert proc.returncode == 1, proc.stderr
    shown = [line for line in tour.splitlines()[1:] if line != "..."]
    printed = proc.stdout.splitlines()
    assert all(line in printed for line in shown), [line for line in shown if line not in printed]
    assert shown[-3:] == printed[-3:]  # the totals


def test_safe_fixes_never_make_the_examples_import_the_linter(tmp_path):
    """The pre-commit fix hook runs `xlalint fix --write` (safe only) from an environment of its own:
    what it writes must run where xlalint is not installed."""
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy)
    safe = xlalint("fix", "--no-cache", copy)
    assert safe.returncode == 1 and safe.stdout.startswith("--- a/"), safe.stderr
    added = [line for line in safe.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added and not [line for line in added if "xlalint" in line]
    unsafe = xlalint("fix", "--no-cache", "--unsafe-fixes", copy)
    assert "+from xlalint.runtime import" in unsafe.stdout  # what the safe run leaves out


def test_checking_the_examples_reads_their_projects_not_the_checkout_around_them(run_cli, monkeypatch):
    """Each example is a project of its own (its pyproject.toml): `xlalint check examples/` in a clone
    summarises the examples' files, not the linter's 250 modules around them (issue 40, item 11)."""
    from xlalint import workspace

    read: list[Path] = []
    real = workspace.analyse

    def counting(source, **kwargs):
        read.append(Path(source.path).resolve())
        return real(source, **kwargs)

    monkeypatch.setattr(workspace, "analyse", counting)
    code, out, _ = run_cli("check", "--preview", "--no-cache", "--jobs", "1", "--output-format", "json", EXAMPLES)
    monkeypatch.undo()
    assert code == 1 and len(json.loads(out)) >= 40
    assert read and all(EXAMPLES in p.parents for p in read), sorted({str(p) for p in read if EXAMPLES not in p.parents})[:5]
