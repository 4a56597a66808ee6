"""TPU111 xla-optimizer-step: `xm.optimizer_step` all-reduces gradients across replicas."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaOptimizerStep(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `xm.optimizer_step(optimizer)`. {opt_in}

    ## Why is this bad?
    It all-reduces the gradients across replicas, then steps (and with `barrier=True` cuts the
    graph). TorchTPU has no such call: gradients are reduced by `DistributedDataParallel` or
    FSDP2 over the `tpu` process group, and the step is `optimizer.step()`. Rewriting the call
    alone would silently train each replica on its own gradients.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    for x, y in loader:
        loss_fn(model(x), y).backward()
        xm.optimizer_step(optimizer)
    ```

    Use instead:
    ```python
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    {references}
    """,
        "TPU111",
    )

    code, name, category = "TPU111", "xla-optimizer-step", "deprecated_xla_api"
    summary = "`xm.optimizer_step` all-reduces gradients across replicas: on TorchTPU that is DDP / FSDP2's job"
    hint = "`xlalint explain TPU111` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\noptimizer.step()\n")]
    INVALID = [
        Invalid("import torch_xla.core.xla_model as xm\nxm.optimizer_step(optimizer, barrier=True)\n", line=2),
    ]
