"""JAX rules (JAX1xx): code that cannot run, or recompiles, inside functions JAX traces."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import enclosing_traced
from xlalint.analysis.names import has_star_args, keyword, positional
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy functions whose output size depends on the values, unless `size=` bounds it
SIZED = {"nonzero", "argwhere", "flatnonzero", "unique", "unique_values", "unique_counts", "unique_inverse",
         "unique_all", "extract", "union1d", "intersect1d", "setdiff1d", "setxor1d"}


class NonzeroWithoutSize(Rule):
    """## What it does
    Flags, inside a function JAX traces (`@jax.jit`, `jax.jit(f)`, `pmap`, `vmap`, `shard_map`, the
    body of `lax.scan`/`fori_loop`/`while_loop`/`cond`, or a function they call), `jnp.nonzero`,
    `argwhere`, `flatnonzero`, `unique` (and its variants), `extract`, the set operations, and
    one-argument `jnp.where(c)`, called without `size=`.

    ## Why is this bad?
    Under tracing every array has a static shape, and these functions return as many elements as
    the data holds. Without a bound JAX cannot trace them: the call raises
    `ConcretizationTypeError` ("The size argument of jnp.nonzero must be statically specified").
    Given `size=` (and `fill_value=` for the padding), the output has a fixed shape and the function
    compiles once for all data.

    ## Example
    ```python
    @jax.jit
    def positive_sum(x):
        idx = jnp.nonzero(x > 0)[0]
        return x[idx].sum()
    ```

    Use instead:
    ```python
    @jax.jit
    def positive_sum(x):
        idx = jnp.nonzero(x > 0, size=x.shape[0], fill_value=x.shape[0])[0]  # padded with an out-of-range index
        return x.at[idx].get(mode="fill", fill_value=0).sum()
    ```
    or, without indices at all: `jnp.where(x > 0, x, 0).sum()`.

    ## Fix safety
    No automatic fix: the bound (`size=`) and what the padding means for the code that follows are
    the author's choice.

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `jax.numpy.nonzero` (`size`, `fill_value`)
    """

    code, name, category = "JAX101", "nonzero-without-size", "dynamic_shape"
    summary = "`{func}` without `size=` in a function JAX traces: its output size depends on the data"
    hint = "pass `size=` (a static bound) and `fill_value=`, or compute with `jnp.where(mask, x, 0)` instead of indices"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0, size=x.shape[0], fill_value=x.shape[0])[0]
                return x.at[idx].get(mode="fill", fill_value=0).sum()
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def labels(y):  # not traced: runs on concrete arrays
                return jnp.unique(y)
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clip(x):
                return jnp.where(x > 0, x, 0.0)  # three arguments: same shape as x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0)[0]
                return x[idx].sum()
            """,
            line=6,
        ),
        Invalid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            def count_classes(labels):
                return jnp.unique(labels).shape[0]

            @partial(jax.jit, static_argnames="n")
            def step(params, labels, n):
                return params * count_classes(labels) / n
            """,
            line=7,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            def body(carry, x):
                return carry + jnp.where(x > 0)[0].shape[0], None

            total, _ = jax.lax.scan(body, 0, xs)
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        head, _, func = name.rpartition(".")
        if head != "jax.numpy" or keyword(node, "size") is not None or has_star_args(node):
            return
        if func not in SIZED and not (func == "where" and len(positional(node)) == 1 and not node.keywords):
            return
        if enclosing_traced(self.ctx, node) is not None:
            self.report(node, self.summary.format(func=f"jnp.{func}"))
