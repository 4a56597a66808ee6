"""JAX rules: the INVALID examples fail under real JAX (CPU), the fixed forms run and compile once."""

import textwrap

import pytest

from rules.jax_tracing import NonzeroWithoutSize
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
