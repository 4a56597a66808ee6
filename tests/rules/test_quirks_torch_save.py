"""XLA701: which devices count as XLA, what counts as moved back to the CPU, and how the `xm.save`
fix is spelled."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

XLA701 = RULES_BY_CODE["XLA701"]


def _found(code: str):
    return lint_code(textwrap.dedent(code).lstrip(), [XLA701])


def _rows(code: str) -> list[int]:
    return [d.location.row for d in _found(code)]


@pytest.mark.parametrize(
    "device, reported",
    [
        ("torch_xla.device()", True),
        ("xm.xla_device()", True),
        ('"xla"', True),
        ('"xla:0"', True),
        ('torch.device("xla", index)', True),
        ('f"xla:{index}"', True),
        ('xm.xla_device() if use_tpu else torch.device("cuda")', True),
        ('"cpu"', False),
        ('torch.device("cuda:0")', False),
        ('torch.device("cuda" if torch.cuda.is_available() else "cpu")', False),
        ("accelerator.device", False),  # unknown: not evident
    ],
)
def test_device_spellings(device, reported):
    code = f"""
import torch
import torch_xla
import torch_xla.core.xla_model as xm

device = {device}
model = Net().to(device)
torch.save(model.state_dict(), "model.pt")
"""
    assert _rows(code) == ([7] if reported else [])


def test_needs_torch_xla():
    code = """
import torch
model = Net().to("xla")
torch.save(model.state_dict(), "model.pt")
"""
    assert _rows(code) == []
    assert lint_code(textwrap.dedent(code).lstrip(), [XLA701], path="x.py") == []


def test_device_and_model_through_module_local_callers():
    code = """
import torch
import torch_xla

def save(model, path):
    torch.save(model.state_dict(), path)

def fit(model, device):
    model.to(device)
    save(model, "a.pt")

def unknown(model, path):
    torch.save(model.state_dict(), path)  # nobody here says where `model` lives

fit(Net(), torch_xla.device())
"""
    assert _rows(code) == [5]


def test_moves_are_read_in_order():
    code = """
import torch
import torch_xla

device = torch_xla.device()
model = Net()
model.cpu()
model.to(device)
torch.save(model.state_dict(), "on_xla.pt")
model.cpu()
torch.save(model.state_dict(), "on_cpu.pt")
model = model.to(device)
torch.save(model.state_dict(), "on_xla_again.pt")
"""
    assert _rows(code) == [8, 12]


@pytest.mark.parametrize(
    "saved, reported",
    [
        ("{k: v.cpu() for k, v in model.state_dict().items()}", False),
        ('{k: v.to("cpu") for k, v in model.state_dict().items()}', False),
        ("{k: v for k, v in model.state_dict().items()}", True),
        ("[p.grad for p in model.parameters()]", True),
        ("model.state_dict()['fc.weight'].detach().clone()", True),
        ("model.state_dict()['fc.weight'].detach().cpu()", False),
        ('{"epoch": 3, "lr": 1e-4, "history": [0.5, 0.4]}', False),
        ("(torch.zeros(3), torch.ones(3))", False),  # created on the CPU
        ("torch.zeros(3, device=device)", True),
        ("torch.zeros_like(model.state_dict()['fc.bias'])", True),
        ("torch.optim.SGD(model.parameters(), lr=0.1).state_dict()", True),
    ],
)
def test_what_is_saved(saved, reported):
    code = f"""
import torch
import torch_xla

device = torch_xla.device()
model = Net().to(device)
torch.save({saved}, "x.pt")
"""
    assert _rows(code) == ([6] if reported else [])


def test_loader_batches_and_non_xla_branches():
    code = """
import torch
import torch_xla
import torch_xla.distributed.parallel_loader as pl

device = torch_xla.device()
for x, y in pl.MpDeviceLoader(loader, device):
    torch.save(x, "batch.pt")
    if torch.cuda.is_available():
        torch.save(y, "cuda.pt")
"""
    assert _rows(code) == [7]


def test_whole_module_is_reported_without_fix():
    # xm.save moves only plain tensors: a module's nn.Parameters would stay XLA tensors
    code = """
import torch
import torch_xla

model = Net().to(torch_xla.device())
model.train()
torch.save(model, "model.pt")
"""
    found = _found(code)
    assert [d.location.row for d in found] == [6]
    assert found[0].fix is None


@pytest.mark.parametrize(
    "call",
    ['torch.save(obj=model.state_dict(), f="m.pt")', 'torch.save(model.state_dict(), "m.pt", pickle_protocol=4)',
     'torch.save(*args)'],
)
def test_no_fix_for_other_argument_shapes(call):
    code = f"""
import torch
import torch_xla

model = Net().to(torch_xla.device())
args = (model.state_dict(), "m.pt")
{call}
"""
    found = _found(code)
    assert all(d.fix is None for d in found)
    if "*args" not in call:
        assert [d.location.row for d in found] == [6]


def test_fix_spellings_of_xla_model():
    aliased = """
import torch
import torch_xla
import torch_xla.core.xla_model as xla_model

model = Net().to(xla_model.xla_device())
torch.save(model.state_dict(), "m.pt",)
"""
    fixed = fix_code(textwrap.dedent(aliased).lstrip(), [XLA701], unsafe=True)
    assert 'xla_model.save(model.state_dict(), "m.pt", master_only=False,)\n' in fixed
    assert fixed.count("import torch_xla.core.xla_model") == 1

    guarded = """
import torch
try:
    import torch_xla
except ImportError:
    torch_xla = None

model = Net().to(torch_xla.device())
torch.save(model.state_dict(), "m.pt")
"""
    fixed = fix_code(textwrap.dedent(guarded).lstrip(), [XLA701], unsafe=True)
    assert "try:\n    import torch_xla\n    import torch_xla.core.xla_model as xm\nexcept ImportError:" in fixed
    assert 'xm.save(model.state_dict(), "m.pt", master_only=False)\n' in fixed

    taken = """
import torch
import torch_xla

xm = 3  # the usual name is taken
model = Net().to(torch_xla.device())
torch.save(model.state_dict(), "m.pt")
"""
    code = textwrap.dedent(taken).lstrip()
    fixed = fix_code(code, [XLA701], unsafe=True)
    assert 'torch_xla.core.xla_model.save(model.state_dict(), "m.pt", master_only=False)\n' in fixed
    assert fix_code(code, [XLA701], unsafe=False) == code
    compile(fixed, "fixed.py", "exec")
    assert _found(fixed) == []
