"""Heavy input: is a check bounded by a file's size, and does Python's own nesting get checked?

Prints, for generated modules of the sizes asked (default 1, 2, 4 and 7.5 MB: under the 8 MiB limit)
in the shapes generated code takes, the CPU seconds and peak memory of a cold `xlalint check
--no-cache --jobs 1` of the one file (a fresh process each, as a user runs it), with the factor per
doubling of the size (about 2: linear); then, for expressions nested as deep as Python compiles
(`--nesting`), what the check says and what it costs. Not a test: figures to read.

Usage: python benchmarks/heavy_input.py [--sizes 1,2,4,7.5] [--shapes fx,functions,...] [--nesting]

Shapes: `fx` (one `forward` of straight-line tensor code, as torch.fx and exporters write it),
`functions` (many small torch functions and one model calling them), `weights` (a huge dict literal
of float lists, as checkpoint dumps write it), `lines` (few statements, each a line of 50,000
characters).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1_000_000


def fx(size: int) -> str:
    out = ["import torch", "", "", "class GraphModule(torch.nn.Module):", "    def forward(self, x, w):"]
    i, total = 0, 0
    while total < size:
        line = [
            f"        mul_{i} = torch.ops.aten.mul.Tensor(x, w[{i % 97}]);  x = None",
            f"        add_{i} = torch.ops.aten.add.Tensor(mul_{i}, {i}.5);  mul_{i} = None",
            f"        x = torch.ops.aten.relu.default(add_{i});  add_{i} = None",
        ][i % 3]
        out.append(line)
        total += len(line) + 1
        i += 1
    out.append("        return (x,)")
    return "\n".join(out) + "\n"


def functions(size: int) -> str:
    out = ["import torch", "import torch.nn.functional as F", ""]
    i, total = 0, 0
    while total < size:
        block = (
            f"def layer_{i}(x, w, cfg):\n"
            f"    y = torch.matmul(x, w[{i % 31}])\n"
            f"    if cfg.flag_{i % 13}:\n"
            f"        y = y + {i}\n"
            f"    for k in range(cfg.depth):\n"
            f"        y = F.relu(y) * k\n"
            f"    return y\n\n"
        )
        out.append(block)
        total += len(block)
        i += 1
    calls = "\n".join(f"        x = layer_{k}(x, self.w, self.cfg)" for k in range(min(i, 2000)))
    out.append(
        "class Model(torch.nn.Module):\n    def forward(self, x):\n" + calls + "\n        return x\n\n\n"
        "def train(model, loader, optimizer):\n    for batch in loader:\n        loss = model(batch).sum()\n"
        "        loss.backward()\n        optimizer.step()\n        print(loss.item())\n"
    )
    return "\n".join(out)


def weights(size: int) -> str:
    out = ["import torch", "", "WEIGHTS = {"]
    i, total = 0, 0
    while total < size:
        values = ", ".join(f"{(i * 31 + k) % 1000 / 1000:.3f}" for k in range(16))
        line = f'    "layer.{i}.weight": [{values}],'
        out.append(line)
        total += len(line) + 1
        i += 1
    out += ["}", "", "def load(model):", "    for name, value in WEIGHTS.items():",
            "        model.state_dict()[name].copy_(torch.tensor(value))", ""]
    return "\n".join(out)


def lines(size: int) -> str:
    out = ["import torch", ""]
    i, total = 0, 0
    while total < size:
        values = ", ".join(f"{(i + k) % 977}" for k in range(10_000))
        line = f"T{i} = torch.tensor([{values}])"
        out.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(out) + "\n"


SHAPES = {"fx": fx, "functions": functions, "weights": weights, "lines": lines}

# expressions as deep as Python 3.11 compiles in a module (about 3,000 levels; a call chain takes two)
NESTING = {
    "a + a + ...": lambda n: " + ".join(["t"] * n),
    "'s' + 's' + ...": lambda n: " + ".join(['"s"'] * n),
    "a and a and ...": lambda n: " and ".join(["t"] * n),
    "a < a < ...": lambda n: " < ".join(["t"] * n),
    "a.f().f()...": lambda n: "t" + ".f()" * n,
    "a[0][0]...": lambda n: "t" + "[0]" * n,
    "a if c else ...": lambda n: " if c else ".join(["t"] * n),
}
DEPTHS = {"a and a and ...": 20_000, "a < a < ...": 20_000, "a.f().f()...": 1400}


def nested_module(expr: str) -> str:
    return (
        "import torch\nimport torch_xla.core.xla_model as xm\n\n\n"
        "def train(model, loader, optimizer, c):\n    for batch in loader:\n        t = model(batch)\n"
        f"        y = {expr}\n        loss = y.sum()\n        loss.backward()\n        optimizer.step()\n"
        "        print(loss.item())\n"
    )


def measure(path: Path) -> tuple[float, float, int, str]:
    """(CPU seconds, wall seconds, peak RSS in MiB, the last line printed) of a cold check of `path`."""
    command = [sys.executable, "-m", "xlalint", "check", "--no-cache", "--jobs", "1", "--quiet", str(path)]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=path.parent)
    output = process.stdout.read().decode(errors="replace") if process.stdout else ""
    _, _, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    last = (output.strip().splitlines() or [""])[-1]
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss // 1024, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,4,7.5", help="module sizes in MB (10^6 bytes)")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--nesting", action="store_true", help="also check expressions nested as Python allows")
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'shape':<10} {'MB':>5} {'CPU s':>8} {'x/2':>5} {'wall s':>8} {'RSS MiB':>8}  last line")
        for shape in args.shapes.split(","):
            previous = None
            for size in sizes:
                path = Path(folder) / f"{shape}_{size}.py"
                path.write_text(SHAPES[shape](int(size * MB)))
                cpu, wall, rss, last = measure(path)
                factor = f"{(cpu / previous[1]) ** (1 / math.log2(size / previous[0])):.1f}" if previous else ""
                print(f"{shape:<10} {size:>5} {cpu:>8.1f} {factor:>5} {wall:>8.1f} {rss:>8}  {last[:60]}", flush=True)
                previous = (size, cpu)
                path.unlink()
        if args.nesting:
            print(f"\n{'nesting':<18} {'terms':>6} {'CPU s':>7} {'RSS MiB':>8}  last line")
            for name, build in NESTING.items():
                depth = DEPTHS.get(name, 2900)
                path = Path(folder) / "nested.py"
                path.write_text(nested_module(build(depth)))
                cpu, _, rss, last = measure(path)
                print(f"{name:<18} {depth:>6} {cpu:>7.1f} {rss:>8}  {last[:70]}", flush=True)


if __name__ == "__main__":
    main()
