"""Robust linear regression in JAX, written the way a newcomer writes it.

Every jitted function here has a hazard that `xlalint check` reports: a boolean-mask index of a
traced array, `print` of a tracer, a Python loop over a traced bound, a branch on a traced value, a
static argument that changes every step, `jax.jit` of a new lambda inside the loop, and the loop
reading the loss on the host at every step. Under JAX
the first of them stops the script (`NonConcreteBooleanIndexError`); `fixed/train_regression.py`
is the same program written for `jit`: it runs, and compiles each function once.
"""

import json
import sys
from functools import partial

import jax
import jax.numpy as jnp


def make_data(key, n=256, d=8):
    """Features, targets from a known weight vector, and every 17th target missing (NaN)."""
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (n, d))
    y = x @ (jnp.arange(d) / d) + 0.1 * jax.random.normal(k2, (n,))
    return x, y.at[::17].set(jnp.nan)  # concrete arrays outside jit: fine


@jax.jit
def loss_fn(w, x, y):
    err = x @ w - y
    err = err.at[jnp.isnan(err)].set(0)  # missing targets count as exact predictions
    return jnp.mean(err**2)


@partial(jax.jit, static_argnames="step")
def update(w, x, y, step):
    lr = 0.1 * 0.99**step
    loss, grads = jax.value_and_grad(loss_fn)(w, x, y)
    return w - lr * grads, loss


@jax.jit
def smooth(w, n_iter):
    for _ in range(n_iter):
        w = 0.5 * (w + jnp.roll(w, 1))
    return w


@jax.jit
def outlier_error(w, x, y, threshold):
    err = jnp.abs(x @ w - y)
    print("outlier threshold", threshold)
    if threshold <= 0:
        return jnp.max(err)
    return err[err > threshold].sum()


def main(steps=100, seed=0):
    x, y = make_data(jax.random.PRNGKey(seed))
    w = jnp.zeros(x.shape[1])
    history, losses = [], []
    for step in range(steps):
        w, loss = update(w, x, y, step)
        losses.append(float(loss))
        if step % 20 == 0:
            val = jax.jit(lambda w: loss_fn(w, x, y))(w)
            print("val", val, file=sys.stderr)
            history.append(val)
    return {
        "loss": float(loss_fn(w, x, y)),
        "smoothed_norm": float(jnp.linalg.norm(smooth(w, 3))),
        "outlier_error": float(outlier_error(w, x, jnp.nan_to_num(y), 0.2)),
        "first_loss": losses[0],
        "evaluations": len(history),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
