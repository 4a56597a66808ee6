"""The audit's host-read recorder, on CPU tensors (the audit watches the `xla` device the same way)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")

from xlalint.runtime._hostreads import HostReadRecorder  # noqa: E402

USER = """\
import torch
def step(t):
    a = t.sum().item()
    if t.sum() > 0:
        pass
    print(t)
    b = float(t.sum())
    c = t.cpu()
    d = t.to("cpu")
    e = t.to(torch.float64)
    f = t.tolist()
    return f"{t.sum():.2f}"
"""


def load(tmp_path):
    path = tmp_path / "user_code.py"
    path.write_text(USER)
    spec = importlib.util.spec_from_file_location("user_code", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_each_read_is_counted_once_at_its_line_and_the_methods_are_restored(tmp_path, capsys):
    path, module = load(tmp_path)
    original = torch.Tensor.item
    with HostReadRecorder([tmp_path], device_types=("cpu",)) as recorder:
        module.step(torch.ones(3))
    assert torch.Tensor.item is original
    got = {(row["line"], row["kind"]): row["count"] for row in recorder.rows()}
    assert got == {(3, "item"): 1, (4, "bool"): 1, (6, "repr"): 1, (7, "float"): 1, (8, "cpu"): 1,
                   (9, "to(cpu)"): 1, (11, "tolist"): 1, (12, "format"): 1}
    assert {row["file"] for row in recorder.rows()} == {str(path.resolve())}
    assert "tensor([1., 1., 1.])" in capsys.readouterr().out  # the wrapped methods still work


def test_tensors_on_other_devices_and_code_outside_the_roots_are_not_counted(tmp_path):
    _, module = load(tmp_path)
    with HostReadRecorder([tmp_path], device_types=("xla",)) as recorder:
        module.step(torch.ones(3))
    assert recorder.rows() == []
    with HostReadRecorder([tmp_path / "elsewhere"], device_types=("cpu",)) as recorder:
        module.step(torch.ones(3))
    assert recorder.rows() == []

