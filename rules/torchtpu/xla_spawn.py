"""TPU112 xla-spawn: torch_xla's launcher."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaSpawn(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `xmp.spawn(...)` and `torch_xla.launch(...)`. {opt_in}

    ## Why is this bad?
    They start one process per TPU device through torch_xla's PJRT runtime. TorchTPU leaves spawning
    to PyTorch: `torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=...)` (exported in
    0.2.0's `public_api.py`, defined in `_internal/distributed/distributed.py`) sets the
    variables every rank must agree on, then `torch.multiprocessing.spawn`, `elastic_launch` or
    `torchrun` start the workers, which call `init_process_group("tpu")`. The worker's arguments
    and the device count differ, so this is a rewrite by hand.

    ## Example
    ```python
    import torch_xla.distributed.xla_multiprocessing as xmp

    if __name__ == "__main__":
        xmp.spawn(_mp_fn, args=(flags,))
    ```

    Use instead:
    ```python
    import torch

    if __name__ == "__main__":
        torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=4)
        torch.multiprocessing.spawn(_mp_fn, args=(flags,), nprocs=4)
    ```

    {references}
    """,
        "TPU112",
    )

    code, name, category = "TPU112", "xla-spawn", "deprecated_xla_api"
    summary = "torch_xla's launcher: TorchTPU sets the launch environment, then torch's launchers spawn"
    hint = "`xlalint explain TPU112` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch\nimport torch_xla\ntorch.multiprocessing.spawn(fn, nprocs=4)\n")]
    INVALID = [
        Invalid("import torch_xla.distributed.xla_multiprocessing as xmp\nxmp.spawn(_mp_fn, args=(flags,))\n", line=2),
        Invalid("import torch_xla\ntorch_xla.launch(_mp_fn, args=(flags,))\n", line=2),
    ]
