"""bucket_size, pad_to_bucket and pad_sequences against simple eager references on CPU."""

from __future__ import annotations

import pytest
import torch
# A [test] dependency; skip (not fail) in the minimal torch_xla venv of test_runtime_torch_xla.py.
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xlalint.runtime import bucket_size, masked_sum, pad_sequences, pad_to_bucket  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)

bucket_sets = st.lists(st.integers(0, 12), min_size=1, max_size=4, unique=True)


@SETTINGS
@given(buckets=bucket_sets, n=st.integers(0, 14))
def test_bucket_size_is_the_smallest_fitting_bucket(buckets, n):
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        with pytest.raises(ValueError, match="exceeds the largest bucket"):
            bucket_size(n, buckets)
    else:
        assert bucket_size(n, buckets) == min(fitting)
        assert bucket_size(n, iter(buckets)) == min(fitting)  # any iterable, read once


@pytest.mark.parametrize(
    "n, buckets, error, match",
    [
        (-1, [4], ValueError, ">= 0"),
        (3, [], ValueError, "empty"),
        (3, [4, -2], ValueError, "non-negative"),
        (3, [4.0], TypeError, "must be ints"),
        (3, 128, TypeError, "iterable of ints"),
        (3.0, [4], TypeError, "Python int"),
        (torch.tensor(3), [4], TypeError, "Python int"),  # int(tensor) would be a host sync
    ],
)
def test_bucket_size_rejects(n, buckets, error, match):
    with pytest.raises(error, match=match):
        bucket_size(n, buckets)


dtypes = st.sampled_from([torch.float32, torch.int64, torch.bool])


@st.composite
def pad_cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    dim = draw(st.integers(-ndim, ndim - 1))
    extra = draw(st.lists(st.integers(0, 6), min_size=0, max_size=2))
    buckets = sorted({shape[dim] + e for e in extra} | {shape[dim] + draw(st.integers(0, 3))})
    buckets = draw(st.permutations(buckets))
    dtype = draw(dtypes)
    x = torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape).to(dtype)
    value = draw(st.sampled_from([0, 1, -1])) if dtype != torch.bool else draw(st.booleans())
    return x, list(buckets), dim, value


@SETTINGS
@given(case=pad_cases())
def test_pad_to_bucket(case):
    x, buckets, dim, value = case
    padded, mask = pad_to_bucket(x, buckets, dim=dim, value=value)
    length, size = x.shape[dim], bucket_size(x.shape[dim], buckets)
    expected_shape = list(x.shape)
    expected_shape[dim] = size
    assert padded.shape == tuple(expected_shape) and padded.dtype == x.dtype
    assert mask.shape == (size,) and mask.dtype == torch.bool
    assert mask.tolist() == [True] * length + [False] * (size - length)
    assert torch.equal(padded.narrow(dim, 0, length), x)
    pad = padded.narrow(dim, length, size - length)
    assert torch.equal(pad, torch.full_like(pad, value))
    # The mask selects exactly the real entries.
    shape = [1] * x.ndim
    shape[dim] = size
    assert torch.equal(masked_sum(padded.long(), mask.reshape(shape)), x.long().sum())


def test_pad_to_bucket_returns_x_when_it_fits():
    x = torch.ones(4, 3)
    padded, mask = pad_to_bucket(x, [2, 4, 8])
    assert padded is x and mask.all() and mask.shape == (4,)


def test_pad_to_bucket_errors():
    with pytest.raises(IndexError, match="out of range"):
        pad_to_bucket(torch.tensor(1.0), [4])
    with pytest.raises(IndexError, match="out of range"):
        pad_to_bucket(torch.ones(2, 3), [4], dim=2)
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        pad_to_bucket(torch.ones(9, 3), [4, 8])


@SETTINGS
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5),
    buckets=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    trailing=st.sampled_from([(), (2,)]),
    dtype=dtypes,
    value=st.sampled_from([0, -1]),
)
def test_pad_sequences(lengths, buckets, trailing, dtype, value):
    width = 2 if trailing else 1
    seqs = [(torch.arange(n * width) + 1).reshape(n, *trailing).to(dtype) for n in lengths]
    value = bool(value) if dtype == torch.bool else value
    if max(lengths) > max(buckets):
        with pytest.raises(ValueError, match="exceeds the largest bucket"):
            pad_sequences(seqs, buckets, value=value)
        return
    batch, mask = pad_sequences(seqs, buckets, value=value)
    size = min(b for b in buckets if b >= max(lengths))
    assert batch.shape == (len(seqs), size, *trailing) and batch.dtype == dtype
    assert mask.shape == (len(seqs), size) and mask.dtype == torch.bool
    for i, s in enumerate(seqs):
        assert mask[i].tolist() == [True] * len(s) + [False] * (size - len(s))
        assert torch.equal(batch[i, : len(s)], s)
        assert torch.equal(batch[i, len(s) :], torch.full_like(batch[i, len(s) :], value))


def test_pad_sequences_errors():
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([], [4])
    with pytest.raises(ValueError, match="at least one dimension"):
        pad_sequences([torch.ones(2), torch.tensor(1.0)], [4])


def test_shapes_come_from_the_buckets():
    # The point of bucketing: many different lengths, only len(buckets) distinct shapes.
    buckets = (8, 16, 32)
    batches = [pad_sequences([torch.ones(n), torch.ones(n // 2)], buckets)[0] for n in range(1, 33)]
    shapes = {b.shape for b in batches}
    assert shapes == {(2, 8), (2, 16), (2, 32)}
