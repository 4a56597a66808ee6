"""JAX111 python-scalar-becomes-array: Flags, in a loop, a call of a jitted function of the module that
passes a variable which starts as a Python number before the loop and is reassigned to a JAX array
inside it (typically the function's own result)."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import is_device_array, jitted_target
from xlalint.analysis.names import has_star_args, is_number
from xlalint.rule import Invalid, Rule, Valid


class PythonScalarBecomesArray(Rule):
    """## What it does
    Flags, in a loop, a call of a jitted function of the module that passes a variable which starts
    as a Python number before the loop and is reassigned to a JAX array inside it (typically the
    function's own result): `total = 0.0` ... `total = accumulate(total, batch)`.

    ## Why is this bad?
    JAX keys compiled programs on the abstract type of each argument. A Python number is traced
    as a *weakly typed* scalar; the array the function returns is strongly typed. The first call
    compiles for the weak type, the second compiles again for the strong one: a full extra
    compilation of the function (minutes for a large training step on a TPU), and the two programs
    can differ in dtype promotion.

    ## Example
    ```python
    total = 0.0
    for batch in batches:
        total = accumulate(total, batch)
    ```

    Use instead:
    ```python
    total = jnp.zeros((), jnp.float32)  # the type the loop carries
    for batch in batches:
        total = accumulate(total, batch)
    ```

    ## Fix safety
    No automatic fix: the array's dtype must be the one the function returns, which the code does
    not show.

    ## References
    - JAX docs, "Type promotion semantics": weakly typed values; "Just-in-time compilation": caching
    """

    code, name, category = "JAX111", "python-scalar-becomes-array", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{value}` is a Python number on the first call and a JAX array after: `{func}` compiles twice"
    hint = "start the loop with an array of the type it carries, e.g. `jnp.zeros((), jnp.float32)`"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def accumulate(total, batch):
                return total + batch.sum()

            total = jnp.zeros((), jnp.float32)
            for batch in batches:
                total = accumulate(total, batch)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def scale(x, factor):
                return x * factor

            factor = 0.5
            for x in inputs:
                y = scale(x, factor)  # a Python number every time: one program
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax

            @jax.jit
            def accumulate(total, batch):
                return total + batch.sum()

            total = 0.0
            for batch in batches:
                total = accumulate(total, batch)
            """,
            line=9,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name) or has_star_args(node):
            return
        target = jitted_target(self.ctx, node)
        loop = self.ctx.index.enclosing_loop(node)
        if target is None or loop is None:
            return
        passed: list[tuple[str | None, ast.expr]] = [(name, arg) for name, arg in zip(target.params, node.args)]
        passed += [(kw.arg, kw.value) for kw in node.keywords]
        for name, arg in passed:
            if name not in target.static and isinstance(arg, ast.Name) and self._flips(arg, loop):
                self.report(arg, self.summary.format(value=arg.id, func=node.func.id))
                return

    def _flips(self, name: ast.Name, loop: ast.AST) -> bool:
        values = self.ctx.index.assignments.get(self.ctx.index.scope_of(name), {}).get(name.id, [])
        inside = [v for v in values if loop in set(self.ctx.index.ancestors(v))]
        before = [v for v in values if v not in inside]
        return (
            bool(inside)
            and bool(before)
            and all(is_number(v) for v in before)
            and all(is_device_array(self.ctx, v) for v in inside)
        )
