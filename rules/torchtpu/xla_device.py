"""TPU101 xla-device: torch_xla's device -> `torch.device("tpu")`."""

from __future__ import annotations

import ast
import re
from functools import partial

from xlalint.analysis.names import positional, string_value
from xlalint.diagnostics import Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._doc import migration_doc
from ._migration import TorchTpuMigration

XLA_DEVICE = re.compile(r"xla")  # the bare device string; `"xla:1"` names an ordinal TorchTPU spells differently


class XlaDevice(TorchTpuMigration, Rule):
    __doc__ = migration_doc(
        """
    ## What it does
    Flags torch_xla's ways of naming the device: `xm.xla_device()`, `torch_xla.device()`, and the
    `"xla"` device string in `torch.device("xla")`, `device="xla"` and `.to("xla")`. {opt_in}

    ## Why is this bad?
    TorchTPU registers the device `tpu` (it renames PyTorch's PrivateUse1 backend when torch loads
    the plug-in); without torch_xla installed, `xm.xla_device()` cannot be imported and `"xla"` is
    an unknown device.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    model = model.to(device)
    ```

    Use instead:
    ```python
    import torch

    device = torch.device("tpu")
    model = model.to(device)
    ```

    ## Fix safety
    Safe: a call without arguments becomes `torch.device("tpu")` and `"xla"` becomes `"tpu"`;
    `import torch` is added when missing and the torch_xla import goes once nothing uses it.
    `xm.xla_device(n)` and `"xla:1"` get no fix (how a process picks its TPU differs).

    {references}
    """,
        "TPU101",
    )

    code, name, category = "TPU101", "xla-device", "deprecated_xla_api"
    summary = "torch_xla's device: TorchTPU's is `torch.device(\"tpu\")`"
    hint = "`xlalint explain TPU101` lists each move and the torch-tpu 0.2.0 file it was checked in"
    fix_availability = "sometimes"
    preview, target, xla_only = True, "torchtpu", True

    VALID = [
        Valid('import torch\nimport torch_xla\ndevice = torch.device("tpu")\n'),
        Valid('import torch\nimport torch_xla\nx = t.to("cpu")\nname = "xla"  # not a device argument\n'),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            device = xm.xla_device()
            """,
            line=3,
            expected_replacement="""
            import torch

            device = torch.device("tpu")
            """,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            x = torch.zeros(4, device="xla")
            """,
            line=4,
            expected_replacement="""
            import torch
            import torch_xla

            x = torch.zeros(4, device="tpu")
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            device = xm.xla_device(1)  # an ordinal: no fix
            """,
            line=2,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        super().visit_Call(node)
        value = None
        args = positional(node)
        if self.ctx.qualified_name(node.func) == "torch.device" and args:
            value = args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "to" and args:
            value = args[0]
        for kw in node.keywords:
            if kw.arg == "device":
                value = kw.value
        written = string_value(value) if value is not None else None
        if value is not None and written is not None and XLA_DEVICE.fullmatch(written):
            self.report(
                value,
                'the `"xla"` device string is torch_xla\'s: TorchTPU\'s device is `"tpu"`',
                fix=partial(_to_tpu, value=value),
            )


def _to_tpu(cctx, value: ast.expr):
    old = cctx.locate(value)
    if not isinstance(old, cst.SimpleString) or old.prefix:
        return None
    return Fix.replace(old, cst.SimpleString(f"{old.quote}tpu{old.quote}"), title='Use the `"tpu"` device', safe=True)
