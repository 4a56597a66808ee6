"""TPU115 xla-wait-device-ops: `xm.wait_device_ops()` is torch_xla's."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaWaitDeviceOps(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `xm.wait_device_ops()`. {opt_in}

    ## Why is this bad?
    It waits for torch_xla's device work. On TorchTPU the device-generic
    `torch.accelerator.synchronize()` is the public wait: 0.2.0 makes `torch.tpu.synchronize()`
    internal with torch >= 2.11 (calling it from user code raises, naming
    `torch.accelerator.synchronize`; `_internal/device/_device_module.py`).

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    xm.wait_device_ops()
    elapsed = time.perf_counter() - start
    ```

    Use instead:
    ```python
    import torch

    torch.accelerator.synchronize()
    elapsed = time.perf_counter() - start
    ```

    ## Fix safety
    Safe: the same wait, through PyTorch's device-generic API.

    {references}
    """,
        "TPU115",
    )

    code, name, category = "TPU115", "xla-wait-device-ops", "deprecated_xla_api"
    summary = "`xm.wait_device_ops()` is torch_xla's: the public wait is `torch.accelerator.synchronize()`"
    hint = "`xlalint explain TPU115` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "always"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch\nimport torch_xla\ntorch.accelerator.synchronize()\n")]
    INVALID = [
        Invalid(
            "import torch\nimport torch_xla.core.xla_model as xm\nxm.wait_device_ops()\n",
            line=3,
            expected_replacement="import torch\ntorch.accelerator.synchronize()\n",
        ),
    ]
