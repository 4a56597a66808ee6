"""JAX112 traced-size: Flags, inside a function JAX traces, an array whose size comes from a traced
value."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import enclosing_traced, is_traced_value
from xlalint.analysis.names import has_star_args, keyword
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy constructors: (positions, keywords) of the arguments that give the output's size
SIZE_ARGUMENTS = {
    "arange": ((0, 1, 2), ("start", "stop", "step")),
    "zeros": ((0,), ("shape",)),
    "ones": ((0,), ("shape",)),
    "empty": ((0,), ("shape",)),
    "full": ((0,), ("shape",)),
    "eye": ((0, 1), ("N", "M")),
    "identity": ((0,), ("n",)),
    "tri": ((0, 1), ("N", "M")),
    "linspace": ((2,), ("num",)),
    "logspace": ((2,), ("num",)),
    "tile": ((1,), ("reps",)),
    "reshape": ((1,), ("shape", "newshape")),
}


class TracedSize(Rule):
    """## What it does
    Flags, inside a function JAX traces, an array whose size comes from a traced value:
    `jnp.arange(n)`, `jnp.zeros((n, d))` (`ones`, `full`, `empty`, `eye`, `linspace(num=n)`, `tile`),
    `lax.full((n, d), v)`, `x.reshape(n, -1)`, and `jax.ops.segment_sum` (`segment_max`, ...) without
    `num_segments`, where `n` is a traced argument or computed from array values (`mask.sum()`).
    A size computed from shapes (`x.shape[0]`, `len(x)`) or a static argument is known while
    tracing and is not reported.

    ## Why is this bad?
    JAX compiles one program per input shape: every array inside it must have a size known while
    tracing. A size taken from a value raises `ConcretizationTypeError`, or a `TypeError` ("Shapes
    must be 1D sequences of concrete values of integer type"): the most asked JAX error; `segment_sum`
    without `num_segments` computes the count from the ids' maximum, a value.

    ## Example
    ```python
    @jax.jit
    def first_n(x, n):
        return jnp.ones(n) * x.sum()
    ```

    Use instead:
    ```python
    @partial(jax.jit, static_argnames="n")
    def first_n(x, n):  # one program per value of n: keep their number small
        return jnp.ones(n) * x.sum()
    ```
    or pad to a bound known outside (`jnp.where(jnp.arange(bound) < n, ...)`), or pass
    `num_segments=` from the data's static size.

    ## Fix safety
    No automatic fix: making `n` static compiles once per value, and a bound changes the shapes.

    ## References
    - JAX docs, "Common gotchas: dynamic shapes"; `jax.errors.ConcretizationTypeError`
    - `jax.ops.segment_sum`: "num_segments ... required under jit"
    """

    code, name, category = "JAX112", "traced-size", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` takes its size from a traced value inside a function JAX traces: the shape is unknown"
    hint = "make the size a static argument, compute it from shapes (`x.shape[0]`), or pad to a bound"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="n")
            def first_n(x, n):
                return jnp.ones(n) * x.sum()
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positions(x):
                n = x.shape[0]
                return jnp.arange(n) * x + jnp.zeros((len(x),)), x.reshape(n // 2, -1)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def pool(data, segment_ids):
                return jax.ops.segment_sum(data, segment_ids, num_segments=data.shape[0])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def first_n(x, n):
                return jnp.ones(n) * x.sum()
            """,
            line=6,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def kept(x):
                count = (x > 0).sum()
                return jnp.arange(count)
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            @jax.jit
            def pool(data, segment_ids):
                return jax.ops.segment_sum(data, segment_ids)
            """,
            line=5,
        ),
    ]

    SEGMENTS = {"jax.ops.segment_sum", "jax.ops.segment_max", "jax.ops.segment_min", "jax.ops.segment_prod"}

    def visit_Call(self, node: ast.Call) -> None:
        if has_star_args(node) or enclosing_traced(self.ctx, node) is None:
            return
        name = self.ctx.qualified_name(node.func) or ""
        head, _, func = name.rpartition(".")
        if name in self.SEGMENTS:
            if keyword(node, "num_segments") is None and len(node.args) < 3:
                self.report(node, self.summary.format(func=f"{func} without num_segments"))
            return
        sizes: list[ast.expr] = []
        if head == "jax.numpy" and func in SIZE_ARGUMENTS:
            positions, keywords = SIZE_ARGUMENTS[func]
            sizes = [node.args[p] for p in positions if p < len(node.args)]
            sizes += [k.value for k in node.keywords if k.arg in keywords]
            label = f"jnp.{func}"
        elif name == "jax.lax.full" and node.args:
            sizes, label = [node.args[0]], "lax.full"
        elif (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "reshape"
            and head != "jax.numpy"
            and is_traced_value(self.ctx, node.func.value)
        ):
            sizes, label = list(node.args) + [k.value for k in node.keywords if k.arg == "shape"], ".reshape"
        else:
            return
        parts = [e for s in sizes for e in (s.elts if isinstance(s, (ast.Tuple, ast.List)) else [s])]
        if any(is_traced_value(self.ctx, p) for p in parts):
            self.report(node, self.summary.format(func=label))
