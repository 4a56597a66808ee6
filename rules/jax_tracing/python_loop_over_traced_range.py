"""JAX106 python-loop-over-traced-range: Flags, inside a function JAX traces, a Python `for` loop over
`range(...)` whose bound is a traced value (a non-static parameter, or what `jnp` computes from
one)."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import is_traced_value
from xlalint.rule import Invalid, Rule, Valid


class PythonLoopOverTracedRange(Rule):
    """## What it does
    Flags, inside a function JAX traces, a Python `for` loop over `range(...)` whose bound is a
    traced value (a non-static parameter, or what `jnp` computes from one).

    ## Why is this bad?
    `range` needs a Python integer while JAX traces the function, when a traced bound has no
    value: JAX raises `TracerIntegerConversionError`. Marking the bound static compiles one
    program per value and unrolls the loop into it (long compiles for long loops). `lax.fori_loop`
    takes a traced bound and compiles the body once.

    ## Example
    ```python
    @jax.jit
    def power_iteration(a, v, n):
        for _ in range(n):
            v = a @ v
            v = v / jnp.linalg.norm(v)
        return v
    ```

    Use instead:
    ```python
    @jax.jit
    def power_iteration(a, v, n):
        def body(_, v):
            v = a @ v
            return v / jnp.linalg.norm(v)
        return jax.lax.fori_loop(0, n, body, v)
    ```

    ## Fix safety
    No automatic fix: the loop's body has to become a function of its carried values.

    ## References
    - JAX docs, "Control flow and logical operators with JIT": `lax.fori_loop`, `static_argnames`
    """

    code, name, category = "JAX106", "python-loop-over-traced-range", "control_flow_on_tensor"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "Python loop over `range` of a traced value inside a function JAX traces: the bound has no value yet"
    hint = "use `jax.lax.fori_loop(0, n, body, init)`, or mark the bound static (one compile per value)"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def power_iteration(a, v, n):
                def body(_, v):
                    v = a @ v
                    return v / jnp.linalg.norm(v)
                return jax.lax.fori_loop(0, n, body, v)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def cumulative(x):
                for i in range(1, x.shape[0]):  # metadata: a static bound, unrolled
                    x = x.at[i].add(x[i - 1])
                return x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def power_iteration(a, v, n):
                for _ in range(n):
                    v = a @ v
                    v = v / jnp.linalg.norm(v)
                return v
            """,
            line=6,
        ),
    ]

    def visit_For(self, node: ast.For) -> None:
        loop = node.iter
        if (
            isinstance(loop, ast.Call)
            and isinstance(loop.func, ast.Name)
            and loop.func.id == "range"
            and any(is_traced_value(self.ctx, a) for a in loop.args)
        ):
            self.report(loop)
