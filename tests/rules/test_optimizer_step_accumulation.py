"""XLA404: gradient accumulation whose only barrier runs with the optimizer step, every N iterations."""

from __future__ import annotations

import textwrap

import torch

from xlalint.rules import ALL_RULES
from xlalint.testing import fix_code, lint_code

# every rule of the family: a loop one rule leaves alone must not be another's finding by accident
FAMILY = [rule for rule in ALL_RULES if rule.category == "optimizer_step"]


def _lint(code: str, rules=FAMILY):
    return lint_code(textwrap.dedent(code).lstrip(), rules, with_edits=True)


def _found(code: str, rules=FAMILY) -> list[tuple[str, int]]:
    return [(d.code, d.location.row) for d in _lint(code, rules)]


# -- XLA404: gradient accumulation ----------------------------------------------------------------------

ACCUMULATION = """
import math

import torch
from torch import nn

try:
    import torch_xla.core.xla_model as xm
except ImportError:
    xm = None

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
dataset = torch.utils.data.TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
train_loader = torch.utils.data.DataLoader(dataset, batch_size=4)
accumulation_steps = 3
for i, (x, y) in enumerate(train_loader):
    loss = nn.functional.mse_loss(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
        if xm is not None:
            xm.mark_step()
"""


def _train(code: str) -> list[torch.Tensor]:
    namespace: dict = {"__name__": "__xlalint_test__"}
    exec(compile(code, "<script>", "exec"), namespace)  # noqa: S102 - our own test script
    return [p.detach().clone() for p in namespace["model"].parameters()]


def test_accumulation_fix_adds_a_barrier_per_micro_batch_and_trains_the_same():
    code = textwrap.dedent(ACCUMULATION).lstrip()
    assert _found(code) == [("XLA404", 19)]
    assert fix_code(code, FAMILY, unsafe=False) == code  # it imports xlalint.runtime: unsafe
    fixed = fix_code(code, FAMILY, unsafe=True)
    assert "    loss.backward()\n    sync()\n" in fixed
    assert _found(fixed) == []
    before, after = _train(code), _train(fixed)
    assert all(torch.equal(b, a) for b, a in zip(before, after))


def test_accumulation_over_a_device_loader_is_silent():
    code = ACCUMULATION.replace("    import torch_xla.core.xla_model as xm\n",
                                "    import torch_xla.core.xla_model as xm\n    import torch_xla.distributed.parallel_loader as pl\n")
    code = code.replace("enumerate(train_loader)", "enumerate(pl.MpDeviceLoader(train_loader, device))")
    assert _found(code) == []


def test_accumulation_with_the_step_every_iteration_is_no_accumulation():
    """A barrier every N steps for logging while the optimizer steps every iteration: XLA401's case
    (the step has no barrier), not an accumulation."""
    code = """
    import torch
    import torch_xla.core.xla_model as xm
    for i, (x, y) in enumerate(torch.utils.data.DataLoader(dataset, batch_size=4)):
        loss_fn(model(x), y).backward()
        optimizer.step()
        if i % 10 == 0:
            xm.mark_step()
    """
    assert _found(code) == [("XLA401", 5)]


def test_accumulation_barrier_inside_a_helper():
    code = """
    import torch
    import torch_xla

    class Trainer:
        def apply_gradients(self):
            self.optimizer.step()
            self.optimizer.zero_grad()
            torch_xla.sync()

        def fit(self, dataset):
            for step, batch in enumerate(torch.utils.data.DataLoader(dataset, batch_size=4)):
                self.model(**batch).loss.backward()
                if (step + 1) % self.accum == 0:
                    self.apply_gradients()
    """
    assert _found(code) == [("XLA404", 12)]


def test_accumulation_with_optimizer_step_barrier_every_n():
    code = """
    import torch
    import torch_xla.core.xla_model as xm
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            xm.optimizer_step(optimizer, barrier=True)
            optimizer.zero_grad()
    """
    assert _found(code) == [("XLA404", 5)]
