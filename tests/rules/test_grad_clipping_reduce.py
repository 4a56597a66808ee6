"""XLA503: what makes a file multi-replica, which clips a later `xm.optimizer_step` reduces, and when
the reduce-first fix is offered."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

XLA401 = RULES_BY_CODE["XLA401"]
XLA503 = RULES_BY_CODE["XLA503"]

STEP = """
def _mp_fn(index):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        xm.optimizer_step(optimizer)
"""
HEADER = "import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\n"


def _found(code: str, rules=(XLA503,)):
    return lint_code(textwrap.dedent(code).lstrip(), list(rules))


def _rows(code: str) -> list[int]:
    return [d.location.row for d in _found(code)]


@pytest.mark.parametrize(
    "replicas",
    [
        "import torch_xla.distributed.xla_multiprocessing as xmp\nxmp.spawn(_mp_fn, args=())",
        "torch_xla.launch(_mp_fn)",
        "import torch_xla.distributed.parallel_loader as pl\nloader = pl.MpDeviceLoader(train_loader, device)",
        "import torch_xla.distributed.parallel_loader as pl\n"
        "loader = pl.ParallelLoader(train_loader, [device]).per_device_loader(device)",
        "import torch_xla.runtime as xr\nlr = 0.1 * xr.world_size()",
        "lr = 0.1 * xm.xrt_world_size()",
    ],
)
def test_each_sign_of_several_replicas_is_enough(replicas):
    assert _rows(HEADER + STEP + replicas + "\n") == [9]


def test_without_replicas_optimizer_step_reduces_nothing():
    assert _rows(HEADER + STEP) == []


@pytest.mark.parametrize(
    "owner",
    [
        "from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP\nmodel = FSDP(model)",
        "import torch_xla.runtime as xr\nxr.use_spmd()",
        "import torch_xla.distributed.spmd as xs\nxs.mark_sharding(t, mesh, (0, 1))",
        "from torch.nn.parallel import DistributedDataParallel\nmodel = DistributedDataParallel(model)",
    ],
)
def test_a_wrapper_that_owns_the_reduction_silences_it(owner):
    assert _rows(HEADER + owner + "\n" + STEP + "torch_xla.launch(_mp_fn)\n") == []


@pytest.mark.parametrize(
    "owner",
    [
        # FSDP2 reduce-scatters the gradients in backward (XLA_FACTS, XLA111: no xm.optimizer_step
        # reduction with an FSDP wrapper); its older home is not a reducer module, its name is.
        "from torch.distributed._composable.fsdp import fully_shard\nfully_shard(model)",
        # torch_xla's docs import SPMD FSDP as FSDPv2; a project may re-export it under that name.
        "from project.parallel import FSDPv2\nmodel = FSDPv2(model)",
    ],
)
def test_the_reducers_of_the_step_model_silence_it(owner):
    """One table of gradient reducers (xlalint.analysis.vocabulary) for XLA40x and XLA50x: the
    copy XLA503 had lacked `fully_shard`, the one XLA401 had lacked `FSDPv2`."""
    from xlalint.analysis.vocabulary import GRADIENT_REDUCERS

    assert {"fully_shard", "FSDPv2"} <= GRADIENT_REDUCERS.keys()
    assert _rows(HEADER + STEP + "torch_xla.launch(_mp_fn)\n") != []  # without it: a finding
    assert _rows(HEADER + owner + "\n" + STEP + "torch_xla.launch(_mp_fn)\n") == []


def test_clip_grad_value_and_spellings():
    code = HEADER + """
from torch.nn.utils import clip_grad_value_
from torch.nn import utils

def _mp_fn(index):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        clip_grad_value_(model.parameters(), 0.5)
        utils.clip_grad_norm_(model.parameters(), 1.0)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)  # not torch's
        xm.optimizer_step(optimizer)

torch_xla.launch(_mp_fn)
"""
    found = _found(code)
    assert [d.location.row for d in found] == [11, 12]
    assert "`clip_grad_value_` clips" in found[0].message


def test_reduction_before_the_clip_or_non_xla_branch_is_fine():
    code = HEADER + """
def _mp_fn(index, use_cuda):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        if use_cuda:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        xm.all_reduce(xm.REDUCE_SUM, [p.grad for p in model.parameters()], scale=0.5)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        xm.optimizer_step(optimizer)

torch_xla.launch(_mp_fn)
"""
    assert _rows(code) == []


def test_clip_in_another_training_loop_is_not_this_steps():
    code = HEADER + """
def _mp_fn(index):
    for x, y in warmup_loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        torch_xla.sync()
    for x, y in loader:
        loss_fn(model(x), y).backward()
        xm.optimizer_step(optimizer, barrier=True)

torch_xla.launch(_mp_fn)
"""
    assert _rows(code) == []


def test_runtime_optimizer_step_reduces_late_too_but_gets_no_fix():
    code = HEADER + """
from xlalint.runtime import optimizer_step

def _mp_fn(index):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer_step(optimizer)

torch_xla.launch(_mp_fn)
"""
    found = _found(code)
    assert [d.location.row for d in found] == [10]
    assert found[0].fix is None


def test_two_clips_one_step_first_gets_the_fix_and_fixing_settles():
    code = HEADER + """
def _mp_fn(index):
    for x, y in loader:
        loss_fn(model(x), y).backward()

        torch.nn.utils.clip_grad_norm_(model.encoder.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(model.decoder.parameters(), 1.0)
        xm.optimizer_step(optimizer, barrier=False, optimizer_args={"closure": closure}, pin_layout=False)

torch_xla.launch(_mp_fn)
"""
    found = _found(code)
    assert [d.location.row for d in found] == [9, 10]
    assert found[0].fix is not None and found[1].fix is None
    assert fix_code(code, [XLA503], unsafe=False) == code
    fixed = fix_code(code, [XLA503], unsafe=True)
    assert fixed == code.replace(
        "\n\n        torch.nn.utils.clip_grad_norm_(model.encoder",
        "\n\n        xm.reduce_gradients(optimizer, pin_layout=False)\n"
        "        torch.nn.utils.clip_grad_norm_(model.encoder",
    ).replace(
        'xm.optimizer_step(optimizer, barrier=False, optimizer_args={"closure": closure}, pin_layout=False)',
        'optimizer.step(**{"closure": closure})',
    )
    assert _found(fixed) == []
    assert fix_code(fixed, [XLA503], unsafe=True) == fixed
    # the reduction counts as the step's gradient handling for XLA401 as well: nothing new there
    assert _found(fixed, [XLA401]) == _found(code, [XLA401])


@pytest.mark.parametrize(
    "step",
    [
        "xm.optimizer_step(optimizer, barrier=True)",  # the barrier would be lost
        "xm.optimizer_step(optimizer, True)",
        "xm.optimizer_step(self.optimizers()[0])",  # evaluated twice
        "xm.optimizer_step(optimizer, groups=make_groups())",  # evaluated earlier
        "xm.optimizer_step(*opts)",
        "loss = xm.optimizer_step(optimizer)",  # the value is used
    ],
)
def test_no_fix_when_the_step_cannot_move_exactly(step):
    code = HEADER + STEP.replace("xm.optimizer_step(optimizer)", step) + "torch_xla.launch(_mp_fn)\n"
    found = _found(code)
    assert [d.location.row for d in found] == [9]
    assert found[0].fix is None


def test_no_fix_when_the_step_runs_less_often_than_the_clip():
    code = HEADER + """
def _mp_fn(index):
    for i, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accumulation == 0:
            xm.optimizer_step(optimizer)

torch_xla.launch(_mp_fn)
"""
    found = _found(code)
    assert [d.location.row for d in found] == [8]
    assert found[0].fix is None


def test_no_fix_on_a_shared_line_or_a_reassigned_optimizer():
    shared = HEADER + STEP.replace(
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        xm.optimizer_step(optimizer)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); xm.optimizer_step(optimizer)",
    ) + "torch_xla.launch(_mp_fn)\n"
    reassigned = HEADER + STEP.replace(
        "        xm.optimizer_step(optimizer)",
        "        optimizer = optimizers[index]\n        xm.optimizer_step(optimizer)",
    ) + "torch_xla.launch(_mp_fn)\n"
    for code in (shared, reassigned):
        found = _found(code)
        assert [d.location.row for d in found] == [9], code
        assert found[0].fix is None


def test_fix_imports_reduce_gradients_beside_a_from_import():
    code = """
import torch
import torch_xla
from torch_xla.core.xla_model import optimizer_step

def _mp_fn(index):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer_step(optimizer)

torch_xla.launch(_mp_fn)
"""
    fixed = fix_code(textwrap.dedent(code).lstrip(), [XLA503], unsafe=True)
    assert "from torch_xla.core.xla_model import reduce_gradients" in fixed.replace(
        "reduce_gradients, optimizer_step", "reduce_gradients")
    assert "        reduce_gradients(optimizer)\n        torch.nn.utils.clip_grad_norm_" in fixed
    assert "        optimizer.step()\n" in fixed
    compile(fixed, "fixed.py", "exec")
