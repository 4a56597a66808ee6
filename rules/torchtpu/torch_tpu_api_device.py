"""TPU109 torch-tpu-api-device: early TorchTPU's `torch_tpu.api.tpu_device()`, gone in 0.2.0."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class TorchTpuApiDevice(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags early TorchTPU's `from torch_tpu import api` and `api.tpu_device()` (2026 notebooks). {opt_in}

    ## Why is this bad?
    The torch-tpu 0.2.0 wheel has no `torch_tpu/api` package (its top level is `__init__.py`,
    `_loader.py`, `_tcmalloc_check.py`, `_versioned_so_loader.py` and `_internal/`): the import
    fails. The plug-in now loads with torch (the `torch.backends` entry point) and the device is
    `torch.device("tpu")`.

    ## Example
    ```python
    from torch_tpu import api

    device = api.tpu_device()
    ```

    Use instead:
    ```python
    import torch

    device = torch.device("tpu")
    ```

    ## Fix safety
    Safe: `api.tpu_device()` becomes `torch.device("tpu")`, and the import goes once nothing else
    uses it.

    {references}
    """,
        "TPU109",
    )

    code, name, category = "TPU109", "torch-tpu-api-device", "deprecated_xla_api"
    summary = '`torch_tpu.api` is not in torch-tpu 0.2.0: the device is `torch.device("tpu")`'
    hint = "`xlalint explain TPU109` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "sometimes"
    preview, target = True, "torchtpu"

    VALID = [Valid("import torch\ndevice = torch.device('tpu')\n")]
    INVALID = [
        Invalid("from torch_tpu import api\n", line=1),
        Invalid(
            """
            import torch
            import torch_tpu
            device = torch_tpu.api.tpu_device()
            """,
            line=3,
            expected_replacement="""
            import torch
            import torch_tpu
            device = torch.device("tpu")
            """,
        ),
    ]

    @classmethod
    def applies(cls, ctx) -> bool:
        return any(b.qualified.split(".")[0] == "torch_tpu" for b in ctx.index.imports.values())
