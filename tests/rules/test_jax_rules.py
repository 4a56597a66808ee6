"""JAX rules: the INVALID examples fail under real JAX (CPU), the fixed forms run and compile once.

Backend assumptions: the compile counts and host waits below were measured on the CPU backend, and
on CUDA (jax 0.11.2, one H200) every claim held but two, which assert what holds on every backend
and say so: the sweep over literal configurations compiles once per configuration at least (4 on
CPU, 6 on CUDA, which compiles helper programs too), and whether a step's value is still being
computed when the host reads it is a timing claim asserted on CPU only (CUDA's first timed step
was already done).
"""

import textwrap
import warnings

import pytest

from xlalint.rules.jax_tracing.boolean_mask_of_tracer import BooleanMaskOfTracer
from xlalint.rules.jax_tracing.host_conversion_of_tracer import HostConversionOfTracer
from xlalint.rules.jax_tracing.host_read_per_step import HostReadPerStep
from xlalint.rules.jax_tracing.jit_rebuilt_in_loop import JitRebuiltInLoop
from xlalint.rules.jax_tracing.nonzero_without_size import NonzeroWithoutSize
from xlalint.rules.jax_tracing.print_of_tracer import PrintOfTracer
from xlalint.rules.jax_tracing.python_branch_on_tracer import PythonBranchOnTracer
from xlalint.rules.jax_tracing.python_loop_over_traced_range import PythonLoopOverTracedRange
from xlalint.rules.jax_tracing.python_scalar_becomes_array import PythonScalarBecomesArray
from xlalint.rules.jax_tracing.static_argument_per_iteration import StaticArgumentPerIteration
from xlalint.rules.jax_tracing.unhashable_static_argument import UnhashableStaticArgument
from xlalint.testing import fix_code, lint_code

from jax_helpers import compiles, load  # noqa: E402  (tests/rules/jax_helpers.py)

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ON_CPU = jax.default_backend() == "cpu"  # the backend the exact counts and timings were measured on


def test_nonzero_without_size_raises_under_jit_and_the_sized_form_compiles_once():
    invalid = load(NonzeroWithoutSize.INVALID[0].code)["positive_sum"]
    with pytest.raises(jax.errors.ConcretizationTypeError):
        invalid(jnp.array([1.0, -2.0, 3.0]))
    fixed = load(NonzeroWithoutSize.VALID[0].code)["positive_sum"]
    for data in ([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [5.0, 6.0, 7.0]):
        x = jnp.array(data)
        assert float(fixed(x)) == float(jnp.where(x > 0, x, 0).sum())
    assert fixed._cache_size() == 1  # one compilation for every data: the shape is static


def test_unique_in_a_helper_of_a_jitted_step_raises_too():
    namespace = load(NonzeroWithoutSize.INVALID[1].code)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        namespace["step"](jnp.ones(3), jnp.array([0, 1, 1]), n=2)


def test_where_with_one_argument_in_a_scan_body_raises():
    namespace = {"xs": jnp.array([[1.0, -1.0, 2.0], [0.0, 3.0, -4.0]])}  # one row per step
    source = textwrap.dedent(NonzeroWithoutSize.INVALID[2].code)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        exec(compile(source, "example", "exec"), namespace)


@pytest.mark.parametrize("source, rows", [
    # jax.jit(f) elsewhere in the module traces f
    ("import jax\nimport jax.numpy as jnp\n\ndef f(x):\n    return jnp.argwhere(x)\n\ng = jax.jit(f)\n", [5]),
    # a lambda given to lax.cond, a vmapped function
    ("import jax\nimport jax.numpy as jnp\nfrom jax import lax\n\n"
     "y = lax.cond(p, lambda x: jnp.flatnonzero(x), lambda x: x, x)\n", [5]),
    ("import jax\nimport jax.numpy as jnp\n\n@jax.vmap\ndef per_row(r):\n    return jnp.unique(r, size=4)\n", []),
    # not JAX: torch.nonzero, numpy, a method of something else
    ("import numpy as jnp\n\n@jit\ndef f(x):\n    return jnp.nonzero(x)\n", []),
])
def test_traced_functions_by_structure(source, rows):
    assert [d.location.row for d in lint_code(source, [NonzeroWithoutSize])] == rows


def test_host_conversions_of_tracers_raise_and_the_static_forms_compile_once():
    invalid = load(HostConversionOfTracer.INVALID[0].code)["loss_and_log"]
    with pytest.raises(jax.errors.ConcretizationTypeError):
        invalid(jnp.ones(3), jnp.ones((2, 3)))
    with pytest.raises(jax.errors.ConcretizationTypeError):
        load(HostConversionOfTracer.INVALID[1].code)
    tile = load(HostConversionOfTracer.VALID[0].code)["tile"]
    for data in ([1.0, 2.0], [3.0, 4.0]):
        assert tile(jnp.array(data), 2).tolist() == data * 2
    assert tile._cache_size() == 1


def test_python_branches_on_tracers_raise_and_jnp_where_compiles_once():
    invalid = load(PythonBranchOnTracer.INVALID[0].code)["relu_or_zero"]
    with pytest.raises(jax.errors.TracerBoolConversionError):
        invalid(jnp.array([-1.0, 2.0]), 1.0)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        load(PythonBranchOnTracer.INVALID[1].code)["solve_fast"](jnp.array([4.0, -8.0]))
    fixed = load(PythonBranchOnTracer.VALID[1].code)["relu_or_zero"]
    assert fixed(jnp.array([-1.0, 2.0]), 1.0).tolist() == [0.0, 2.0]
    assert fixed(jnp.array([-1.0, 2.0]), -1.0).tolist() == [0.0, 0.0]
    assert fixed._cache_size() == 1  # one program for every t
    dropout = load(PythonBranchOnTracer.VALID[0].code)["dropout"]
    assert dropout(jnp.ones((2, 2)), jax.random.PRNGKey(0), training=False).tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("source, rows", [
    # a helper called from jitted code may be given static values by its callers: not judged
    ("import jax\nimport jax.numpy as jnp\n\ndef scale(x, k):\n    if k > 1:\n        return x * k\n    return x\n\n"
     "@jax.jit\ndef f(x):\n    return scale(x, 2)\n", []),
    # `static_argnums` by position; metadata in a loop bound; `is None`
    ("import jax\nfrom functools import partial\n\n@partial(jax.jit, static_argnums=(1,))\ndef f(x, n, y=None):\n"
     "    if n > 2 and x.shape[0] > 1 and y is not None:\n        return x\n    return -x\n", []),
    # a traced parameter through an assignment and a method
    ("import jax\n\n@jax.jit\ndef f(x):\n    m = x.mean()\n    return 1.0 if m > 0 else -1.0\n", [6]),
])
def test_traced_values_by_structure(source, rows):
    assert [d.location.row for d in lint_code(source, [PythonBranchOnTracer, HostConversionOfTracer])] == rows


def test_print_of_a_tracer_shows_it_once_and_jax_debug_print_shows_every_value(capsys):
    invalid = load(PrintOfTracer.INVALID[0].code)["step"]
    fixed = load(PrintOfTracer.INVALID[0].expected_replacement)["step"]
    params = jnp.ones(2)
    for scale in (1.0, 2.0):
        invalid(params, jnp.full((3, 2), scale))
    printed = capsys.readouterr().out
    assert printed.count("loss") == 1 and "Tracer" in printed  # once, at tracing, no value
    for scale in (1.0, 2.0):
        assert float(fixed(params, jnp.full((3, 2), scale))) == (2 * scale) ** 2
    jax.effects_barrier()
    printed = capsys.readouterr().out
    assert printed.split() == ["loss", "4.0", "loss", "16.0"]  # every call, the values
    assert fixed._cache_size() == 1


def test_boolean_masks_raise_under_jit_and_the_where_rewrites_are_exact_and_compile_once():
    import math

    for example in BooleanMaskOfTracer.INVALID:
        namespace = load(example.code)
        func = next(v for k, v in namespace.items() if callable(v) and k not in ("jax", "jnp"))
        args = (jnp.array([[1.0, 2.0], [3.0, 4.0]]), 1) if func.__name__ == "masked_rows" else (jnp.array([1.0, -2.0]),)
        with pytest.raises(jax.errors.NonConcreteBooleanIndexError):
            func(*args)
    clean = load(BooleanMaskOfTracer.INVALID[0].expected_replacement)["clean"]
    positive_sum = load(BooleanMaskOfTracer.INVALID[1].expected_replacement)["positive_sum"]
    for data in ([1.0, math.nan, -3.0], [math.nan, math.nan, math.nan], [2.0, 5.0, 0.5]):
        eager = [0.0 if math.isnan(v) else v for v in data]  # the reference, without tracing
        assert float(clean(jnp.array(data))) == sum(v for v in eager if v > 0)
        assert float(positive_sum(jnp.array(eager))) == sum(v for v in eager if v > 0)
    assert clean._cache_size() == 1 and positive_sum._cache_size() == 1


def test_a_float_fill_is_unsafe_because_at_set_casts_it_to_an_integer_array():
    x = jnp.array([1, -2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # newer JAX warns that this cast will raise
        assert x.at[x < 0].set(0.5).tolist() == [1, 0, 3]  # eager `.at[]` keeps int32: 0.5 -> 0
    assert jnp.where(x < 0, 0.5, x).tolist() == [1.0, 0.5, 3.0]  # promoted to float
    source = "import jax\n\n@jax.jit\ndef f(x):\n    return x.at[x < 0].set(0.5)\n"
    (diagnostic,) = lint_code(source, [BooleanMaskOfTracer])
    assert diagnostic.fix is not None and diagnostic.fix.applicability.value == "unsafe"
    (diagnostic,) = lint_code(source.replace("0.5", "-1"), [BooleanMaskOfTracer])
    assert diagnostic.fix.applicability.value == "safe"


@pytest.mark.parametrize("source, fixable", [
    ("import jax\n\n@jax.jit\ndef f(x, y):\n    return x[y > 0].sum()\n", False),  # y's shape is not x's
    ("import jax\nimport jax.numpy as jnp\n\n@jax.jit\ndef f(x):\n    m = ~jnp.isnan(x) & (x < 9)\n"
     "    return x[m].sum()\n", True),
    ("import jax\n\n@jax.jit\ndef f(x):\n    return x[x > 0].mean()\n", False),
    ("import jax\n\n@jax.jit\ndef f(x):\n    return x.at[x > 0].add(1)\n", False),
])
def test_boolean_mask_fixes_only_when_the_mask_has_the_arrays_shape(source, fixable):
    (diagnostic,) = lint_code(source, [BooleanMaskOfTracer])
    assert (diagnostic.fix is not None) == fixable


@pytest.mark.parametrize("source", [
    "import jax\n\n@jax.jit\ndef f(x, i):\n    return x[i]\n",  # an integer tracer index keeps the shape
    "import jax\nimport numpy as np\n\ndef f(x):\n    return x[x > 0]\n",  # not traced
    "import jax\n\n@jax.jit\ndef f(x):\n    keep = x.shape[0] > 2\n    return x\n",
])
def test_boolean_mask_look_alikes(source):
    assert lint_code(source, [BooleanMaskOfTracer]) == []


def test_python_loop_over_a_traced_range_raises_and_fori_loop_compiles_once():
    invalid = load(PythonLoopOverTracedRange.INVALID[0].code)["power_iteration"]
    a, v = jnp.array([[2.0, 0.0], [0.0, 1.0]]), jnp.array([1.0, 1.0])
    with pytest.raises(jax.errors.TracerIntegerConversionError):
        invalid(a, v, 3)
    fixed = load(PythonLoopOverTracedRange.VALID[0].code)["power_iteration"]
    for n in (1, 5, 30):
        assert abs(float(fixed(a, v, n)[0]) - 2.0 ** n / (4.0 ** n + 1) ** 0.5) < 1e-5
    assert fixed._cache_size() == 1
    unrolled = load(PythonLoopOverTracedRange.VALID[1].code)["cumulative"]
    assert unrolled(jnp.array([1.0, 2.0, 3.0])).tolist() == [1.0, 3.0, 6.0]


def test_jit_of_a_new_function_each_iteration_compiles_each_iteration():
    invalid, valid = JitRebuiltInLoop.INVALID[0].code, JitRebuiltInLoop.VALID[0].code
    data = {"batches": [jnp.ones((2, 2)) * k for k in range(4)], "params": jnp.ones(2)}
    assert compiles(lambda: exec(compile(invalid, "example", "exec"), dict(data))) == 4
    assert compiles(lambda: exec(compile(valid, "example", "exec"), dict(data))) == 1
    train = load(JitRebuiltInLoop.INVALID[1].code)["train"]
    assert compiles(lambda: train(jnp.ones(2), data["batches"])) == 4
    same_function = JitRebuiltInLoop.VALID[1].code
    assert compiles(lambda: exec(compile(same_function, "example", "exec"), {"inputs": [jnp.ones(2)] * 4})) == 1


@pytest.mark.parametrize("source, rows", [
    # a bound method is a new object at every access; a module's function is not
    ("import jax\nimport numpy as np\n\nclass M:\n    def f(self, x):\n        return x\n\n    def run(self, xs):\n"
     "        for x in xs:\n            a = jax.jit(np.sin)(x)\n            b = jax.jit(self.f)(x)\n", [11]),
    ("import jax\nfrom functools import partial\n\nwhile True:\n    y = jax.jit(partial(f, k=2))(x)\n", [5]),
    # hoisted: the jit is outside the loop
    ("import jax\n\nstep = jax.jit(lambda p, b: p - b)\nfor b in bs:\n    p = step(p, b)\n", []),
])
def test_jit_rebuilt_in_loop_by_structure(source, rows):
    assert [d.location.row for d in lint_code(source, [JitRebuiltInLoop])] == rows


def test_unhashable_static_arguments_raise_and_tuples_compile_once():
    for example in UnhashableStaticArgument.INVALID:
        with pytest.raises(ValueError, match="Non-hashable static arguments"):
            exec(compile(example.code, "example", "exec"), {"x": jnp.ones((2, 3))})
    namespace = load(UnhashableStaticArgument.VALID[0].code.replace("y = ", "x = jax.numpy.ones((2, 3))\ny = "))
    assert namespace["y"].shape == (2, 2) and namespace["project"]._cache_size() == 1


def test_a_loop_variable_as_static_argument_compiles_every_iteration():
    data = {"params": jnp.ones(2), "grads": jnp.ones(2)}
    source = StaticArgumentPerIteration.INVALID[0].code.replace("range(1000)", "range(5)")
    assert compiles(lambda: exec(compile(source, "example", "exec"), dict(data))) == 5
    fixed = StaticArgumentPerIteration.VALID[0].code.replace("range(1000)", "range(5)")
    assert compiles(lambda: exec(compile(fixed, "example", "exec"), dict(data))) == 1
    through_a_variable = next(e.code for e in StaticArgumentPerIteration.INVALID if "lr = 0.1" in e.code)
    source = through_a_variable.replace("range(1000)", "range(5)")
    assert compiles(lambda: exec(compile(source, "example", "exec"), dict(data))) >= 5  # a new lr each step


@pytest.mark.parametrize("source, codes", [
    # static_argnums counts `self` for a decorated method
    ("import jax\nfrom functools import partial\n\nclass M:\n    @partial(jax.jit, static_argnums=(0, 2))\n"
     "    def f(self, x, training):\n        if training:\n            return x\n        return -x\n", []),
    # `step = jax.jit(f, static_argnums=1)`, called positionally with the counter
    ("import jax\n\ndef f(x, n):\n    return x * n\n\nstep = jax.jit(f, static_argnums=1)\n"
     "for i, x in enumerate(xs):\n    y = step(x, i + 1)\n    z = step(x, len(x))\n", ["JAX109"]),
    # a dict for a traced argument is a pytree
    ("import jax\n\n@jax.jit\ndef f(params, x):\n    return x\n\nf({'w': 1}, [1, 2])\n", []),
])
def test_static_arguments_by_structure(source, codes):
    rules = [StaticArgumentPerIteration, UnhashableStaticArgument, PythonBranchOnTracer]
    assert [d.code for d in lint_code(source, rules)] == codes


@pytest.mark.parametrize("source, rows", [
    # a fori_loop body gets (index, carry): a later parameter keeps its Python default
    ("import jax\nfrom jax import lax\n\ndef body(i, carry, causal=False):\n    if causal:\n        return carry + i\n"
     "    return carry\n\nout = lax.fori_loop(0, 4, body, 0.0)\n", []),
    ("import jax\nfrom jax import lax\n\ndef body(i, carry):\n    if carry > 1:\n        return carry\n"
     "    return carry + i\n\nout = lax.fori_loop(0, 4, body, 0.0)\n", [5]),
    # lax.cond passes its operands to both branches
    ("import jax\nfrom jax import lax\n\ndef neg(x, flip=True):\n    return -x if flip else x\n\n"
     "y = lax.cond(p, neg, neg, x)\n", []),
    # a flag passed to a jitted function without static_argnames is traced: reported
    ("import jax\n\n@jax.jit\ndef f(x, training):\n    if training:\n        return x * 0.5\n    return x\n", [5]),
])
def test_which_parameters_are_traced(source, rows):
    assert [d.location.row for d in lint_code(source, [PythonBranchOnTracer])] == rows


def test_a_control_flow_bodys_default_stays_python_under_real_jax():
    namespace = load(
        "import functools\nfrom jax import lax\n\ndef body(i, carry, causal=False):\n    if causal:\n"
        "        return carry + i\n    return carry\n\n"
        "a = lax.fori_loop(0, 4, body, 0.0)\nb = lax.fori_loop(0, 4, functools.partial(body, causal=True), 0.0)\n"
    )
    assert (float(namespace["a"]), float(namespace["b"])) == (0.0, 6.0)


def test_sweeps_over_literal_configurations_compile_per_configuration_on_purpose():
    """Once per configuration at least, on every backend: exactly 4 on CPU, 6 on CUDA."""
    source = JitRebuiltInLoop.VALID[2].code
    data = {"step": lambda x, b, u: x * b + u, "timings": {}, "x": jnp.ones(2),
            "benchmark": lambda kernel, x: float(kernel(x)[0])}
    count = compiles(lambda: exec(compile(source, "example", "exec"), data))
    assert count == 4 if ON_CPU else count >= 4, count  # one per configuration (CUDA adds helpers)
    assert data["timings"] == {(64, 1): 65.0, (64, 2): 66.0, (128, 1): 129.0, (128, 2): 130.0}
    assert len(lint_code(source.replace("(64, 128)", "range(steps)"), [JitRebuiltInLoop])) == 1  # steps, not configurations
    over_data = "import jax\n\nfor batch in batches:\n    f = jax.jit(lambda x: x + batch)\n"
    assert len(lint_code(over_data, [JitRebuiltInLoop])) == 1


def test_a_per_step_host_read_waits_for_every_step_and_without_it_the_host_runs_ahead():
    """On every backend, the host reads each step's loss, and without the read the loop ends before
    the device does. That the host found each timed step still running (it waited) is asserted on
    CPU only: it is a race, and on CUDA the first timed step was already done when read."""
    import builtins

    def loss_fn(params, batch):  # heavy enough that a step takes far longer than its dispatch
        for _ in range(6):
            batch = jnp.tanh(batch @ batch)
        return jnp.mean(batch * params)

    waited = []

    def float_(value):  # `float`, noting whether the value was computed when the host asked for it
        waited.append(not value.is_ready())
        return builtins.float(value)

    batches = [jnp.full((300, 300), 0.01 * (k + 1)) for k in range(4)]
    namespace = {"loss_fn": loss_fn, "batches": batches, "num_steps": 4, "params": jnp.float32(1.0), "float": float_}
    exec(compile(HostReadPerStep.INVALID[0].code, "example", "exec"), namespace)  # compiles, then 4 steps
    assert len(waited) == 4  # a host read every step
    if ON_CPU:
        assert waited[1:] == [True, True, True]  # every step: the host stopped until the device finished
    kept_on_device = HostReadPerStep.INVALID[0].code.replace("float(loss)", "loss")
    namespace = {"loss_fn": loss_fn, "batches": batches, "num_steps": 4, "params": jnp.float32(1.0)}
    exec(compile(kept_on_device, "example", "exec"), namespace)
    assert not namespace["losses"][-1].is_ready()  # the loop ended before the device: it ran ahead
    assert [builtins.float(v) for v in jax.device_get(namespace["losses"])] == pytest.approx(
        [builtins.float(v) for v in namespace["losses"]])


@pytest.mark.parametrize("source, rows", [
    # a flax TrainState step, read with jax.device_get each step
    ("import jax\n\n@jax.jit\ndef step(state, batch):\n    grads = jax.grad(loss)(state.params, batch)\n"
     "    return state.apply_gradients(grads=grads), grads\n\nfor batch in data:\n    state, g = step(state, batch)\n"
     "    g = jax.device_get(g)\n", [10]),
    # print of the loss every step; a Python number is no device array
    ("import jax\n\n@jax.jit\ndef update(p, x):\n    return p - jax.grad(f)(p, x)\n\nfor x in xs:\n    p = update(p, x)\n"
     "    print(p)\n    print(float(len(xs)))\n", [9]),
    # a loop calling a jitted function that trains nothing is no training loop
    ("import jax\n\n@jax.jit\ndef f(x):\n    return x * 2\n\nfor x in xs:\n    y = float(f(x))\n", []),
    # not jax at all
    ("import torch\n\nfor batch in loader:\n    loss = model(batch)\n    print(float(loss))\n", []),
])
def test_host_reads_per_step_by_structure(source, rows):
    assert [d.location.row for d in lint_code(source, [HostReadPerStep])] == rows


def test_a_python_number_that_becomes_an_array_compiles_twice_and_an_array_start_once():
    batches = [jnp.ones(3) * k for k in range(5)]
    invalid = PythonScalarBecomesArray.INVALID[0].code
    namespace = {"batches": batches}
    assert compiles(lambda: exec(compile(invalid, "example", "exec"), namespace)) == 2  # weak f32, then f32
    valid = PythonScalarBecomesArray.VALID[0].code
    fixed = {"batches": batches}
    assert compiles(lambda: exec(compile(valid, "example", "exec"), fixed)) == 1
    assert float(namespace["total"]) == float(fixed["total"]) == 30.0
    constant = PythonScalarBecomesArray.VALID[1].code
    assert compiles(lambda: exec(compile(constant, "example", "exec"), {"inputs": batches})) == 1


@pytest.mark.parametrize("source, rows", [
    # by keyword; inside a function; the counter stays a Python int (no flip)
    ("import jax\n\n@jax.jit\ndef f(x, acc):\n    return acc + x\n\ndef run(xs):\n    acc = 0\n    step = 0\n"
     "    for x in xs:\n        acc = f(x, acc=acc)\n        step = step + 1\n    return acc\n", [11]),
    # reassigned to another Python number in the loop: no array
    ("import jax\n\n@jax.jit\ndef f(x, lr):\n    return x * lr\n\nlr = 1.0\nfor x in xs:\n    y = f(x, lr)\n"
     "    lr = lr * 0.5\n", []),
])
def test_python_scalar_becomes_array_by_structure(source, rows):
    assert [d.location.row for d in lint_code(source, [PythonScalarBecomesArray])] == rows


def test_the_unsafe_size_fix_runs_and_compiles_once_but_its_padding_changes_the_numbers():
    example = NonzeroWithoutSize.INVALID[0]
    assert example.applicability.value == "unsafe"
    padded = load(example.expected_replacement)["positive_sum"]
    x = jnp.array([1.0, -2.0, 3.0])
    assert float(padded(x)) == 1.0 + 3.0 + 1.0  # the padding index 0 counts x[0] once more
    assert float(padded(jnp.array([-1.0, 2.0, 2.0]))) == 2.0 + 2.0 - 1.0
    assert padded._cache_size() == 1  # but it traces, for every input


@pytest.mark.parametrize("source, fixed", [
    ("jnp.unique(labels)", "jnp.unique(labels, size=labels.size)"),
    ("jnp.flatnonzero(jnp.isnan(x))", "jnp.flatnonzero(jnp.isnan(x), size=x.size)"),
    ("jnp.argwhere(\n        m,\n    )", "jnp.argwhere(\n        m,\n        size=m.size,\n    )"),  # its layout
    ("jnp.argwhere(m,)", "jnp.argwhere(m, size=m.size,)"),
    ("jnp.nonzero(x > y)", None),  # which array bounds it is not evident
    ("jnp.setdiff1d(a, b)", None),
])
def test_the_size_fix_bounds_by_the_evident_array(source, fixed):
    code = f"import jax\nimport jax.numpy as jnp\n\n@jax.jit\ndef f(x, y, labels, m, a, b):\n    return {source}\n"
    (diagnostic,) = lint_code(code, [NonzeroWithoutSize])
    assert (diagnostic.fix is not None) == (fixed is not None)
    if fixed is not None:
        result = fix_code(code, [NonzeroWithoutSize], unsafe=True)
        assert result == code.replace(source, fixed)
        assert lint_code(result, [NonzeroWithoutSize]) == []


def test_an_f_string_print_of_a_tracer_raises_and_its_fix_prints_each_value(capsys):
    example = PrintOfTracer.INVALID[1]
    invalid, fixed = load(example.code)["step"], load(example.expected_replacement)["step"]
    with pytest.raises(TypeError, match="unsupported format string"):
        invalid(jnp.array([1.0, 2.0]))  # `:.3f` of a tracer, while tracing: it has no value to format
    for data in ([1.0, 2.0], [0.5, 0.25]):
        fixed(jnp.array(data))
    jax.effects_barrier()
    assert capsys.readouterr().out.splitlines() == ["total=3.000 {x}", "total=0.750 {x}"]
    assert fixed._cache_size() == 1


def test_a_fix_spells_jax_numpy_by_an_import_that_reaches_it():
    code = ("import jax\n\ndef helper():\n    import jax.numpy as local_np\n    return local_np.ones(2)\n\n"
            "@jax.jit\ndef f(x):\n    return x[x > 0].sum()\n")
    fixed = fix_code(code, [BooleanMaskOfTracer], unsafe=False)
    assert "return jax.numpy.where(x > 0, x, 0).sum()" in fixed  # not `local_np`, bound in another function


def test_sizes_from_traced_values_raise_under_jit_and_static_or_shape_sizes_compile():
    from xlalint.rules.jax_tracing.traced_size import TracedSize

    first_n = load(TracedSize.INVALID[0].code)["first_n"]
    kept = load(TracedSize.INVALID[1].code)["kept"]
    pool = load(TracedSize.INVALID[2].code)["pool"]
    for call in (lambda: first_n(jnp.ones(8), 3), lambda: kept(jnp.array([1.0, -1.0, 2.0])),
                 lambda: pool(jnp.ones(3), jnp.array([0, 0, 1]))):
        with pytest.raises(TypeError, match="concrete"):  # ConcretizationTypeError, or "Shapes must be ... concrete"
            call()
    static = load(TracedSize.VALID[0].code)["first_n"]
    assert compiles(lambda: [static(jnp.ones(8), n) for n in (3, 3, 5)]) == 2  # one program per value of n
    arange, reshaped = load(TracedSize.VALID[1].code)["positions"](jnp.ones(4))
    assert arange.tolist() == [0.0, 1.0, 2.0, 3.0] and reshaped.shape == (2, 2)
    assert load(TracedSize.VALID[2].code)["pool"](jnp.ones(3), jnp.array([0, 0, 1])).tolist() == [2.0, 1.0, 0.0]


def test_an_array_grown_in_a_loop_compiles_every_iteration_and_the_list_once():
    from xlalint.rules.jax_tracing.array_grown_in_loop import ArrayGrownInLoop

    step = jax.jit(lambda x: (x * 2).sum())
    data = {"batches": [jnp.ones(3) * k for k in range(8)], "params": None, "eval_step": lambda p, b: step(b)}
    step(data["batches"][0])
    grown = dict(data)
    assert compiles(lambda: exec(compile(ArrayGrownInLoop.INVALID[0].code, "example", "exec"), grown)) >= 8  # one per length
    collected = dict(data)
    assert compiles(lambda: exec(compile(ArrayGrownInLoop.VALID[0].code, "example", "exec"), collected)) <= 1
    assert grown["losses"].tolist() == collected["losses"].tolist() == [6.0 * k for k in range(8)]
    table = load(ArrayGrownInLoop.INVALID[1].code)["collect"]([jnp.ones(3)] * 3)
    assert table.shape == (3, 3)


def test_the_at_set_rewrite_keeps_the_arrays_dtype_bool_included():
    source = "import jax\nimport jax.numpy as jnp\n\n@jax.jit\ndef clear(x):\n    return x.at[x == 1].set(0)\n"
    fixed = fix_code(source, [BooleanMaskOfTracer], unsafe=False)
    assert ".astype(x.dtype)" in fixed
    before, after = load(source)["clear"], load(fixed)["clear"]
    for x in (jnp.array([True, False, True]), jnp.array([1, 2, 1], jnp.int8), jnp.array([1.0, 2.0], jnp.float16)):
        with warnings.catch_warnings(), jax.disable_jit():  # the original runs eagerly only
            warnings.simplefilter("ignore", FutureWarning)  # JAX warns on casting an int fill to bool
            expected = before(x)
        assert after(x).dtype == expected.dtype == x.dtype and after(x).tolist() == expected.tolist()
    without_cast = fixed.replace(".astype(x.dtype)", "")
    assert load(without_cast)["clear"](jnp.array([True, False])).dtype == jnp.int32  # what the cast is for
