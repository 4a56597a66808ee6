"""TPU206 internal-tpu-device-api: `torch.tpu.synchronize()` and the other device calls 0.2.0 made internal."""

from __future__ import annotations

import ast

from xlalint.analysis.names import has_star_args
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid

from ._common import spell_module

# torch.tpu.X -> torch.accelerator.Y: `prefer=` of `@internal_or_experimental(internal_when=torch >= 2.11)`
# in torch_tpu/_internal/device/_device_module.py (0.2.0); 0.2.0 needs torch >= 2.11, so always internal
ACCELERATOR = {
    "synchronize": "synchronize",
    "device_count": "device_count",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "is_available": "is_available",
    "current_stream": "current_stream",
    "set_stream": "set_stream",
    "device": "device_index",
}


class InternalTpuDeviceApi(Rule):
    """## What it does
    Flags calls of `torch.tpu.synchronize`, `device_count`, `current_device`, `set_device`,
    `is_available`, `current_stream`, `set_stream` and the `torch.tpu.device(...)` context manager.

    ## Why is this bad?
    In torch-tpu 0.2.0 these are *internal* whenever torch is 2.11 or newer (0.2.0 requires
    `torch>=2.11`): `torch_tpu/_internal/device/_device_module.py` decorates each with
    `@internal_or_experimental(internal_when=get_torch_version() >= (2, 11), prefer="torch.accelerator....",
    strict=_STRICT_INTERNAL_DEVICE_APIS)`, and `torch_tpu/_internal/utils/annotations.py` makes
    a call from user code raise `RuntimeError` naming the `torch.accelerator` function to use
    (only a warning with `TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS=1`). Code written the CUDA way
    (`torch.cuda.synchronize()` -> `torch.tpu.synchronize()`) crashes.

    ## Example
    ```python
    import torch

    torch.tpu.synchronize()
    n = torch.tpu.device_count()
    ```

    Use instead:
    ```python
    import torch

    torch.accelerator.synchronize()
    n = torch.accelerator.device_count()
    ```

    ## Fix safety
    Safe: each `torch.accelerator` function is the one 0.2.0's own error message names, with the
    same positional arguments (`torch.accelerator`'s take them positionally only, so a call with
    keywords gets no fix).

    ## References
    - torch-tpu 0.2.0 wheel: `torch_tpu/_internal/device/_device_module.py`,
      `torch_tpu/_internal/utils/annotations.py` (`internal_or_experimental`)
    - https://pytorch.org/docs/stable/accelerator.html
    """

    code, name, category = "TPU206", "internal-tpu-device-api", "other"
    summary = "`torch.tpu.<name>()` is internal in torch-tpu 0.2.0 (torch>=2.11): calling it raises `RuntimeError`"
    hint = "use the device-generic `torch.accelerator` API (`torch.accelerator.synchronize()`, `device_count()`, ...)"
    fix_availability = "sometimes"
    preview = True

    VALID = [
        Valid(
            """
            import torch
            torch.accelerator.synchronize()
            mesh = torch.tpu.distributed.topology_aware_mesh(shape)
            """
        ),
        Valid("import torch\nif torch.cuda.is_available():\n    torch.cuda.synchronize()\n"),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            torch.tpu.synchronize()
            """,
            line=2,
            expected_replacement="""
            import torch
            torch.accelerator.synchronize()
            """,
        ),
        Invalid(
            """
            import torch
            with torch.tpu.device(1):
                y = model(x)
            """,
            line=2,
            expected_replacement="""
            import torch
            with torch.accelerator.device_index(1):
                y = model(x)
            """,
        ),
        Invalid(
            """
            import torch
            torch.tpu.set_device(device=local_rank)  # keyword: no fix
            """,
            line=2,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified_name(node.func) or ""
        module, _, func = qualified.rpartition(".")
        if module != "torch.tpu" or func not in ACCELERATOR:
            return
        fix = None
        spelled = spell_module(self.ctx, "torch.accelerator", node)
        if spelled is not None and not node.keywords and not has_star_args(node):
            name, imports = spelled
            fix = lambda cctx, n=node: _rename(cctx, n, f"{name}.{ACCELERATOR[func]}", imports)  # noqa: E731
        self.report(node, self.summary.replace("<name>", func), fix=fix)


def _rename(cctx, node: ast.Call, new_name: str, imports):
    old = cctx.locate(node)
    if old is None:
        return None
    return Fix.replace(
        old,
        old.with_changes(func=cctx.parse_expression(new_name)),
        title=f"Use `{new_name}()`",
        safe=True,
        imports=imports,
    )
