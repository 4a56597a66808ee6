"""TPU204 inference-mode-compiled: `@torch.inference_mode` on a function compiled for TorchTPU."""

from __future__ import annotations

import ast
from functools import partial

from xlalint.analysis.torchtpu import compiled_functions, on_tpu_backend
from xlalint.diagnostics import Applicability, Fix
from xlalint.rule import Invalid, Rule, Valid

INFERENCE_MODE = "torch.inference_mode"


class InferenceModeCompiled(Rule):
    """## What it does
    Flags `@torch.inference_mode` / `@torch.inference_mode()` on a function that is compiled with
    TorchTPU's `tpu` backend (named, or no backend in a TorchTPU file): decorated with
    `torch.compile` as well, or passed to `torch.compile(f)` in the same module.

    ## Why is this bad?
    TorchTPU's error glossary (`docs/notebooks/error_glossary.py`, "3c. The `inference_mode`
    Crash") shows that `torch.compile` of an `@torch.inference_mode()` function crashes on TPU:
    "`torch.compile` cannot capture graphs under `@torch.inference_mode`. Use `@torch.no_grad()`
    instead." (the notebook runs it in a subprocess "to isolate the dispatcher corruption").

    ## Example
    ```python
    import torch

    model = Net().to("tpu")

    @torch.inference_mode()
    def predict(x):
        return model(x)

    fast_predict = torch.compile(predict, backend="tpu")
    ```

    Use instead:
    ```python
    import torch

    model = Net().to("tpu")

    @torch.no_grad()
    def predict(x):
        return model(x)

    fast_predict = torch.compile(predict, backend="tpu")
    ```

    ## Fix safety
    `torch.inference_mode` becomes `torch.no_grad`; unsafe: outputs are ordinary tensors, no
    longer inference tensors, so code that relied on autograd rejecting them now runs, and
    `torch.is_inference_mode_enabled()` reads False inside.

    ## Known problems
    A `with torch.inference_mode():` block around the compiled call is not flagged (the glossary
    shows the decorator).

    ## References
    - TorchTPU guide: `docs/notebooks/error_glossary.py` (google-pytorch/torch_tpu)
    """

    code, name, category = "TPU204", "inference-mode-compiled", "other"
    summary = "`@torch.inference_mode` on a function compiled for TorchTPU: TorchTPU's glossary lists this as a crash"
    hint = "use `@torch.no_grad()` instead"
    fix_availability = "always"
    preview = True

    VALID = [
        Valid(
            """
            import torch

            @torch.no_grad()
            @torch.compile(backend="tpu")
            def predict(x):
                return model(x)
            """
        ),
        Valid(
            """
            import torch

            @torch.inference_mode()
            def evaluate(x):  # not compiled
                return model(x)

            fast = torch.compile(other, backend="tpu")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.inference_mode()
            def predict(x):
                return model(x)

            fast_predict = torch.compile(predict, backend="tpu")
            """,
            line=3,
            expected_replacement="""
            import torch

            @torch.no_grad()
            def predict(x):
                return model(x)

            fast_predict = torch.compile(predict, backend="tpu")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            x = torch.ones(2, device="tpu")

            @torch.compile
            @torch.inference_mode
            def predict(x):
                return model(x)
            """,
            line=5,
            expected_replacement="""
            import torch
            x = torch.ones(2, device="tpu")

            @torch.compile
            @torch.no_grad()
            def predict(x):
                return model(x)
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def finish(self) -> None:
        for func, sites in compiled_functions(self.ctx).items():
            if not any(on_tpu_backend(self.ctx, s) for s in sites):
                continue
            for decorator in getattr(func, "decorator_list", ()):  # a def (a lambda has none)
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if self.ctx.qualified_name(target) == INFERENCE_MODE and not (
                    isinstance(decorator, ast.Call) and (decorator.args or decorator.keywords)
                ):
                    self.report(decorator, fix=partial(_no_grad, decorator=decorator))


def _no_grad(cctx, decorator: ast.expr):
    old = cctx.locate(decorator)
    if old is None:
        return None
    head = cctx.code(old.func if hasattr(old, "func") else old).rsplit(".", 1)
    new_name = f"{head[0]}.no_grad()" if len(head) == 2 else None
    if new_name is None:
        return None
    return Fix.replace(old, cctx.parse_expression(new_name), title="Use `torch.no_grad()`", safe=False)
