"""TPU107 xla-autocast: autocast on the `xla` device -> `torch.autocast("tpu", ...)`."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaAutocast(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `torch.autocast("xla", ...)`, `torch.amp.autocast("xla", ...)` and
    `torch_xla.amp.autocast(device, ...)`. {opt_in}

    ## Why is this bad?
    Without torch_xla, `"xla"` is no autocast device and `torch_xla.amp` cannot be imported.
    TorchTPU's device module declares its autocast dtypes (`get_amp_supported_dtype`), so
    `torch.autocast("tpu", dtype=torch.bfloat16)` is the spelling (TorchTPU's `api_mapping.py` guide
    shows `torch.amp.autocast("tpu", ...)`).

    ## Example
    ```python
    import torch_xla.amp

    with torch_xla.amp.autocast(device):
        loss = loss_fn(model(x), y)
    ```

    Use instead:
    ```python
    import torch

    with torch.autocast("tpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    ```

    ## Fix safety
    Safe: the device becomes `"tpu"`; `torch_xla.amp.autocast` keeps `enabled`, `dtype` and
    `cache_enabled`, and gets `dtype=torch.bfloat16` (what torch_xla used on TPU) when it passed
    none, as the `tpu` device's default autocast dtype is not bfloat16 in every torch.

    {references}
    """,
        "TPU107",
    )

    code, name, category = "TPU107", "xla-autocast", "deprecated_xla_api"
    summary = "autocast on torch_xla's device: TorchTPU's is `torch.autocast(\"tpu\", dtype=torch.bfloat16)`"
    hint = "`xlalint explain TPU107` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "always"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch\nimport torch_xla\nwith torch.autocast('tpu', dtype=torch.bfloat16):\n    y = f(x)\n")]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla
            with torch.autocast("xla", dtype=torch.bfloat16):
                y = model(x)
            """,
            line=3,
            expected_replacement="""
            import torch
            import torch_xla
            with torch.autocast("tpu", dtype=torch.bfloat16):
                y = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            from torch_xla.amp import autocast
            with autocast(device, enabled=use_amp):
                y = model(x)
            """,
            line=3,
            expected_replacement="""
            import torch
            with torch.autocast("tpu", dtype=torch.bfloat16, enabled=use_amp):
                y = model(x)
            """,
        ),
    ]
