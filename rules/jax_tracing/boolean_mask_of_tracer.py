"""JAX105 boolean-mask-of-tracer: Flags, inside a function JAX traces, indexing with a traced boolean
mask."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import elementwise_of, enclosing_traced, is_boolean_mask, is_traced_value
from xlalint.analysis.names import is_number
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid

from ._common import module_spelling


class BooleanMaskOfTracer(Rule):
    """## What it does
    Flags, inside a function JAX traces, indexing with a traced boolean mask: `x[mask]`,
    `x[:, mask]`, and the indexed updates `x.at[mask].set(v)` / `.add(v)` / `.get()`, where `mask`
    is evidently boolean (a comparison, `~m`, `m & n`, `jnp.isnan(x)`, `x.astype(bool)`, or a name
    holding one) and computed from traced values.

    ## Why is this bad?
    The result of `x[mask]` has as many elements as the mask has `True`s, which is unknown while
    tracing: JAX raises `NonConcreteBooleanIndexError`. The indexed-update form `x.at[mask]` raises
    the same error. The static-shape forms select with `jnp.where` over the whole array.

    ## Example
    ```python
    @jax.jit
    def clean(x):
        x = x.at[jnp.isnan(x)].set(0)
        return x[x > 0].sum()
    ```

    Use instead:
    ```python
    @jax.jit
    def clean(x):
        x = jnp.where(jnp.isnan(x), 0, x)
        return jnp.where(x > 0, x, 0).sum()
    ```

    ## Fix safety
    Two rewrites are offered when the mask evidently has the array's shape (a comparison of the
    array itself with numbers, `jnp.isnan(x)`-like tests of it, and `~`, `&`, `|` of those):
    `x[m].sum()` -> `jnp.where(m, x, 0).sum()` and `x.at[m].set(c)` ->
    `jnp.where(m, c, x).astype(x.dtype)` for a number `c` (`.at[].set` keeps the array's dtype; the
    cast undoes `where`'s promotion of a bool array to int32). Both are exact, and safe, for an
    integer `c`; for a float `c` the rewrite is unsafe: `.at[].set` casts `c` to an integer array's
    dtype, `jnp.where` computes in float first (int32 values above 2**24 lose digits). A
    row mask (`x[valid]` with `valid` of shape `(n,)` and `x` of shape `(n, d)`) is not elementwise
    and gets no fix.

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `NonConcreteBooleanIndexError` in "Errors"
    """

    code, name, category = "JAX105", "boolean-mask-of-tracer", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "boolean-mask index of a traced array: the result's size depends on the data, JAX cannot trace it"
    hint = "select with `jnp.where(mask, x, 0)` over the whole array, or `jnp.nonzero(mask, size=...)`"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = jnp.where(jnp.isnan(x), 0, x)
                return jnp.where(x > 0, x, 0).sum()
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def positives(x):  # not traced: concrete arrays have a known mask
                return x[x > 0]
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def gather(x, idx):
                return x[idx] + x.at[0].get()  # integer indices keep their shape
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = x.at[jnp.isnan(x)].set(0)
                return jnp.where(x > 0, x, 0).sum()
            """,
            line=6,
            expected_replacement="""
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = jnp.where(jnp.isnan(x), 0, x).astype(x.dtype)
                return jnp.where(x > 0, x, 0).sum()
            """,
        ),
        Invalid(
            """
            import jax

            @jax.jit
            def positive_sum(x):
                return x[x > 0].sum()
            """,
            line=5,
            expected_replacement="""
            import jax

            @jax.jit
            def positive_sum(x):
                return jax.numpy.where(x > 0, x, 0).sum()
            """,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def masked_rows(x, lengths):
                valid = jnp.arange(x.shape[0]) < lengths
                return x[valid].mean(axis=0)  # a row mask: no fix
            """,
            line=7,
        ),
    ]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        masks = [i for i in index if is_boolean_mask(self.ctx, i)]
        if not masks or not any(is_traced_value(self.ctx, m) for m in masks):
            return
        if enclosing_traced(self.ctx, node) is None:
            return
        self.report(node, fix=self._fix(node, masks[0]) if len(index) == 1 else None)

    def _fix(self, node: ast.Subscript, mask: ast.expr):
        """`x[m].sum()` or `x.at[m].set(c)`, with `m` elementwise on `x`: the call to rewrite."""
        parent = self.ctx.index.parent(node)
        call = self.ctx.index.parent(parent) if parent is not None else None
        if (
            not isinstance(call, ast.Call)
            or not isinstance(call.func, ast.Attribute)
            or call.func is not parent
            or call.keywords
        ):
            return None
        method = call.func.attr
        base = node.value
        if isinstance(base, ast.Attribute) and base.attr == "at":  # `x.at[m].set(c)`
            array = base.value
            if method != "set" or len(call.args) != 1 or not is_number(call.args[0]):
                return None
            number = call.args[0]
            literal = number.operand if isinstance(number, ast.UnaryOp) else number
            safe = isinstance(literal, ast.Constant) and type(literal.value) is int
            parts = lambda seg: (seg(mask), seg(number), seg(array))  # noqa: E731
        else:
            array = base
            if method != "sum" or call.args:
                return None
            safe = True
            parts = lambda seg: (seg(mask), seg(array), "0")  # noqa: E731
        if not elementwise_of(self.ctx, mask, array):
            return None
        # `.at[].set` keeps the array's dtype (it casts the fill); `where` promotes a bool array
        # filled with an int to int32: cast back, exact for every integer fill and every dtype
        return lambda cctx: _where(
            cctx,
            call,
            parts(cctx.text.segment),
            safe,
            tail=".sum()" if method == "sum" else f".astype({cctx.text.segment(array)}.dtype)",
        )


def _where(cctx, node: ast.Call, arguments: tuple[str, str, str], safe: bool, tail: str):
    call = cctx.locate(node)
    if call is None:
        return None
    spelling, imports = module_spelling(cctx, call, "jax.numpy")
    replacement = cctx.parse_expression(f"{spelling}.where({', '.join(arguments)}){tail}")
    return Fix.replace(call, replacement, title="Select with `jnp.where` (static shape)", safe=safe, imports=imports)
