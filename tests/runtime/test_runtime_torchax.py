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

from xlalint.runtime import clip_grad_norm_, optimizer_step  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

SYNC_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)
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
