"""XLA403 xla-optimizer-step-without-barrier: Flags `xm.optimizer_step(optimizer)` with `barrier` left
out or `False` in a step loop that has no other barrier."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.barriers import PLAIN_BATCHES, barrier_argument, names_in
from xlalint.analysis.vocabulary import XM_OPTIMIZER_STEP
from xlalint.diagnostics import Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


class XlaOptimizerStepWithoutBarrier(Rule):
    """## What it does
    Flags `xm.optimizer_step(optimizer)` with `barrier` left out or `False` in a step loop that has
    no other barrier: its batches come from a plain data loader (or `range`), not a device loader;
    no `torch_xla.sync()` / `xm.mark_step()` runs as often as the step; and the step does not run
    inside `torch_xla.step()`, `torch_xla.compile` or `torch.compile(..., backend="openxla")`.

    ## Why is this bad?
    `xm.optimizer_step` all-reduces the gradients and steps the optimizer, but its `barrier`
    defaults to `False`: it cuts the graph only when asked to. Its docstring says the barrier is
    unnecessary with torch_xla's `ParallelLoader` or `DataParallel`, whose loader syncs at every
    batch; the "Data Loading" notes of the advanced guide add that without `MpDeviceLoader` you
    need `barrier=True` or an explicit `torch_xla.sync()`. With a plain `DataLoader` nothing cuts the graph: every iteration appends to
    one lazy graph that grows until an accidental sync compiles it (anew each time) or the device
    runs out of memory.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss_fn(model(data), target).backward()
        xm.optimizer_step(optimizer)
    ```

    Use instead:
    ```python
    import torch_xla.core.xla_model as xm

    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss_fn(model(data), target).backward()
        xm.optimizer_step(optimizer, barrier=True)
    ```

    Or iterate `pl.MpDeviceLoader(train_loader, device)`, which also overlaps the upload of the next
    batch with the step.

    ## Fix safety
    The fix sets `barrier=True`: the same reduction and the same step, followed by
    `torch_xla.sync()`, which computes the same values. It is safe.

    ## Known problems
    Reported only when the loop's loader is traced, in this file, to a host loader (`DataLoader`,
    `range`, a module-local function returning one), or when a loader that arrives from elsewhere
    yields batches the loop moves to the device by hand (`data.to(device)`: needless with a device
    loader) while no device loader is built in this file and no call in the project passes one for
    it.

    ## References
    - `optimizer_step(..., barrier=False)` and its docstring: torch_xla/core/xla_model.py at v2.9.0
    - docs/source/learn/xla-advanced.md ("Data Loading") and
      docs/source/learn/trace-vs-execution-time.md at v2.9.0
    """

    code, name, category = "XLA403", "xla-optimizer-step-without-barrier", "optimizer_step"
    summary = (
        "`xm.optimizer_step` without `barrier=True` in a loop over a plain data loader: nothing cuts the step's graph"
    )
    hint = "pass `barrier=True`, or iterate a `pl.MpDeviceLoader(loader, device)`"
    xla_only = True

    RUNNER = {
        "run.py": """
        import torch_xla
        import torch_xla.distributed.parallel_loader as pl
        from example import train_loop_fn

        def _mp_fn(index):
            device = torch_xla.device()
            train_loop_fn(pl.MpDeviceLoader(train_loader, device), model, optimizer, device)
        """
    }
    LOOP = """
        import torch_xla.core.xla_model as xm

        def train_loop_fn(loader, model, optimizer, device):
            model.train()
            for data, target in loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer)
        """
    fix_availability = "always"

    VALID = [
        Valid(LOOP, modules=RUNNER),  # the project's caller passes a device loader
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train_loop_fn(loader, model, optimizer):
                for data, target in loader:  # nothing tells what the loader is
                    optimizer.zero_grad()
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            model = MNIST().train().to(device)
            optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            for data, target in train_loader:
                optimizer.zero_grad()
                data, target = data.to(device), target.to(device)
                loss = loss_fn(model(data), target)
                loss.backward()
                xm.optimizer_step(optimizer, barrier=True)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                mp_device_loader = pl.MpDeviceLoader(train_loader, device)
                for data, target in mp_device_loader:
                    optimizer.zero_grad()
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)  # the device loader syncs every batch

            torch_xla.launch(_mp_fn, args=())
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def train_loop_fn(loader):
                for step, (data, target) in enumerate(loader):
                    optimizer.zero_grad()
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)

            def _mp_fn(index):
                train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=128, drop_last=True)
                para_loader = pl.ParallelLoader(train_loader, [device])
                train_loop_fn(para_loader.per_device_loader(device))
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            for data, target in train_loader:
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer)
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train(model, loader, optimizer):
                for data, target in loader:  # whatever the caller passes: maybe a device loader
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
            for data, target in train_loader:
                with torch_xla.step():
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
            for data, target in train_loader:
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer, barrier=args.sync_every_step)  # the caller decides
            """
        ),
    ]
    INVALID = [
        Invalid(LOOP, line=9),  # batches moved by hand: a plain loader
        Invalid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer)
            """,
            line=11,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer, barrier=True)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train_epoch(model, loader, optimizer):
                for step, (data, target) in enumerate(loader):
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer, barrier=False)
                    if step % 100 == 0:
                        xm.mark_step()  # every 100 steps: the graph spans 100 steps

            train_epoch(model, DataLoader(dataset, batch_size=32), optimizer)
            """,
            line=7,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train_epoch(model, loader, optimizer):
                for step, (data, target) in enumerate(loader):
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer, barrier=True)
                    if step % 100 == 0:
                        xm.mark_step()  # every 100 steps: the graph spans 100 steps

            train_epoch(model, DataLoader(dataset, batch_size=32), optimizer)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for step in range(num_steps):
                loss_fn(model(inputs), labels).backward()
                xm.optimizer_step(
                    optimizer,
                )
            """,
            line=4,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            for step in range(num_steps):
                loss_fn(model(inputs), labels).backward()
                xm.optimizer_step(
                    optimizer, barrier=True,
                )
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if (
            self.ctx.qualified_name(node.func) != XM_OPTIMIZER_STEP
            or barrier_argument(node, default=False) is not False
        ):
            return
        if not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        barriers = self.ctx.barriers
        paths = barriers.paths(node, names_in(node.args[0] if node.args else None))
        if not paths or any(not p.in_loop or p.compiled for p in paths):
            return  # a loop this file can't see, or a compiled step
        if all(barriers.covered(p) or barriers.loop_kind(p.top) != PLAIN_BATCHES for p in paths):
            return
        self.report(node, fix=lambda cctx: _fix_barrier_argument(cctx, node))


def _fix_barrier_argument(cctx: CstContext, node: ast.Call) -> Fix | None:
    call = cctx.locate(node)
    if not isinstance(call, cst.Call):
        return None
    true = cst.Name("True")
    title = "Pass `barrier=True`"
    for position, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == "barrier") or (
            arg.keyword is None and position == 1 and not arg.star
        ):
            return Fix.replace(arg.value, true, title=title, safe=True)
    new = cst.Arg(
        value=true,
        keyword=cst.Name("barrier"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma stays last: `f(\n    opt,\n)`
        new = new.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return Fix.replace(call, call.with_changes(args=args), title=title, safe=True)
