"""xlalint.runtime.clip_grad_norm_ against upstream torch.nn.utils.clip_grad_norm_ on CPU.

On CPU the runtime must be bit-identical to torch (same kernels, same grouping
order), so comparisons are exact (NaN == NaN), dtype included.
"""

from __future__ import annotations

import importlib
import math
import warnings

import pytest
import torch

# The upstream function: importing torch_xla replaces torch.nn.utils.clip_grad_norm_ with its own.
from torch.nn.utils.clip_grad import clip_grad_norm_ as torch_clip_grad_norm_

from xlalint.runtime import clip_grad_norm_

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
NORM_TYPES = [1, 2.0, 3.5, math.inf, "inf"]
DTYPE_SETS = {
    "float32": [F32] * 4,
    "float64": [F64] * 3,
    "mixed": [F32, F64, BF16, F32, F64],
}
# Gradients are ~N(0, 1), so every total norm here is far above 0.05 and far below 1e6.
MAX_NORMS = {"clip": 0.05, "no_clip": 1e6}


def _run_both(make, max_norm, norm_type, same, **kwargs):
    """Clip two identical parameter sets with torch and the runtime; assert equal results."""
    expected_params, actual_params = make(), make()
    expected = torch_clip_grad_norm_(expected_params, max_norm, norm_type, **kwargs)
    actual = clip_grad_norm_(actual_params, max_norm, norm_type, **kwargs)
    same(actual, expected)
    assert actual.requires_grad == expected.requires_grad
    for a, e in zip(actual_params, expected_params):
        if e.grad is None:
            assert a.grad is None
        else:
            same(a.grad, e.grad)
    return actual, actual_params


@pytest.mark.parametrize("foreach", [None, False, True])
@pytest.mark.parametrize("path", sorted(MAX_NORMS))
@pytest.mark.parametrize("dtypes", sorted(DTYPE_SETS))
@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
def test_matches_torch(norm_type, dtypes, path, foreach, make_params, same):
    make = lambda: make_params(DTYPE_SETS[dtypes])  # noqa: E731
    original = [p.grad.clone() for p in make()]
    norm, params = _run_both(make, MAX_NORMS[path], norm_type, same, foreach=foreach)

    # Check the test exercises the path it claims to.
    if path == "no_clip":
        for p, g in zip(params, original):
            same(p.grad, g)  # coefficient clamped to exactly 1.0
    else:
        assert all(not torch.equal(p.grad, g) for p, g in zip(params, original))
        new_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad.double(), float(norm_type)) for p in params]),
            float(norm_type),
        )
        assert new_norm.item() == pytest.approx(MAX_NORMS["clip"], rel=1e-2)  # bf16 grads round
        assert norm.item() > MAX_NORMS["clip"]


@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_grads(norm_type, bad, make_params, same):
    def make():
        params = make_params([F32, F64, F32])
        params[1].grad[0, 0] = bad
        return params

    norm, params = _run_both(make, 1.0, norm_type, same)
    assert not torch.isfinite(norm)
    assert torch.isnan(params[1].grad[0, 0])  # inf * 0 or nan * anything


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_error_if_nonfinite_raises_on_cpu_like_torch(bad, make_params):
    for fn in (torch_clip_grad_norm_, clip_grad_norm_):
        params = make_params([F32, F32])
        params[0].grad[1, 1] = bad
        before = [p.grad.clone() for p in params]
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            fn(params, 1.0, error_if_nonfinite=True)
        for p, g in zip(params, before):  # raised before scaling anything
            torch.testing.assert_close(p.grad, g, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
def test_error_if_nonfinite_with_finite_grads(norm_type, make_params, same):
    _run_both(lambda: make_params([F32, F64]), 0.1, norm_type, same, error_if_nonfinite=True)


def test_empty_parameter_list(same):
    expected = torch_clip_grad_norm_([], 1.0)
    actual = clip_grad_norm_([], 1.0)
    same(actual, expected)
    same(actual, torch.tensor(0.0))


def test_all_grads_none(make_params, same):
    params = make_params([F32, F32], with_grad=[False, False])
    same(clip_grad_norm_(params, 1.0), torch_clip_grad_norm_(params, 1.0))
    assert all(p.grad is None for p in params)


def test_some_grads_none(make_params, same):
    _run_both(lambda: make_params([F32, F32, F32], with_grad=[True, False, True]), 0.1, 2.0, same)


def test_single_tensor(same):
    def make():
        t = torch.arange(12.0).reshape(3, 4).requires_grad_()
        t.grad = torch.linspace(-3, 5, 12).reshape(3, 4)
        return t

    expected_t, actual_t = make(), make()
    same(clip_grad_norm_(actual_t, 0.5), torch_clip_grad_norm_(expected_t, 0.5))
    same(actual_t.grad, expected_t.grad)


def test_generator_is_consumed_once(make_params, same):
    expected_params, actual_params = make_params([F32] * 3), make_params([F32] * 3)
    expected = torch_clip_grad_norm_((p for p in expected_params), 0.1)
    actual = clip_grad_norm_((p for p in actual_params), 0.1)
    same(actual, expected)
    for a, e in zip(actual_params, expected_params):
        same(a.grad, e.grad)


def test_module_parameters_generator(same):
    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 2))
        model(torch.randn(4, 5)).pow(2).sum().backward()
        return model

    expected_model, actual_model = make(), make()
    expected = torch_clip_grad_norm_(expected_model.parameters(), 0.1)
    actual = clip_grad_norm_(actual_model.parameters(), 0.1)
    same(actual, expected)
    for a, e in zip(actual_model.parameters(), expected_model.parameters()):
        same(a.grad, e.grad)


def test_empty_generator_warns_like_torch(same):
    with pytest.warns(UserWarning, match="empty generator") as record:
        norm = clip_grad_norm_((p for p in []), 1.0)
    same(norm, torch.tensor(0.0))
    assert record[0].filename == __file__  # stacklevel points at the caller


def test_tensor_max_norm_equals_float_max_norm(make_params, same):
    expected_params, actual_params = make_params([F32] * 3), make_params([F32] * 3)
    expected = clip_grad_norm_(expected_params, 0.05)
    actual = clip_grad_norm_(actual_params, torch.tensor(0.05, dtype=F64))
    same(actual, expected)
    for a, e in zip(actual_params, expected_params):
        same(a.grad, e.grad)


def test_foreach_true_falls_back_instead_of_raising():
    # 'meta' tensors have no foreach kernels: torch raises on foreach=True, the runtime loops.
    params = [torch.nn.Parameter(torch.empty(3, device="meta")) for _ in range(2)]
    for p in params:
        p.grad = torch.empty(3, device="meta")
    with pytest.raises(RuntimeError, match="foreach=True was passed"):
        torch_clip_grad_norm_(params, 1.0, foreach=True)
    norm = clip_grad_norm_(params, 1.0, foreach=True)
    assert norm.device.type == "meta" and norm.shape == ()


def test_python_grouping_fallback(make_params, monkeypatch, same):
    """Old torch without the private grouping helper: groups in first-occurrence order.

    torch groups by a C++ hash map, so with mixed dtypes the per-group norms are
    stacked in another order; only the final (float64) reduction's rounding can
    differ, hence a 1e-12 relative tolerance there. Single-dtype sets stay exact.
    """
    clip_module = importlib.import_module("xlalint.runtime._clip")
    monkeypatch.setattr(clip_module, "_group_tensors_by_device_and_dtype", None)
    _run_both(lambda: make_params([F32] * 4), 0.05, 2.0, same)
    for norm_type in NORM_TYPES:
        close = lambda a, e: torch.testing.assert_close(a, e, rtol=1e-12, atol=0)  # noqa: E731
        _run_both(lambda: make_params(DTYPE_SETS["mixed"]), 0.05, norm_type, close)


def test_no_warning_on_cpu_with_error_if_nonfinite(make_params):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clip_grad_norm_(make_params([F32]), 1.0, error_if_nonfinite=True)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("foreach", [None, False, True])
@pytest.mark.parametrize("path", sorted(MAX_NORMS))
@pytest.mark.parametrize("dtypes", sorted(DTYPE_SETS))
@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
def test_matches_torch_on_cuda(norm_type, dtypes, path, foreach, make_params, same):
    _run_both(lambda: make_params(DTYPE_SETS[dtypes], devices=["cuda"]), MAX_NORMS[path], norm_type, same, foreach=foreach)


@cuda
@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
def test_matches_torch_across_devices(norm_type, make_params, same):
    norm, _ = _run_both(lambda: make_params([F32, F64, F32, F32], devices=["cuda", "cpu"]), 0.05, norm_type, same)
    assert norm.device.type == "cuda"  # the first gradient's device, as in torch


@cuda
@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_non_finite_on_cuda(bad, make_params, same):
    def make():
        params = make_params([F32, F32], devices=["cuda"])
        params[1].grad[0, 0] = bad
        return params

    _run_both(make, 1.0, 2.0, same)
    with pytest.raises(RuntimeError, match="is non-finite"):
        clip_grad_norm_(make(), 1.0, error_if_nonfinite=True)
