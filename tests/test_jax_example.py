"""The bundled JAX project: `xlalint check` finds its hazards, the original fails under `jit`, and the
fixed form computes what the original computes eagerly, compiling each function once.

Backend: nothing here depends on it. "Once" is each jitted function's own cache (`_cache_size()`), one
entry per input signature on any backend; the numbers are compared with a tolerance (rel 1e-5).
It passed on CPU and on CUDA (jax 0.11.2, one H200) alike."""

import difflib
import importlib.util
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "jax_project"
ORIGINAL, FIXED = PROJECT / "train_regression.py", PROJECT / "fixed" / "train_regression.py"


def xlalint(*args):
    return subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def findings(path: Path) -> list[dict]:
    proc = xlalint("check", "--no-cache", "--preview", "--output-format", "json", path)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_check_reports_each_hazard_and_nothing_in_the_fixed_form():
    codes = sorted(d["code"] for d in findings(ORIGINAL))
    assert codes == ["JAX103", "JAX104", "JAX105", "JAX105", "JAX106", "JAX107", "JAX109", "JAX110"]
    assert findings(FIXED) == []


def test_the_original_stops_under_jit():
    original = load(ORIGINAL, "jax_example_original")
    with pytest.raises(jax.errors.NonConcreteBooleanIndexError):
        original.main(steps=3)


def test_the_fixed_form_compiles_each_function_once_and_matches_the_original_run_eagerly():
    fixed = load(FIXED, "jax_example_fixed")
    after = fixed.main(steps=60, seed=1)
    jitted = {name: f for name, f in vars(fixed).items() if hasattr(f, "_cache_size")}
    assert set(jitted) == {"loss_fn", "update", "smooth", "outlier_error"}
    assert {name: f._cache_size() for name, f in jitted.items()} == dict.fromkeys(jitted, 1)
    with jax.disable_jit():  # the original's meaning: Python runs every line on concrete arrays
        before = load(ORIGINAL, "jax_example_eager").main(steps=60, seed=1)
    assert before.keys() == after.keys() and before["evaluations"] == after["evaluations"] == 3
    for key in before:
        assert math.isclose(before[key], after[key], rel_tol=1e-5, abs_tol=1e-6), (key, before[key], after[key])
    first = fixed.loss_fn(jax.numpy.zeros(8), *fixed.make_data(jax.random.PRNGKey(1)))
    assert after["loss"] < float(first) / 10  # it trains


def test_xlalint_fix_writes_what_the_fixed_form_has(tmp_path):
    copy = tmp_path / "train_regression.py"
    shutil.copy(ORIGINAL, copy)
    proc = xlalint("fix", "--write", "--no-cache", "--preview", copy)
    assert proc.returncode == 1, proc.stderr  # the hazards without an automatic fix remain
    added = [line[1:].strip() for line in difflib.unified_diff(ORIGINAL.read_text().splitlines(),
                                                               copy.read_text().splitlines(), lineterm="")
             if line.startswith("+") and not line.startswith("+++")]
    assert len(added) == 2
    fixed_lines = {line.strip() for line in FIXED.read_text().splitlines()}
    assert all(line in fixed_lines for line in added), added
    assert sorted(d["code"] for d in findings(copy)) == ["JAX103", "JAX105", "JAX106", "JAX107", "JAX109", "JAX110"]
