"""JAX rules: the INVALID examples fail under real JAX (CPU), the fixed forms run and compile once."""

import textwrap

import pytest

from rules.jax_tracing import HostConversionOfTracer, NonzeroWithoutSize, PrintOfTracer, PythonBranchOnTracer
from xlalint.testing import lint_code

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "example", "exec"), namespace)
    return namespace


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
