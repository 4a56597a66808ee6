"""Opt-in: the runtime on a real torch_xla device, checked with torch_xla's own metrics: no CPU
fallback (``aten::*`` counters), no host read before the step barrier, the same values as on CPU.

Skips unless torch_xla imports. It needs a torch/torch_xla pair, which the
project's pinned torch is not, so run it from a separate environment, e.g.
the venv of benchmarks/runtime_on_torch_xla.py plus ``pip install pytest`` and
``pip install --no-deps -e .``::

    PJRT_DEVICE=CPU /tmp/xla-venv/bin/python -m pytest tests/runtime --confcutdir=tests/runtime

(``--confcutdir`` skips tests/conftest.py, which needs the linter's
dependencies; that venv has only torch, torch_xla, pytest and the runtime.)
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
    clip_grad_norm_,
    masked_count,
    masked_max,
    masked_mean,
    masked_min,
    masked_sum,
    nonzero_static,
    optimizer_step,
    pad_sequences,
    sync,
)

NORM_TYPES = [1, 2.0, 3.5, math.inf, "inf"]


def _count(metric):
    data = met.metric_data(metric)
    return data[0] if data else 0


def _host_reads():
    """Device-to-host copies and `.item()`-style reads since the last clear_all()."""
    return _count("TransferFromDeviceTime") + (met.counter_value("aten::_local_scalar_dense") or 0)


def _params(device, seed=0, n=4):
    gen = torch.Generator().manual_seed(seed)
    params = []
    for i in range(n):
        p = torch.nn.Parameter(torch.randn(3 + i, 5, generator=gen).to(device))
        p.grad = torch.randn(3 + i, 5, generator=gen).to(device)
        params.append(p)
    return params


def _fresh_xla_params(**kwargs):
    params = _params(torch_xla.device(), **kwargs)
    torch_xla.sync(wait=True)  # materialise inputs so only the code under test is pending
    met.clear_all()
    return params


def close(actual, expected):
    # XLA's CPU lowering may round reductions/pow differently from ATen by a few ulps.
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
@pytest.mark.parametrize("max_norm", [0.05, 1e6], ids=["clip", "no_clip"])
def test_clip_reads_nothing_on_the_host(norm_type, max_norm):
    params = _fresh_xla_params()
    norm = clip_grad_norm_(params, max_norm, norm_type)
    assert _host_reads() == 0 and _count("ExecuteTime") == 0  # nothing ran yet
    torch_xla.sync(wait=True)
    expected_params = _params("cpu")
    expected = torch.nn.utils.clip_grad.clip_grad_norm_(expected_params, max_norm, norm_type)
    close(norm, expected)
    for p, e in zip(params, expected_params):
        close(p.grad, e.grad)


@pytest.mark.parametrize(
    "kwargs", [{"error_if_nonfinite": True}, {"norm_type": math.inf}], ids=["error_if_nonfinite", "inf"]
)
def test_torch_xla_patched_clip_reads_on_the_host(kwargs):
    # Negative control: torch_xla's monkeypatched clip_grad_norm_ does read values.
    params = _fresh_xla_params()
    torch.nn.utils.clip_grad_norm_(params, 1.0, **kwargs)
    assert met.counter_value("aten::_local_scalar_dense")


def test_error_if_nonfinite_raises_at_the_barrier_with_no_read_before_it():
    params = _fresh_xla_params()
    clip_grad_norm_(params, 1.0, error_if_nonfinite=True)  # finite: checked at the barrier, passes
    assert _host_reads() == 0  # nothing read in the step itself
    sync()
    assert _host_reads() >= 1  # the check: a copy of the norm the step computed
    params[0].grad[0] = float("nan")
    met.clear_all()
    clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert _host_reads() == 0  # the call cuts no graph: the check waits for the barrier
    with pytest.raises(RuntimeError, match="non-finite"):
        sync()


@pytest.mark.parametrize("barrier", [True, False])
def test_optimizer_step_delegates_to_xm(barrier):
    params = _fresh_xla_params()
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    optimizer_step(opt, barrier=barrier)
    assert (met.counter_value("MarkStep") or 0) == (1 if barrier else 0)
    assert _host_reads() == 0
    expected = _params("cpu")
    torch.optim.SGD(expected, lr=0.1, momentum=0.9).step()
    for p, e in zip(params, expected):
        close(p.detach(), e.detach())


def test_sync_marks_a_step():
    _fresh_xla_params()
    sync()
    sync(wait=True)
    assert met.counter_value("MarkStep") == 2


def test_the_audit_attributes_each_per_step_read_of_the_example_to_its_line(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "xla_project" / "train_classifier.py"
    report, no_findings = tmp_path / "report.json", tmp_path / "findings.json"
    no_findings.write_text("[]")  # this environment may lack the linter: attribution only
    # run from the example's folder with a relative path, as a user would: `train_classifier.py 3`
    proc = subprocess.run([sys.executable, "-m", "xlalint.runtime.audit", "--steps", "3", "--findings", str(no_findings),
                           "--json", str(report), example.name, "3"],
                          capture_output=True, text=True, cwd=example.parent, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    item_line = next(i for i, text in enumerate(example.read_text().splitlines(), 1) if "loss.item()" in text)
    lines = {row["line"]: row for row in json.loads(report.read_text())["lines"]}
    assert lines[item_line]["host_reads"] == 3  # one execution forced by `.item()` per step
    assert lines[item_line]["reads"] == 3  # and the recorder saw the read itself at that line


# -- nonzero_static, masked reductions, DeviceAccumulator, bucketing -----------------------------
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
