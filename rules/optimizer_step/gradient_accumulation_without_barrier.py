"""XLA404 gradient-accumulation-without-barrier: Flags the `.backward()` of a gradient-accumulation
loop on XLA whose only step barrier runs with the optimizer step, every N iterations (`if (i + 1) %
accumulation_steps == 0:`)."""

from __future__ import annotations

import ast

from xlalint.analysis.barriers import PLAIN_BATCHES, StepPath, names_in
from xlalint.analysis.names import method_name, receiver
from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._common import insert_sync_after, simple_statement


class GradientAccumulationWithoutBarrier(Rule):
    """## What it does
    Flags the `.backward()` of a gradient-accumulation loop on XLA whose only step barrier runs with
    the optimizer step, every N iterations (`if (i + 1) % accumulation_steps == 0:`): the backward runs
    every iteration, nothing cuts the graph between micro-batches, and the loop does not iterate a
    device loader.

    ## Why is this bad?
    XLA tensors are lazy: until the barrier, every micro-batch's forward and backward is appended to
    one graph. With N micro-batches per step the graph holds N copies of the model's forward and
    backward, with every micro-batch's inputs: compile time grows with N, and so can device memory,
    instead of staying at one micro-batch's worth (the docs' Stable Diffusion example shows what a
    loop without a barrier inside does to compile times). A barrier after each backward keeps one
    small graph per micro-batch, compiled once and reused; the accumulated gradients stay on the
    device between them.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    for i, (x, y) in enumerate(train_loader):
        loss = loss_fn(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            xm.mark_step()
    ```

    Use instead:
    ```python
    import torch_xla.core.xla_model as xm
    from xlalint.runtime import sync

    for i, (x, y) in enumerate(train_loader):
        loss = loss_fn(model(x), y) / accumulation_steps
        loss.backward()
        sync()  # torch_xla.sync() on XLA, a no-op elsewhere
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            xm.mark_step()
    ```

    Or iterate a `pl.MpDeviceLoader`, which syncs at every batch.

    ## Fix safety
    The fix adds `xlalint.runtime.sync()` (`torch_xla.sync()` when torch_xla is in use, else a
    no-op) right after the backward. It changes where graphs are cut, not what they compute: the
    same gradients are accumulated. It is unsafe all the same: the added `from xlalint.runtime
    import sync` makes the code import the linter at run time, and the training environment may not
    have it (the pre-commit fix hook runs in an environment of its own). In a file that already
    imports xlalint it is safe.

    ## Known problems
    Reported only when the loop and its loader are in this file and the loader is a host loader
    (`DataLoader`, `range`). Accumulation over an inner loop of micro-batches is not recognised.

    ## References
    - docs/source/learn/xla-examples.md (a loop without a barrier builds one huge graph) and
      docs/source/learn/xla-advanced.md ("Graphs") at v2.9.0
    - `PerDeviceLoader.next` syncs every batch: torch_xla/distributed/parallel_loader.py at v2.9.0
    """

    code, name, category = "XLA404", "gradient-accumulation-without-barrier", "optimizer_step"
    summary = (
        "`.backward()` every micro-batch but a step barrier only every N: one XLA graph spans all "
        "accumulated micro-batches"
    )
    hint = "call `torch_xla.sync()` (or `xlalint.runtime.sync()`) after each backward, or iterate a `MpDeviceLoader`"
    xla_only = True
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import torch_xla
            for i, (x, y) in enumerate(train_loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                torch_xla.sync()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            device_loader = pl.MpDeviceLoader(train_loader, torch_xla.device())
            for i, (x, y) in enumerate(device_loader):  # syncs at every batch
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    xm.optimizer_step(optimizer)
                    optimizer.zero_grad()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss_fn(model(x), y).backward()
                xm.optimizer_step(optimizer, barrier=True)  # steps and syncs every iteration
                if i % log_every == 0:
                    xm.mark_step()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            def micro_step(x, y):
                (loss_fn(model(x), y) / accumulation_steps).backward()

            compiled = torch_xla.compile(micro_step)
            for i, (x, y) in enumerate(torch.utils.data.DataLoader(dataset, batch_size=8)):
                compiled(x, y)
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            for i, (x, y) in enumerate(train_loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()  # no barrier at all: XLA401's finding
                    optimizer.zero_grad()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    xm.mark_step()
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch_xla.core.xla_model as xm
            from xlalint.runtime import sync

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                sync()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    xm.mark_step()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train(model, dataset, optimizer, accum):
                for step, batch in enumerate(DataLoader(dataset, batch_size=4)):
                    model(**batch).loss.div(accum).backward()
                    if (step + 1) % accum != 0:
                        continue
                    xm.optimizer_step(optimizer, barrier=True)
                    optimizer.zero_grad()
            """,
            line=6,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader
            from xlalint.runtime import sync

            def train(model, dataset, optimizer, accum):
                for step, batch in enumerate(DataLoader(dataset, batch_size=4)):
                    model(**batch).loss.div(accum).backward()
                    sync()
                    if (step + 1) % accum != 0:
                        continue
                    xm.optimizer_step(optimizer, barrier=True)
                    optimizer.zero_grad()
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "backward":
            return
        barriers = self.ctx.barriers
        recv = receiver(node)
        if not self.ctx.is_per_step(node) or self.ctx.in_non_xla_code(node) or barriers.in_framework_class(node):
            return
        paths = barriers.paths(node, names_in(recv))
        if not paths or any(not p.in_loop or p.compiled for p in paths):
            return
        if not any(self._accumulates_without_barrier(p) for p in paths):
            return
        statement = simple_statement(self.ctx, node)
        self.report(node, fix=(lambda cctx: insert_sync_after(cctx, statement)) if statement is not None else None)

    def _accumulates_without_barrier(self, path: StepPath) -> bool:
        """The loop runs the backward every iteration; its optimizer steps and its barriers run only
        every N iterations; its batches come from a host loader."""
        barriers = self.ctx.barriers
        if path.gates or barriers.covered(path) or barriers.loop_kind(path.top) != PLAIN_BATCHES:
            return False
        found = barriers.barriers(path.top)
        steps = barriers.optimizer_steps(path.top)
        return bool(found) and bool(steps) and all(_every_n(g) for _, g in [*found, *steps])


def _every_n(gates: frozenset) -> bool:
    return bool(gates) and any(key[0] == "every" for key in gates)
