"""Robust linear regression in JAX, written for `jit` (the fixed form of ../train_regression.py).

What changed, hazard by hazard (`xlalint check` reports each one in the original):
- JAX105: `err.at[jnp.isnan(err)].set(0)` -> `jnp.where(jnp.isnan(err), 0, err).astype(err.dtype)` (`xlalint fix`);
  `err[err > threshold].sum()` -> `jnp.where(err > threshold, err, 0).sum()` (by hand: the
  threshold's shape is not evident to the linter, it is a scalar here).
- JAX104: `print` of a tracer -> `jax.debug.print` (`xlalint fix`).
- JAX106: `for _ in range(n_iter)` -> `lax.fori_loop`, so `n_iter` stays a traced argument.
- JAX103: `if threshold <= 0` -> `jnp.where`.
- JAX109: `step` is traced: one program for every step.
- JAX107: the evaluation function is jitted once, before the loop, and takes the data as arguments.
- JAX110: the losses stay on the device during the loop and are read once after it.
"""

import json
import sys

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
    err = jnp.where(jnp.isnan(err), 0, err).astype(err.dtype)  # missing targets count as exact predictions
    return jnp.mean(err**2)


@jax.jit
def update(w, x, y, step):
    lr = 0.1 * 0.99**step
    loss, grads = jax.value_and_grad(loss_fn)(w, x, y)
    return w - lr * grads, loss


@jax.jit
def smooth(w, n_iter):
    return jax.lax.fori_loop(0, n_iter, lambda _, w: 0.5 * (w + jnp.roll(w, 1)), w)


@jax.jit
def outlier_error(w, x, y, threshold):
    err = jnp.abs(x @ w - y)
    jax.debug.print("outlier threshold {}", threshold)
    return jnp.where(threshold <= 0, jnp.max(err), jnp.where(err > threshold, err, 0).sum())


def main(steps=100, seed=0):
    x, y = make_data(jax.random.PRNGKey(seed))
    w = jnp.zeros(x.shape[1])
    history, losses = [], []
    for step in range(steps):
        w, loss = update(w, x, y, step)
        losses.append(loss)  # stays on the device: the host does not wait for each step
        if step % 20 == 0:
            val = loss_fn(w, x, y)
            print("val", val, file=sys.stderr)
            history.append(val)
    losses = [float(v) for v in jax.device_get(losses)]  # one transfer, after the loop
    return {
        "loss": float(loss_fn(w, x, y)),
        "smoothed_norm": float(jnp.linalg.norm(smooth(w, 3))),
        "outlier_error": float(outlier_error(w, x, jnp.nan_to_num(y), 0.2)),
        "first_loss": losses[0],
        "evaluations": len(history),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
