"""JAX101 nonzero-without-size: Flags, inside a function JAX traces (`@jax.jit`, `jax.jit(f)`, `pmap`,
`vmap`, `shard_map`, the body of `lax.scan`/`fori_loop`/`while_loop`/`cond`, or a function they
call), `jnp.nonzero`, `argwhere`, `flatnonzero`, `unique` (and its variants), `extract`, the set
operations, and one-argument `jnp.where(c)`, called without `size=`."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import elementwise_of, enclosing_traced
from xlalint.analysis.names import has_star_args, keyword, positional
from xlalint.diagnostics import Applicability, Fix
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy functions whose output size depends on the values, unless `size=` bounds it
SIZED = {
    "nonzero",
    "argwhere",
    "flatnonzero",
    "unique",
    "unique_values",
    "unique_counts",
    "unique_inverse",
    "unique_all",
    "extract",
    "union1d",
    "intersect1d",
    "setdiff1d",
    "setxor1d",
}


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
    When the bound is evident, the argument being an array (`jnp.nonzero(mask)`) or an elementwise
    test of one (`x > 0`, `jnp.isnan(x)`), an unsafe fix adds `size=<array>.size`: every input then
    fits, and the function compiles once. It is unsafe because the output changes: it always
    has that many entries, the extra ones padded with `fill_value` (index 0 for `nonzero`, the
    smallest value for `unique`), and the code that follows must mask or ignore them, or pass a
    `fill_value` that it can (an out-of-range index with `.at[idx].get(mode="fill")`).

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `jax.numpy.nonzero` (`size`, `fill_value`)
    """

    code, name, category = "JAX101", "nonzero-without-size", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` without `size=` in a function JAX traces: its output size depends on the data"
    hint = "pass `size=` (a static bound) and `fill_value=`, or compute with `jnp.where(mask, x, 0)` instead of indices"
    fix_availability = "sometimes"

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
            applicability=Applicability.UNSAFE,
            expected_replacement="""
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0, size=x.size)[0]
                return x[idx].sum()
            """,
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
            array = self._bound(node, func)
            fix = (lambda cctx: _with_size(cctx, node, array)) if array is not None else None
            self.report(node, self.summary.format(func=f"jnp.{func}"), fix=fix)

    def _bound(self, node: ast.Call, func: str) -> str | None:
        """The array whose size bounds the output: the argument, or the array an elementwise test
        of it is about; None for the set operations and `extract` (two arrays)."""
        args = positional(node)
        if func in ("union1d", "intersect1d", "setdiff1d", "setxor1d", "extract") or not args:
            return None
        arg = args[0]
        if isinstance(arg, ast.Name):
            return arg.id
        for name in {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}:
            if elementwise_of(self.ctx, arg, ast.Name(id=name)):
                return name
        return None


def _with_size(cctx, node: ast.Call, array: str):
    from xlalint.fixing.cst_names import with_keyword

    call = cctx.locate(node)
    if call is None:
        return None
    return Fix.replace(
        call,
        with_keyword(call, "size", cctx.parse_expression(f"{array}.size")),
        title=f"Pad to `size={array}.size` (the output gains padded entries)",
        safe=False,
    )
