"""XLA704 batches-copied-in-step: Flags a training loop on XLA that iterates a plain `DataLoader`
and moves each batch to the XLA device itself."""

from __future__ import annotations

import ast

from xlalint.analysis.barriers import PLAIN_BATCHES, UNKNOWN_BATCHES
from xlalint.analysis.evidence import Evidence, seen
from xlalint.analysis.loaders import batch_moves
from xlalint.analysis.names import dotted_name, last_part
from xlalint.analysis.placement import Placement, move_targets
from xlalint.analysis.steps import loop_trains
from xlalint.diagnostics import HIGH, POSSIBLE
from xlalint.rule import Invalid, Rule, Valid


class BatchesCopiedInStep(Rule):
    """## What it does
    Flags a loop that trains (a backward pass or an optimizer step in its body) in torch_xla code
    when it iterates a plain `torch.utils.data.DataLoader` (through `enumerate`, `tqdm`, the names it
    is bound to) and moves each batch to the device itself (`x, y = x.to(device), y.to(device)`,
    `batch = {k: v.to(device) for k, v in batch.items()}`), to a device seen to be the XLA device
    (`torch_xla.device()`, `xm.xla_device()`, through the names, attributes and parameters that
    carry it). The finding is at the first such `.to(device)` in the loop, one per loop.

    Not reported: a loop over a device loader (`pl.MpDeviceLoader(loader, device)`,
    `pl.ParallelLoader(loader, [device]).per_device_loader(device)`, also with SPMD's
    `input_sharding=`), or over a loader a framework prepared (accelerate's `prepare`, Lightning);
    a loop that does not train (evaluation, prediction); code on the project's CUDA path; a move to
    a device the analysis does not see to be the XLA device (`device or torch.device("cpu")` from a
    caller it cannot follow).

    ## Why is this bad?
    Each batch is copied from host memory to the device inside the step, synchronously: the
    transfer starts only when the loop asks for the batch, and the device waits for it, with no
    overlap with the previous step's computation. torch_xla's device loaders run the host-to-device
    copies on background threads and keep a few batches uploaded ahead of the step (`MpDeviceLoader`
    starts `loader_prefetch_size` batches ahead, 8 by default, with `device_prefetch_size` on the
    device); the torch_xla guide names `MpDeviceLoader` as the way to feed a training loop on XLA,
    and the loader also marks the step (`torch_xla.sync()`) as each batch is taken.

    ## Example
    ```python
    import torch_xla

    device = torch_xla.device()
    loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        torch_xla.sync()
    ```

    Use instead:
    ```python
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    device = torch_xla.device()
    loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
    for x, y in pl.MpDeviceLoader(loader, device):  # batches arrive on the device
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    ## Fix safety
    No fix is offered. Wrapping the loader changes where the step barrier is: `MpDeviceLoader`
    calls `torch_xla.sync()` as each batch is taken, so a loop that marks its own step (or
    accumulates gradients over several batches before it does) would cut its graphs at other
    places; the batches it yields are already on the device, and code that relies on them being on
    the host (a `.numpy()` of the labels, a CPU-side filter) changes behaviour. Wrap the loader and
    drop the `.to(device)` calls by hand.

    ## References
    - [PyTorch on XLA devices, "Running on multiple XLA devices with multi-processing" (v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/pytorch-on-xla-devices.md):
      `MpDeviceLoader` "loads the training data onto each device" and "wraps a torch dataloader ...
      preloading the data onto the device ... and calling `torch_xla.sync()`" after each batch
    - `torch_xla/distributed/parallel_loader.py` at v2.9.0: `MpDeviceLoader`, `ParallelLoader`
      (`loader_prefetch_size=8`, `device_prefetch_size=4`, the `_loader_worker` / `_worker`
      threads that copy batches ahead of the step)
    """

    code, name, category = "XLA704", "batches-copied-in-step", "other"
    summary = "training loop copies each batch from a plain `DataLoader` to the XLA device inside the step"
    hint = "iterate `pl.MpDeviceLoader(loader, device)` instead (and drop the `.to(device)` calls)"
    xla_only = True
    evidence = ("step",)

    VALID = [
        Valid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl

            device = torch_xla.device()
            loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            for x, y in pl.MpDeviceLoader(loader, device):
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl

            device = torch_xla.device()
            loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            train_loader = pl.ParallelLoader(loader, [device]).per_device_loader(device)
            for step, (x, y) in enumerate(train_loader):
                x = x.to(device)  # already there: a no-op
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl
            import torch_xla.distributed.spmd as xs

            device = torch_xla.device()
            loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            sharded = pl.MpDeviceLoader(loader, device, input_sharding=xs.ShardingSpec(mesh, ("data", None)))
            for batch in sharded:
                loss_fn(model(batch["x"]), batch["y"]).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            device = torch_xla.device()
            loader = DataLoader(eval_set, batch_size=64)
            with torch.no_grad():
                for x, y in loader:  # evaluation: nothing trains
                    predictions.append(model(x.to(device)).cpu())
            """
        ),
        Valid(
            """
            import torch

            device = torch.device("cuda")
            loader = DataLoader(train_set, batch_size=64, shuffle=True)
            for x, y in loader:  # no XLA in this file
                x, y = x.to(device), y.to(device)
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            loader = DataLoader(train_set, batch_size=64, shuffle=True)
            for x, y in loader:
                x = x.to(torch.bfloat16)  # a cast, not a copy to the device
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl

            def fit(model, optimizer, batches, device):
                for batch in batches:  # the file wraps its loaders: these may be device batches
                    batch = {k: v.to(device) for k, v in batch.items()}
                    model(**batch).loss.backward()
                    optimizer.step()

            fit(model, optimizer, pl.MpDeviceLoader(loader, torch_xla.device()), torch_xla.device())
            """
        ),
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            data_iter = iter(loader)
            for step in range(num_steps):  # counts steps; the batch is drawn inside
                x, y = next(data_iter)
                x, y = x.to(device), y.to(device)
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            try:
                import torch_xla
                import torch_xla.distributed.parallel_loader as pl
                HAS_XLA = True
            except ImportError:
                HAS_XLA = False

            loader = DataLoader(train_set, batch_size=64, shuffle=True)
            batches = pl.MpDeviceLoader(loader, device) if HAS_XLA else loader
            for x, y in batches:
                if not HAS_XLA:  # only the GPU path moves its batches
                    x, y = x.to(device), y.to(device)
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            class Trainer:
                def __init__(self, model, device=None):
                    self.model = model
                    self.device = device or torch.device("cpu")  # whatever the caller passes

                def train_epoch(self):
                    try:
                        import torch_xla.core.xla_model as xm
                    except ImportError:
                        xm = None
                    for x, y in self.train_loader:
                        x, y = x.to(self.device), y.to(self.device)
                        self.loss_fn(self.model(x), y).backward()
                        self.optimizer.step()
                        if xm is not None:
                            xm.mark_step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla

            device = torch_xla.device()
            loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
                torch_xla.sync()
            """,
            line=6,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def train(model, dataset, optimizer, device):
                train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)
                for step, batch in enumerate(tqdm(train_loader)):
                    batch = {k: v.to(device) for k, v in batch.items()}
                    loss = model(**batch).loss
                    loss.backward()
                    xm.optimizer_step(optimizer)

            train(model, dataset, optimizer, xm.xla_device())
            """,
            line=6,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def fit(model, optimizer, train_dataloader):
                device = xm.xla_device()
                for step, batch in enumerate(train_dataloader):  # a parameter no call in view passes: possible
                    input_ids = batch["input_ids"].to(device)
                    labels = batch["labels"].to(device)
                    model(input_ids=input_ids, labels=labels).loss.backward()
                    optimizer.step()
                    xm.mark_step()
            """,
            line=6,
        ),
        Invalid(
            """
            import torch_xla

            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.device = torch_xla.device()

                def train_epoch(self):
                    for batch in tqdm(self.train_loader):
                        images = batch["image"]
                        with torch_xla.step():
                            images = images.to(self.device)
                            loss = self.loss_fn(self.model(images), batch["label"].to(self.device))
                            loss.backward()
                            self.optimizer.step()
            """,
            line=12,
        ),
    ]

    def visit_For(self, node: ast.For) -> None:
        self._check(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._check(node)

    def _check(self, loop: ast.For | ast.AsyncFor) -> None:
        barriers = self.ctx.barriers
        kind = barriers.loop_kind(loop)
        # batches from a host loader; or from an iterable nothing tells (a parameter, a helper's
        # loader) in a file with no device loader at all, moved to the device by hand below
        if kind != PLAIN_BATCHES and (kind != UNKNOWN_BATCHES or barriers.has_device_loader):
            return
        if _counts(loop.iter) or self.ctx.in_non_xla_code(loop) or not loop_trains(self.ctx, loop):
            return
        # a move on the loop's non-XLA path (`if not HAS_XLA: x = x.to(device)`) is not the XLA step's
        moves = [m for m in batch_moves(self.ctx, loop, parts=True) if not self.ctx.in_non_xla_code(m)]
        # evidence, not assumption: the device the batch goes to is seen to be the XLA device
        # (`xm.xla_device()`, an attribute or a parameter every seen binding or call gives one)
        placement = Placement(self.ctx)
        moves = [m for m in moves if any(placement.device(t) is True for t in move_targets(m))]
        if not moves or not self.ctx.runs_hot(moves[0]):  # a test's or a verification script's loop
            return
        found = self.evidence_for(moves[0]) or Evidence(HIGH)
        if barriers.loader_kind(loop.iter) == PLAIN_BATCHES:  # the host loader itself is seen
            found = found & seen(self.ctx, loop.iter, "batches from a plain `DataLoader`")
        else:  # a parameter, a global, a helper's loader: what it yields is not seen
            found = found & Evidence(POSSIBLE, seen(self.ctx, loop.iter, "batches from a loader not seen").chain)
        self.report(moves[0], evidence=found)


def _counts(expr: ast.expr) -> bool:
    """`range(n)`, `trange(n)`, `enumerate(range(n))`: the loop counts steps; its batches, if any,
    are drawn inside it."""
    while isinstance(expr, ast.Call) and last_part(dotted_name(expr.func)) in ("enumerate", "tqdm") and expr.args:
        expr = expr.args[0]
    return isinstance(expr, ast.Call) and last_part(dotted_name(expr.func)) in ("range", "trange")
