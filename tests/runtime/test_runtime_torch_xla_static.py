"""Opt-in: nonzero_static, masked reductions, DeviceAccumulator and bucketing on a real torch_xla device.

Skips unless torch_xla imports; run it like test_runtime_torch_xla.py (same venv, same command).
Checked with torch_xla's own metrics: no CPU fallback (``aten::*`` counters), no host read before
the step barrier, and the same values as the runtime (and eager torch) on CPU.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

_pjrt_was_set = "PJRT_DEVICE" in os.environ
os.environ.setdefault("PJRT_DEVICE", "CPU")  # must precede the import; a TPU/GPU run sets its own
try:
    import torch_xla
    import torch_xla.debug.metrics as met
except Exception as exc:  # ImportError, or a binary built for another torch
    if not _pjrt_was_set:
        os.environ.pop("PJRT_DEVICE", None)
    pytest.skip(f"torch_xla is not usable here: {exc!r}", allow_module_level=True)

from xlalint.runtime import (  # noqa: E402
    DeviceAccumulator,
    masked_count,
    masked_max,
    masked_mean,
    masked_min,
    masked_sum,
    nonzero_static,
    pad_sequences,
)


def _count(metric):
    data = met.metric_data(metric)
    return data[0] if data else 0


def _host_reads():
    return _count("TransferFromDeviceTime") + (met.counter_value("aten::_local_scalar_dense") or 0)


def _fallbacks():
    return [name for name in met.counter_names() if name.startswith("aten::")]


def _to_xla(*tensors):
    out = [t.to(torch_xla.device()) for t in tensors]
    torch_xla.sync(wait=True)  # materialise inputs so only the code under test is pending
    met.clear_all()
    return out


def _masked_data(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randint(-400, 400, (5, 6), generator=gen) / 4).to(dtype)
    mask = torch.rand(5, 6, generator=gen) > 0.5
    mask[3] = False  # an empty row
    mask[:, 1] = False  # and an empty column
    if dtype.is_floating_point:
        x[~mask] = math.nan
        x[0, 1] = -math.inf
    return x, mask


@pytest.mark.parametrize("shape", [(), (7,), (5, 6), (2, 3, 4), (0, 3)], ids=str)
def test_nonzero_static_has_no_fallback(shape):
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(1)) > 0.5
    count = int(mask.sum())
    (xla_mask,) = _to_xla(mask)
    sizes = sorted({0, max(count - 2, 0), count, count + 3})
    outs = [nonzero_static(xla_mask, size, fill_value=-3) for size in sizes]
    assert _host_reads() == 0 and _count("ExecuteTime") == 0
    torch_xla.sync(wait=True)
    assert _fallbacks() == []
    for size, out in zip(sizes, outs):
        assert torch.equal(out.cpu(), torch.nonzero_static(mask, size=size, fill_value=-3))


def test_torch_nonzero_static_falls_back():
    # Negative control: torch's own nonzero_static is a CPU fallback on torch_xla.
    (xla_mask,) = _to_xla(torch.tensor([True, False, True]))
    torch.nonzero_static(xla_mask, size=4)
    torch_xla.sync(wait=True)
    assert "aten::nonzero_static" in _fallbacks()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("fn", [masked_sum, masked_mean, masked_max, masked_min, masked_count])
def test_masked_reductions_match_cpu_without_host_reads(fn, dtype):
    x, mask = _masked_data(dtype)
    xla_x, xla_mask = _to_xla(x, mask)
    cases = [(None, False), (0, False), (1, True), ((0, 1), False)]
    outs = [fn(xla_x, xla_mask, dim=dim, keepdim=keepdim) for dim, keepdim in cases]
    assert _host_reads() == 0 and _count("ExecuteTime") == 0
    torch_xla.sync(wait=True)
    assert _fallbacks() == []
    for (dim, keepdim), out in zip(cases, outs):
        expected = fn(x, mask, dim=dim, keepdim=keepdim)
        # Empty selections give -inf/+inf here too (torch_xla's own max of only -inf is -3.4e38).
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-6, atol=0, equal_nan=True)


def test_accumulator_reads_only_in_step_closures():
    (x,) = _to_xla(torch.arange(12.0).reshape(4, 3) / 8)
    acc = DeviceAccumulator()
    seen = []
    for step in range(8):
        acc.add((x**2).mean() * 0.5, weight=2)
        if step % 4 == 3:
            acc.read_in_step_closure(seen.append)
            acc.reset()
            assert len(seen) == step // 4  # this read is deferred to the barrier
        torch_xla.sync()
    torch_xla.sync(wait=True)
    expected = float(((torch.arange(12.0).reshape(4, 3) / 8) ** 2).mean() * 0.5)
    assert len(seen) == 2
    for reading in seen:
        assert reading.weight == 8.0
        assert reading.mean == pytest.approx(expected, rel=1e-6)
    assert (met.counter_value("aten::_local_scalar_dense") or 0) == 0
    assert _count("TransferFromDeviceTime") == 2  # one transfer per read, nothing else
    # First add, steady-state add, read-and-reset step: three graphs, compiled once each.
    assert met.counter_value("UncachedCompile") == 3


def test_bucketed_batches_compile_once_per_bucket():
    torch_xla.sync(wait=True)
    met.clear_all()
    outs = []
    for n in (3, 5, 6, 7, 9, 12):  # two buckets: 8 and 16
        batch, mask = pad_sequences([torch.ones(n), torch.ones(max(n - 2, 0))], (8, 16))
        batch, mask = batch.to(torch_xla.device()), mask.to(torch_xla.device())
        outs.append(masked_mean(batch, mask))
        torch_xla.sync()
    assert met.counter_value("UncachedCompile") == 2
    assert [float(o.cpu()) for o in outs] == [1.0] * len(outs)
