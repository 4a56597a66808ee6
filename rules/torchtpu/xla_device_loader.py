"""TPU103 xla-device-loader: torch_xla's device loaders (`MpDeviceLoader`, `ParallelLoader`)."""

from __future__ import annotations

from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaDeviceLoader(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `pl.MpDeviceLoader(loader, device)` and `pl.ParallelLoader(...)`. {opt_in}

    ## Why is this bad?
    TorchTPU has no device loader (the wheel ships none): batches are moved the PyTorch way, with
    `.to(device, non_blocking=True)`, and `torch_xla.distributed.parallel_loader` cannot be
    imported without torch_xla. The loader also cut torch_xla's graph after each batch, which
    TorchTPU (eager) does not need.

    ## Example
    ```python
    import torch_xla.distributed.parallel_loader as pl

    for x, y in pl.MpDeviceLoader(loader, device):
        loss = loss_fn(model(x), y)
    ```

    Use instead:
    ```python
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = loss_fn(model(x), y)
    ```

    ## Fix safety
    `MpDeviceLoader(loader, device)` becomes `loader`; unsafe: the batches now arrive on the CPU,
    and the loop must move them (`.to(device)`), which the fix does not add.

    {references}
    """,
        "TPU103",
    )

    code, name, category = "TPU103", "xla-device-loader", "deprecated_xla_api"
    summary = "torch_xla's device loader: TorchTPU iterates the loader and moves each batch with `.to(device)`"
    hint = "`xlalint explain TPU103` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "sometimes"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\nfor x, y in loader:\n    x = x.to(device, non_blocking=True)\n")]
    INVALID = [
        Invalid(
            """
            import torch_xla.distributed.parallel_loader as pl
            train = pl.MpDeviceLoader(loader, device)
            """,
            line=2,
            expected_replacement="""
            train = loader
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            from torch_xla.distributed import parallel_loader
            batches = parallel_loader.ParallelLoader(loader, [device]).per_device_loader(device)
            """,
            line=2,
        ),
    ]
