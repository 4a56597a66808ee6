"""XLA601 removed-xla-api: this torch_xla API was removed."""

from __future__ import annotations

from xlalint.diagnostics import Applicability
from xlalint.rule import Invalid, Rule, Valid

from ._common import XlaMigration, entries_doc

# --------------------------------------------------------------------------------------------------
# The two codes
# --------------------------------------------------------------------------------------------------

_REMOVED_DOC = """## What it does
Flags what current torch_xla releases no longer have, from the migration table
`rules/xla_migrations.toml`: uses and imports of removed APIs, code that sets an environment
variable torch_xla no longer reads, and argument values it now rejects:

{entries}

## Why is this bad?
The code fails with `AttributeError`/`ImportError` on a current torch_xla: `xm.xrt_world_size()`
and `xm.get_ordinal()` were deleted in 2.7 after two releases of warnings (RFC #8000), and downstream
projects (accelerate, transformers, Lightning) had to ship fixes. `xmp.spawn(fn, nprocs=8)` raises
`ValueError` since 2.6: PJRT takes only `nprocs=None` (every device) or 1. Setting an XRT variable
(`XRT_TPU_CONFIG`) or `XLA_USE_FP16` fails silently instead: XRT was deleted in 2.1 and the fp16
flags are not read since 2.5, so the program runs on PJRT's defaults, or in float32. Code that must
keep working on an old torch_xla should guard the old call by version (that is not reported).

## Example
```python
import os
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

def _mp_fn(index):
    world_size = xm.xrt_world_size()
    rank = xm.get_ordinal()

os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
xmp.spawn(_mp_fn, nprocs=8)
```

Use instead:
```python
import os
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

def _mp_fn(index):
    world_size = xr.world_size()
    rank = xr.global_ordinal()

os.environ["PJRT_DEVICE"] = "TPU"
xmp.spawn(_mp_fn)
```

## Fix safety
The renames are safe: the new functions are what the old ones called (an existing alias of the new
module is reused, else `import torch_xla.runtime as xr` is added next to the old import, inside the
same `try/except ImportError` when it is guarded; the old import goes once unused). A call passing
an argument the new function lacks (`defval`) gets no fix. The `torch_xla.experimental.xla_sharding`
move is unsafe (`torch_xla.distributed.spmd` re-exports only the public names); `pjrt` and
`parse_xla_device` have no automatic fix. Where the file binds the module's name to a stand-in as
well (`except ImportError: xm = SimpleNamespace(...)`, a class, another import, or `None` where the
use does not check for it), the rename is unsafe: without torch_xla the old call reached the stand-in,
the new name is unbound (NameError). Dropping `nprocs` from `xmp.spawn` is unsafe: from 2.1 to
2.5 it changes nothing (the count was ignored), from 2.6 the call runs on every device instead of
raising (set `<X>_NUM_DEVICES` for fewer); it is offered only when `nprocs` is a keyword or the last
positional argument. Environment variables get no fix: PJRT's variables take other values.

With a target torch_xla (`--target-version`, `target-version`, or the project's pin) older than a
replacement, that entry is not reported: the suggested code would not run there.

## Known problems
Version checks are recognised by their words (`version`, `_GREATER_EQUAL_2_1`, `XLA_GE_28`,
`hasattr`), an `if`/`else` whose other branch uses the replacement is a version switch whatever its
test, and a call in an `except AttributeError/ImportError` handler counts as a fallback. Only values this file
shows are judged: `nprocs=8`, or a name or `a if c else b` holding a literal; `nprocs=args.cores` is
not reported. An environment variable is found where the code sets `os.environ` (`[...] =`,
`setdefault`, `update`) or calls `os.putenv` with its name as a literal (or a name holding one); a
`{{**os.environ, ...}}` mapping handed to a subprocess is not.

## References
- torch_xla deprecation policy: https://github.com/pytorch/xla/issues/8000
- torch_xla deprecation tracking issue: https://github.com/pytorch/xla/issues/8915
- XRT deleted: https://github.com/pytorch/xla/pull/5240
- `nprocs` rejected: https://github.com/pytorch/xla/pull/7971 (torch_xla/_internal/pjrt.py at v2.6.0)
- each table entry's `reference`
"""


class RemovedXlaApi(XlaMigration, Rule):
    __doc__ = _REMOVED_DOC.format(entries=entries_doc("removed"))

    code, name, category = "XLA601", "removed-xla-api", "deprecated_xla_api"
    summary = "this torch_xla API was removed"
    hint = ""  # the message names the replacement
    fix_availability = "sometimes"
    not_for_targets = ("torchtpu",)  # advice toward newer torch_xla competes with the TPU1xx migration

    VALID = [
        Valid(
            """
            import torch_xla.runtime as xr
            world_size = xr.world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            if _XLA_GREATER_EQUAL_2_1:
                import torch_xla.runtime as xr
                world_size = xr.world_size()
            else:
                world_size = xm.xrt_world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def world_size():
                if XLA_VERSION >= version.parse("2.1"):
                    from torch_xla import runtime as xr
                    return xr.world_size()
                return xm.xrt_world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            try:
                import torch_xla.runtime as xr
                rank = xr.global_ordinal()
            except (AttributeError, ImportError):
                rank = xm.get_ordinal()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            if hasattr(xm, "xrt_world_size"):  # a string, and a feature check
                n = getattr(xm, "xrt_world_size")()
            """
        ),
        Valid(
            """
            import torch_xla
            class Trainer:
                def xrt_world_size(self):  # a definition
                    '''Replaces xm.xrt_world_size().'''
                    return self.get_ordinal() + 1
            """
        ),
        Valid("import torch_xla_py_helpers\nimport torch_xla.distributed.spmd as xs\n"),
        Valid(
            """
            import torch_xla.distributed.xla_multiprocessing as xmp

            if __name__ == "__main__":
                xmp.spawn(_mp_fn, args=(flags,))
                xmp.spawn(_mp_fn, (flags,), None, start_method="fork")
                xmp.spawn(_mp_fn, args=(flags,), nprocs=1)  # one process: still accepted
            """
        ),
        Valid(
            """
            import os
            import torch_xla

            if "XRT_TPU_CONFIG" in os.environ:  # reads are not reported
                print("legacy config:", os.environ.get("XRT_TPU_CONFIG"))
            os.environ["PJRT_DEVICE"] = "TPU"
            os.environ["XLA_USE_FP16"] = "0"  # off, as without it
            """
        ),
        Valid(
            """
            import os
            import torch_xla
            from packaging import version

            if version.parse(torch_xla.__version__) < version.parse("2.1"):
                os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
            else:
                os.environ["PJRT_DEVICE"] = "TPU"
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            world_size = xm.xrt_world_size()
            """,
            line=3,
            expected_replacement="""
            import torch_xla.runtime as xr

            world_size = xr.world_size()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch_xla import runtime as rt

            def shard():
                return xm.get_ordinal(), xm.xla_real_devices()
            """,
            line=5,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch_xla import runtime as rt

            def shard():
                return rt.global_ordinal(), xm.xla_real_devices()
            """,
        ),
        Invalid(
            """
            try:
                import torch_xla.core.xla_model as xm
            except ImportError:
                xm = None

            def world_size():
                return xm.xrt_world_size() if xm is not None else 1
            """,
            line=7,
            expected_replacement="""
            try:
                import torch_xla.core.xla_model as xm
                import torch_xla.runtime as xr
            except ImportError:
                xm = None

            def world_size():
                return xr.world_size() if xm is not None else 1
            """,
        ),
        Invalid(
            """
            import torch_xla
            from torch_xla.core.xla_model import xrt_world_size as get_world_size

            print(get_world_size())
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            import torch_xla.runtime as xr

            print(xr.world_size())
            """,
        ),
        Invalid(
            """
            import torch_xla

            @torch_xla.experimental.compile
            def step(x):
                return x * 2
            """,
            line=3,
            expected_replacement="""
            import torch_xla

            @torch_xla.compile
            def step(x):
                return x * 2
            """,
        ),
        Invalid(
            """
            import torch_xla.experimental.xla_sharding as xs
            xs.mark_sharding(t, mesh, (0, 1))
            """,
            line=1,
            expected_replacement="""
            import torch_xla.distributed.spmd as xs
            xs.mark_sharding(t, mesh, (0, 1))
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla_py.xla_model as xm
            device = xm.xla_device()
            """,
            line=1,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            device = xm.xla_device()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            n = xm.xrt_world_size(defval=8)  # no equivalent: no fix
            """,
            line=2,
        ),
        Invalid(
            """
            import torch_xla
            from torch_xla.experimental import pjrt
            """,
            line=2,
        ),
        Invalid(
            """
            import torch_xla.distributed.xla_multiprocessing as xmp

            if __name__ == "__main__":
                xmp.spawn(_mp_fn, args=(flags,), nprocs=8, start_method="fork")
            """,
            line=4,
            expected_replacement="""
            import torch_xla.distributed.xla_multiprocessing as xmp

            if __name__ == "__main__":
                xmp.spawn(_mp_fn, args=(flags,), start_method="fork")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.distributed.xla_multiprocessing as xmp
            xmp.spawn(_mp_fn, (), 8, False)  # positional, with an argument after it: no fix
            """,
            line=2,
        ),
        Invalid(
            """
            import os
            import torch_xla

            os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
            """,
            line=4,
        ),
        Invalid(
            """
            import os
            import torch_xla.core.xla_model as xm
            os.environ.update({"PJRT_DEVICE": "GPU", "XLA_USE_FP16": "1"})
            """,
            line=3,
        ),
    ]
