"""XLA602 deprecated-xla-api: this torch_xla API is deprecated."""

from __future__ import annotations

from xlalint.rule import Invalid, Rule, Valid

from ._common import XlaMigration, entries_doc

_DEPRECATED_DOC = """## What it does
Flags uses of torch_xla APIs that still work but warn or are superseded, and code that sets an
environment variable torch_xla warns about, from the migration table `rules/xla_migrations.toml`:

{entries}

## Why is this bad?
`xm.mark_step()` and `xm.xla_device()` print a deprecation warning since torch_xla 2.8 and will go
after the two-release grace period; the new names (`torch_xla.sync()`, `torch_xla.device()`) exist
since 2.4 and 2.3. Since 2.4, setting `XLA_USE_BF16` or `XLA_DOWNCAST_BF16` prints that the flag
will be deprecated (their fp16 siblings stopped working in 2.5): cast the model, or use autocast.
`XLA_USE_SPMD` warns since 2.1: `torch_xla.runtime.use_spmd()` is the supported switch.

## Example
```python
import os
import torch_xla.core.xla_model as xm

os.environ["XLA_USE_BF16"] = "1"
device = xm.xla_device()
for x, y in loader:
    loss = loss_fn(model(x.to(device)), y.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.mark_step()
```

Use instead:
```python
import torch
import torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
model = model.to(device, dtype=torch.bfloat16)
for x, y in loader:
    loss = loss_fn(model(x.to(device, dtype=torch.bfloat16)), y.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    torch_xla.sync()
```

## Fix safety
`mark_step` -> `sync` and `xla_device` -> `device` are safe: in 2.8 the old functions just call the
new ones (`wait`, `reset_scope` and the device index are kept; `xla_device(n, devkind)` gets no fix).
`import torch_xla` is added next to the import of `xm`, inside its `try/except ImportError` when it
is guarded. Where the file binds `xm` to a stand-in as well (`except ImportError:` a class, a
`SimpleNamespace`, another import, or `None` where the use does not check `xm is not None`), the fix
is unsafe: without torch_xla the old call reached the stand-in, `torch_xla` is unbound (NameError).
Environment variables get no fix: casting a model is a change to the program, not a rename.

With a target torch_xla (`--target-version`, `target-version`, or the project's pin) older than a
replacement, that entry is not reported: the suggested code would not run there; a variable without
a replacement is reported once the target deprecates it. Arguments are checked against the target
too (`params_since` in the table): below 2.8, `xm.mark_step(wait=True)` or `(reset_scope=...)` is
reported without a fix, as `torch_xla.sync` is not known to take them there.

## Known problems
Setting a variable to a value that leaves it off (`"0"`, `"false"`) is not reported. The variable's
name must be a literal in the file (or a name holding one).

## References
- `torch_xla.sync`: https://github.com/pytorch/xla/pull/9086
- `torch_xla.device`: https://github.com/pytorch/xla/pull/9200
- `XLA_USE_BF16` and friends: https://github.com/pytorch/xla/pull/7150 (torch_xla/csrc/dtype.cpp at v2.9.0)
- `XLA_USE_SPMD`: https://github.com/pytorch/xla/pull/5474 (torch_xla/runtime.py at v2.9.0)
"""


class DeprecatedXlaApi(XlaMigration, Rule):
    __doc__ = _DEPRECATED_DOC.format(entries=entries_doc("deprecated"))

    code, name, category = "XLA602", "deprecated-xla-api", "deprecated_xla_api"
    summary = "this torch_xla API is deprecated"
    hint = ""  # the message names the replacement
    fix_availability = "sometimes"
    not_for_targets = ("torchtpu",)  # advice toward newer torch_xla competes with the TPU1xx migration

    VALID = [
        Valid(
            """
            import torch_xla
            device = torch_xla.device()
            torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            class Accelerator:
                def __init__(self):
                    self.xla_device = None  # an attribute of ours
                def mark_step(self):
                    print("xm.mark_step() is deprecated")
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            get_device = getattr(xm, "xla_device", None)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            try:
                import torch_xla
                torch_xla.sync()
            except AttributeError:
                xm.mark_step()  # torch_xla < 2.4
            """
        ),
        Valid("model.mark_step()\nthing.xla_device()\n"),
        Valid(
            """
            import os
            import torch_xla.runtime as xr

            xr.use_spmd()
            assert os.environ.get("XLA_USE_SPMD") == "1"  # reads are not reported
            os.environ["XLA_USE_BF16"] = "0"  # off, as without it
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.mark_step()
            """,
            line=7,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            import torch_xla

            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                xm.optimizer_step(optimizer)
                torch_xla.sync()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            device = xm.xla_device(n=1)
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            device = torch_xla.device(index=1)
            """,
        ),
        Invalid(
            """
            try:
                import torch_xla.core.xla_model as xm
            except ImportError:
                xm = None

            def barrier():
                if xm is not None:
                    xm.mark_step(wait=True)
            """,
            line=8,
            expected_replacement="""
            try:
                import torch_xla.core.xla_model as xm
                import torch_xla
            except ImportError:
                xm = None

            def barrier():
                if xm is not None:
                    torch_xla.sync(wait=True)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xla_mod
            import torch_xla as tx
            dev = xla_mod.xla_device(0)
            """,
            line=3,
            expected_replacement="""
            import torch_xla as tx
            dev = tx.device(0)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            dev = xm.xla_device(devkind="TPU")  # devkind was dropped: no fix
            """,
            line=2,
        ),
        Invalid(
            """
            import os
            import torch_xla

            os.environ["XLA_USE_BF16"] = "1"
            """,
            line=4,
        ),
        Invalid(
            """
            import os
            import torch_xla.runtime as xr

            def setup(spmd: bool):
                if spmd:
                    os.environ.setdefault("XLA_USE_SPMD", "1")
            """,
            line=6,
        ),
    ]
