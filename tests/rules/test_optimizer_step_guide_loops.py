"""XLA403 (and XLA401) on the PyTorch/XLA guide's own training loops.

The loops of docs/source/learn/pytorch-on-xla-devices.md (one device with
`xm.optimizer_step(optimizer, barrier=True)`; `MpDeviceLoader` / `ParallelLoader.per_device_loader` with
`xm.optimizer_step(optimizer)`) and the threaded `dp.DataParallel` loop function of
torch_xla/distributed/data_parallel.py must stay silent; the loop that iterates a plain `DataLoader`
with `xm.optimizer_step(optimizer)` never cuts its graph. The loops below are written for these tests
in the style of those docs.
"""

from __future__ import annotations

import textwrap

import pytest

from xlalint.diagnostics import Applicability
from xlalint.rules import ALL_RULES, RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

# every rule of the family: a loop one rule leaves alone must not be another's finding by accident
FAMILY = [rule for rule in ALL_RULES if rule.category == "optimizer_step"]
XLA403 = RULES_BY_CODE["XLA403"]


def _lint(code: str, rules=FAMILY):
    return lint_code(textwrap.dedent(code).lstrip(), rules, with_edits=True)


def _found(code: str, rules=FAMILY) -> list[tuple[str, int]]:
    return [(d.code, d.location.row) for d in _lint(code, rules)]


# -- the guide's loops ---------------------------------------------------------------------------------

SINGLE_DEVICE = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm

def train_mnist(train_loader, lr, momentum):
    device = torch_xla.device()
    model = MNIST().train().to(device)
    loss_fn = torch.nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for data, target in train_loader:
        optimizer.zero_grad()
        data = data.to(device)
        target = target.to(device)
        loss = loss_fn(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer, barrier=True)

train_mnist(torch.utils.data.DataLoader(train_dataset, batch_size=64, drop_last=True), 0.01, 0.5)
"""

MP_DEVICE_LOADER = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

def _mp_fn(index):
    device = torch_xla.device()
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=64, drop_last=True)
    mp_device_loader = pl.MpDeviceLoader(train_loader, device)
    model = MNIST().train().to(device)
    loss_fn = torch.nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    for data, target in mp_device_loader:
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)

if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=())
"""

PER_DEVICE_LOADER = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

def train_loop_fn(model, loader, optimizer, loss_fn):
    model.train()
    for step, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % 20 == 0:
            xm.add_step_closure(print, args=(step, loss))

def _mp_fn(index):
    device = torch_xla.device()
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=64, drop_last=True)
    model = MNIST().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(10):
        para_loader = pl.ParallelLoader(train_loader, [device])
        train_loop_fn(model, para_loader.per_device_loader(device), optimizer, torch.nn.NLLLoss())
"""

THREADED_DATA_PARALLEL = """
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.data_parallel as dp

devices = xm.get_xla_supported_devices(max_devices=8)
model_parallel = dp.DataParallel(MNIST, device_ids=devices)

def train_loop_fn(model, loader, device, context):
    loss_fn = torch.nn.NLLLoss()
    optimizer = context.getattr_or("optimizer", lambda: torch.optim.SGD(model.parameters(), lr=0.01))
    model.train()
    for step, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)

train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=64, drop_last=True)
for epoch in range(1, 11):
    model_parallel(train_loop_fn, train_loader)
"""

PLAIN_DATALOADER = """
import torch
import torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
model = MNIST().train().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=64, shuffle=True, drop_last=True)
for data, target in train_loader:
    optimizer.zero_grad()
    data, target = data.to(device), target.to(device)
    loss = torch.nn.functional.nll_loss(model(data), target)
    loss.backward()
    xm.optimizer_step(optimizer)
"""


@pytest.mark.parametrize("code", [SINGLE_DEVICE, MP_DEVICE_LOADER, PER_DEVICE_LOADER, THREADED_DATA_PARALLEL],
                         ids=["single-device-barrier", "MpDeviceLoader", "per_device_loader", "dp.DataParallel"])
def test_the_guides_loops_are_silent(code):
    assert _found(code) == []


def test_the_threaded_loop_without_dataparallel_is_judged_by_its_loader():
    """The loop function is silent because DataParallel hands it a per-device loader: called directly
    with the plain DataLoader, the same function is reported."""
    direct = THREADED_DATA_PARALLEL.replace("model_parallel(train_loop_fn, train_loader)",
                                            "train_loop_fn(model, train_loader, device, context)")
    assert _found(direct) == [("XLA403", 16)]


def test_the_threaded_loop_iterates_a_device_loader():
    """With a plain `optimizer.step()` (no `xm.optimizer_step` at all), the per-device loader that
    DataParallel passes is still the loop's barrier."""
    code = THREADED_DATA_PARALLEL.replace("xm.optimizer_step(optimizer)", "optimizer.step()")
    assert _found(code) == []
    direct = code.replace("model_parallel(train_loop_fn, train_loader)",
                          "train_loop_fn(model, train_loader, device, context)")
    assert _found(direct) == [("XLA401", 16)]


def test_plain_dataloader_with_xm_optimizer_step_is_reported():
    found = _lint(PLAIN_DATALOADER)
    assert [(d.code, d.location.row) for d in found] == [("XLA403", 14)]
    assert found[0].fix.applicability is Applicability.SAFE
    fixed = fix_code(textwrap.dedent(PLAIN_DATALOADER).lstrip(), FAMILY, unsafe=False)
    assert "xm.optimizer_step(optimizer, barrier=True)" in fixed
    assert _found(fixed) == []


def test_the_same_loop_over_a_device_loader_is_silent():
    code = PLAIN_DATALOADER.replace("import torch_xla.core.xla_model as xm\n",
                                    "import torch_xla.core.xla_model as xm\nimport torch_xla.distributed.parallel_loader as pl\n")
    code = code.replace("for data, target in train_loader:", "for data, target in pl.MpDeviceLoader(train_loader, device):")
    assert _found(code) == []


@pytest.mark.parametrize("barrier, reported", [("", True), (", barrier=False", True), (", False", True),
                                               (", barrier=True", False), (", True", False),
                                               (", barrier=every_step", False), (", **step_kwargs", False)])
def test_xla403_barrier_argument(barrier, reported):
    code = PLAIN_DATALOADER.replace("xm.optimizer_step(optimizer)", f"xm.optimizer_step(optimizer{barrier})")
    assert (("XLA403", 14) in _found(code)) is reported


def test_xla403_fix_replaces_a_positional_false():
    code = PLAIN_DATALOADER.replace("xm.optimizer_step(optimizer)", "xm.optimizer_step(optimizer, False, {})")
    fixed = fix_code(textwrap.dedent(code).lstrip(), [XLA403], unsafe=False)
    assert "xm.optimizer_step(optimizer, True, {})" in fixed


def test_xla403_sync_every_n_steps_is_no_barrier_per_step():
    code = PLAIN_DATALOADER.replace("for data, target in train_loader:", "for i, (data, target) in enumerate(train_loader):")
    code += "    if i % 50 == 0:\n        torch_xla.sync()\n"
    assert _found(code) == [("XLA403", 14)]
