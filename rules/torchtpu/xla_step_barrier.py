"""TPU102 xla-step-barrier: torch_xla's step barriers (`xm.mark_step()`, `torch_xla.sync()`, `torch_xla.step()`)."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaStepBarrier(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags torch_xla's step barriers: `xm.mark_step()`, `torch_xla.sync()`, `with torch_xla.step():`.
    {opt_in}

    ## Why is this bad?
    TorchTPU has no lazy graph to cut: by default it runs eagerly (`EagerMode.DEFER_NEVER`, "strict
    eager", asynchronous like CUDA), so the barrier has nothing to do, and without torch_xla it
    cannot be imported. Under the opt-in fused eager mode (`DEFER_AND_FUSE`) work runs when a value
    is materialised (`.item()`, `.cpu()`, `print(t)`), not at a barrier.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        xm.mark_step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Known problems
    No fix: deleting the barrier is right in strict eager, but a loop written for fused eager may
    rely on a materialisation the barrier stood next to.

    {references}
    """,
        "TPU102",
    )

    code, name, category = "TPU102", "xla-step-barrier", "deprecated_xla_api"
    summary = "torch_xla's step barrier: TorchTPU runs eagerly, there is no graph to cut"
    hint = "`xlalint explain TPU102` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\nmodel.mark_step()  # not torch_xla's\n")]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for x in loader:
                model(x).sum().backward()
                xm.mark_step()
            """,
            line=4,
        ),
        Invalid(
            """
            import torch_xla
            for x in loader:
                with torch_xla.step():
                    model(x).sum().backward()
            """,
            line=3,
        ),
        Invalid("from torch_xla import sync\nsync()\n", line=2),
    ]
