"""What the JAX rules' findings rest on (issue 37): a read is per step when a loop that trains (or a
role JAX code has) runs it, a value is on the device when its origin says so, an array grows when
the join is fed by its own previous result. Each test is a general fact, written from scratch; the
harm itself is shown by the rules' own tests (test_jax_rules.py)."""

import textwrap

import pytest

from xlalint.diagnostics import HIGH, POSSIBLE
from xlalint.rules.jax_tracing.host_read_per_step import HostReadPerStep
from xlalint.testing import lint_code

jax = pytest.importorskip("jax")


def found(source: str, rule, **kwargs) -> list[tuple[int, str]]:
    """(row, confidence) of each finding."""
    return [(d.location.row, d.confidence) for d in lint_code(textwrap.dedent(source).lstrip("\n"), [rule], **kwargs)]


# -- runs every step: a loop that trains, not a function's name --------------------------------------

# An interactive viewer: `step` runs once per key press a person makes; nothing trains around it.
STEP_BY_NAME_ONLY = """
import jax
import jax.numpy as jnp

def env_step(state, action):
    return state + action, jnp.sum(state)

def step(state, action):
    state, reward = jax.jit(env_step)(state, action)
    print("reward", reward)
    return state

def on_key(event, state):
    return step(state, 1 if event == "right" else -1)
"""


def test_a_read_in_a_function_named_step_with_no_training_loop_is_possible_only():
    assert found(STEP_BY_NAME_ONLY, HostReadPerStep) == [(9, POSSIBLE)]
    # the same function, called by a loop that runs a jitted training step: seen, high
    trained = STEP_BY_NAME_ONLY + textwrap.dedent(
        """
        @jax.jit
        def train_step(params, batch):
            loss, grads = jax.value_and_grad(lambda p: jnp.sum((p * batch) ** 2))(params)
            return params - 0.1 * grads, loss

        for batch in batches:
            params, loss = train_step(params, batch)
            state = step(state, 1)
        """
    )
    assert found(trained, HostReadPerStep) == [(9, HIGH)]


def test_the_rules_examples_rest_on_a_training_loop_seen():
    for case in HostReadPerStep.INVALID:
        diagnostics = lint_code(case.code, [HostReadPerStep], modules=case.modules)
        assert [d.confidence for d in diagnostics] == [HIGH]
        assert diagnostics[0].related and diagnostics[0].related[0].message.startswith("training loop")


# -- a device value: what lives in host memory is read without a wait ----------------------------------

# `shuffled` is made under `jax.default_device(cpu)`, `kept` is put on the CPU: both are host arrays.
ON_THE_CPU = """
import jax
import numpy as np

@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: ((p * batch) ** 2).sum())(params)
    return params - 0.1 * grads, loss

cpu = jax.devices("cpu")[0]
for step, batch in enumerate(batches):
    with jax.default_device(cpu):
        shuffled = np.asarray(jax.random.permutation(jax.random.key(step), 8))
    params, loss = train_step(params, batch)
    kept = jax.device_put(loss, cpu)
    history.append(float(kept))
    order = np.asarray(jax.random.permutation(jax.random.key(step), 8))
"""


def test_arrays_made_under_a_cpu_default_device_or_put_on_the_cpu_are_host_arrays():
    assert found(ON_THE_CPU, HostReadPerStep) == [(16, HIGH)]  # only the permutation made on the default device
    data = {"batches": [jax.numpy.ones(2)] * 2, "params": jax.numpy.ones(2), "history": []}
    exec(compile(textwrap.dedent(ON_THE_CPU), "example", "exec"), data)
    assert data["kept"].devices() == {jax.devices("cpu")[0]}
    assert jax.numpy.asarray(data["shuffled"]).size == 8
