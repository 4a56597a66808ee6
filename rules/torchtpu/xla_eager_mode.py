"""TPU116 xla-eager-mode: torch_xla's eager switch."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaEagerMode(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `torch_xla.experimental.eager_mode(...)`. {opt_in}

    ## Why is this bad?
    TorchTPU runs eagerly by default (`EagerMode.DEFER_NEVER`). Its fused eager mode, closer to
    torch_xla's lazy tensors, is `torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE)`,
    marked experimental in 0.2.0, so it is only named in the hint.

    ## Example
    ```python
    import torch_xla

    torch_xla.experimental.eager_mode(True)
    ```

    Use instead:
    ```python
    import torch

    # eager is the default on TorchTPU
    ```

    {references}
    """,
        "TPU116",
    )

    code, name, category = "TPU116", "xla-eager-mode", "deprecated_xla_api"
    summary = "torch_xla's eager switch: eager is TorchTPU's default"
    hint = "`xlalint explain TPU116` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\nmode = eager_mode  # ours\n")]
    INVALID = [
        Invalid("import torch_xla\ntorch_xla.experimental.eager_mode(True)\n", line=2),
    ]
