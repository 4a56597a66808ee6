"""What a `gc.collect()` per training step costs the host (XLA703 gc-collect-in-step).

Prints, for live heaps of the sizes asked (small lists kept alive, as a dataset index or a
tokenizer's tables keep them), the time of one full `gc.collect()`, of `gc.collect(0)` (the young
generation only), and of a full collection after `gc.freeze()`: the milliseconds the host spends
per step instead of tracing and dispatching the next one. Not a test: figures to read (the median of
`--repeat` calls; CPU time, so a busy machine inflates them less than wall time). `--preload torch`
imports modules first, as a training process has: their objects are part of every full collection.

Usage: python benchmarks/gc_in_step.py [--sizes 0,100000,1000000] [--repeat 7] [--preload torch,numpy]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import platform
import statistics
import sys
import time


def per_call_ms(generation: int | None, repeat: int) -> float:
    """The median CPU milliseconds of one `gc.collect(generation)` (None: no argument)."""
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        if generation is None:
            gc.collect()
        else:
            gc.collect(generation)
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"gc_in_step.py: --sizes takes numbers separated by commas, not {text!r}") from None
    if not sizes or any(size < 0 for size in sizes):
        raise SystemExit("gc_in_step.py: --sizes takes one or more sizes >= 0")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100000,1000000", help="live objects kept on the heap")
    parser.add_argument("--repeat", type=int, default=7, help="calls timed per figure (the median is shown)")
    parser.add_argument("--preload", default="", help="modules to import first, separated by commas")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("gc_in_step.py: --repeat must be at least 1")
    sizes = parse_sizes(args.sizes)
    for module in filter(None, (part.strip() for part in args.preload.split(","))):
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise SystemExit(f"gc_in_step.py: --preload {module}: {error}") from None
    gc.collect()
    preloaded = f", after importing {args.preload}" if args.preload else ""
    where = f"{platform.machine()}, {platform.processor() or 'cpu'}{preloaded}"
    print(f"CPython {platform.python_version()} on {where}: {len(gc.get_objects()):,} objects tracked")
    print(f"{'live objects':>12}  {'gc.collect()':>13}  {'gc.collect(0)':>13}  {'after freeze':>13}")
    for size in sizes:
        heap = [[i] for i in range(size)]  # `size` tracked containers (and the list holding them)
        gc.collect()
        full = per_call_ms(None, args.repeat)
        young = per_call_ms(0, args.repeat)
        gc.freeze()
        frozen = per_call_ms(None, args.repeat)
        gc.unfreeze()
        print(f"{size:>12,}  {full:>10.2f} ms  {young:>10.3f} ms  {frozen:>10.3f} ms")
        del heap
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
