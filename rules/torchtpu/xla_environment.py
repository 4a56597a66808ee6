"""TPU118 xla-environment: an environment variable for torch_xla."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaEnvironment(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags code that sets torch_xla's environment variables (`PJRT_DEVICE`, `XLA_USE_BF16`,
    `XLA_DOWNCAST_BF16`, `XLA_USE_SPMD`, `XRT_TPU_CONFIG`, `PT_XLA_DEBUG`, `XLA_IR_DEBUG`,
    `XLA_HLO_DEBUG`). {opt_in}

    ## Why is this bad?
    None of them is named in any file of the torch-tpu 0.2.0 wheel (its Python sources and its `.so`
    libraries were searched), so setting them does nothing there; code that set `XLA_USE_BF16=1`
    for bfloat16 silently trains in float32.

    ## Example
    ```python
    import os

    os.environ["PJRT_DEVICE"] = "TPU"
    os.environ["XLA_USE_BF16"] = "1"
    ```

    Use instead:
    ```python
    import torch

    model = model.to(torch.device("tpu"), dtype=torch.bfloat16)
    ```

    {references}
    """,
        "TPU118",
    )

    code, name, category = "TPU118", "xla-environment", "deprecated_xla_api"
    summary = "an environment variable for torch_xla: TorchTPU does not read it"
    hint = "`xlalint explain TPU118` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [
        Valid(
            "import os\nimport torch_xla\nos.environ['XLA_FLAGS'] = '--xla_dump_to=/tmp/dump'\nflag = os.environ.get('PJRT_DEVICE')\n"
        )
    ]
    INVALID = [
        Invalid('import os\nimport torch_xla\nos.environ["PJRT_DEVICE"] = "TPU"\n', line=3),
        Invalid('import os\nimport torch_xla\nos.environ.setdefault("XLA_USE_BF16", "1")\n', line=3),
    ]
