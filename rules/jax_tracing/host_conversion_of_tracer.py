"""JAX102 host-conversion-of-tracer: Flags, inside a function JAX stages out (`@jax.jit`, `jax.jit(f)`,
`pmap`, `vmap`, a `lax.scan`/`fori_loop`/`while_loop`/`cond` body), a conversion of a traced value
to Python or NumPy."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import is_numpy_function, is_traced_value
from xlalint.analysis.names import positional
from xlalint.rule import Invalid, Rule, Valid


class HostConversionOfTracer(Rule):
    """## What it does
    Flags, inside a function JAX stages out (`@jax.jit`, `jax.jit(f)`, `pmap`, `vmap`, a
    `lax.scan`/`fori_loop`/`while_loop`/`cond` body), a conversion of a traced value to Python or
    NumPy: `float(x)`, `int(x)`, `bool(x)`, `x.item()`, `x.tolist()`, `np.asarray(x)`, `np.array(x)`.
    Traced values are the function's non-static parameters and what `jnp`/`lax` compute from them;
    metadata (`x.shape[0]`, `x.ndim`, `len(x)`) and `static_argnames`/`static_argnums` are not.

    ## Why is this bad?
    While tracing, an array has a shape and a dtype but no value: converting it raises
    `ConcretizationTypeError` (or `TracerIntegerConversionError`). Outside `jit` the same line is a
    blocking device-to-host copy, so moving the conversion out is the fix in both cases.

    ## Example
    ```python
    @jax.jit
    def loss_and_log(params, x):
        loss = jnp.mean((x @ params) ** 2)
        print("loss", float(loss))
        return loss
    ```

    Use instead:
    ```python
    @jax.jit
    def loss_and_log(params, x):
        loss = jnp.mean((x @ params) ** 2)
        jax.debug.print("loss {}", loss)  # printed when the value exists, no host round trip in the trace
        return loss
    ```
    or return the value and convert it outside the jitted function.

    ## Fix safety
    No automatic fix.

    ## References
    - JAX docs, "Key concepts: tracing" and the `ConcretizationTypeError` entry of "Errors"
    """

    code, name, category = "JAX102", "host-conversion-of-tracer", "item_sync"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{what}` converts a traced value to Python inside a function JAX traces: it has no value yet"
    hint = "return the value and convert it outside the jitted function, or use `jax.debug.print`"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="n")
            def tile(x, n):
                width = int(x.shape[0])  # metadata is static
                return jnp.tile(x, int(n))[: width * n]  # a static argument
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def report(x):  # not traced
                return float(jnp.mean(x))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def loss_and_log(params, x):
                loss = jnp.mean((x @ params) ** 2)
                print("loss", float(loss))
                return loss
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            def body(i, total):
                return total + total.item() * i

            out = jax.lax.fori_loop(0, 3, body, 1.0)
            """,
            line=4,
        ),
    ]

    CONVERSIONS = {"float", "int", "bool", "complex"}

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        operand, what = None, ""
        if isinstance(func, ast.Name) and func.id in self.CONVERSIONS and len(node.args) == 1:
            operand, what = node.args[0], f"{func.id}()"
        elif isinstance(func, ast.Attribute) and func.attr in ("item", "tolist") and not node.args:
            operand, what = func.value, f".{func.attr}()"
        elif is_numpy_function(self.ctx, func) and node.args:  # `np.asarray(x)`, `np.argmax(x)`
            operands = positional(node)
            operand = next((a for a in operands if is_traced_value(self.ctx, a)), None)
            what = f"np.{func.attr if isinstance(func, ast.Attribute) else 'asarray'}()"
        if operand is not None and is_traced_value(self.ctx, operand):
            self.report(node, self.summary.format(what=what))
