"""TPU201 compile-dynamic-on-tpu: `torch.compile(..., dynamic=True)` with TorchTPU's backend raises."""

from __future__ import annotations

import ast
from functools import partial

from xlalint.analysis.torchtpu import compile_sites, on_tpu_backend
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid


class CompileDynamicOnTpu(Rule):
    """## What it does
    Flags `torch.compile(..., dynamic=True)` that compiles with TorchTPU's `tpu` backend: the backend
    is named (`backend="tpu"`), or no backend is named in a file that runs on TorchTPU
    (`torch.device("tpu")`, a `"tpu"` device string, `torch.tpu.*`), where torch-tpu 0.2.0's
    `torch.compile` picks `tpu` for TPU inputs.

    ## Why is this bad?
    The first call raises. In torch-tpu 0.2.0, `TpuBackend.__call__`
    (`torch_tpu/_internal/compile/_backend.py`) checks `torch._dynamo.config.assume_static_by_default`,
    which `dynamic=True` turns off, and raises `NotImplementedError("TPU backend does not support
    torch.compile(..., dynamic=True, ...)")`. The backend compiles static shapes only; its own
    module docstring says "Only False is supported", and `_loader._default_tpu_compile` passes
    `dynamic=False` whenever the call names none.

    ## Example
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="tpu", dynamic=True)
    ```

    Use instead:
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="tpu", dynamic=False)
    ```

    ## Fix safety
    `dynamic=True` becomes `dynamic=False`. Safe where `backend="tpu"` is named (the call raised
    before; it compiles now, one graph per input shape). Unsafe where the backend is chosen by the
    inputs: with CPU inputs the call did not raise, and shapes that used to share a dynamic graph
    now compile once each.

    ## Known problems
    Only literal `dynamic=True` is seen, not `torch._dynamo.config.assume_static_by_default = False`.
    A file counts as TorchTPU code by the evidence above, never by `import torch_tpu` alone (another
    vendor, Sophgo, ships a package of that name).

    ## References
    - torch-tpu 0.2.0 wheel: `torch_tpu/_internal/compile/_backend.py` (`TpuBackend.__call__`),
      `torch_tpu/_loader.py` (`_default_tpu_compile`)
    """

    code, name, category = "TPU201", "compile-dynamic-on-tpu", "other"
    summary = "`torch.compile(..., dynamic=True)` with TorchTPU's `tpu` backend raises `NotImplementedError`"
    hint = "pass `dynamic=False` (the tpu backend compiles static shapes; mark varying dims or bucket the shapes)"
    fix_availability = "always"
    preview = True

    VALID = [
        Valid(
            """
            import torch
            compiled = torch.compile(model, backend="tpu")
            """
        ),
        Valid(
            """
            import torch
            compiled = torch.compile(model, dynamic=True)  # no TorchTPU in this file: Inductor
            """
        ),
        Valid(
            """
            import torch
            x = torch.ones(3, device="tpu")
            compiled = torch.compile(model, backend="inductor", dynamic=True, options={"tpu_backend": "pallas"})
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            compiled = torch.compile(model, backend="tpu", dynamic=True)
            """,
            line=2,
            expected_replacement="""
            import torch
            compiled = torch.compile(model, backend="tpu", dynamic=False)
            """,
        ),
        Invalid(
            """
            import torch

            device = torch.device("tpu")

            @torch.compile(dynamic=True)
            def step(x):
                return x * 2
            """,
            line=5,
            expected_replacement="""
            import torch

            device = torch.device("tpu")

            @torch.compile(dynamic=False)
            def step(x):
                return x * 2
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def finish(self) -> None:
        for site in compile_sites(self.ctx):
            if site.dynamic is not True or not on_tpu_backend(self.ctx, site):
                continue
            dynamic = site.option("dynamic")
            if dynamic is None:
                continue  # (never: `dynamic=True` is written)
            self.report(dynamic.value, fix=partial(_to_false, value=dynamic.value, safe=site.backend == "tpu"))


def _to_false(cctx, value: ast.expr, safe: bool):
    old = cctx.locate(value)
    return Fix.replace(old, cst.Name("False"), title="Pass `dynamic=False`", safe=safe) if old is not None else None
