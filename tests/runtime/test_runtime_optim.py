"""optimizer_step and sync on CPU, and their torch_xla dispatch (with a stand-in xla_model)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from xlalint.runtime import optimizer_step, sync

optim_module = importlib.import_module("xlalint.runtime._optim")
xla_module = importlib.import_module("xlalint.runtime._xla")


def _model_and_batch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    return model, torch.randn(16, 6), torch.randn(16, 3)


def _train(opt_factory, step, steps=4):
    model, x, y = _model_and_batch()
    opt = opt_factory(model.parameters())
    results = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        results.append(step(opt))
    return [p.detach().clone() for p in model.parameters()], results


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
}


@pytest.mark.parametrize("barrier", [True, False])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_same_parameters_as_optimizer_step(name, barrier):
    expected, _ = _train(OPTIMIZERS[name], lambda opt: opt.step())
    actual, returned = _train(OPTIMIZERS[name], lambda opt: optimizer_step(opt, barrier=barrier))
    initial = [p.detach() for p in _model_and_batch()[0].parameters()]
    assert not all(torch.equal(a, i) for a, i in zip(actual, initial))  # it did train
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)
    assert returned == [None] * len(returned)


def test_lbfgs_closure_returns_loss_and_matches():
    def run(use_runtime):
        model, x, y = _model_and_batch()
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        losses = [
            optimizer_step(opt, optimizer_args={"closure": closure}) if use_runtime else opt.step(closure)
            for _ in range(3)
        ]
        return losses, [p.detach().clone() for p in model.parameters()]

    expected_losses, expected_params = run(False)
    actual_losses, actual_params = run(True)
    assert all(isinstance(loss, torch.Tensor) for loss in actual_losses)
    for a, e in zip(actual_losses, expected_losses):
        assert torch.equal(a, e)
    for a, e in zip(actual_params, expected_params):
        assert torch.equal(a, e)
    assert actual_losses[-1] < actual_losses[0]


class _RecordingOptimizer:
    """Just enough of an optimizer to see what optimizer_step calls."""

    def __init__(self, device):
        self.param_groups = [{"params": [types.SimpleNamespace(device=torch.device(device))]}]
        self.calls = []

    def step(self, **kwargs):
        self.calls.append(kwargs)
        return "loss"


@pytest.mark.parametrize("optimizer_args", [None, {}, {"closure": len}])
def test_cpu_only_steps(optimizer_args, monkeypatch):
    monkeypatch.setattr(optim_module, "xla_model", lambda: pytest.fail("looked for torch_xla on CPU"))
    opt = _RecordingOptimizer("cpu")
    assert optimizer_step(opt, barrier=True, optimizer_args=optimizer_args) == "loss"
    assert opt.calls == [dict(optimizer_args or {})]


def test_xla_params_delegate_to_xm_optimizer_step(monkeypatch):
    calls = []
    fake_xm = types.SimpleNamespace(
        optimizer_step=lambda opt, **kw: calls.append((opt, kw)) or "xm-loss"
    )
    monkeypatch.setattr(optim_module, "xla_model", lambda: fake_xm)
    opt = _RecordingOptimizer("xla")
    assert optimizer_step(opt) == "xm-loss"
    assert optimizer_step(opt, barrier=False, optimizer_args={"closure": len}) == "xm-loss"
    assert calls == [
        (opt, {"barrier": True, "optimizer_args": {}}),
        (opt, {"barrier": False, "optimizer_args": {"closure": len}}),
    ]
    assert opt.calls == []  # xm.optimizer_step owns the step


def test_xla_params_without_torch_xla_fall_back_to_step(monkeypatch):
    monkeypatch.setattr(optim_module, "xla_model", lambda: None)
    opt = _RecordingOptimizer("xla")
    assert optimizer_step(opt, optimizer_args={"closure": len}) == "loss"
    assert opt.calls == [{"closure": len}]


def test_sync_is_a_noop_without_torch_xla(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    monkeypatch.setattr(xla_module, "xla_model", lambda: pytest.fail("sync imported torch_xla"))
    assert sync() is None
    assert sync(wait=True) is None
    assert "torch_xla" not in sys.modules


def _fake_torch_xla(monkeypatch, initialized=True, with_sync=True):
    calls = []
    module = types.ModuleType("torch_xla")
    module._XLAC = types.SimpleNamespace(_xla_runtime_is_initialized=lambda: initialized)
    if with_sync:
        module.sync = lambda wait=False: calls.append(("sync", wait))
    monkeypatch.setitem(sys.modules, "torch_xla", module)
    fake_xm = types.SimpleNamespace(mark_step=lambda wait=False: calls.append(("mark_step", wait)))
    monkeypatch.setattr(xla_module, "xla_model", lambda: fake_xm)
    return calls


def test_sync_calls_torch_xla_sync(monkeypatch):
    calls = _fake_torch_xla(monkeypatch)
    sync()
    sync(wait=True)
    assert calls == [("sync", False), ("sync", True)]


def test_sync_falls_back_to_mark_step(monkeypatch):
    calls = _fake_torch_xla(monkeypatch, with_sync=False)
    sync(wait=True)
    assert calls == [("mark_step", True)]


def test_sync_skips_uninitialised_runtime(monkeypatch):
    calls = _fake_torch_xla(monkeypatch, initialized=False)
    sync()
    assert calls == []
