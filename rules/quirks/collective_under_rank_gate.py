"""XLA702 collective-under-rank-gate: Flags a call every replica must make (a rendezvous, a
collective) placed under a branch that tests the process's rank."""

from __future__ import annotations

import ast

from xlalint.analysis.ranks import COLLECTIVES, joined_on_other_branch, rank_gate
from xlalint.rule import Invalid, Rule, Valid


class CollectiveUnderRankGate(Rule):
    """## What it does
    Flags a call that every replica of the job must make, reached only under a branch that tests
    the process's own rank: `xm.rendezvous`, `xm.all_reduce` / `all_gather` / `reduce_scatter` /
    `all_to_all` / `collective_permute` / `mesh_reduce`, `xm.reduce_gradients`, `xm.optimizer_step`
    (which all-reduces the gradients) and the `torch.distributed` collectives (`barrier`,
    `all_reduce`, `broadcast`, `all_gather`, ...) under `if xm.is_master_ordinal():`, `if rank == 0:`,
    `if xr.global_ordinal() == 0:`, `if local_rank in (-1, 0):` or their `else`. The rank is a call of
    `xm.get_ordinal()`, `xm.get_local_ordinal()`, `xr.global_ordinal()`, `xr.local_ordinal()`,
    `dist.get_rank()`, a name bound only from one, or the first parameter of the function the module
    launches with `xmp.spawn` / `torch_xla.launch` (the replica's index).

    ## Why is this bad?
    A collective returns only when every replica has joined it. Under a rank gate only some replicas
    call it; the others never arrive, so the ones that did wait until the runtime's timeout (or
    forever) and the job hangs or dies, often long after the code last changed (at the first
    checkpoint or evaluation).

    Not reported: the same collective made by the other replicas on the complementary branch (the
    `else`, or `if not main: barrier()` ... `if main: barrier()`, the "main process first" idiom where
    every replica calls it once). Code under the gate that is not a collective (`torch.save`, logging, `xm.master_print`) is fine,
    and so is a gate on the world size (`if world_size > 1:`), which holds on all replicas alike.
    `xm.save` is not reported: since torch_xla 2.1 it no longer ends in a rendezvous (pytorch/xla
    PR #4926 removed it), so under `if xm.is_master_ordinal():` it writes on the master only and
    returns; on torch_xla 2.0 and older it called `xm.rendezvous` and hung under such a gate.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    def _mp_fn(index):
        train(model)
        if xm.is_master_ordinal():
            torch.save(model.state_dict(), "model.pt")
            xm.rendezvous("checkpoint_saved")  # the other replicas never get here
    ```

    Use instead:
    ```python
    import torch_xla.core.xla_model as xm

    def _mp_fn(index):
        train(model)
        if xm.is_master_ordinal():
            torch.save(model.state_dict(), "model.pt")
        xm.rendezvous("checkpoint_saved")  # every replica joins
    ```

    ## Fix safety
    There is no fix. Moving the call out of the gate changes what the other replicas do (they then
    join a reduction or a barrier whose result the code may not expect them to use), and the right
    place depends on the program: the author must decide.

    ## References
    - `torch_xla/core/xla_model.py` at v2.9.0: `rendezvous` ("Waits for all the mesh clients to reach
      the named rendezvous"), `all_reduce`, `optimizer_step`; `save` without a rendezvous since
      v2.1.0 (commit 4f7f3dcd, "Remove rendezvous from xm.save (#4926)")
    - [torch.distributed, "Collective functions"](https://pytorch.org/docs/stable/distributed.html#collective-functions):
      `barrier` "blocks processes until the whole group enters this function"
    """

    code, name, category = "XLA702", "collective-under-rank-gate", "other"
    summary = "a collective reached only under a test of the process's rank: the other replicas never join it"
    hint = "call it on every replica, outside the rank test; keep only the rank-specific work under it"
    xla_only = True
    # no finding on the 45 repositories of the ecosystem corpus nor on the 12 pinned wheels of the dev
    # set: its precision on real code is not yet shown
    preview = True

    VALID = [
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            def _mp_fn(index):
                train(model)
                if xm.is_master_ordinal():
                    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "model.pt")
                    print("saved")
                xm.rendezvous("saved")
                xm.master_print("done")
            """
        ),
        Valid(
            """
            import torch.distributed as dist
            import torch_xla.runtime as xr

            world_size = xr.world_size()
            if world_size > 1:
                dist.barrier()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def evaluate(model, loader, epoch):
                accuracy = run_eval(model, loader)
                if epoch == 0:
                    accuracy = xm.mesh_reduce("accuracy", accuracy, sum)
                return accuracy
            """
        ),
        Valid(
            """
            import contextlib
            import torch_xla.core.xla_model as xm

            @contextlib.contextmanager
            def main_process_first(tag):
                is_main = xm.get_ordinal() == 0
                if not is_main:
                    xm.rendezvous(tag)  # the others wait for the main process...
                yield
                if is_main:
                    xm.rendezvous(tag)  # ...which joins them when it is done

            def broadcast_object(obj, device):
                if xm.get_ordinal() == 0:
                    data = encode(obj, device)
                    xm.all_reduce(xm.REDUCE_SUM, [data])
                else:
                    data = empty(device)
                    xm.all_reduce(xm.REDUCE_SUM, [data])
                return decode(data)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train(index, flags):  # not launched by this module: `index` may be anything
                if index == 0:
                    xm.rendezvous("first")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def evaluate(model, loader):
                is_main = xm.get_ordinal() == 0
                accuracy = run_eval(model, loader)
                if is_main:
                    accuracy = xm.mesh_reduce("accuracy", accuracy, sum)
                    print(accuracy)
            """,
            line=7,
        ),
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            def _mp_fn(index):
                train(model)
                if xm.is_master_ordinal():
                    torch.save(model.state_dict(), "model.pt")
                    xm.rendezvous("checkpoint_saved")
            """,
            line=8,
        ),
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(rank, flags):
                for step, batch in enumerate(loader):
                    loss = model(batch)
                    loss.backward()
                    if rank == 0:
                        total = xm.all_reduce(xm.REDUCE_SUM, loss)
                    xm.optimizer_step(optimizer)

            xmp.spawn(_mp_fn, args=({},))
            """,
            line=10,
        ),
        Invalid(
            """
            import torch.distributed as dist
            import torch_xla.runtime as xr

            def save_and_sync(model):
                local_rank = xr.local_ordinal()
                if local_rank in (-1, 0):
                    write(model)
                    dist.barrier()
            """,
            line=8,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def step(model, optimizer):
                if xm.get_ordinal() != 0:
                    return
                xm.optimizer_step(optimizer)
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name not in COLLECTIVES or self.ctx.in_non_xla_code(node):
            return
        found = rank_gate(self.ctx, node)
        if found is None:
            return
        gate, holds = found
        if joined_on_other_branch(self.ctx, node, gate, holds, name):
            return
        call = name.rsplit(".", 1)[-1]
        where = "holds" if holds else "does not hold"
        self.report(
            node,
            message=(
                f"collective `{call}` runs only where `{self.ctx.code(gate.test)}` {where} (line "
                f"{gate.lineno}): the other replicas never join it and the job hangs"
            ),
        )
