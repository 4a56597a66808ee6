"""What JAX traces and what it does not, each a general fact: the rules stay silent where JAX sees a
Python value (the code runs under JAX as written), and still report the traced twin (it fails)."""

import textwrap

import numpy as np
import pytest

from xlalint.rules.jax_tracing.host_conversion_of_tracer import HostConversionOfTracer
from xlalint.rules.jax_tracing.host_read_per_step import HostReadPerStep
from xlalint.rules.jax_tracing.jit_rebuilt_in_loop import JitRebuiltInLoop
from xlalint.rules.jax_tracing.python_branch_on_tracer import PythonBranchOnTracer
from xlalint.testing import lint_code

from jax_helpers import compiles, load  # noqa: E402  (tests/rules/jax_helpers.py)

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def rows(source: str, rule) -> list[int]:
    return [d.location.row for d in lint_code(textwrap.dedent(source).lstrip("\n"), [rule])]


# -- names resolve where they are used ------------------------------------------------------------
TWO_LOCAL_FUNCTIONS = """
import jax

def test_eager():
    def update_fn(x, loss):
        assert loss == 1
        return x
    return update_fn(2.0, loss=1)

def test_jitted():
    def update_fn(x):
        return x * 2
    return jax.jit(update_fn)(2.0)
"""


def test_jit_of_a_local_function_traces_that_function_not_its_namesakes():
    assert rows(TWO_LOCAL_FUNCTIONS, PythonBranchOnTracer) == []
    namespace = load(TWO_LOCAL_FUNCTIONS)
    assert namespace["test_eager"]() == 2.0  # runs eagerly on Python values: the assert is fine
    assert float(namespace["test_jitted"]()) == 4.0


# -- pytrees of Python values stay Python ---------------------------------------------------------
TREE_OF_FLAGS = """
import jax
import jax.numpy as jnp

def init_step(updates, flags):
    dims = jax.tree.map(lambda s: int(s), flags)
    return jax.tree.map(lambda u, d: u * (d + 1), updates, dims)

@jax.jit
def step(updates, count):
    flags = jax.tree.map(lambda _: True, updates)
    return jax.lax.cond(count == 1, lambda: init_step(updates, flags), lambda: updates)
"""
TREE_OF_TRACERS = """
import jax

@jax.jit
def step(updates):
    return jax.tree.map(lambda u: int(u), updates)
"""


def test_a_function_mapped_over_a_pytree_sees_its_leaves():
    assert rows(TREE_OF_FLAGS, HostConversionOfTracer) == []
    out = load(TREE_OF_FLAGS)["step"]({"w": jnp.ones(2)}, 1)
    assert out["w"].tolist() == [2.0, 2.0]  # int(True) ran while tracing: a Python bool
    assert rows(TREE_OF_TRACERS, HostConversionOfTracer) == [5]
    with pytest.raises(jax.errors.ConcretizationTypeError):
        load(TREE_OF_TRACERS)["step"]({"w": jnp.ones(())})


# -- metadata and predicates are Python values ----------------------------------------------------
METADATA = """
import equinox as eqx
import jax
import jax.numpy as jnp

class Mask(eqx.Module):
    causal: bool = eqx.field(static=True)

    def is_causal(self):
        return self.causal

@jax.jit
def pool(mask, x):
    dims = jnp.size(x)
    if dims % 2 != 0:
        x = x[1:]
    if mask.is_causal():
        x = x * 2
    return x.reshape(2, -1).sum(axis=1)
"""


def test_sizes_and_predicates_of_a_pytree_are_python_values():
    pytest.importorskip("equinox")
    assert rows(METADATA, PythonBranchOnTracer) == []
    namespace = load(METADATA)
    assert namespace["pool"](namespace["Mask"](True), jnp.arange(5.0)).tolist() == [2.0 * (1 + 2), 2.0 * (3 + 4)]
    # not an array's value: a test of one still fails under jit, and is still reported
    on_values = METADATA.replace("if mask.is_causal():", "if x.sum() > 0:")
    assert rows(on_values, PythonBranchOnTracer) == [16]
    with pytest.raises(jax.errors.TracerBoolConversionError):
        load(on_values)["pool"](namespace["Mask"](True), jnp.arange(5.0))


# -- vmap passes its in_axes=None arguments through ----------------------------------------------
UNMAPPED = """
import jax

def pool(x, target, op):
    if x.shape[0] % target != 0:
        x = x[: x.shape[0] - x.shape[0] % target]
    return op(x.reshape(target, -1), axis=1)

def run(x, op):
    return jax.vmap(pool, (0, None, None))(x, 2, op)
"""
MAPPED = UNMAPPED.replace("(0, None, None))(x, 2, op)", "(0, 0, None))(x, jax.numpy.array([2, 2]), op)")


def test_vmap_passes_unmapped_python_arguments_as_they_are():
    assert rows(UNMAPPED, PythonBranchOnTracer) == []
    assert load(UNMAPPED)["run"](jnp.ones((2, 5)), jnp.sum).tolist() == [[2.0, 2.0]] * 2
    assert rows(MAPPED, PythonBranchOnTracer) == [4]
    with pytest.raises(jax.errors.TracerBoolConversionError):
        load(MAPPED)["run"](jnp.ones((2, 5)), jnp.sum)


# -- Equinox's filtered transformations trace arrays only ----------------------------------------
FILTERED = """
import equinox as eqx
import jax.numpy as jnp
from jax import Array

@eqx.filter_jit
def run(x, use_scan, k):
    if use_scan:
        x = x + 1
    if k.__name__ == "f":
        x = x * 2
    return x

@eqx.filter_jit
def clip(x: Array, limit: Array):
    if limit > 0:
        return jnp.minimum(x, limit)
    return x
"""


def test_filter_jit_makes_every_non_array_argument_static():
    pytest.importorskip("equinox")

    def f():
        return None

    assert rows(FILTERED, PythonBranchOnTracer) == [15]  # only the branch on the annotated array
    namespace = load(FILTERED)
    assert namespace["run"](jnp.ones(2), True, f).tolist() == [4.0, 4.0]
    with pytest.raises(jax.errors.TracerBoolConversionError):
        namespace["clip"](jnp.ones(2), jnp.array(0.5))


# -- the same function object hits the cache ------------------------------------------------------
FIELD_AND_METHOD = """
from typing import Callable, NamedTuple

import jax

class Transform(NamedTuple):
    update: Callable

class Model:
    def apply(self, x):
        return x * 2

    def run_methods(self, xs):
        for x in xs:
            y = jax.jit(self.apply)(x)
        return y

def run_fields(tx, xs):
    for x in xs:
        y = jax.jit(tx.update)(x)
    return y
"""


def test_jit_of_a_bound_method_in_a_loop_recompiles_a_function_field_does_not():
    assert rows(FIELD_AND_METHOD, JitRebuiltInLoop) == [14]
    namespace = load(FIELD_AND_METHOD)
    xs = [jnp.ones(3)] * 4
    model, tx = namespace["Model"](), namespace["Transform"](lambda x: x + 1)
    namespace["run_methods"] = model.run_methods
    assert compiles(lambda: model.run_methods(xs)) == 4  # a new bound-method object each time
    assert compiles(lambda: namespace["run_fields"](tx, xs)) == 1  # the same function object


LITERAL_SWEEP = """
import equinox as eqx
import jax

def test_wrappers(f):
    for wrapper in (jax.jit, eqx.filter_jit):
        @eqx.filter_jit
        def g(k):
            return k
        g(wrapper(f))
"""


def test_a_loop_over_a_written_out_tuple_compiles_once_per_item_on_purpose():
    assert rows(LITERAL_SWEEP, JitRebuiltInLoop) == []
    inside_data_loop = LITERAL_SWEEP.replace("(jax.jit, eqx.filter_jit)", "batches")
    assert rows(inside_data_loop, JitRebuiltInLoop) == [6]


# -- per step: a pass every N steps is not a step; an evaluation loop inside one is --------------
PERIODIC_PASS = """
import jax

@jax.jit
def update(state, batch):
    grads = jax.grad(loss)(state, batch)
    return state - 0.1 * grads

@jax.jit
def loss_fn(state, batch):
    return (state * batch).sum()

for step in range(steps):
    state = update(state, next(train))
    if step % eval_every == 0:
        for split, ds in evals.items():
            print(split, jax.device_get(loss_fn(state, next(ds))))
"""


def test_reads_in_a_pass_over_splits_every_n_steps_are_not_per_step():
    assert rows(PERIODIC_PASS, HostReadPerStep) == []
    eval_loop = PERIODIC_PASS.replace("for split, ds in evals.items():", "for batch in val_loader:").replace(
        "print(split, jax.device_get(loss_fn(state, next(ds))))", "total += loss_fn(state, batch).item()")
    assert rows(eval_loop, HostReadPerStep) == [16]  # every validation batch waits for the device


# -- recall: a jitted method stepping the model -------------------------------------------------
JITTED_METHOD = """
import functools

import jax
import optax

class Learner:
    @functools.partial(jax.jit, static_argnums=0)
    def update(self, params, opt_state, batch):
        grads = jax.grad(self._loss)(params, batch)
        updates, opt_state = self._opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state

    def run(self, params, opt_state, batches):
        for batch in batches:
            params, opt_state = self.update(params, opt_state, batch)
            self.published = jax.device_get(params)
"""


def test_a_loop_calling_a_jitted_method_that_trains_is_a_step_loop():
    assert rows(JITTED_METHOD, HostReadPerStep) == [16]
    other_class = JITTED_METHOD.replace("    def run(self", "class Other:\n    def run(self")
    assert rows(other_class, HostReadPerStep) == []  # `self.update` of another class: unknown


# -- NumPy functions and f-strings read device arrays ---------------------------------------------
NUMPY_READS = """
import jax
import numpy as np

@jax.jit
def train_step(params, batch):
    grads = jax.grad(lambda p: ((batch * p) ** 2).sum())(params)
    return params - 0.1 * grads, (batch * params).sum()

losses = np.array([])
for batch in batches:
    params, loss = train_step(params, batch)
    losses = np.append(losses, loss)
    log(f"loss {loss:.3f}")
    best = np.argmax(params)  # `params.argmax()`: NumPy calls the array's method, a device array
"""
NUMPY_UNDER_JIT = """
import jax
import numpy as np

@jax.jit
def normalise(x):
    return np.asarray(x) / np.mean(x)  # np.mean calls `x.mean()`: traced, fine
"""


def test_numpy_functions_and_f_strings_of_device_arrays_are_host_reads():
    assert rows(NUMPY_READS, HostReadPerStep) == [12, 13]
    logged: list = []
    data = {"batches": [jnp.ones(2)] * 2, "params": jnp.ones(2), "log": logged.append}
    exec(compile(textwrap.dedent(NUMPY_READS), "example", "exec"), data)
    assert type(data["losses"]).__module__ == "numpy" and data["losses"].round(4).tolist() == [2.0, 1.6]
    assert logged == ["loss 2.000", "loss 1.600"]  # the values: each formatted on the host
    assert type(data["best"]).__module__.startswith("jax")  # np.argmax stayed on the device
    assert rows(NUMPY_UNDER_JIT, HostConversionOfTracer) == [6]
    with pytest.raises(jax.errors.TracerArrayConversionError):
        load(NUMPY_UNDER_JIT)["normalise"](jnp.ones(2))


def test_filter_jit_compiles_once_per_python_int_from_a_loop_and_not_per_array():
    pytest.importorskip("equinox")
    from xlalint.rules.jax_tracing.static_argument_per_iteration import StaticArgumentPerIteration

    example = next(e.code for e in StaticArgumentPerIteration.INVALID if "def free(" in e.code)
    data = {"num_slots": 4, "table": jnp.ones(4)}
    assert compiles(lambda: exec(compile(example, "example", "exec"), data)) == 4  # one program per slot
    assert data["table"].tolist() == [0.0] * 4
    as_array = example.replace("table = free(table, slot)", "table = free(table, jnp.asarray(slot))").replace(
        "import equinox as eqx", "import equinox as eqx\nimport jax.numpy as jnp")
    data = {"num_slots": 4, "table": jnp.ones(4)}
    assert rows(as_array, StaticArgumentPerIteration) == []
    assert compiles(lambda: exec(compile(as_array, "example", "exec"), data)) <= 2  # traced: one program (+ asarray)
    items = example.replace("for slot in range(num_slots):", "for slot in slots:")
    assert rows(items, StaticArgumentPerIteration) == []  # the items may be arrays: traced by filter_jit


# -- a module's plain attributes are static structure; its arrays are read through `.value` -------
MODULE_ATTRIBUTES = """
import jax
import jax.numpy as jnp

class Param:
    def __init__(self, value, out_sharding=None):
        self.value, self.out_sharding = value, out_sharding

class Model:  # as Flax NNX lays a module out: attributes static, Variables hold the arrays
    def __init__(self, dim, kernel):
        self.dim, self.kernel = dim, Param(kernel, ("a", None))

jax.tree_util.register_pytree_node(Param, lambda p: ((p.value,), p.out_sharding), lambda aux, c: Param(c[0], aux))
jax.tree_util.register_pytree_node(Model, lambda m: ((m.kernel,), m.dim), lambda aux, c: Model(aux, c[0].value))

@jax.jit
def forward(model, x):
    print(model.kernel.out_sharding)
    if model.dim == 4:
        x = x * 2
    return x @ model.kernel.value
"""


def test_a_modules_attributes_and_variable_metadata_are_static_its_values_are_traced():
    assert rows(MODULE_ATTRIBUTES, PythonBranchOnTracer) == []
    model = load(MODULE_ATTRIBUTES)["Model"](4, jnp.eye(2))
    assert load(MODULE_ATTRIBUTES)["forward"](model, jnp.ones(2)).tolist() == [2.0, 2.0]
    on_value = MODULE_ATTRIBUTES.replace("if model.dim == 4:", "if model.kernel.value.sum() > 0:")
    assert rows(on_value, PythonBranchOnTracer) == [18]
    namespace = load(on_value)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        namespace["forward"](namespace["Model"](4, jnp.eye(2)), jnp.ones(2))


def test_reads_in_a_short_written_out_loop_are_a_demonstration_not_training():
    demo = NUMPY_READS.replace("for batch in batches:", "for batch in batches[:3]:")
    assert rows(demo, HostReadPerStep) == [12, 13]  # a slice of the data: still a data loop
    three = JITTED_METHOD.replace("for batch in batches:", "for _ in range(3):\n            batch = next(it)")
    assert rows(three, HostReadPerStep) == []
    many = JITTED_METHOD.replace("for batch in batches:", "for _ in range(1000):\n            batch = next(it)")
    assert rows(many, HostReadPerStep) == [17]


def test_a_filter_jit_method_of_another_module_compiles_once_per_slot(tmp_path, monkeypatch):
    pytest.importorskip("equinox")
    from xlalint.rules.jax_tracing.static_argument_per_iteration import StaticArgumentPerIteration

    example = next(e for e in StaticArgumentPerIteration.INVALID if e.modules)
    (tmp_path / "pages.py").write_text(example.modules["pages.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"num_slots": 4}
    assert compiles(lambda: exec(compile(example.code, "example", "exec"), data)) >= 4  # one per slot
    assert data["table"].refs.tolist() == [0.0] * 4


def test_a_step_loop_over_another_modules_jitted_train_step_reads_each_loss(tmp_path, monkeypatch):
    example = next(e for e in HostReadPerStep.INVALID if e.modules)
    (tmp_path / "train_lib.py").write_text(example.modules["train_lib.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"params": jnp.ones(2), "batches": [jnp.ones(2)] * 3}
    exec(compile(example.code, "example", "exec"), data)
    assert [type(h).__module__ for h in data["history"]] == ["numpy"] * 3  # each loss copied to the host
    assert [round(float(h), 4) for h in data["history"]] == [2.0, 1.28, 0.8192]


def test_a_tests_loop_of_checks_on_jitted_results_is_not_training():
    from xlalint.testing import lint_code as lint

    source = textwrap.dedent(PERIODIC_PASS).lstrip("\n").replace(
        "    if step % eval_every == 0:\n        for split, ds in evals.items():\n            print(split, jax.device_get(loss_fn(state, next(ds))))",
        "    assert float(loss_fn(state, next(train))) < 1.0")
    assert [d.location.row for d in lint(source, [HostReadPerStep])] == [14]
    for name in ("train_test.py", "tests/test_train.py", "test_train.py"):
        assert lint(source, [HostReadPerStep], path=name) == [], name


def test_a_second_read_of_the_same_array_in_a_step_is_not_another_wait():
    source = textwrap.dedent(NUMPY_READS).replace(
        '    log(f"loss {loss:.3f}")', '    history.append(loss.item())\n    bar.set_postfix(loss=loss.item())')
    assert rows(source, HostReadPerStep) == [12, 13]  # np.append, then the first .item() only
    rebound = source.replace("    bar.set_postfix", "    params, loss = train_step(params, batch)\n    bar.set_postfix")
    assert rows(rebound, HostReadPerStep) == [12, 13, 15]  # a new loss: a new wait


ITEMS_AS_STATIC = """
from functools import partial

import jax

@partial(jax.jit, static_argnums=1)
def maybe_cast(x, trainable):
    return x.astype("float32") if trainable else x

for idx, trainable in enumerate(mask_leaves):
    params[idx] = maybe_cast(params[idx], trainable)
"""


def test_a_loops_items_as_a_static_argument_compile_per_distinct_value_not_per_iteration():
    from xlalint.rules.jax_tracing.static_argument_per_iteration import StaticArgumentPerIteration

    assert rows(ITEMS_AS_STATIC, StaticArgumentPerIteration) == []
    data = {"mask_leaves": [True, False] * 3, "params": [jnp.ones(2, "bfloat16")] * 6}
    assert compiles(lambda: exec(compile(textwrap.dedent(ITEMS_AS_STATIC), "example", "exec"), data)) == 2
    by_counter = ITEMS_AS_STATIC.replace("maybe_cast(params[idx], trainable)", "maybe_cast(params[idx], idx)")
    assert rows(by_counter, StaticArgumentPerIteration) == [10]


# -- what a caller passes decides -----------------------------------------------------------------
DEFAULTS = """
import jax
from jax.sharding import PartitionSpec as P

@jax.jit
def gather(x, prefix=None, *, row_chunk: int = 16):
    if prefix:
        raise ValueError("no prefix handling")
    assert row_chunk / 8 == 2
    return x * row_chunk

def sharded(x, mesh, cp_size):
    def body(a, n):
        if n > 1:
            return a * 2
        return a
    return jax.shard_map(body, mesh=mesh, in_specs=(P(), None), out_specs=P())(x, cp_size)
"""


def test_defaults_none_tests_and_unsharded_arguments_are_python_values():
    assert rows(DEFAULTS, PythonBranchOnTracer) == []
    namespace = load(DEFAULTS)
    assert namespace["gather"](jnp.ones(2)).tolist() == [16.0, 16.0]  # the defaults bind while tracing
    mesh = jax.make_mesh((1,), ("x",))
    assert namespace["sharded"](jnp.ones(2), mesh, 3).tolist() == [2.0, 2.0]  # cp_size arrives as an int
    passed = DEFAULTS + "\ny = gather(x, row_chunk=16)\n"
    assert rows(passed, PythonBranchOnTracer) == [8]  # a caller passes it: a tracer
    with pytest.raises(jax.errors.TracerBoolConversionError):
        namespace["gather"](jnp.ones(2), row_chunk=16)


TWO_FORWARDS = """
from functools import partial

import jax

def test_a(model, x):
    @jax.jit
    def forward(model, x):
        return model(x)
    return forward(model, x)

def test_b(model, x):
    @partial(jax.jit, static_argnames=["seqlen"])
    def forward(model, x, seqlen):
        return model(x)[:seqlen]
    return forward(model, x, seqlen=[4])
"""


def test_a_jitted_name_is_the_function_defined_where_it_is_called():
    from xlalint.rules.jax_tracing.unhashable_static_argument import UnhashableStaticArgument

    assert rows(TWO_FORWARDS, UnhashableStaticArgument) == [15]  # test_b's own call, not test_a's


HOST_BRANCH = """
import jax
import jax.numpy as jnp
import numpy as np

@jax.jit
def concatenate(parts):
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return jnp.concatenate(parts)
"""


def test_a_branch_for_numpy_arrays_is_never_reached_by_a_tracer():
    assert rows(HOST_BRANCH, HostConversionOfTracer) == []
    out = load(HOST_BRANCH)["concatenate"]([np.ones(2), np.ones(2)])  # host arrays in: tracers inside
    assert out.tolist() == [1.0] * 4 and type(out).__module__.startswith("jax")
    unguarded = HOST_BRANCH.replace("    if isinstance(parts[0], np.ndarray):\n        return np.concatenate(parts)\n", "")
    unguarded = unguarded.replace("return jnp.concatenate(parts)", "return np.concatenate(parts)")
    assert rows(unguarded, HostConversionOfTracer) == [7]
    with pytest.raises(jax.errors.TracerArrayConversionError):
        load(unguarded)["concatenate"]([np.ones(2), np.ones(2)])
