"""TPU114 xla-spmd: torch_xla's SPMD sharding."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaSpmd(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags imports of `torch_xla.distributed.spmd` (and the older
    `torch_xla.experimental.xla_sharding`) and `xr.use_spmd()`. {opt_in}

    ## Why is this bad?
    torch_xla's SPMD (`xs.Mesh`, `xs.mark_sharding`, `xr.use_spmd()`) annotates one program that XLA
    partitions. TorchTPU has no SPMD mode: sharding is PyTorch's DTensor / FSDP2 over a device
    mesh (`torch.tpu.distributed.topology_aware_mesh` in 0.2.0's public API), one process per
    device.

    ## Example
    ```python
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    xs.mark_sharding(w, mesh, ("data", None))
    ```

    Use instead:
    ```python
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = torch.tpu.distributed.topology_aware_mesh((8,), ("data",))
    w = distribute_tensor(w, mesh, [Shard(0)])
    ```

    {references}
    """,
        "TPU114",
    )

    code, name, category = "TPU114", "xla-spmd", "deprecated_xla_api"
    summary = "torch_xla's SPMD sharding: TorchTPU shards with DTensor / FSDP2 (a redesign, not a rename)"
    hint = "`xlalint explain TPU114` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\nfrom torch.distributed.tensor import distribute_tensor\n")]
    INVALID = [
        Invalid("import torch_xla.distributed.spmd as xs\n", line=1),
        Invalid("import torch_xla.runtime as xr\nxr.use_spmd()\n", line=2),
    ]
