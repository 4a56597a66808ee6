"""What the torch.compile rules' fixes change, measured by Dynamo itself (a script, not a test).

Runs `examples/compile_project/train_compiled.py` and its `fixed/` twin, each in its own
subprocess, with a backend that counts the graphs Dynamo hands it and delegates to `eager` (no
code generation: Dynamo's own cost) or `inductor` (the default compiler; needs a C++ compiler).
Printed per script and backend: graphs compiled, graph breaks (`torch._dynamo.utils.counters`),
recompilations (the `recompiles` log records), whether the recompile limit was hit, the first
run's wall time (tracing and compiling included) and a third run's time per step (the steady
state: compiled code reused, or eager after the limit), and the loss `main()` returns. Counts are
over the three runs.

    python benchmarks/compile_effect.py [--steps 36] [--backends eager,inductor] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {"original": REPO / "examples/compile_project/train_compiled.py",
           "fixed": REPO / "examples/compile_project/fixed/train_compiled.py"}


def measure(script: Path, backend: str, steps: int) -> dict:
    """Run in this process (the child): import the script, run `main` twice, count."""
    import importlib.util
    import logging

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    records: list[str] = []
    limit: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            (limit if "recompile_limit" in record.getMessage() else records).append(record.getMessage())

    torch._logging.set_logs(recompiles=True)
    for name in ("torch._dynamo.guards.__recompiles", "torch._dynamo.convert_frame"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [Collect()]
        lg.propagate = False
    graphs = {"n": 0}

    def counting(gm, example_inputs):
        graphs["n"] += 1
        if backend == "eager":
            return gm.forward
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, example_inputs)

    spec = importlib.util.spec_from_file_location("script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logging.getLogger("script").disabled = True
    sys.stderr = open("/dev/null", "w")  # the scripts' per-step prints
    start = time.perf_counter()
    metrics = module.main(steps, backend=counting)
    first = time.perf_counter() - start
    for _ in range(2):  # a new model compiles its forward once more; the third run is the steady state
        start = time.perf_counter()
        module.main(steps, backend=counting)
        steady = time.perf_counter() - start
    breaks = sum(counters["graph_break"].values())
    return {"graphs": graphs["n"], "breaks": breaks, "recompiles": len(records), "limit_hit": bool(limit),
            "first_run_s": round(first, 2), "steady_ms_per_step": round(1000 * steady / steps, 2), **metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=36)
    parser.add_argument("--backends", default="eager,inductor")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(SCRIPTS[args.child[0]], args.child[1], args.steps)))
        return
    rows = []
    for backend in args.backends.split(","):
        for variant in SCRIPTS:
            proc = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", variant, backend],
                                  capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                rows.append({"variant": variant, "backend": backend, "error": proc.stderr.strip().splitlines()[-1:]})
                continue
            rows.append({"variant": variant, "backend": backend, **json.loads(proc.stdout.strip().splitlines()[-1])})
    import torch

    print(f"torch {torch.__version__}, CPU, {args.steps} steps per run (examples/compile_project)")
    print(f"{'backend':<9} {'script':<9} {'graphs':>6} {'breaks':>6} {'recompiles':>10} {'limit':>5} "
          f"{'1st run s':>9} {'ms/step':>8} {'loss':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<9} {r['variant']:<9} error: {r['error']}")
            continue
        print(f"{r['backend']:<9} {r['variant']:<9} {r['graphs']:>6} {r['breaks']:>6} {r['recompiles']:>10} "
              f"{'yes' if r['limit_hit'] else 'no':>5} {r['first_run_s']:>9} {r['steady_ms_per_step']:>8} "
              f"{r['loss']:>8.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
