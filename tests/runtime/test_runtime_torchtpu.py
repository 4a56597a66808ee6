"""The runtime on TorchTPU's `tpu` device, faked: no TPU here, so the device is what torch-tpu 0.2.0
makes of it (PrivateUse1 renamed "tpu", `torch.tpu` a module whose legacy device calls raise) and
`torch.accelerator` reports it. What is checked: nothing reaches torch_xla, `optimizer_step` is a
plain step, and `sync(wait=True)` waits with `torch.accelerator.synchronize()`, never `torch.tpu`."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from xlalint.runtime import optimizer_step, sync

xla_module = importlib.import_module("xlalint.runtime._xla")


class _LegacyTpuModule(types.ModuleType):
    """`torch.tpu` as torch-tpu 0.2.0 installs it for torch >= 2.11: `synchronize()` and the other
    device calls are internal and raise from user code (`_internal/device/_device_module.py`)."""

    def __init__(self):
        super().__init__("torch.tpu")

    def synchronize(self, device=None):
        raise RuntimeError("torch.tpu.synchronize is internal; use torch.accelerator.synchronize")


@pytest.fixture
def fake_tpu(monkeypatch):
    """The current accelerator is `tpu`; no torch_xla is importable; waits are recorded."""
    waits = []
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: types.SimpleNamespace(type="tpu"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a: waits.append(a))
    monkeypatch.setattr(torch, "tpu", _LegacyTpuModule(), raising=False)
    monkeypatch.setitem(sys.modules, "torch_xla", None)  # `import torch_xla` raises ImportError
    monkeypatch.setitem(sys.modules, "torch_xla.core", None)
    monkeypatch.setitem(sys.modules, "torch_xla.core.xla_model", None)
    return waits


def test_sync_waits_with_the_public_api_on_tpu(fake_tpu):
    sync()  # nothing to cut on an eager device
    assert fake_tpu == []
    sync(wait=True)
    assert fake_tpu == [()]


def test_sync_is_a_no_op_without_an_accelerator(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: None)
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a: calls.append(a))
    sync(wait=True)
    assert calls == []


def test_sync_on_cuda_like_accelerators_is_unchanged(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: types.SimpleNamespace(type="cuda"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a: calls.append(a))
    sync(wait=True)
    assert calls == []  # only TorchTPU gains a wait: CUDA code keeps its old no-op


class _TpuParam:
    """What `optimizer_step` looks at: a parameter on the `tpu` device."""

    device = types.SimpleNamespace(type="tpu")


class _RecordingOptimizer:
    def __init__(self):
        self.param_groups = [{"params": [_TpuParam()]}]
        self.calls = []

    def step(self, closure=None):
        self.calls.append(closure)
        return "loss"


def test_optimizer_step_is_a_plain_step_on_tpu(fake_tpu):
    opt = _RecordingOptimizer()
    assert optimizer_step(opt) == "loss"
    assert optimizer_step(opt, barrier=False, optimizer_args={"closure": "c"}) == "loss"
    assert opt.calls == [None, "c"]
    assert fake_tpu == []  # no wait, no torch_xla


def test_the_device_is_torch_tpu_s_renamed_privateuse1():
    """torch-tpu 0.2.0's loader renames PrivateUse1 to "tpu"; after that `current_accelerator` is what
    `on_torchtpu` reads (checked in a fresh interpreter: the rename is process-wide)."""
    code = textwrap.dedent(
        """
        import torch
        torch.utils.rename_privateuse1_backend("tpu")
        assert torch.device("tpu").type == "tpu"
        assert torch._C._get_privateuse1_backend_name() == "tpu"
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
