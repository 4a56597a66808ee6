"""XLA105 host-collective-in-step: Flags torch_xla's host collectives on a per-step path."""

from __future__ import annotations

import ast

from xlalint.rule import Invalid, Rule, Valid


class HostCollectiveInStep(Rule):
    """## What it does
    Flags torch_xla's host collectives on a per-step path: `xm.mesh_reduce(...)`,
    `xm.rendezvous(...)`, `xm.xla_rendezvous(...)` and `xm.do_on_ordinals(...)`.

    ## Why is this bad?
    These exchange Python data between processes through the host, not in the device graph.
    Under PJRT, `rendezvous` is an alias of `xla_rendezvous`, which runs `torch_xla.sync()` (it
    executes whatever the step has traced so far, cutting the step's graph in two when called before
    the step's own sync), all-gathers the payload sizes, reads their maximum on the host with
    `.item()`, and for a non-empty payload all-gathers it and copies it back with `.cpu()`.
    `mesh_reduce` first copies its data to the host and pickles it, then goes through `rendezvous`;
    `do_on_ordinals` copies its data to the host and ends with a `rendezvous`. Every step pays a
    graph execution, device-to-host reads and a barrier that waits for the slowest replica.

    Once at setup, once per epoch or every N steps, this costs nothing worth reporting.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        avg = xm.mesh_reduce("loss", loss, np.mean)
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        avg = xm.all_reduce(xm.REDUCE_SUM, loss) / xr.world_size()  # stays on the device
    ```

    Synchronise processes (`xm.rendezvous("checkpoint")`) around the rare events that need it,
    not every step.

    ## References
    - `rendezvous`, `xla_rendezvous`, `mesh_reduce`, `do_on_ordinals`:
      `torch_xla/core/xla_model.py` at v2.9.0 (https://github.com/pytorch/xla/blob/v2.9.0/torch_xla/core/xla_model.py)
    """

    code, name, category = "XLA105", "host-collective-in-step", "item_sync"
    evidence = ("step",)
    summary = "`{func}` on a per-step path is a graph sync, a host read and a barrier across replicas every step"
    hint = "use `xm.all_reduce` on device tensors (it stays in the step's graph), or synchronise once per epoch"
    xla_only = True

    CALLS = {
        f"torch_xla.core.xla_model.{name}": f"xm.{name}"
        for name in ("mesh_reduce", "rendezvous", "xla_rendezvous", "do_on_ordinals")
    }

    VALID = [
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            avg = xm.mesh_reduce("loss", loss, np.mean)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train(model, loader, optimizer, epochs):
                xm.rendezvous("init")  # setup, once
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        xm.optimizer_step(optimizer)
                    xm.rendezvous("epoch_end")  # once per epoch
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                if step % 500 == 0:
                    xm.rendezvous("save")
                    xm.save(model.state_dict(), "ckpt.pt")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                avg = xm.mesh_reduce("loss", loss, np.mean)
            """,
            line=5,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def train_step(model, batch, optimizer):
                loss = model(batch).mean()
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.rendezvous("step_done")
                return loss
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = self.CALLS.get(self.ctx.qualified_name(node.func) or "")
        if func is not None and self.ctx.runs_hot(node):
            self.report(node, self.summary.format(func=func))
