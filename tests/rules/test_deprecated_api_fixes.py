"""XLA601/XLA602 beyond the rule examples: a realistic script fixed end to end, guards, scopes."""

import textwrap

import pytest

import libcst as cst

from xlalint.diagnostics import Applicability
from xlalint.rules.deprecated_api.deprecated_xla_api import DeprecatedXlaApi
from xlalint.rules.deprecated_api.removed_xla_api import RemovedXlaApi
from xlalint.testing import fix_code, lint_code

RULES = [RemovedXlaApi, DeprecatedXlaApi]

SCRIPT = textwrap.dedent(
    '''
    """Train a small classifier on TPU."""
    import os

    import torch
    import torch.nn as nn

    try:
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl
        import torch_xla.distributed.xla_multiprocessing as xmp
    except ImportError:  # CPU-only machines
        xm = None


    def log(msg):
        if xm is None or xm.get_ordinal() == 0:  # only the first replica logs
            print(msg)


    def train(index, flags):
        device = xm.xla_device()
        model = nn.Linear(16, 4).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=flags["lr"])
        loader = pl.MpDeviceLoader(make_loader(xm.xrt_world_size()), device)
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)
            if step % 100 == 0:
                xm.mark_step()
        log("done")


    if __name__ == "__main__":
        xmp.spawn(train, args=({"lr": 0.1},), nprocs=8)
    '''
).lstrip()


def test_realistic_script_safe_fixes_parse_and_converge():
    found = lint_code(SCRIPT, RULES)
    assert sorted((d.code, d.location.row) for d in found) == [
        ("XLA601", 16), ("XLA601", 24), ("XLA601", 36), ("XLA602", 21), ("XLA602", 31)
    ]
    fixed = fix_code(SCRIPT, RULES, unsafe=False)
    compile(fixed, "fixed.py", "exec")
    assert fix_code(fixed, RULES, unsafe=False) == fixed
    # `xm = None` without torch_xla: a use behind `xm is None or` never meets it, the safe fix applies
    assert "xm.get_ordinal" not in fixed and "xr.global_ordinal() == 0" in fixed
    # the others may run with `xm = None`: their fixes turn an AttributeError into a NameError (unsafe)
    assert "xm.xla_device()" in fixed and "xm.xrt_world_size()" in fixed and "xm.mark_step()" in fixed
    assert "nprocs=8" in fixed  # dropping it is unsafe: not applied without opt-in
    # the new import sits inside the same try/except ImportError as the old ones
    module = cst.parse_module(fixed)
    guarded = cst.Module([module.body[4]]).code
    assert "import torch_xla.runtime as xr" in guarded
    left = lint_code(fixed, RULES)
    assert [(d.code, d.location.row) for d in left] == [("XLA602", 22), ("XLA601", 25), ("XLA602", 32), ("XLA601", 37)]
    assert all(d.fix.applicability is Applicability.UNSAFE for d in left)


def test_realistic_script_unsafe_fixes_parse_and_converge():
    fixed = fix_code(SCRIPT, RULES, unsafe=True)
    compile(fixed, "fixed.py", "exec")
    assert fix_code(fixed, RULES, unsafe=True) == fixed
    assert "torch_xla.device()" in fixed and "torch_xla.sync()" in fixed
    guarded = cst.Module([cst.parse_module(fixed).body[4]]).code
    assert "import torch_xla.runtime as xr" in guarded and "import torch_xla\n" in guarded
    # xmp.spawn stays (it is not deprecated); only the count PJRT rejects goes
    assert 'xmp.spawn(train, args=({"lr": 0.1},))' in fixed
    assert not lint_code(fixed, RULES)


def test_function_local_imports_get_their_own_new_import():
    code = textwrap.dedent(
        """
        def device():
            import torch_xla.core.xla_model as xm
            return xm.xla_device()

        def save(state, path):
            import torch_xla.core.xla_model as xm
            xm.mark_step()
            xm.save(state, path)
        """
    )
    fixed = fix_code(code, RULES, unsafe=False)
    assert fixed == textwrap.dedent(
        """
        def device():
            import torch_xla
            return torch_xla.device()

        def save(state, path):
            import torch_xla.core.xla_model as xm
            import torch_xla
            torch_xla.sync()
            xm.save(state, path)
        """
    )


def test_version_guarded_fallbacks_are_not_reported():
    code = textwrap.dedent(
        """
        import torch_xla
        import torch_xla.core.xla_model as xm
        from packaging import version

        if version.parse(torch_xla.__version__) < version.parse("2.4"):
            sync = xm.mark_step
        else:
            sync = torch_xla.sync

        def world():
            if _XLA_GREATER_EQUAL_2_1:
                from torch_xla import runtime as xr
                return xr.world_size()
            return xm.xrt_world_size()

        if _XLA_GREATER_EQUAL_2_1:
            from torch_xla.core.xla_model import broadcast_master_param
        else:
            from torch_xla.experimental.pjrt import broadcast_master_param

        try:
            from torch_xla.distributed.spmd import Mesh
        except ImportError:
            from torch_xla.experimental.xla_sharding import Mesh
        """
    )
    assert lint_code(code, RULES) == []


def test_guard_that_is_not_about_versions_still_reports():
    code = textwrap.dedent(
        """
        import torch_xla.core.xla_model as xm
        if global_step >= max_steps:
            xm.mark_step()
        try:
            import torch_xla_py.xla_model as old_xm
        except ImportError:
            old_xm = None
        """
    ).lstrip()
    assert [(d.code, d.location.row) for d in lint_code(code, RULES)] == [("XLA602", 3), ("XLA601", 5)]


def test_torch_xla_own_implementation_is_not_reported():
    # torch_xla.runtime.use_spmd() sets the variable it deprecates
    code = textwrap.dedent(
        """
        import os
        import torch_xla

        def use_spmd():
            os.environ["XLA_USE_SPMD"] = "1"
        """
    )
    assert lint_code(code, RULES, path="site-packages/torch_xla/runtime.py") == []
    assert len(lint_code(code, RULES, path="myproject/launch.py")) == 1


def test_aliases_and_full_names_resolve():
    code = textwrap.dedent(
        """
        import torch_xla.core.xla_model
        from torch_xla.core import xla_model as foo

        torch_xla.core.xla_model.mark_step()
        foo.mark_step(wait=True)
        """
    )
    fixed = fix_code(code, RULES, unsafe=False)
    assert "torch_xla.sync()" in fixed and "torch_xla.sync(wait=True)" in fixed
    compile(fixed, "fixed.py", "exec")
    assert fix_code(fixed, RULES, unsafe=False) == fixed


def codes_and_rows(code, rules=(RemovedXlaApi, DeprecatedXlaApi)):
    return sorted((d.code, d.location.row) for d in lint_code(textwrap.dedent(code), list(rules)))


def test_uses_through_an_old_package_name_are_found():
    # `torch_xla_py.xla_model` is today's `torch_xla.core.xla_model`: its functions moved with it
    code = """
    import torch_xla_py.xla_model as xm

    world = xm.xrt_world_size()
    device = xm.xla_device()
    """
    assert codes_and_rows(code) == [("XLA601", 2), ("XLA601", 4), ("XLA602", 5)]


def test_xm_passed_as_a_parameter_is_torch_xla():
    code = textwrap.dedent("""
        import torch_xla

        def _mp_fn(rank, cfg, xm):
            device = xm.xla_device()
            return xm.get_ordinal()
        """)
    assert codes_and_rows(code) == [("XLA601", 6), ("XLA602", 5)]
    # a shim of its own is not torch_xla's module, nor is `xm` in code that never uses torch_xla
    shim = code.replace("def _mp_fn", "xm = CpuShim()\n\ndef _mp_fn").replace(", xm)", ")")
    assert codes_and_rows(shim) == []
    assert codes_and_rows(code.replace("import torch_xla\n", "import torch\n")) == []


def test_sharded_tensor_import_moved_in_2_5():
    code = "from torch_xla.experimental.xla_sharded_tensor import XLAShardedTensor\n"
    (found,) = lint_code(code, [RemovedXlaApi])
    assert "removed in torch_xla 2.5" in found.message
    assert fix_code(code, [RemovedXlaApi], unsafe=False) == \
        "from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor\n"


@pytest.mark.parametrize("test", ["XLA_GE_28", "_TORCH_XLA_GE_2_8", "not XLA_LT_28", "use_new_api", "hasattr(torch_xla, 'sync')",
                                  'version.parse(torch_xla.__version__) >= version.parse("2.8")'])
def test_a_branch_beside_the_replacement_is_a_fallback_and_stays(test):
    code = textwrap.dedent(
        f"""
        import torch_xla
        import torch_xla.core.xla_model as xm
        from packaging import version

        def barrier():
            if {test}:
                torch_xla.sync()
            else:
                xm.mark_step()
            sync = torch_xla.sync if {test} else xm.mark_step
        """
    )
    assert lint_code(code, RULES) == []
    assert fix_code(code, RULES, unsafe=True) == code


@pytest.mark.parametrize("test", ["XLA_LT_28", "not XLA_GE_28"])
def test_the_old_side_of_a_version_flag_is_not_reported(test):
    code = textwrap.dedent(
        f"""
        import torch_xla.core.xla_model as xm

        def barrier():
            if {test}:
                xm.mark_step()
        """
    )
    assert lint_code(code, RULES) == []
