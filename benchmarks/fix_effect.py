"""Measure what `xlalint fix --unsafe-fixes` does to the example training scripts on a real
torch_xla device (a script, not a test).

For each ``examples/xla_project/train_*.py`` it runs the original and the copy that
``xlalint fix --unsafe-fixes --write`` produced, each in its own subprocess on the torch_xla
interpreter under ``PJRT_DEVICE=CPU``. The subprocess imports the script by path and calls its
``main(steps=N, seed=...)`` twice: a warm-up run (seed 0) that traces and compiles the graphs
the loop builds, then a measured run (metrics cleared first) that shows the steady state.

Printed per script and variant: the warm-up's wall time and compiles (``UncachedCompile``); for
the measured run steps/s, compiles, and per step graph executions (``ExecuteComputation``),
device-to-host transfers (``TransferFromDeviceTime`` samples) and ``aten::_local_scalar_dense``
calls (``.item()``, ``bool(t)``, formatting a tensor); and the largest relative difference
between the values ``main()`` returned before and after the fix. A run past ``--timeout`` shows
``timeout`` (with the warm-up's figures when the warm-up finished); one that fails shows its
last error line. Counters carry over to TPU; wall-clock figures on PJRT CPU are only indicative.

The measured run's seed is 0 by default: the same data as the warm-up, so graphs whose shapes
depend on the data are cache hits. ``--measured-seed 1`` feeds it new data, as the next epoch
of a real run would, and shows those recompiles.

Setup (a separate venv: never install torch_xla into the project's environment, whose torch is
pinned to another release); ``--build-env`` does these steps when the ``--python`` path is missing::

    python3 -m venv /tmp/xla-venv
    /tmp/xla-venv/bin/pip install torch==2.9.0 torch_xla==2.9.0   # ~7 GB
    /tmp/xla-venv/bin/pip install -e .     # the fixed code imports xlalint.runtime; the audit runs the linter

Run from the repository root (this process needs only the standard library)::

    python3 benchmarks/fix_effect.py [--python /tmp/xla-venv/bin/python] [--xlalint .venv/bin/xlalint]
        [--steps N] [--measured-seed 0] [--timeout 600] [--json out.json]

N defaults to each script's own ``main()`` default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCH_XLA = "2.9.0"  # torch and torch_xla releases go in pairs
EXAMPLES = REPO / "examples"

# Runs on the torch_xla interpreter: argv = script path, steps ("" for the script's default), measured run's seed.
HARNESS = r"""
import importlib.util, inspect, json, sys, time
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

spec = importlib.util.spec_from_file_location("train_script", sys.argv[1])
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
steps = int(sys.argv[2] or inspect.signature(script.main).parameters["steps"].default)

def timed_main(seed):
    start = time.perf_counter()
    result = script.main(steps=steps, seed=seed)
    xm.wait_device_ops()  # work main() did not wait for still counts
    return result, time.perf_counter() - start

_, warmup_s = timed_main(0)
print(json.dumps({"steps": steps, "warmup_s": warmup_s,
                  "warmup_compiles": met.counter_value("UncachedCompile") or 0}), flush=True)
met.clear_all()
result, wall_s = timed_main(int(sys.argv[3]))
transfers = met.metric_data("TransferFromDeviceTime")
print(json.dumps({"wall_s": wall_s, "result": result,
                  "compiles": met.counter_value("UncachedCompile") or 0,
                  "executions": met.counter_value("ExecuteComputation") or 0,
                  "transfers": transfers[0] if transfers else 0,
                  "local_scalar_dense": met.counter_value("aten::_local_scalar_dense") or 0}))
"""

VERSIONS = "import json, torch, torch_xla; print(json.dumps([torch.__version__, torch_xla.__version__]))"


def run_script(python: str, script: Path, steps: int | None, seed: int, timeout: float) -> dict:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [python, "-c", HARNESS, str(script), str(steps or ""), str(seed)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stdout, error = (exc.stdout or b"").decode(), "timeout"  # bytes here even with text=True
    else:
        stdout, error = proc.stdout, None
        if proc.returncode:
            error = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    report = {}  # the warm-up's line, then the measured run's
    for line in stdout.splitlines():
        if line.startswith("{"):
            report.update(json.loads(line))
    if error:
        report["error"] = error
    return report


def max_rel_diff(a: dict, b: dict) -> float:
    return max(abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), 1e-12) for k in a)


def cells(script: str, variant: str, r: dict, diff: str) -> list[str]:
    if "error" in r:
        warmup = f" (warm-up {r['warmup_s']:.1f} s, {r['warmup_compiles']} compiles)" if "warmup_s" in r else ""
        return [script, variant, r["error"] + warmup, "", "", "", "", "", "", "", diff]
    steps = r["steps"]
    per_step = [f"{r[key] / steps:.2f}" for key in ("executions", "transfers", "local_scalar_dense")]
    return [script, variant, str(steps), f"{r['warmup_s']:.1f}", f"{steps / r['wall_s']:.1f}",
            str(r["warmup_compiles"]), str(r["compiles"]), *per_step, diff]


def build_env(venv: Path) -> None:
    """The separate torch_xla environment: pinned torch/torch_xla pair, and this checkout's runtime."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={TORCH_XLA}", f"torch_xla=={TORCH_XLA}"], check=True)
    # whole, with its dependencies: the fixed code imports xlalint.runtime, and the audit runs the
    # linter there (without libcst and click it reported no findings to cross-reference)
    subprocess.run([*pip, "-e", str(REPO)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/tmp/xla-venv/bin/python", help="an interpreter with torch_xla")
    parser.add_argument("--xlalint", default=str(REPO / ".venv/bin/xlalint"))
    parser.add_argument("--steps", type=int, help="steps per run (default: each script's main() default)")
    parser.add_argument("--measured-seed", type=int, default=0,
                        help="seed of the measured run; another than the warm-up's 0 shows data-dependent recompiles")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per subprocess (warm-up + measured)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--build-env", action="store_true",
                        help="first create the torch_xla venv at the --python path if it is missing (~7 GB, minutes)")
    args = parser.parse_args()
    if args.build_env and not Path(args.python).exists():
        build_env(Path(args.python).parents[1])

    torch_version, xla_version = json.loads(subprocess.run(
        [args.python, "-c", VERSIONS], check=True, capture_output=True, text=True).stdout)
    machine = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs"
    print(f"{machine}; torch {torch_version}, torch_xla {xla_version}, PJRT_DEVICE=CPU; "
          f"measured run: seed {args.measured_seed}\n")

    header = ["script", "variant", "steps", "warm-up s", "steps/s", "compiles (warm-up)", "compiles (measured)",
              "executions/step", "D2H transfers/step", "_local_scalar_dense/step", "max rel diff"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="xlalint-fix-effect-") as tmp:
        fixed = Path(tmp) / "examples"
        shutil.copytree(EXAMPLES, fixed, ignore=shutil.ignore_patterns("__pycache__"))
        proc = subprocess.run([args.xlalint, "fix", "--unsafe-fixes", "--write", "--no-cache", str(fixed)],
                              capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            sys.exit(f"xlalint fix failed:\n{proc.stderr}")
        for original in sorted((EXAMPLES / "xla_project").glob("train_*.py")):
            after_path = fixed / original.relative_to(EXAMPLES)
            before = run_script(args.python, original, args.steps, args.measured_seed, args.timeout)
            after = run_script(args.python, after_path, args.steps, args.measured_seed, args.timeout)
            unchanged = after_path.read_bytes() == original.read_bytes()
            both = "result" in before and "result" in after
            diff = f"{max_rel_diff(before['result'], after['result']):.1e}" if both else "n/a"
            after_label = "after (unchanged)" if unchanged else "after"
            for variant, report, shown_diff in (("before", before, ""), (after_label, after, diff)):
                print("| " + " | ".join(cells(original.name, variant, report, shown_diff)) + " |", flush=True)
            rows.append({"script": original.name, "fix_changed_it": not unchanged, "before": before, "after": after})

    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "torch": torch_version, "torch_xla": xla_version,
                                         "measured_seed": args.measured_seed, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
