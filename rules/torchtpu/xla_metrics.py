"""TPU117 xla-metrics: torch_xla's metrics."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaMetrics(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags imports of `torch_xla.debug.metrics`. {opt_in}

    ## Why is this bad?
    The metrics report (`met.metrics_report()`, compile and transfer counters) reads torch_xla's
    runtime. TorchTPU 0.2.0 has no public equivalent (its cache statistics are private): profile
    with `torch.profiler` and read graph breaks and recompilations with
    `TORCH_LOGS=graph_breaks,recompiles`.

    ## Example
    ```python
    import torch_xla.debug.metrics as met

    print(met.metrics_report())
    ```

    Use instead:
    ```python
    import torch

    with torch.profiler.profile() as prof:
        step()
    print(prof.key_averages().table())
    ```

    {references}
    """,
        "TPU117",
    )

    code, name, category = "TPU117", "xla-metrics", "deprecated_xla_api"
    summary = "torch_xla's metrics: TorchTPU has no metrics report"
    hint = "`xlalint explain TPU117` lists each move and the torch-tpu 0.2.0 file it was checked in"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch_xla\nimport torch.profiler\n")]
    INVALID = [
        Invalid("import torch_xla.debug.metrics as met\n", line=1),
        Invalid("from torch_xla.debug import metrics\n", line=1),
    ]
