"""nonzero_static and the masked reductions against eager torch on CPU.

nonzero_static is compared with ``torch.nonzero_static`` itself, exactly. The
reductions are compared with boolean indexing (``x[mask].sum()`` and, per
dimension, a loop over slices). Floating inputs are multiples of 1/4 with
small magnitudes, so every sum is exact whatever the summation order and the
comparisons can be exact too (NaN == NaN); one test uses arbitrary floats with
a tolerance.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
# A [test] dependency; skip (not fail) in the minimal torch_xla venv of test_runtime_torch_xla.py.
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xlalint.runtime import (  # noqa: E402
    masked_count,
    masked_max,
    masked_mean,
    masked_min,
    masked_sum,
    nonzero_static,
)


def assert_same(actual, expected):
    """Exact equality (dtype and shape included) that treats NaN as equal to NaN."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SPECIALS = [math.inf, -math.inf, math.nan]

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


def _numel(shape):
    return math.prod(shape)


@st.composite
def masks(draw, shape=None, dtype=None):
    shape = draw(shapes) if shape is None else shape
    fill = draw(st.sampled_from(["random", "empty", "full"]))
    if fill == "random":
        bits = draw(st.lists(st.booleans(), min_size=_numel(shape), max_size=_numel(shape)))
    else:
        bits = [fill == "full"] * _numel(shape)
    mask = torch.tensor(bits, dtype=torch.bool).reshape(shape)
    dtype = draw(st.sampled_from([torch.bool, torch.int64, torch.float32])) if dtype is None else dtype
    if dtype == torch.bool:
        return mask
    # Nonzero entries of a non-bool mask: any nonzero value, NaN and inf included.
    values = draw(
        st.lists(
            st.sampled_from([1, -3, 7, math.nan, math.inf] if dtype.is_floating_point else [1, -3, 7]),
            min_size=_numel(shape),
            max_size=_numel(shape),
        )
    )
    return torch.where(mask, torch.tensor(values, dtype=dtype).reshape(shape), 0)


# ---------------------------------------------------------------- nonzero_static


@SETTINGS
@given(mask=masks(), extra=st.integers(-4, 4), fill_value=st.sampled_from([-1, 0, 5, -(2**40)]))
def test_nonzero_static_matches_torch(mask, extra, fill_value):
    count = int(torch.count_nonzero(mask))
    size = max(0, count + extra)  # below (truncates), at, and above (pads) the true count
    actual = nonzero_static(mask, size, fill_value)
    expected = torch.nonzero_static(mask, size=size, fill_value=fill_value)
    assert actual.shape == (size, mask.ndim)
    assert actual.dtype == expected.dtype == torch.int64
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("size", [0, 1, 5, 300])
def test_nonzero_static_large_size_and_defaults(size):
    mask = torch.arange(200).reshape(10, 20) % 7 == 3
    expected = torch.nonzero_static(mask, size=size)
    assert torch.equal(nonzero_static(mask, size), expected)
    if size == 300:
        assert (expected[torch.count_nonzero(mask):] == -1).all()  # padded with the default


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("size", [0, 2])
def test_nonzero_static_zero_dim(value, size):
    mask = torch.tensor(value)
    expected = torch.nonzero_static(mask, size=size)
    actual = nonzero_static(mask, size)
    assert actual.shape == expected.shape == (size, 0)
    assert actual.dtype == torch.int64


@pytest.mark.parametrize(
    "size, fill_value, error",
    [(-1, -1, ValueError), (2.0, -1, TypeError), (torch.tensor(2), -1, TypeError), (2, 1.5, TypeError)],
)
def test_nonzero_static_rejects_bad_arguments(size, fill_value, error):
    # the exception type torch.nonzero_static raises for the same argument (RuntimeError for -1 there;
    # a tensor size it reads on the host, which the runtime refuses)
    with pytest.raises(error):
        nonzero_static(torch.tensor([True, False]), size, fill_value)
    if error is TypeError and not isinstance(size, torch.Tensor):
        with pytest.raises(TypeError):
            torch.nonzero_static(torch.tensor([True, False]), size=size, fill_value=fill_value)


# ---------------------------------------------------------------- masked reductions


@st.composite
def broadcast_mask_shapes(draw, shape):
    """Shapes that broadcast to ``shape``: some leading dims dropped, some others set to 1."""
    drop = draw(st.integers(0, len(shape)))
    kept = shape[drop:]
    ones = draw(st.lists(st.booleans(), min_size=len(kept), max_size=len(kept)))
    return tuple(1 if one else n for n, one in zip(kept, ones))


def _values(draw, dtype, n):
    if dtype.is_floating_point:
        # Multiples of 1/4 below 1000: every sum of <= 64 of them is exact in float32.
        quarters = st.integers(-4000, 4000).map(lambda k: k / 4)
        specials = draw(st.booleans())
        element = st.one_of(quarters, st.sampled_from(SPECIALS)) if specials else quarters
    elif dtype == torch.bool:
        element = st.booleans()
    else:
        element = st.integers(-1000, 1000)
    return torch.tensor(draw(st.lists(element, min_size=n, max_size=n)), dtype=torch.float64).to(dtype)


@st.composite
def reduction_cases(draw, dtypes=(torch.float32, torch.float64, torch.int64)):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes)
    x = _values(draw, dtype, _numel(shape)).reshape(shape)
    mask_shape = draw(broadcast_mask_shapes(shape))
    mask = draw(masks(shape=mask_shape, dtype=torch.bool))
    if draw(st.booleans()) or not shape:
        dim = None
    else:
        dims = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
        negative = draw(st.booleans())
        dims = [d - len(shape) if negative else d for d in dims]
        dim = dims[0] if len(dims) == 1 and draw(st.booleans()) else tuple(dims)
    keepdim = draw(st.booleans())
    return x, mask, dim, keepdim


def _empty_value(dtype, largest):
    if dtype == torch.bool:
        return not largest
    if dtype.is_floating_point:
        return -math.inf if largest else math.inf
    return torch.iinfo(dtype).max if not largest else torch.iinfo(dtype).min


def _mean(selected):
    if not selected.dtype.is_floating_point:
        return selected.sum() / torch.tensor(selected.numel())  # exact int sum, then default float
    return selected.mean()


def _max(selected, dtype):
    return selected.max() if selected.numel() else torch.tensor(_empty_value(dtype, True), dtype=dtype)


def _min(selected, dtype):
    return selected.min() if selected.numel() else torch.tensor(_empty_value(dtype, False), dtype=dtype)


REFERENCES = {
    masked_sum: lambda sel, dtype: sel.sum(),
    masked_mean: lambda sel, dtype: _mean(sel),
    masked_max: _max,
    masked_min: _min,
    masked_count: lambda sel, dtype: torch.tensor(sel.numel()),
}


def _reference(fn, x, mask, dim, keepdim):
    """Eager boolean indexing: ``x[mask].op()``, or per slice of the kept dimensions."""
    mask = mask.expand(x.shape)
    op = REFERENCES[fn]
    if dim is None:
        out = op(x[mask], x.dtype)
        return out.reshape([1] * x.ndim) if keepdim else out
    dims = sorted(d % x.ndim for d in ((dim,) if isinstance(dim, int) else dim))
    kept = [d for d in range(x.ndim) if d not in dims]
    # Move the reduced dims last and loop over every index of the kept ones.
    xs, ms = x.permute(kept + dims), mask.permute(kept + dims)
    kept_shape = [x.shape[d] for d in kept]
    results = [op(xs[idx][ms[idx]], x.dtype) for idx in itertools.product(*map(range, kept_shape))]
    sample = op(x.reshape(-1)[:0], x.dtype)  # dtype of an empty result
    if results:
        out = torch.stack(results).reshape(kept_shape)
    else:
        out = torch.empty(kept_shape, dtype=sample.dtype)
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out


ALL = [masked_sum, masked_mean, masked_max, masked_min, masked_count]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
@SETTINGS
@given(case=reduction_cases())
def test_matches_boolean_indexing(fn, case):
    x, mask, dim, keepdim = case
    expected = _reference(fn, x, mask, dim, keepdim)
    actual = fn(x, mask, dim=dim, keepdim=keepdim)
    assert_same(actual, expected)  # exact, dtype and shape included


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(case=reduction_cases(dtypes=(torch.bool, torch.int32, torch.float16)))
def test_other_dtypes(fn, case):
    x, mask, dim, keepdim = case
    expected = _reference(fn, x, mask, dim, keepdim)
    actual = fn(x, mask, dim=dim, keepdim=keepdim)
    # float16 sums and means may round differently from indexing (float32 accumulation either way).
    torch.testing.assert_close(actual, expected, rtol=2e-3, atol=1e-2, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_arbitrary_floats_within_rounding(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, 53, generator=gen, dtype=dtype) * 100
    mask = torch.rand(37, 53, generator=gen) > 0.4
    for fn in ALL:
        for dim in (None, 0, 1, (0, 1)):
            expected = _reference(fn, x, mask, dim, False)
            # Summation order differs from indexing: float32 sums of ~30 values of ~100 differ by ~1e-4.
            tol = {"rtol": 1e-5, "atol": 1e-3} if dtype == torch.float32 else {}
            torch.testing.assert_close(fn(x, mask, dim=dim), expected, **tol)


@pytest.mark.parametrize("fn", [masked_sum, masked_mean, masked_max, masked_min])
def test_nan_and_inf_outside_the_mask_do_not_leak(fn):
    x = torch.tensor([[1.0, math.nan], [math.inf, 4.0], [-math.inf, 2.0]], requires_grad=True)
    mask = torch.tensor([[True, False], [False, True], [False, True]])
    assert torch.isnan((x * mask).sum())  # the pattern this replaces
    for dim in (0, 1):
        assert torch.isfinite(fn(x, mask, dim=dim)).all()
    out = fn(x, mask)
    assert torch.isfinite(out)
    out.backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[~mask] == 0).all()  # no gradient reaches the unselected entries


def test_empty_selection_semantics():
    none = torch.zeros(2, 3, dtype=torch.bool)
    for dtype in (torch.float32, torch.float64):
        x = torch.ones(2, 3, dtype=dtype)
        assert masked_sum(x, none) == 0
        assert torch.isnan(masked_mean(x, none))
        assert torch.isnan(x[none].mean())  # same as the eager reference
        assert masked_max(x, none) == -math.inf and masked_min(x, none) == math.inf
        assert masked_count(x, none).item() == 0
    x = torch.ones(2, 3, dtype=torch.int64)
    assert masked_max(x, none) == torch.iinfo(torch.int64).min
    assert masked_min(x, none, dim=1).tolist() == [torch.iinfo(torch.int64).max] * 2
    with pytest.raises(RuntimeError):
        x[none].max()  # what masked_max replaces raises here
    # Reducing over a zero-length dimension: every slice is empty.
    empty = torch.empty(0, 3)
    assert masked_max(empty, torch.ones(0, 3, dtype=torch.bool), dim=0).tolist() == [-math.inf] * 3
    assert masked_min(empty, torch.ones(3, dtype=torch.bool), dim=0, keepdim=True).shape == (1, 3)
    assert masked_max(empty, torch.ones(3, dtype=torch.bool), dim=1).shape == (0,)


def test_row_mask_needs_a_trailing_axis():
    x = torch.arange(12.0).reshape(3, 4)
    rows = torch.tensor([True, False, True])
    with pytest.raises(ValueError, match=r"mask\[:, None\]"):
        masked_sum(x, rows)
    assert masked_sum(x, rows[:, None]) == x[rows].sum()
    assert torch.equal(masked_sum(x, rows[:, None], dim=0), x[rows].sum(0))
    assert torch.equal(masked_count(x, rows[:, None], dim=1), torch.tensor([4, 0, 4]))


@pytest.mark.parametrize(
    "x_shape, mask_shape", [((3,), (2, 3)), ((3, 4), (4, 1)), ((2, 3), (3, 2)), ((), (1,))]
)
def test_mask_must_broadcast_to_x(x_shape, mask_shape):
    x, mask = torch.zeros(x_shape), torch.ones(mask_shape, dtype=torch.bool)
    for fn in ALL:
        with pytest.raises(ValueError, match="does not broadcast"):
            fn(x, mask)


def test_non_bool_mask_and_bad_dims_raise():
    x = torch.ones(2, 3)
    for fn in ALL:
        with pytest.raises(TypeError, match="bool"):
            fn(x, torch.ones(2, 3, dtype=torch.int64))  # x[int_tensor] would index, not mask
        with pytest.raises(IndexError):
            fn(x, x > 0, dim=2)
        with pytest.raises(ValueError, match="more than once"):
            fn(x, x > 0, dim=(1, -1))


def test_zero_dim_input():
    x, yes, no = torch.tensor(3.0), torch.tensor(True), torch.tensor(False)
    for dim in (None, 0, -1):
        assert_same(masked_sum(x, yes, dim=dim), torch.tensor(3.0))
        assert_same(masked_mean(x, no, dim=dim), torch.tensor(math.nan))
        assert_same(masked_max(x, no, dim=dim, keepdim=True), torch.tensor(-math.inf))
        assert_same(masked_count(x, yes, dim=dim), torch.tensor(1))


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_no_mask_means_plain_reduction(data):
    # With an all-True mask the reductions are torch's own, per dim too.
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    x = _values(data.draw, torch.float32, _numel(shape)).reshape(shape)
    assume(not torch.isnan(x).any())
    yes = torch.ones(shape, dtype=torch.bool)
    dim = data.draw(st.integers(0, len(shape) - 1))
    assert_same(masked_sum(x, yes, dim=dim), x.sum(dim))
    assert_same(masked_max(x, yes, dim=dim), x.amax(dim))
    assert_same(masked_min(x, yes, dim=dim), x.amin(dim))
    assert_same(masked_mean(x, yes, dim=dim), x.mean(dim))
