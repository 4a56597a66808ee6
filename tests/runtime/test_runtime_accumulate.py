"""DeviceAccumulator against eager weighted sums/means, and its step-closure dispatch."""

from __future__ import annotations

import importlib
import math
import sys
import types

import pytest
import torch
# A [test] dependency; skip (not fail) in the minimal torch_xla venv of test_runtime_torch_xla.py.
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xlalint.runtime import DeviceAccumulator  # noqa: E402

accumulate_module = importlib.import_module("xlalint.runtime._accumulate")

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)
weights = st.one_of(st.integers(0, 5), st.floats(0, 4, allow_nan=False, width=32))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    entries=st.lists(st.tuples(finite, weights, st.booleans()), min_size=0, max_size=8),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_weighted_mean_matches_eager(entries, dtype):
    acc = DeviceAccumulator()
    for value, weight, as_tensor in entries:
        acc.add(torch.tensor(value, dtype=dtype), torch.tensor(weight) if as_tensor else weight)
    # Eager reference in float64 from the same (dtype-rounded) values.
    values = [torch.tensor(v, dtype=dtype).double() for v, _, _ in entries]
    total = torch.tensor(0.0, dtype=torch.float64)
    for v, (_, w, _) in zip(values, entries):
        total = total + float(w) * v
    weight = sum(float(w) for _, w, _ in entries)
    # bf16 accumulates in float32; an empty accumulator reports the default dtype.
    state = torch.float64 if dtype == torch.float64 and entries else torch.float32
    assert acc.sum().dtype == acc.mean().dtype == state
    tol = {"rtol": 1e-5, "atol": 1e-3} if state == torch.float32 else {}
    torch.testing.assert_close(acc.sum(), total.to(state), **tol)
    torch.testing.assert_close(acc.total_weight(), torch.tensor(weight, dtype=state), **tol)
    expected_mean = total / weight if weight else torch.tensor(math.nan, dtype=torch.float64)
    torch.testing.assert_close(acc.mean(), expected_mean.to(state), equal_nan=True, **tol)
    reading = acc.read()
    assert all(isinstance(r, float) for r in reading)
    assert reading.sum == float(acc.sum()) and reading.weight == float(acc.total_weight())
    assert reading.mean == float(acc.mean()) or (math.isnan(reading.mean) and not weight)


def test_exact_small_example_and_reset():
    acc = DeviceAccumulator()
    assert math.isnan(acc.read().mean) and acc.read()[1:] == (0.0, 0.0)
    acc.add(torch.tensor(2.0), weight=3)
    acc.add(torch.tensor(4.0))
    acc.add(5)  # Python numbers work too
    assert acc.read() == (15.0 / 5, 15.0, 5.0)
    acc.reset()
    assert acc.sum().shape == () and acc.sum().dtype == torch.float32
    reading = acc.read()
    assert math.isnan(reading.mean) and reading[1:] == (0.0, 0.0)
    acc.add(torch.tensor(1.5), torch.tensor(2.0))
    assert acc.read() == (1.5, 3.0, 2.0)


def test_zero_weight_hides_nan_and_inf():
    acc = DeviceAccumulator()
    acc.add(torch.tensor(1.0))
    acc.add(torch.tensor(math.nan), weight=0)
    acc.add(torch.tensor(math.inf), weight=torch.tensor(0.0))
    assert acc.read() == (1.0, 1.0, 1.0)
    acc.add(torch.tensor(math.nan))  # a NaN with weight propagates, as in the eager sum
    assert math.isnan(acc.read().mean)


def test_elementwise_values_and_weights():
    acc = DeviceAccumulator()
    per_class = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    counts = torch.tensor([[1.0, 0.0, 2.0], [1.0, 1.0, 0.0]])
    for v, w in zip(per_class, counts):
        acc.add(v, w)
    expected_sum = (per_class * counts).sum(0)
    assert torch.equal(acc.sum(), expected_sum)
    assert torch.equal(acc.total_weight(), counts.sum(0))
    assert torch.equal(acc.mean(), expected_sum / counts.sum(0))
    assert acc.read().sum == expected_sum.tolist()
    acc.add(torch.tensor(1.0))  # a scalar broadcasts to the state's shape
    with pytest.raises(ValueError, match="does not broadcast"):
        acc.add(torch.ones(2, 3))


def test_add_detaches_and_keeps_no_graph():
    w = torch.tensor(2.0, requires_grad=True)
    acc = DeviceAccumulator()
    acc.add(w * 3)
    acc.add(w * w, weight=w)
    assert not acc.sum().requires_grad and acc.sum().grad_fn is None
    assert acc.read() == (pytest.approx(14 / 3), 14.0, 3.0)  # (6*1 + 4*2) / (1 + 2)


def test_dtype_argument_and_errors():
    acc = DeviceAccumulator(dtype=torch.float64)
    acc.add(torch.tensor(1, dtype=torch.int64))
    acc.add(torch.tensor(0.1, dtype=torch.float32))
    assert acc.sum().dtype == torch.float64
    assert DeviceAccumulator().sum().dtype == torch.get_default_dtype()
    ints = DeviceAccumulator()
    ints.add(torch.tensor([1, 2]))
    assert ints.sum().dtype == torch.float32
    with pytest.raises(TypeError, match="floating"):
        DeviceAccumulator(dtype=torch.int64)
    with pytest.raises(TypeError, match="cannot accumulate"):
        DeviceAccumulator().add(torch.tensor(1j))


# ------------------------------------------------------------- read_in_step_closure


def test_read_in_step_closure_calls_back_at_once_off_xla(monkeypatch):
    monkeypatch.setattr(accumulate_module, "xla_model", lambda: pytest.fail("looked for torch_xla on CPU"))
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))  # imported, but CPU tensors
    acc = DeviceAccumulator()
    seen = []
    acc.read_in_step_closure(seen.append)  # empty: no device at all
    acc.add(torch.tensor(3.0), weight=2)
    acc.read_in_step_closure(seen.append)
    assert math.isnan(seen[0].mean)
    assert seen[1:] == [(3.0, 6.0, 2.0)]


def _fake_xla(monkeypatch):
    closures = []
    fake_xm = types.SimpleNamespace(
        add_step_closure=lambda fn, args=(), run_async=False: closures.append((fn, args, run_async))
    )
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    monkeypatch.setattr(accumulate_module, "xla_model", lambda: fake_xm)
    # CPU tensors stand in for 'xla' ones: only the device check is replaced.
    monkeypatch.setattr(accumulate_module, "_on_torch_xla", lambda t: True)
    return closures


@pytest.mark.parametrize("run_async", [False, True])
def test_read_in_step_closure_defers_on_xla(monkeypatch, run_async):
    closures = _fake_xla(monkeypatch)
    acc = DeviceAccumulator()
    acc.add(torch.tensor(3.0), weight=2)
    seen = []
    acc.read_in_step_closure(seen.append, run_async=run_async)
    assert seen == []  # nothing read yet: the step has not run
    assert len(closures) == 1 and closures[0][2] == run_async
    acc.reset()  # the closure sees the values at registration time
    acc.add(torch.tensor(100.0))
    fn, args, _ = closures[0]
    assert all(isinstance(a, torch.Tensor) for a in args if not callable(a))  # tensors go as args
    fn(*args)  # what torch_xla does after the step executes
    assert seen == [(3.0, 6.0, 2.0)]


def test_read_in_step_closure_without_torch_xla_falls_back(monkeypatch):
    _fake_xla(monkeypatch)
    monkeypatch.setattr(accumulate_module, "xla_model", lambda: None)
    acc = DeviceAccumulator()
    acc.add(torch.tensor(1.0))
    seen = []
    acc.read_in_step_closure(seen.append)
    assert seen == [(1.0, 1.0, 1.0)]


def test_on_torch_xla_needs_both_the_device_and_the_import(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    fake = types.SimpleNamespace(device=torch.device("xla"))
    assert not accumulate_module._on_torch_xla(fake)
    monkeypatch.setitem(sys.modules, "torch_xla", types.ModuleType("torch_xla"))
    assert accumulate_module._on_torch_xla(fake)
    assert not accumulate_module._on_torch_xla(torch.ones(1))
