"""TPU113 xla-collective: torch_xla's collective."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaCollective(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags torch_xla's collectives: `xm.all_reduce`, `xm.all_gather`, `xm.reduce_scatter`,
    `xm.all_to_all`, `xm.collective_broadcast`, `xm.collective_permute`. {opt_in}

    ## Why is this bad?
    They are torch_xla's graph ops with their own signatures (`xm.all_reduce(reduce_type, tensors,
    scale=...)` takes the reduction first and a list; `xm.all_gather` returns a new tensor
    concatenated on `dim`). TorchTPU runs `torch.distributed`'s collectives over the `tpu`
    process group, in place and one tensor at a time, so a rename would be wrong: the arguments
    must be rewritten by hand.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    loss = xm.all_reduce(xm.REDUCE_SUM, loss, scale=1.0 / world)
    ```

    Use instead:
    ```python
    import torch.distributed as dist

    dist.all_reduce(loss, op=dist.ReduceOp.SUM)
    loss = loss / world
    ```

    {references}
    """,
        "TPU113",
    )

    code, name, category = "TPU113", "xla-collective", "deprecated_xla_api"
    summary = "torch_xla's collective: on TorchTPU use `torch.distributed`'s (the signature differs)"
    hint = "`xlalint explain TPU113` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch.distributed as dist\nimport torch_xla\ndist.all_reduce(t)\n")]
    INVALID = [
        Invalid("import torch_xla.core.xla_model as xm\ntotal = xm.all_reduce(xm.REDUCE_SUM, t)\n", line=2),
        Invalid("from torch_xla.core.xla_model import all_gather\nout = all_gather(t, dim=0)\n", line=2),
    ]
