"""Opt-in: the runtime on a real torch_xla device, checked with torch_xla's own metrics.

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

from xlalint.runtime import clip_grad_norm_, optimizer_step, sync  # noqa: E402

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
