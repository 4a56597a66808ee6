"""TPU108 xla-save: `xm.save(obj, path)` -> `torch.save` of CPU values."""

from __future__ import annotations

from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaSave(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `xm.save(obj, path)`. {opt_in}

    ## Why is this bad?
    `xm.save` is torch_xla's: it moves every tensor in `obj` to the CPU and writes from the master
    process only. On TorchTPU, `torch.save` of device tensors would write TPU tensors that load back
    only where a TPU is present; the CPU copy has to be made explicitly.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    xm.save(model.state_dict(), "model.pt")
    ```

    Use instead:
    ```python
    import torch

    torch.save(torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, model.state_dict()), "model.pt")
    ```

    ## Fix safety
    Unsafe: the values are saved as CPU tensors as before, but every process that calls it now
    writes, where `xm.save` wrote from the master only (guard it with
    `torch.distributed.get_rank() == 0`). Only `xm.save(obj, path)` with two positional
    arguments gets a fix.

    {references}
    """,
        "TPU108",
    )

    code, name, category = "TPU108", "xla-save", "deprecated_xla_api"
    summary = "`xm.save` is torch_xla's: on TorchTPU use `torch.save` of CPU values"
    hint = "`xlalint explain TPU108` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "sometimes"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch\nimport torch_xla\ntorch.save(model.state_dict(), path)\n")]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm
            xm.save(model.state_dict(), "model.pt")
            """,
            line=3,
            expected_replacement="""
            import torch
            torch.save(torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, model.state_dict()), "model.pt")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            xm.save(state, path, master_only=False)  # no fix
            """,
            line=2,
        ),
    ]
