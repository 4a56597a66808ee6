"""TPU106 xla-compile: `backend="openxla"` and `torch_xla.compile` -> `torch.compile(..., backend="tpu")`."""

from __future__ import annotations

from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration


class XlaCompile(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags `torch.compile(..., backend="openxla")` (or `"openxla_eval"`) and `torch_xla.compile(f)`
    / `@torch_xla.compile`. {opt_in}

    ## Why is this bad?
    `openxla` is a Dynamo backend torch_xla registers, and `torch_xla.compile` is torch_xla's
    lazy-tensor tracer; TorchTPU compiles through `torch.compile` with its own `tpu` backend.

    ## Example
    ```python
    import torch

    compiled = torch.compile(model, backend="openxla")
    ```

    Use instead:
    ```python
    import torch

    compiled = torch.compile(model, backend="tpu")
    ```

    ## Fix safety
    `backend="openxla"` -> `backend="tpu"` is safe (same entry point, TorchTPU's backend; 0.2.0
    adds `dynamic=False` when none is given). `torch_xla.compile(f)` -> `torch.compile(f,
    backend="tpu")` is unsafe: Dynamo splits the function at a graph break (`.item()`, a Python
    branch on a tensor) where torch_xla's tracer did not, and `full_graph=` / `name=` have no
    counterpart (a call passing them gets no fix).

    {references}
    """,
        "TPU106",
    )

    code, name, category = "TPU106", "xla-compile", "deprecated_xla_api"
    summary = 'torch_xla\'s compile: TorchTPU compiles with `torch.compile(..., backend="tpu")`'
    hint = "`xlalint explain TPU106` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "always"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [Valid("import torch\nimport torch_xla\ncompiled = torch.compile(model, backend='tpu')\n")]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla
            compiled = torch.compile(model, backend="openxla")
            """,
            line=3,
            expected_replacement="""
            import torch
            import torch_xla
            compiled = torch.compile(model, backend="tpu")
            """,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            @torch_xla.compile
            def step(x):
                return x * 2
            """,
            line=4,
            expected_replacement="""
            import torch
            import torch_xla

            @torch.compile(backend="tpu")
            def step(x):
                return x * 2
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]
