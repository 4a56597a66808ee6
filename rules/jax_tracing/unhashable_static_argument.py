"""JAX108 unhashable-static-argument: Flags a call of a jitted function of the same module
(`@partial(jax.jit, static_argnames=...)`, `step = jax.jit(f, static_argnums=...)`) that passes a
list, dict or set (a display or a comprehension), or a NumPy/JAX array, to a static parameter."""

from __future__ import annotations

import ast

from xlalint.rule import Invalid, Rule, Valid

from ._common import static_arguments


class UnhashableStaticArgument(Rule):
    """## What it does
    Flags a call of a jitted function of the same module (`@partial(jax.jit, static_argnames=...)`,
    `step = jax.jit(f, static_argnums=...)`) that passes a list, dict or set (a display or a
    comprehension), or a NumPy/JAX array, to a static parameter.

    ## Why is this bad?
    JAX keys its compilation cache on the static arguments' hashes: an unhashable value raises
    `ValueError: Non-hashable static arguments are not supported`. An array is not hashable either
    (and as a static value it would compile once per content).

    ## Example
    ```python
    @partial(jax.jit, static_argnames="dims")
    def project(x, dims):
        return x[..., dims[0] : dims[1]]

    y = project(x, dims=[0, 2])
    ```

    Use instead:
    ```python
    y = project(x, dims=(0, 2))  # a tuple is hashable
    ```

    ## Fix safety
    No automatic fix: a tuple is the usual replacement, but the function may mutate or compare
    the value as a list.

    ## References
    - `jax.jit` documentation: `static_argnums` ("must be hashable and immutable")
    """

    code, name, category = "JAX108", "unhashable-static-argument", "other"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "unhashable value for the static argument `{name}` of a jitted function: JAX raises `ValueError`"
    hint = "pass a tuple (or another hashable value), or make the argument a traced array"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="dims")
            def project(x, dims):
                return x[..., dims[0] : dims[1]]

            y = project(x, dims=(0, 2))
            z = project(x + 1, dims=(0, 2))  # the same static value: the same program
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="dims")
            def project(x, dims):
                return x[..., dims[0] : dims[1]]

            y = project(x, dims=[0, 2])
            """,
            line=9,
        ),
        Invalid(
            """
            import jax
            import numpy as np

            def tile(x, reps):
                return jax.numpy.tile(x, reps)

            tile_jit = jax.jit(tile, static_argnums=1)
            y = tile_jit(x, np.array([2, 1]))
            """,
            line=8,
        ),
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnums=1)
            def reduce(x, axes):
                return x.sum(axis=axes)

            axes = [0, 1]
            total = reduce(x, axes)
            """,
            line=10,
        ),
    ]

    ARRAYS = {
        "numpy.array",
        "numpy.asarray",
        "numpy.zeros",
        "numpy.ones",
        "numpy.arange",
        "jax.numpy.array",
        "jax.numpy.asarray",
        "jax.numpy.zeros",
        "jax.numpy.ones",
        "jax.numpy.arange",
    }

    def visit_Call(self, node: ast.Call) -> None:
        for name, arg in static_arguments(self.ctx, node):
            # a variable holding one (`dims = [0, 1]; f(x, dims)`): every value that reaches the call
            values = self.ctx.reaching_values(arg) if isinstance(arg, ast.Name) else [arg]
            if values and all(self._unhashable(v) for v in values):
                self.report(arg, self.summary.format(name=name))

    def _unhashable(self, value: ast.expr) -> bool:
        return isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and self.ctx.qualified_name(value.func) in self.ARRAYS
        )
