"""XLA703 gc-collect-in-step: Flags a full `gc.collect()` on a per-step path of torch_xla code."""

from __future__ import annotations

import ast

from xlalint.analysis.names import argument
from xlalint.rule import Invalid, Rule, Valid


class GcCollectInStep(Rule):
    """## What it does
    Flags a full garbage collection, `gc.collect()` (or `gc.collect(2)`), on a per-step path of
    torch_xla code: in the body of a training or evaluation loop, or in a function that runs every
    step, with no gate on the way. `import gc as g` and `from gc import collect` are seen too.

    ## Why is this bad?
    `gc.collect()` with no argument collects all three generations: CPython walks every object
    the collector tracks (every list, dict, instance and tuple alive in the process), however
    little garbage there is. A training process holds large heaps (a dataset's index, a tokenizer's
    vocabulary, pandas frames, Python-side caches), so each call costs time proportional to all of
    it: measured with `benchmarks/gc_in_step.py` (CPython 3.11, torch 2.13, a shared 2-core AMD
    EPYC VM), one call takes about 70 ms in a process that has only imported torch (167,000 tracked
    objects) and 120 ms with a million small lists alive besides, while `gc.collect(0)`, or a full
    collection after `gc.freeze()`, takes microseconds. With lazy XLA tensors the host is what traces
    the next step and dispatches it while the device runs the last one, so time the host spends
    collecting adds to every step whenever tracing is the bottleneck (small models, many small
    ops, input pipelines in the same process), and to every step outright when the step waits for
    the device anyway (a per-step `.item()`). The collection frees nothing that reference counting
    had not already freed, unless the program makes reference cycles every step; Python's own
    collector already runs the young generations automatically, and the full collection only when
    the long-lived heap has grown by a quarter.

    Not reported:
    - a collection behind a step gate (`if step % 100 == 0:`), once per epoch, before or after
      the loop, or in an `except` block (recovering from an out-of-memory error);
    - `gc.collect(0)` and `gc.collect(1)`: only the young generations, whose size Python bounds,
      and a generation that is not a literal (`gc.collect(generation)`);
    - code that runs off XLA (a CUDA-only branch) and files that do not use torch_xla.

    ## Example
    ```python
    import gc

    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        del x, y, loss
        gc.collect()
    ```

    Use instead:
    ```python
    import gc

    gc.collect()
    gc.freeze()  # the set-up's objects: never examined again
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % 1000 == 0:
            gc.collect()
    ```

    ## Fix safety
    No fix: whether a program needs its collections (reference cycles built every step, a memory
    limit) is its author's choice. Run the collection every N steps or once per epoch, or call
    `gc.freeze()` once after set-up, which moves every object then alive to a permanent
    generation that later collections skip.

    ## References
    - [`gc.collect`, `gc.freeze`](https://docs.python.org/3/library/gc.html)
    - [Python's garbage collector design](https://devguide.python.org/internals/garbage-collector/)
    - [Troubleshooting, "Performance debugging" (torch_xla v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md):
      tracing on the host overlaps with execution on the device
    """

    code, name, category = "XLA703", "gc-collect-in-step", "other"
    evidence = ("step",)
    summary = "a full `gc.collect()` on a per-step path: the host walks every live Python object every step"
    hint = "collect every N steps or once per epoch, or call `gc.freeze()` once after set-up"
    xla_only = True

    VALID = [
        Valid(
            """
            import gc
            import torch_xla.core.xla_model as xm

            gc.collect()
            gc.freeze()
            for epoch in range(epochs):
                for step, (x, y) in enumerate(loader):
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    xm.optimizer_step(optimizer)
                    if step % 500 == 0:
                        gc.collect()
                gc.collect()  # once per epoch
            gc.collect()
            """
        ),
        Valid(
            """
            import gc
            import torch_xla.core.xla_model as xm

            for x, y in loader:
                try:
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    xm.optimizer_step(optimizer)
                except RuntimeError:
                    gc.collect()  # recovering from an out-of-memory error
                gc.collect(0)  # the young generation only
                gc.collect(1)
            """
        ),
        Valid(
            """
            import gc
            import torch

            for x, y in loader:  # no torch_xla in this file
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                gc.collect()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import gc
            import torch_xla.core.xla_model as xm

            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                del x, y, loss
                gc.collect()
            """,
            line=9,
        ),
        Invalid(
            """
            import gc as garbage
            import torch_xla

            def train_one_epoch(model, loader, optimizer):
                for batch in loader:
                    garbage.collect(2)
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    torch_xla.sync()
            """,
            line=6,
        ),
        Invalid(
            """
            from gc import collect
            import torch_xla.core.xla_model as xm

            def train_step(model, batch, optimizer):
                loss = model(batch).mean()
                loss.backward()
                xm.optimizer_step(optimizer)
                collect()
                return loss

            for batch in loader:
                train_step(model, batch, optimizer)
            """,
            line=8,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != "gc.collect" or not _full_collection(node):
            return
        if self.ctx.runs_hot(node):
            self.report(node)


def _full_collection(call: ast.Call) -> bool:
    """`gc.collect()` or `gc.collect(2)`: every generation (no argument, or the literal 2)."""
    if len(call.args) > 1 or any(k.arg not in (None, "generation") for k in call.keywords):
        return False
    generation = argument(call, 0, "generation")
    if generation is None:
        return not any(k.arg is None for k in call.keywords)  # `collect(**kw)`: not known
    return isinstance(generation, ast.Constant) and type(generation.value) is int and generation.value >= 2
