"""Is the analysis linear in a file's lines? Prints, for synthetic modules of N, 2N and 4N lines in
the shapes that once grew faster than the file, the in-process seconds of every rule (preview rules
too) and of the project summary, and the factor per doubling (about 2: linear; 4: quadratic). Not
a test: figures to read.

Usage: python benchmarks/analysis_growth.py [--lines N]   (default 1000: 1,000, 2,000, 4,000 lines)

Shapes: `types` (many pydantic-style config classes and one long validator, as maxtext's
configs/types.py), `loop` (one long training step loop full of `if` blocks), `jax` (many jitted
functions with the same local names `body`/`loss_fn`), `chain` (one jitted function rebinding `h`
at every line).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from xlalint.analysis.project import summarize
from xlalint.engine import analyse, lint_source
from xlalint.rules import ALL_RULES
from xlalint.source import decode_source


def types_like(n: int) -> str:
    out = ["import jax", "from pydantic import BaseModel, Field, model_validator", ""]
    c = 0
    while len(out) < n // 2:
        out.append(f"class Cfg{c}(BaseModel):")
        out += [f"  f{c}_{f}: int = Field({f}, description='field {f} of {c}')" for f in range(12)]
        out.append("")
        c += 1
    out += ["class MaxTextConfig(BaseModel):", "  @model_validator(mode='after')",
            "  def set_derived_and_validate_values(self, flag=None):"]
    i = 0
    while len(out) < n:
        out += [[f"    if self.f{i % c}_1 > {i}:", f"      raise ValueError(f'bad {{self.f{i % c}_1}}')"],
                [f"    self.d{i} = max(self.f{i % c}_2, {i})"],
                [f"    if self.d{i - 1} is None:", f"      self.d{i - 1} = compute(self.f{i % c}_3, {i})"],
                ["    if flag is not None:", f"      log(flag, {i})"]][i % 4]
        i += 1
    return "\n".join(out + ["    return self"]) + "\n"


def loop_like(n: int) -> str:
    out = ["import jax", "", "@jax.jit", "def train_step(state, batch):",
           "  grads = jax.grad(loss_fn)(state.params, batch)", "  return state.apply_gradients(grads=grads)", "",
           "def train(state, train_loader, cfg):", "  step = 0", "  for batch in train_loader:",
           "    state = train_step(state, batch)", "    step += 1"]
    i = 0
    while len(out) < n:
        out += [f"    if cfg.opt{i}:", f"      metric{i} = compute(state, {i})"] if i % 2 == 0 else \
            [f"    value{i} = helper{i % 7}(state, batch, {i})"]
        i += 1
    return "\n".join(out + ["  return state"]) + "\n"


def jax_like(n: int) -> str:
    out = ["import jax", "import jax.numpy as jnp", "from functools import partial", ""]
    i = 0
    while len(out) < n:
        out += ["@partial(jax.jit, static_argnames=('k',))", f"def step{i}(params, xs, k=1):",
                "  def body(carry, x):", "    y = carry + jnp.sum(x)", "    if y > 0:", "      y = y * 2",
                "    return y, y", "  def loss_fn(p):", "    return jnp.mean(p * xs)",
                "  out, _ = jax.lax.scan(body, 0.0, xs)", "  g = jax.grad(loss_fn)(params)",
                f"  return helper{i % 5}(out, g)", ""]
        i += 1
    return "\n".join(out) + "\n"


def chain_like(n: int) -> str:
    out = ["import jax", "import jax.numpy as jnp", "", "@jax.jit", "def forward(params, x):", "  h = x"]
    i = 0
    while len(out) < n:
        out += [f"  h = jnp.tanh(h @ params[{i}])", f"  if h.sum() > {i}:", "    h = h * 2"]
        i += 1
    return "\n".join(out + ["  return h"]) + "\n"


SHAPES = {"types": types_like, "loop": loop_like, "jax": jax_like, "chain": chain_like}


def seconds(code: str, what: str) -> float:
    source = decode_source(Path("module.py"), code.encode())
    gc.collect()
    start = time.process_time()
    if what == "rules":
        lint_source(source, ALL_RULES, prefilter=False)
    else:
        summarize(analyse(source), "module")
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000)
    n = parser.parse_args().lines
    sizes = (n, 2 * n, 4 * n)
    print(f"{'shape':<7} {'what':<8} " + " ".join(f"{s:>9,} l" for s in sizes) + "  per doubling")
    for shape, make in SHAPES.items():
        codes = [make(s) for s in sizes]
        for what in ("rules", "summary"):
            times = [seconds(code, what) for code in codes]
            factor = (times[2] / times[0]) ** 0.5 if times[0] > 0 else float("nan")
            print(f"{shape:<7} {what:<8} " + " ".join(f"{t:10.3f}s" for t in times) + f"  x{factor:.2f}")


if __name__ == "__main__":
    main()
