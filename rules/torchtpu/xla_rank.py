"""TPU105 xla-rank: torch_xla's rank, world size and rendezvous -> `torch.distributed`."""

from __future__ import annotations

from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaRank(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags torch_xla's process-topology calls: `xm.get_ordinal()`, `xr.global_ordinal()`,
    `xm.xrt_world_size()`, `xr.world_size()`, `xm.rendezvous(tag)`, the local ordinals,
    `xm.is_master_ordinal()` and `xm.master_print`. {opt_in}

    ## Why is this bad?
    They come from torch_xla's runtime, which is gone on TorchTPU. There, processes are a
    `torch.distributed` process group over the `tpu` backend, and rank and world size are
    PyTorch's.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    if xm.get_ordinal() == 0:
        print("world:", xm.xrt_world_size())
    ```

    Use instead:
    ```python
    import torch.distributed as dist

    if dist.get_rank() == 0:
        print("world:", dist.get_world_size())
    ```

    ## Fix safety
    The rank, world size and barrier become `torch.distributed.get_rank()`, `get_world_size()` and
    `barrier()`. Safe when the file calls `init_process_group`; unsafe otherwise, because
    torch.distributed raises without a process group where torch_xla answered anyway. The local
    ordinals, `is_master_ordinal` (local by default) and `master_print` get no fix. A
    `rendezvous` passing a payload gets none either.

    {references}
    """,
        "TPU105",
    )

    code, name, category = "TPU105", "xla-rank", "deprecated_xla_api"
    summary = "torch_xla's rank or world size: on TorchTPU they come from `torch.distributed`"
    hint = "`xlalint explain TPU105` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "sometimes"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch.distributed as dist\nimport torch_xla\nrank = dist.get_rank()\n")]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            import torch_xla.core.xla_model as xm

            dist.init_process_group("tpu")
            rank = xm.get_ordinal()
            """,
            line=5,
            expected_replacement="""
            import torch.distributed as dist

            dist.init_process_group("tpu")
            rank = dist.get_rank()
            """,
        ),
        Invalid(
            """
            import torch_xla.runtime as xr
            world = xr.world_size()
            """,
            line=2,
            expected_replacement="""
            import torch.distributed

            world = torch.distributed.get_world_size()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            xm.master_print("done")
            """,
            line=2,
        ),
    ]
