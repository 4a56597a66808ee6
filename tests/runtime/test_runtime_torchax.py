""""No host sync", proven on real XLA: the code runs under jax.jit through torchax.

Under ``torchax.interop.jax_jit`` every torch tensor wraps a JAX tracer, which
has no value. Anything that would copy a value to the host (``.item()``,
``bool(t)``, ``.cpu()``, a Python ``if`` or ``max()`` on tensors) raises
instead of syncing, so "runs under jit" is a proof of "never syncs". The
negative controls check that the harness does catch syncs.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

# torchax mutates process-wide state on import; undo what it sets so other tests see stock torch.
_fastpath = torch.backends.mha.get_fastpath_enabled()
_telemetry = os.environ.get("ENABLE_RUNTIME_UPTIME_TELEMETRY")
jax = pytest.importorskip("jax")
torchax = pytest.importorskip("torchax")
from torch.nn.utils.clip_grad import clip_grad_norm_ as torch_clip_grad_norm_  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402
from torchax import interop  # noqa: E402

torch.backends.mha.set_fastpath_enabled(_fastpath)
if _telemetry is None:
    os.environ.pop("ENABLE_RUNTIME_UPTIME_TELEMETRY", None)

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
    pad_to_bucket,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
    # jax runs without x64 here: int64 values are traced as int32 (see same_values).
    pytest.mark.filterwarnings("ignore:Explicitly requested dtype int64"),
]

SYNC_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)
# Boolean indexing has a value-dependent shape: under jit it raises this instead.
SHAPE_ERRORS = (*SYNC_ERRORS, jax.errors.NonConcreteBooleanIndexError)
NORM_TYPES = [1, 2.0, 3.5, math.inf, "inf"]


def close(actual, expected):
    # XLA's CPU reductions and pow/sqrt lowerings may round differently from
    # ATen's kernels (a few float32 ulps); in practice they match exactly here.
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-7, equal_nan=True)


@pytest.fixture(autouse=True)
def _torchax_left_disabled():
    yield
    assert not torchax.default_env().enabled
    assert type(torch.ones(1) + 1) is torch.Tensor  # no torchax mode left active


def same_values(actual, expected):
    """Exact equality up to dtype width: without x64, jax gives int32/float32 for int64/float64."""
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.to(expected.dtype), expected, rtol=0, atol=0, equal_nan=True)


def run_jitted(fn, *args):
    """Run ``fn(*args)`` under jax.jit via torchax; CPU tensors in, CPU tensors out."""
    env = torchax.default_env()
    with env:
        jax_args = pytree.tree_map_only(torch.Tensor, lambda t: t.to("jax"), args)
    out = interop.jax_jit(fn)(*jax_args)
    return pytree.tree_map_only(torch.Tensor, lambda t: t.torch(), out)


def _with_grads(weights, grads):
    params = []
    for w, g in zip(weights, grads):
        p = w.clone()
        p.grad = g.clone()
        params.append(p)
    return params


def _data(seed=0, n=4):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(3 + i, 5, generator=gen) for i in range(n)]
    grads = [torch.randn(3 + i, 5, generator=gen) for i in range(n)]
    return weights, grads


def _clip_step(clip_fn, *args, **kwargs):
    def step(weights, grads):
        params = _with_grads(weights, grads)
        norm = clip_fn(params, *args, **kwargs)
        return norm, [p.grad for p in params]

    return step


def _eager_torch_clip(weights, grads, *args, **kwargs):
    params = _with_grads(weights, grads)
    norm = torch_clip_grad_norm_(params, *args, **kwargs)
    return norm, [p.grad for p in params]


NEGATIVE_CONTROLS = {
    "item": lambda w, g: g[0].sum().item(),
    "float": lambda w, g: float(g[0].sum()),
    "cpu": lambda w, g: g[0].cpu(),
    "if_tensor": lambda w, g: g[0] if g[0].norm() > 1.0 else g[1],
    # torch_xla's patched clip_grad_norm_ takes a Python max() over per-grad norms for inf.
    "python_max": lambda w, g: max(x.abs().max() for x in g),
    "torch_clip_error_if_nonfinite": _clip_step(
        torch_clip_grad_norm_, 1.0, error_if_nonfinite=True
    ),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE_CONTROLS))
def test_harness_catches_host_syncs(name):
    with pytest.raises(SYNC_ERRORS):
        run_jitted(NEGATIVE_CONTROLS[name], *_data())


def test_harness_runs_sync_free_code():
    # Positive control: upstream torch clipping without error_if_nonfinite is sync-free too.
    weights, grads = _data()
    norm, new_grads = run_jitted(_clip_step(torch_clip_grad_norm_, 0.1), weights, grads)
    expected_norm, expected_grads = _eager_torch_clip(weights, grads, 0.1)
    close(norm, expected_norm)
    close(new_grads, expected_grads)


@pytest.mark.parametrize("foreach", [None, True])
@pytest.mark.parametrize("max_norm", [0.05, 1e6], ids=["clip", "no_clip"])
@pytest.mark.parametrize("norm_type", NORM_TYPES, ids=repr)
def test_runtime_clip_runs_under_jit(norm_type, max_norm, foreach):
    weights, grads = _data()
    step = _clip_step(clip_grad_norm_, max_norm, norm_type, foreach=foreach)
    norm, new_grads = run_jitted(step, weights, grads)
    expected_norm, expected_grads = _eager_torch_clip(weights, grads, max_norm, norm_type)
    close(norm, expected_norm)
    close(new_grads, expected_grads)
    assert norm.dtype == torch.float32 and norm.shape == ()


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_runtime_error_if_nonfinite_warns_instead_of_syncing(bad):
    weights, grads = _data()
    grads[2][1, 1] = bad
    step = _clip_step(clip_grad_norm_, 1.0, error_if_nonfinite=True)
    with pytest.warns(UserWarning, match="error_if_nonfinite=True is not checked on 'jax'"):
        norm, new_grads = run_jitted(step, weights, grads)
    expected_norm, expected_grads = _eager_torch_clip(weights, grads, 1.0)
    assert not torch.isfinite(norm)
    close(norm, expected_norm)
    close(new_grads, expected_grads)


def _sgd_steps(step_fn):
    def run(weights, grads):
        params = _with_grads(weights, grads)
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2)
        for _ in range(2):
            step_fn(opt)
        return params

    return run


def test_optimizer_step_runs_under_jit():
    weights, grads = _data()
    actual = run_jitted(_sgd_steps(lambda opt: optimizer_step(opt, barrier=True)), weights, grads)
    expected = _sgd_steps(lambda opt: opt.step())(weights, grads)
    assert not torch.equal(expected[0], weights[0])
    close(actual, [p.detach() for p in expected])


def test_clip_then_step_under_jit():
    def train_step(clip_fn, step_fn):
        def run(weights, grads):
            params = _with_grads(weights, grads)
            opt = torch.optim.SGD(params, lr=0.5)
            norm = clip_fn(params, 0.1, "inf")
            step_fn(opt)
            return norm, params

        return run

    weights, grads = _data(seed=1)
    norm, params = run_jitted(train_step(clip_grad_norm_, optimizer_step), weights, grads)
    expected_norm, expected = train_step(torch_clip_grad_norm_, lambda o: o.step())(weights, grads)
    close(norm, expected_norm)
    close(params, [p.detach() for p in expected])


# ---------------------------------------------------------------- masks, accumulators, buckets


def _masked_data(dtype=torch.float32, seed=0):
    """x of shape (5, 6) with NaN/inf at unselected positions, and its mask."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randint(-400, 400, (5, 6), generator=gen) / 4).to(dtype)  # exact sums in any order
    mask = torch.rand(5, 6, generator=gen) > 0.5
    mask[3] = False  # an empty row
    if dtype.is_floating_point:
        x = torch.where(mask, x, torch.tensor([math.nan, math.inf, -math.inf]).repeat(10)[:30].reshape(5, 6))
    return x, mask


MASK_NEGATIVE_CONTROLS = {
    "bool_index_sum": lambda x, m: x[m].sum(),
    "bool_index_mean": lambda x, m: x[m].mean(),
    "nonzero": lambda x, m: torch.nonzero(m),
    "argwhere": lambda x, m: torch.argwhere(m),
    "where_one_arg": lambda x, m: torch.where(m)[0],
    "masked_select": lambda x, m: torch.masked_select(x, m),
    "torch_nonzero_static": lambda x, m: torch.nonzero_static(m, size=4),  # not sync-free here either
    "running_item": lambda x, m: sum(x[i].sum().item() for i in range(2)),
}


@pytest.mark.parametrize("name", sorted(MASK_NEGATIVE_CONTROLS))
def test_harness_catches_data_dependent_shapes(name):
    with pytest.raises(SHAPE_ERRORS):
        run_jitted(MASK_NEGATIVE_CONTROLS[name], *_masked_data())


@pytest.mark.parametrize("shape", [(), (7,), (5, 6), (2, 3, 4), (0, 3)], ids=str)
def test_nonzero_static_runs_under_jit(shape):
    gen = torch.Generator().manual_seed(len(shape))
    mask = torch.rand(shape, generator=gen) > 0.5
    count = int(mask.sum())
    for size in sorted({0, max(count - 2, 0), count, count + 3}):
        actual = run_jitted(lambda m, size=size: nonzero_static(m, size, fill_value=-3), mask)
        same_values(actual, torch.nonzero_static(mask, size=size, fill_value=-3))


def test_nonzero_static_of_float_mask_runs_under_jit():
    values = torch.tensor([[0.0, math.nan, 2.0], [0.0, 0.0, -math.inf]])
    actual = run_jitted(lambda v: nonzero_static(v, 5), values)
    same_values(actual, torch.nonzero_static(values, size=5))


def _eager_masked(fn, x, mask, dim, keepdim):
    """The eager reference by boolean indexing (per row/column for dim=1/0)."""
    mask = mask.expand(x.shape)
    info = torch.finfo(x.dtype) if x.dtype.is_floating_point else torch.iinfo(x.dtype)
    lowest, highest = (-math.inf, math.inf) if x.dtype.is_floating_point else (info.min, info.max)
    ops = {
        masked_sum: lambda s: s.sum(),
        masked_mean: lambda s: s.mean() if s.dtype.is_floating_point else s.sum() / s.numel(),
        masked_max: lambda s: s.max() if s.numel() else torch.tensor(lowest, dtype=s.dtype),
        masked_min: lambda s: s.min() if s.numel() else torch.tensor(highest, dtype=s.dtype),
        masked_count: lambda s: torch.tensor(s.numel()),
    }
    op = ops[fn]
    if dim is None:
        out = op(x[mask])
        return out.reshape(1, 1) if keepdim else out
    xt, mt = (x, mask) if dim == 1 else (x.T, mask.T)
    out = torch.stack([op(row[m]) for row, m in zip(xt, mt)])
    return out.unsqueeze(dim) if keepdim else out


MASKED = [masked_sum, masked_mean, masked_max, masked_min, masked_count]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("fn", MASKED, ids=lambda f: f.__name__)
def test_masked_reductions_run_under_jit(fn, dim, keepdim):
    x, mask = _masked_data()
    actual = run_jitted(lambda x, m: fn(x, m, dim=dim, keepdim=keepdim), x, mask)
    expected = _eager_masked(fn, x, mask, dim, keepdim)
    assert torch.isnan(x).any() and torch.isinf(x).any()  # unselected entries are NaN/inf...
    if fn is not masked_mean or dim != 1:  # (row 3 selects nothing: its mean is NaN)
        assert not torch.isnan(expected).any()  # ...and do not leak into the result
    _compare(fn, actual, expected)


def _compare(fn, actual, expected):
    if fn is masked_mean:  # XLA may round the division by the count differently (1 ulp)
        close(actual.to(expected.dtype), expected)
    else:
        same_values(actual, expected)


@pytest.mark.parametrize("fn", MASKED, ids=lambda f: f.__name__)
def test_masked_reductions_of_ints_and_row_masks_run_under_jit(fn):
    x, _ = _masked_data(torch.int32, seed=1)
    rows = torch.tensor([True, False, True, True, False])[:, None]  # a row mask, broadcast
    for dim in (None, 0, 1):
        actual = run_jitted(lambda x, m, dim=dim: fn(x, m, dim=dim), x, rows)
        eager = fn(x, rows, dim=dim)
        _compare(fn, actual, eager)
        _compare(fn, actual, _eager_masked(fn, x, rows, dim, False).to(eager.dtype))


def _accumulate(values, weights):
    acc = DeviceAccumulator()
    for i in range(values.shape[0]):
        acc.add(values[i], weights[i])  # tensor weights
    acc.add(values[1] * 2, weight=0.5)  # a Python weight
    acc.add(values[0] + 1)
    return acc.mean(), acc.sum(), acc.total_weight()


def test_accumulator_runs_under_jit():
    values = torch.tensor([1.5, -2.0, math.nan, 4.0, math.inf])
    weights = torch.tensor([1.0, 3.0, 0.0, 2.0, 0.0])  # NaN/inf only at weight 0
    mean, total, weight = run_jitted(_accumulate, values, weights)
    expected_total = 1.5 * 1 - 2.0 * 3 + 4.0 * 2 + (-4.0) * 0.5 + 2.5
    expected_weight = 1 + 3 + 2 + 0.5 + 1
    close(total, torch.tensor(expected_total))
    close(weight, torch.tensor(expected_weight))
    close(mean, torch.tensor(expected_total / expected_weight))
    for actual, eager in zip((mean, total, weight), _accumulate(values, weights)):
        close(actual, eager)


def test_accumulator_read_is_the_one_host_sync():
    # Negative control: read() is the intended sync, so under jit it must raise.
    def read(values, weights):
        acc = DeviceAccumulator()
        acc.add(values[0], weights[0])
        return acc.read()

    with pytest.raises(SYNC_ERRORS):
        run_jitted(read, torch.ones(2), torch.ones(2))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_pad_to_bucket_runs_under_jit(dim):
    x = torch.arange(15.0).reshape(3, 5)
    actual, actual_mask = run_jitted(lambda x: pad_to_bucket(x, (4, 8), dim=dim, value=-1), x)
    expected, expected_mask = pad_to_bucket(x, (4, 8), dim=dim, value=-1)
    assert expected.shape[dim] in (4, 8) and not expected_mask.all()
    same_values(actual, expected)
    same_values(actual_mask, expected_mask)


def test_pad_sequences_runs_under_jit():
    seqs = (torch.arange(1, 4), torch.arange(1, 7), torch.arange(1, 2))
    batch, mask = run_jitted(lambda *s: pad_sequences(s, (4, 8)), *seqs)
    expected, expected_mask = pad_sequences(seqs, (4, 8))
    assert expected.shape == (3, 8)
    same_values(batch, expected)
    same_values(mask, expected_mask)
