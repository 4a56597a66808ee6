"""Measure xlalint.runtime on a real torch_xla device (a script, not a test).

What it prints, for a tiny MLP trained on the XLA device (PJRT CPU by default):

1. Step barriers: (a) plain ``optimizer.step()`` with no barrier at all,
   (b) ``xm.optimizer_step(opt)`` (``barrier=False`` by default), (c) the
   runtime's ``optimizer_step(opt, barrier=True)``.
2. Gradient clipping inside an otherwise identical loop (the step is the
   runtime's ``optimizer_step(barrier=True)``): torch_xla's patched
   ``torch.nn.utils.clip_grad_norm_`` with ``error_if_nonfinite=True`` and with
   ``norm_type=inf``, upstream torch's function with ``error_if_nonfinite=True``,
   and the runtime's ``clip_grad_norm_``.

For each: wall time of the whole loop (final sync included), the part of it
spent compiling (``CompileTime`` sum), steps/s with and without that compile
time, graph executions (``ExecuteComputation`` counter), compiles
(``CompileTime`` count and the ``UncachedCompile`` counter), device-to-host
transfers (``TransferFromDeviceTime`` count) and ``aten::_local_scalar_dense``
(``.item()``/``bool(t)`` reads). Each
variant runs in its own subprocess so no variant reuses another's compilation
cache. Counters carry over to TPU; wall-clock figures on PJRT CPU are only
indicative.

Setup (a separate venv: never install torch_xla into the project's environment,
whose torch is pinned to another release)::

    python3 -m venv /tmp/xla-venv
    /tmp/xla-venv/bin/pip install torch==2.9.0 torch_xla==2.9.0   # ~7 GB
    /tmp/xla-venv/bin/pip install --no-deps -e .                   # optional, see below

Run from the repository root::

    PJRT_DEVICE=CPU /tmp/xla-venv/bin/python benchmarks/runtime_on_torch_xla.py [--steps 50]

Without the ``pip install --no-deps -e .`` step the script loads ``runtime/``
from this checkout as ``xlalint.runtime`` itself (the runtime needs only torch).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
import time
import types
import warnings

REPO = pathlib.Path(__file__).resolve().parents[1]

STEP_VARIANTS = {
    "a": "(a) optimizer.step(), no barrier",
    "b": "(b) xm.optimizer_step(opt)",
    "c": "(c) runtime optimizer_step(opt, barrier=True)",
}
CLIP_VARIANTS = {
    "none": "no clipping",
    "xla_patch_nonfinite": "torch_xla patched clip, error_if_nonfinite=True",
    "xla_patch_inf": "torch_xla patched clip, norm_type=inf",
    "upstream_nonfinite": "upstream torch clip, error_if_nonfinite=True",
    "runtime_nonfinite": "runtime clip, error_if_nonfinite=True",
    "runtime_inf": "runtime clip, norm_type=inf",
}


def _import_runtime():
    """``xlalint.runtime`` if installed, else ``runtime/`` of this checkout under that name."""
    try:
        import xlalint.runtime as runtime

        return runtime
    except ImportError:
        pass
    parent = types.ModuleType("xlalint")
    parent.__path__ = []  # a bare parent package, so the runtime's relative imports resolve
    sys.modules.setdefault("xlalint", parent)
    spec = importlib.util.spec_from_file_location(
        "xlalint.runtime", REPO / "runtime" / "__init__.py",
        submodule_search_locations=[str(REPO / "runtime")],
    )
    runtime = importlib.util.module_from_spec(spec)
    sys.modules["xlalint.runtime"] = runtime
    spec.loader.exec_module(runtime)
    return runtime


def _run_variant(kind: str, variant: str, steps: int) -> dict:
    """Train ``steps`` steps in this process and return the metrics."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    from torch.nn.utils.clip_grad import clip_grad_norm_ as upstream_clip

    runtime = _import_runtime()
    warnings.simplefilter("ignore")  # the runtime's error_if_nonfinite warning, deprecations
    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(device)
    x = torch.randn(32, 64).to(device)
    y = torch.randint(0, 10, (32,)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    if kind == "step":
        step = {
            "a": lambda: opt.step(),
            "b": lambda: xm.optimizer_step(opt),
            "c": lambda: runtime.optimizer_step(opt, barrier=True),
        }[variant]
        clip = lambda: None  # noqa: E731
    else:
        step = lambda: runtime.optimizer_step(opt, barrier=True)  # noqa: E731
        params = list(model.parameters())
        clip = {
            "none": lambda: None,
            # the syncing forms are what this benchmark measures the runtime's against
            "xla_patch_nonfinite": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True),  # noqa: XLA501
            "xla_patch_inf": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, norm_type=math.inf),  # noqa: XLA501
            "upstream_nonfinite": lambda: upstream_clip(params, 1.0, error_if_nonfinite=True),  # noqa: XLA501
            "runtime_nonfinite": lambda: runtime.clip_grad_norm_(params, 1.0, error_if_nonfinite=True),
            "runtime_inf": lambda: runtime.clip_grad_norm_(params, 1.0, norm_type=math.inf),
        }[variant]

    torch_xla.sync(wait=True)  # materialise the inputs before counting
    met.clear_all()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        clip()
        step()
    torch_xla.sync(wait=True)  # (a)/(b) never ran anything until here
    xm.wait_device_ops()
    elapsed = time.perf_counter() - start

    def count(metric):
        data = met.metric_data(metric)
        return data[0] if data else 0

    compile_data = met.metric_data("CompileTime")
    compile_s = compile_data[1] / 1e9 if compile_data else 0.0
    result = {
        "wall_s": elapsed,
        "compile_s": compile_s,
        "steps_per_s": steps / elapsed,
        "steps_per_s_excl_compile": steps / max(elapsed - compile_s, 1e-9),
        # A counter, not the ExecuteTime metric: that one is recorded asynchronously.
        "executions": met.counter_value("ExecuteComputation") or 0,
        "compiles": count("CompileTime"),
        "uncached_compiles": met.counter_value("UncachedCompile") or 0,
        "transfers_from_device": count("TransferFromDeviceTime"),
        "local_scalar_dense": met.counter_value("aten::_local_scalar_dense") or 0,
        "runtime_file": runtime.__file__,
    }
    result["final_loss"] = loss.item()  # after the snapshot: this read is not counted
    return result


def _in_subprocess(kind: str, variant: str, steps: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, variant, "--steps", str(steps)],
        check=True, capture_output=True, text=True, env={**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(title: str, variants: dict, kind: str, steps: int) -> None:
    print(f"\n{title} ({steps} steps; counts are totals over the loop)")
    header = (
        f"{'variant':<49} {'wall s':>6} {'compile s':>9} {'steps/s':>7} {'excl.comp':>9} {'exec':>4} "
        f"{'compiles':>8} {'uncached':>8} {'D2H':>4} {'_local_scalar_dense':>19} {'final loss':>10}"
    )
    print(header)
    print("-" * len(header))
    for key, label in variants.items():
        r = _in_subprocess(kind, key, steps)
        print(
            f"{label:<49} {r['wall_s']:>6.2f} {r['compile_s']:>9.2f} {r['steps_per_s']:>7.1f} "
            f"{r['steps_per_s_excl_compile']:>9.1f} {r['executions']:>4} {r['compiles']:>8} "
            f"{r['uncached_compiles']:>8} {r['transfers_from_device']:>4} {r['local_scalar_dense']:>19} "
            f"{r['final_loss']:>10.6f}"
        )
    print(f"runtime loaded from: {r['runtime_file']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run_variant(*args.child, args.steps)))
        return
    import torch
    import torch_xla

    print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}, PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'CPU')}, {os.cpu_count()} CPUs")
    _table("Step barrier", STEP_VARIANTS, "step", args.steps)
    _table("Gradient clipping (step = runtime optimizer_step(barrier=True))", CLIP_VARIANTS, "clip", args.steps)


if __name__ == "__main__":
    main()
