"""JAX109 static-argument-per-iteration: Flags a call of a jitted function of the same module, inside a
loop, that passes the loop's counter (or what is computed from it."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import jitted_target, reads_any, sweep_variables
from xlalint.analysis.names import has_star_args
from xlalint.analysis.steps import loop_counters
from xlalint.rule import Invalid, Rule, Valid

from ._common import static_arguments


class StaticArgumentPerIteration(Rule):
    """## What it does
    Flags a call of a jitted function of the same module, inside a loop, that passes the loop's
    counter (or what is computed from it: `step`, `epoch * n + i`, `lr = schedule(step)`) to a
    static parameter. A loop's items are not reported: they may repeat (a mask's two values). Under
    Equinox's `filter_jit` every argument that is not an array is static: a loop counter
    (`range`, `enumerate`) passed to a parameter not annotated as an array is reported too, also
    to a `filter_jit` method of another module of the project (found by its name when no other
    method of the project has it).

    ## Why is this bad?
    Every distinct static value compiles a new program. Passing the loop variable compiles once
    per iteration: the training loop spends its time in the compiler, and the compilation cache
    grows without bound. A value that changes every step belongs in a traced argument. A loop over
    literal configurations (`for causal in (False, True)`) is not reported: a program per
    configuration is the intent.

    ## Example
    ```python
    @partial(jax.jit, static_argnames="step")
    def update(params, grads, step):
        lr = 0.1 * 0.99 ** step
        return params - lr * grads

    for step in range(1000):
        params = update(params, grads, step=step)
    ```

    Use instead:
    ```python
    @jax.jit
    def update(params, grads, step):  # traced: one program for every step
        lr = 0.1 * 0.99 ** step
        return params - lr * grads
    ```

    ## Fix safety
    No automatic fix: the function may use the value where JAX needs a static one (a shape, a
    Python branch); those uses must change too.

    ## References
    - `jax.jit` documentation: `static_argnums` ("calling the jitted function with different values
      for these constants will trigger recompilation")
    """

    code, name, category = "JAX109", "static-argument-per-iteration", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "the loop variable `{value}` is passed to the static argument `{name}`: one compile per iteration"
    hint = "make the argument traced (drop it from `static_argnames`/`static_argnums`), or pass a value fixed across the loop"

    VALID = [
        Valid(
            """
            import jax

            @jax.jit
            def update(params, grads, step):
                lr = 0.1 * 0.99 ** step
                return params - lr * grads

            for step in range(1000):
                params = update(params, grads, step=step)
            """
        ),
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="training")
            def forward(params, x, training):
                return x @ params if training else (x @ params) * 0.5

            for epoch in range(10):
                for x in batches:
                    y = forward(params, x, training=True)  # the same value every iteration
            """
        ),
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="causal")
            def attention(q, k, causal):
                return q @ k.T if causal else q @ k.T * 0.5

            for causal in (False, True):  # two configurations, two programs: on purpose
                out = attention(q, k, causal=causal)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="step")
            def update(params, grads, step):
                lr = 0.1 * 0.99 ** step
                return params - lr * grads

            for step in range(1000):
                params = update(params, grads, step=step)
            """,
            line=11,
        ),
        Invalid(
            """
            import equinox as eqx

            @eqx.filter_jit
            def free(table, slot):
                return table.at[slot].set(0)

            for slot in range(num_slots):
                table = free(table, slot)
            """,
            line=8,
        ),
        Invalid(
            """
            import jax.numpy as jnp
            from pages import PageTable

            table = PageTable(jnp.ones(num_slots))
            for slot in range(num_slots):
                table = table.free_pages(slot)
            """,
            line=6,
            modules={
                "pages.py": """
                import equinox as eqx
                import jax.numpy as jnp

                class PageTable(eqx.Module):
                    refs: jnp.ndarray

                    @eqx.filter_jit
                    def free_pages(self, slot: int) -> "PageTable":
                        return PageTable(self.refs.at[slot].set(0))
                """
            },
        ),
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="lr")
            def update(params, grads, lr):
                return params - lr * grads

            for step in range(1000):
                lr = 0.1 * 0.99 ** step
                params = update(params, grads, lr=lr)
            """,
            line=11,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        target = jitted_target(self.ctx, node) if isinstance(node.func, ast.Name) else None
        passed = list(static_arguments(self.ctx, node, filtered=True))
        # static by declaration, a value computed from the counter is new each step too; static
        # by type (filter_jit), only a plain counter is evidently a Python int
        declared = bool(passed) and not (target is not None and target.filtered)
        passed = passed or list(self._project_method_arguments(node))
        for name, arg in passed:
            counter = self._loop_variable(arg, node, derived=declared)
            if counter is not None:
                self.report(arg, self.summary.format(value=counter, name=name))
                return

    def _project_method_arguments(self, call: ast.Call):
        """`table.free_pages(slot)` where `free_pages` is a filter_jit method of the project (the
        only method of that name there): the arguments it passes to its static parameters."""
        func = call.func
        if not self.ctx.project.static_methods or not isinstance(func, ast.Attribute) or has_star_args(call):
            return
        root = func.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.ctx.index.imports:
            return  # `module.func(...)`: a function, not the method
        for name, params, static in self.ctx.project.static_methods:
            if name == func.attr:
                yield from ((p, a) for p, a in zip(params, call.args) if p in static)
                yield from ((k.arg, k.value) for k in call.keywords if k.arg in static)
                return

    def _loop_variable(self, arg: ast.expr, call: ast.Call, derived: bool = True) -> str | None:
        """The name of a loop counter (`range(...)`, `enumerate`'s index, of a loop around `call`)
        that `arg` is computed from: a new value every iteration. A loop's items may repeat
        (`for trainable in mask_leaves`: two values) or be arrays (which `filter_jit` traces)."""
        loops = [a for a in self.ctx.index.ancestors(call) if isinstance(a, (ast.For, ast.AsyncFor))]
        targets = {n for loop in loops for n in loop_counters(self.ctx, loop)} - sweep_variables(self.ctx, call)
        for name in ast.walk(arg):
            if isinstance(name, ast.Name) and name.id in targets:
                return name.id
            if isinstance(name, (ast.Attribute, ast.Subscript, ast.Call)):
                return None  # `batch.shape[0]`, `len(x)`: a size, not the counter (see the shape rules)
        if isinstance(arg, ast.Name) and derived:
            # `lr = schedule(step)` in the loop, then `update(..., lr=lr)`: a new value every step
            loop = self.ctx.index.enclosing_loop(call)
            inside = [
                v
                for v in self.ctx.reaching_values(arg)
                if loop is not None and loop in set(self.ctx.index.ancestors(v))
            ]
            if inside and all(reads_any(self.ctx, v, targets) for v in inside):
                return arg.id
        return None
