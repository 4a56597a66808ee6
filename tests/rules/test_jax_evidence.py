"""What the JAX rules' findings rest on (issue 37): a read is per step when a loop that trains (or a
role JAX code has) runs it, a value is on the device when its origin says so, an array grows when
the join is fed by its own previous result. Each test is a general fact, written from scratch, run
under JAX where running it shows the claim (compilations counted, errors raised, host types)."""

import textwrap

import numpy as np
import pytest
from jax_helpers import compiles  # noqa: E402  (tests/rules/jax_helpers.py)
from xlalint.rules.jax_tracing.array_grown_in_loop import ArrayGrownInLoop
from xlalint.rules.jax_tracing.host_read_per_step import HostReadPerStep
from xlalint.rules.jax_tracing.jit_rebuilt_in_loop import JitRebuiltInLoop
from xlalint.rules.jax_tracing.python_branch_on_tracer import PythonBranchOnTracer

from xlalint.diagnostics import HIGH, POSSIBLE
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


# -- an array grows when the join reads its own previous result ---------------------------------------

# Each iteration makes `frame` afresh, then joins it with a border: the same shape every time.
REBUILT_EACH_ITERATION = """
import jax.numpy as jnp

def frames(pieces, border):
    out = []
    for piece in pieces:
        frame = jnp.pad(piece, 1)
        frame = jnp.concatenate([frame, border])
        out.append(frame)
    return out
"""

# The pieces are gathered in a list (gated, every 100 steps) and joined once, after their loop.
JOINED_ONCE = """
import jax.numpy as jnp

def run(steps, sample):
    for step in range(steps):
        if step % 100 == 0:
            samples = []
            for i in range(4):
                samples.append(sample(i))
            samples = jnp.concatenate(samples)
"""

# The join is followed by a step that cuts a fixed window from it: the next iteration starts from
# the window, of one shape once full.
WINDOW = """
import jax.numpy as jnp

def smooth(values):
    window = jnp.zeros((0,))
    for v in values:
        window = jnp.concatenate([window, v])
        window = window[-4:]
    return window.mean()
"""

# Carried through an operation that keeps its shape, or reset only at some iterations: it grows.
GROWS = """
import jax.numpy as jnp

def trace(values, done):
    history = jnp.zeros((0,))
    for i, v in enumerate(values):
        if done(i):
            history = jnp.zeros((0,))
        history = jnp.concatenate([history, v])
        history = history * 0.5
    return history
"""


def test_a_join_fed_by_a_fresh_array_or_a_list_is_no_growth():
    for source in (REBUILT_EACH_ITERATION, JOINED_ONCE, WINDOW):
        assert found(source, ArrayGrownInLoop) == [], source
    assert found(GROWS, ArrayGrownInLoop) == [(8, HIGH)]
    for case in ArrayGrownInLoop.INVALID:
        assert len(lint_code(case.code, [ArrayGrownInLoop])) == 1


def test_a_join_fed_by_a_fresh_array_compiles_once_a_carried_one_once_per_length():
    jnp = jax.numpy
    rebuilt = _load(REBUILT_EACH_ITERATION)["frames"]
    grown = _load(GROWS)["trace"]
    border = jnp.ones(2)
    pieces, values = [jnp.full(3, float(k)) for k in range(12)], [jnp.ones(1)] * 12
    rebuilt(pieces[:2], border)
    assert compiles(lambda: rebuilt(pieces, border)) == 0  # the shapes of the first two iterations
    grown(values[:2], lambda i: False)
    assert compiles(lambda: grown(values, lambda i: False)) >= 9  # a new length each iteration
    window = _load(WINDOW)["smooth"]
    window(values[:6])
    assert compiles(lambda: window(values)) == 0  # full at 4: one shape from then on


def _load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "example", "exec"), namespace)
    return namespace


# A module's forward runs when the module is applied (inside the jitted step, as a rule): its loop
# is the module's structure, the same shapes at every call.
FLAX_MODULE = """
import flax.linen as nn
import jax.numpy as jnp

class Base(nn.Module):
    pass

class DenseStack(Base):
    depth: int

    @nn.compact
    def __call__(self, x):
        out = x
        for _ in range(self.depth):
            out = jnp.concatenate([out, nn.Dense(2)(x)], -1)
        return out
"""

EQUINOX_MODULE = """
import equinox as eqx
import jax.numpy as jnp

class Stack(eqx.Module):
    depth: int

    def __call__(self, x):
        out = x
        for _ in range(self.depth):
            out = jnp.concatenate([out, x * 2])
        return out
"""


def test_a_join_in_a_jax_modules_forward_is_the_modules_structure():
    assert found(FLAX_MODULE, ArrayGrownInLoop) == []
    assert found(EQUINOX_MODULE, ArrayGrownInLoop) == []
    plain = EQUINOX_MODULE.replace("class Stack(eqx.Module):", "class Stack:")
    assert found(plain, ArrayGrownInLoop) == [(10, HIGH)]  # no module: a loop like any other
    # a module's other method is no forward: a loop over new tokens driven eagerly grows its array
    generate = EQUINOX_MODULE.replace("def __call__(self, x):", "def generate(self, x):")
    assert found(generate, ArrayGrownInLoop) == [(10, HIGH)]
    pytest.importorskip("equinox")
    stack = _load(EQUINOX_MODULE)["Stack"](depth=6)
    x = jax.numpy.ones(2)
    assert stack(x).shape == (14,)
    assert compiles(lambda: stack(x)) == 0  # applied again: the same shapes, nothing compiles
    jitted = jax.jit(stack.__call__)
    assert compiles(lambda: [jitted(x) for _ in range(3)]) == 1  # under jit: traced once, one program


# -- a traced value's truth: a container's is its length ---------------------------------------------

CONTAINER_TRUTH = """
from typing import Optional, Tuple

import jax
import jax.numpy as jnp

@jax.jit
def clip(x, bounds: Tuple[jax.Array, jax.Array], extra: Optional[list] = None):
    if bounds:
        x = jnp.clip(x, bounds[0], bounds[1])
    if not extra:
        return x
    return x + extra[0]
"""


def test_the_truth_of_a_parameter_annotated_as_a_container_is_its_length():
    assert found(CONTAINER_TRUTH, PythonBranchOnTracer) == []
    jnp = jax.numpy
    clip = _load(CONTAINER_TRUTH)["clip"]
    assert clip(jnp.array([-2.0, 0.5, 3.0]), (jnp.array(-1.0), jnp.array(1.0))).tolist() == [-1.0, 0.5, 1.0]
    array = CONTAINER_TRUTH.replace("bounds: Tuple[jax.Array, jax.Array]", "bounds: jax.Array")
    assert found(array, PythonBranchOnTracer) == [(8, HIGH)]  # an array's truth: its value, traced
    with pytest.raises(jax.errors.TracerBoolConversionError):
        _load(array)["clip"](jnp.ones(3), jnp.array(1.0))


# -- a NumPy function given a list of device arrays reads each of them ---------------------------------

LISTS_TO_NUMPY = """
import jax
import numpy as np

@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: ((p * batch) ** 2).sum())(params)
    return params - 0.1 * grads, loss, jax.numpy.abs(grads).max()

for batch in batches:
    params, loss, peak = train_step(params, batch)
    kept = np.mean(loss)
    history.append(np.mean([loss, peak]))
    table.append(np.stack([loss * k for k in range(2)]))
"""


def test_a_numpy_function_given_a_list_of_device_arrays_reads_them_an_array_alone_stays():
    assert found(LISTS_TO_NUMPY, HostReadPerStep) == [(12, HIGH), (13, HIGH)]
    jnp = jax.numpy
    data = {"params": jnp.ones(2), "batches": [jnp.ones(2)], "history": [], "table": []}
    exec(compile(textwrap.dedent(LISTS_TO_NUMPY), "example", "exec"), data)
    assert isinstance(data["kept"], jax.Array)  # `np.mean(x)` ran the array's own mean, on the device
    assert isinstance(data["history"][0], np.floating) and isinstance(data["table"][0], np.ndarray)


# -- a jitted step kept on an object, run through a method ---------------------------------------------

KEPT_ON_AN_OBJECT = """
import jax

def update(params, batch):
    loss, grads = jax.value_and_grad(lambda p: ((p * batch) ** 2).sum())(params)
    return params - 0.1 * grads, loss

class Learner:
    def __init__(self, params):
        self.params = params
        self._update = jax.jit(update)

    def advance(self, batch):
        self.params, loss = self._update(self.params, batch)
        return loss

    def describe(self):
        return "learner", len(self.params)

learner = Learner(params)
for batch in batches:
    loss = learner.advance(batch)
    history.append(float(loss))
    name, size = learner.describe()
    print(int(size))
"""


def test_a_jitted_step_kept_on_an_object_returns_device_arrays_through_its_method():
    assert found(KEPT_ON_AN_OBJECT, HostReadPerStep) == [(22, HIGH)]
    jnp = jax.numpy
    data = {"params": jnp.ones(2), "batches": [jnp.ones(2)] * 2, "history": []}
    exec(compile(textwrap.dedent(KEPT_ON_AN_OBJECT), "example", "exec"), data)
    assert isinstance(data["loss"], jax.Array) and data["history"] == [2.0, pytest.approx(1.28)]


# -- a function jitted anew at every call of a helper that runs every step ----------------------------

REBUILT_PER_CALL = """
import jax

@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: ((p * batch) ** 2).sum())(params)
    return params - 0.1 * grads, loss

def normalised(x):
    def scale(y):
        return y / jax.numpy.abs(y).max()
    return jax.jit(scale)(x)

def make_scaler():
    def scale(y):
        return y * 2
    return jax.jit(scale)

def square(y):
    return y * y

def squared(x):
    return jax.jit(square)(x)

scaler = make_scaler()
for batch in batches:
    params, loss = train_step(params, batch)
    batch = normalised(batch)
    batch = squared(scaler(batch))
"""


def test_a_function_jitted_anew_in_a_helper_run_every_step_compiles_at_every_call():
    diagnostics = lint_code(textwrap.dedent(REBUILT_PER_CALL).lstrip("\n"), [JitRebuiltInLoop])
    assert [(d.location.row, d.confidence) for d in diagnostics] == [(11, HIGH)]
    assert [s.message for s in diagnostics[0].related][-1] == "calls `normalised` (line 27)"
    namespace = _load(REBUILT_PER_CALL.split("scaler = make_scaler()")[0])
    x = jax.numpy.arange(1.0, 4.0)
    namespace["normalised"](x)
    assert compiles(lambda: [namespace["normalised"](x) for _ in range(3)]) >= 3  # a new `scale` each call
    namespace["squared"](x), namespace["make_scaler"]()(x)
    assert compiles(lambda: [namespace["squared"](x) for _ in range(3)]) == 0  # one function object
    guessed = REBUILT_PER_CALL.split("scaler = make_scaler()")[0] + "\ndef step(x):\n    return normalised(x)\n"
    assert found(guessed, JitRebuiltInLoop) == [(11, POSSIBLE)]  # per step by a name only


# -- a loop over data that trains nothing: it reads what a jitted step computed, or it prepares data ---

PREPARED_THEN_TRAINED = """
import jax
import jax.numpy as jnp
import numpy as np

@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(lambda p: ((p * batch) ** 2).sum())(params)
    return params - 0.1 * grads, loss

@jax.jit
def eval_step(params, batch):
    return ((params * batch) ** 2).sum()

prepared = []
for batch in raw_batches:
    prepared.append(np.asarray(jnp.asarray(batch) / 255.0))

for batch in prepared:
    params, loss = train_step(params, batch)
    scaled = np.asarray(jnp.asarray(batch) / 255.0)

for batch in val_batches:
    history.append(float(jnp.mean(eval_step(params, batch))))
"""


def test_a_data_loop_that_trains_nothing_reads_only_what_a_jitted_step_computed():
    # the preparation pass (eager jnp on its own data, once) is not a step; the same read in the
    # training loop is, and so is the evaluation loop's read of its jitted step's result
    assert found(PREPARED_THEN_TRAINED, HostReadPerStep) == [(20, HIGH), (23, HIGH)]
