"""TPU202 inductor-backend-on-tpu: `torch.compile(..., backend="inductor")` on TorchTPU tensors raises."""

from __future__ import annotations

import ast
from functools import partial

from xlalint.analysis.names import string_value
from xlalint.analysis.torchtpu import compile_sites, uses_torchtpu
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid


def pallas_opt_in(options: ast.expr | None) -> bool:
    """`options={"tpu_backend": "pallas", ...}`: the one way 0.2.0 lets Inductor run on TPU."""
    if not isinstance(options, ast.Dict):
        return options is not None  # a dict the file does not show: it may opt in
    return any(
        string_value(k) == "tpu_backend" and string_value(v) == "pallas" for k, v in zip(options.keys, options.values)
    )


class InductorBackendOnTpu(Rule):
    """## What it does
    Flags `torch.compile(..., backend="inductor")` in a file that runs on TorchTPU
    (`torch.device("tpu")`, a `"tpu"` device string, `torch.tpu.*`, `backend="tpu"` elsewhere),
    unless it opts in with `options={"tpu_backend": "pallas"}`.

    ## Why is this bad?
    torch-tpu 0.2.0 patches Inductor's entry point (`_tpu_inductor_wrapper_call` in
    `torch_tpu/_loader.py`): when an input is on TPU it raises `RuntimeError("torch.compile(...,
    backend='inductor') on TPU is experimental and does not yet have full TPU support ... Pass
    backend='tpu' or do not specify `backend` ...")`. Naming `"inductor"` is what breaks: with no
    `backend=`, 0.2.0 picks `tpu` for TPU inputs.

    ## Example
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="inductor")
    ```

    Use instead:
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="tpu")
    ```

    ## Fix safety
    `"inductor"` becomes `"tpu"`; unsafe: the compiled function may only ever see CPU tensors
    (a data-preparation helper in a TPU script), where Inductor worked and was what was meant.

    ## Known problems
    Whether the compiled function gets TPU tensors is judged for the whole file, not per call.

    ## References
    - torch-tpu 0.2.0 wheel: `torch_tpu/_loader.py` (`_INDUCTOR_TPU_ERROR`, `_tpu_inductor_wrapper_call`)
    """

    code, name, category = "TPU202", "inductor-backend-on-tpu", "other"
    summary = '`backend="inductor"` in TorchTPU code raises `RuntimeError` when an input is on TPU'
    hint = 'pass `backend="tpu"` or no backend (0.2.0 picks `tpu` for TPU inputs)'
    fix_availability = "always"
    preview = True

    VALID = [
        Valid(
            """
            import torch
            compiled = torch.compile(model, backend="inductor")  # no TorchTPU here
            """
        ),
        Valid(
            """
            import torch
            x = torch.zeros(4, device="tpu")
            kernel = torch.compile(fn, backend="inductor", options={"tpu_backend": "pallas"})
            """
        ),
        Valid(
            """
            import torch
            x = torch.zeros(4, device="tpu")
            compiled = torch.compile(model)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            device = torch.device("tpu")
            compiled = torch.compile(model.to(device), backend="inductor")
            """,
            line=3,
            expected_replacement="""
            import torch
            device = torch.device("tpu")
            compiled = torch.compile(model.to(device), backend="tpu")
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def finish(self) -> None:
        if not uses_torchtpu(self.ctx):
            return
        for site in compile_sites(self.ctx):
            if site.backend != "inductor":
                continue
            options = site.option("options")
            if pallas_opt_in(options.value if options else None):
                continue
            backend = site.option("backend")
            if backend is None:
                continue  # (never: the site's backend is "inductor" because it says so)
            self.report(backend.value, fix=partial(_to_tpu, value=backend.value))


def _to_tpu(cctx, value: ast.expr):
    old = cctx.locate(value)
    if not isinstance(old, cst.SimpleString):
        return None
    quote = old.quote
    return Fix.replace(old, cst.SimpleString(f"{quote}tpu{quote}"), title='Pass `backend="tpu"`', safe=False)
