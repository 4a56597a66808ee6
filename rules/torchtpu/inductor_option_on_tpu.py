"""TPU205 inductor-option-on-tpu: Inductor's `mode=` / `options=` given to TorchTPU's `tpu` backend."""

from __future__ import annotations

import ast

from xlalint.analysis.names import string_value
from xlalint.analysis.torchtpu import compile_sites, on_tpu_backend
from xlalint.rule import Invalid, Rule, Valid

# the keys TpuBackend.__call__ reads from `options` in torch-tpu 0.2.0 (`_backend.py`); it ignores others
TPU_OPTIONS = frozenset(
    {
        "async_compile",
        "num_dynamic_buckets",
        "bucket_size",
        "serializable",
        "debug_callback",
        "custom_module_name",
        "name",
    }
)


class InductorOptionOnTpu(Rule):
    """## What it does
    Flags Inductor's tuning knobs on a `torch.compile` that uses TorchTPU's `tpu` backend (named,
    or chosen by torch-tpu 0.2.0 for TPU inputs in a TorchTPU file): a `mode=` other than
    `"default"` (`"reduce-overhead"`, `"max-autotune"`, ...), and `options=` keys the tpu backend
    does not read (`"triton.cudagraphs"`, `"max_autotune"`, `"epilogue_fusion"`, ...).

    ## Why is this bad?
    `torch.compile` hands `mode=` to a non-Inductor backend as a keyword argument
    (`torch._TorchCompileWrapper`), and 0.2.0's `TpuBackend.__call__`
    (`torch_tpu/_internal/compile/_backend.py`) raises `TypeError("Unexpected keyword arguments:
    {'mode': ...}")` for anything but `options`. Of `options` it reads only `async_compile`,
    `num_dynamic_buckets`, `bucket_size`, `serializable`, `debug_callback`, `custom_module_name`
    and `name`; Inductor's keys are silently ignored, so the tuning the code asks for never happens.

    ## Example
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="tpu", mode="max-autotune")
    ```

    Use instead:
    ```python
    import torch

    model = Net().to("tpu")
    compiled = torch.compile(model, backend="tpu")
    ```

    ## Known problems
    `options` given as a variable are not read.

    ## References
    - torch-tpu 0.2.0 wheel: `torch_tpu/_internal/compile/_backend.py` (`TpuBackend.__call__`)
    - `torch/__init__.py` (`_TorchCompileWrapper`: `mode` and `options` go to the backend as keywords)
    """

    code, name, category = "TPU205", "inductor-option-on-tpu", "other"
    summary = "Inductor's `<what>` given to TorchTPU's `tpu` backend: <effect>"
    hint = (
        "drop it: the tpu backend takes only its own `options` (async_compile, num_dynamic_buckets, bucket_size, ...)"
    )
    preview = True

    VALID = [
        Valid(
            """
            import torch
            compiled = torch.compile(model, backend="tpu", options={"async_compile": True})
            """
        ),
        Valid(
            """
            import torch
            compiled = torch.compile(model, mode="max-autotune")  # no TorchTPU here
            """
        ),
        Valid(
            """
            import torch
            compiled = torch.compile(model, backend="tpu", mode="default")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            compiled = torch.compile(model, backend="tpu", mode="reduce-overhead")
            """,
            line=2,
        ),
        Invalid(
            """
            import torch
            x = torch.randn(8, device="tpu")
            compiled = torch.compile(model, options={"triton.cudagraphs": True})
            """,
            line=3,
        ),
    ]

    def finish(self) -> None:
        for site in compile_sites(self.ctx):
            if site.call is None or not on_tpu_backend(self.ctx, site):
                continue
            mode = site.option("mode")
            if mode is not None and string_value(mode.value) not in (None, "default"):
                self.report(
                    mode.value,
                    self.summary.replace("<what>", f"mode={string_value(mode.value)!r}").replace(
                        "<effect>", "the backend raises `TypeError: Unexpected keyword arguments`"
                    ),
                )
            options = site.option("options")
            if options is not None and isinstance(options.value, ast.Dict):
                for key in options.value.keys:
                    name = string_value(key) if key is not None else None  # (None: a `**spread`)
                    if key is not None and name is not None and name not in TPU_OPTIONS:
                        self.report(
                            key,
                            self.summary.replace("<what>", f"option {name!r}").replace(
                                "<effect>", "the tpu backend ignores it"
                            ),
                        )
