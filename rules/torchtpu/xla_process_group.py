"""TPU104 xla-process-group: `init_process_group("xla")` -> `"tpu"`."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaProcessGroup(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `torch.distributed.init_process_group("xla", ...)` (positional or `backend="xla"`). {opt_in}

    ## Why is this bad?
    The `xla` process-group backend is registered by torch_xla (`torch_xla.distributed.xla_backend`);
    TorchTPU registers `tpu` (and `tpu_dist`) when the device loads, so `"xla"` raises
    "Invalid backend" there.

    ## Example
    ```python
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend

    dist.init_process_group("xla", init_method="xla://")
    ```

    Use instead:
    ```python
    import torch.distributed as dist

    dist.init_process_group("tpu")
    ```

    ## Fix safety
    Safe: `"xla"` becomes `"tpu"` and `init_method="xla://"` (torch_xla's rendezvous) goes; any
    other argument stays.

    {references}
    """,
        "TPU104",
    )

    code, name, category = "TPU104", "xla-process-group", "deprecated_xla_api"
    summary = "the `xla` process-group backend is torch_xla's: TorchTPU registers `tpu`"
    hint = "`xlalint explain TPU104` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "always"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch.distributed as dist\nimport torch_xla\ndist.init_process_group('tpu')\n")]
    INVALID = [
        Invalid(
            """
            import torch.distributed as dist
            import torch_xla.distributed.xla_backend

            dist.init_process_group("xla", init_method="xla://")
            """,
            line=4,
            expected_replacement="""
            import torch.distributed as dist
            import torch_xla.distributed.xla_backend

            dist.init_process_group("tpu")
            """,
        ),
        Invalid(
            """
            import torch
            import torch_xla
            torch.distributed.init_process_group(backend="xla", timeout=timeout)
            """,
            line=3,
            expected_replacement="""
            import torch
            import torch_xla
            torch.distributed.init_process_group(backend="tpu", timeout=timeout)
            """,
        ),
    ]
