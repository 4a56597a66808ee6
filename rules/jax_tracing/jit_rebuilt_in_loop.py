"""JAX107 jit-rebuilt-in-loop: Flags `jax.jit(...)` (and `jax.pmap`, `pjit`, `equinox.filter_jit`)
applied inside a loop to a function object the loop creates anew."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import COMPILING, is_bound_method, reads_any, resolve_function, sweep_variables
from xlalint.rule import Invalid, Rule, Valid

PER_CALL = (
    "`{func}` of a new function object at every call of `{owner}`, which runs every step: each call compiles again"
)


class JitRebuiltInLoop(Rule):
    """## What it does
    Flags `jax.jit(...)` (and `jax.pmap`, `pjit`, `equinox.filter_jit`) applied inside a loop to a
    function object the loop creates anew: a `lambda`, a `functools.partial(...)`, a bound method
    (`self.apply`), or a function defined in the loop; and a `@jax.jit` function defined in a loop.
    Also, outside loops, `jax.pmap(gather)(x)` called at once on a function object made at every
    call of the function around it (a lambda, a `partial`, a function defined in it) when that
    function runs every step (reached from a training loop; possible when it is a step by its name
    only).

    ## Why is this bad?
    JAX caches compiled programs per function object. A new lambda, partial or bound method at
    every iteration is a new object: every iteration traces and compiles again, which takes far
    longer than the step itself. Jitting the same module-level function again hits the cache, and
    a loop over literal configurations (`for block in (64, 128)`, autotuning) whose values the
    function reads compiles per configuration on purpose: neither is reported.

    ## Example
    ```python
    for batch in batches:
        loss = jax.jit(lambda p: loss_fn(p, batch))(params)
    ```

    Use instead:
    ```python
    loss_jit = jax.jit(loss_fn)
    for batch in batches:
        loss = loss_jit(params, batch)  # the batch is an argument: one compile
    ```

    ## Fix safety
    No automatic fix: hoisting is exact only when the wrapped function and its static arguments do
    not change between iterations, and a lambda usually closes over the loop's variables.

    ## References
    - JAX docs, "Just-in-time compilation": caching (avoid `jax.jit` of temporary functions)
    """

    code, name, category = "JAX107", "jit-rebuilt-in-loop", "other"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` of a new function object at every loop iteration: each iteration compiles again"
    hint = "jit once, before the loop, a function that takes what changes as arguments"

    VALID = [
        Valid(
            """
            import jax

            def loss_fn(params, batch):
                return ((batch @ params) ** 2).mean()

            loss_jit = jax.jit(loss_fn)
            for batch in batches:
                loss = loss_jit(params, batch)
            """
        ),
        Valid(
            """
            import jax

            def scale(x):
                return x * 2

            for x in inputs:
                y = jax.jit(scale)(x)  # the same function object: the cache is hit
            """
        ),
        Valid(
            """
            import itertools

            import jax

            for block, unroll in itertools.product((64, 128), (1, 2)):  # autotuning: a program per configuration
                kernel = jax.jit(lambda x: step(x, block, unroll))
                timings[block, unroll] = benchmark(kernel, x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax

            def loss_fn(params, batch):
                return ((batch @ params) ** 2).mean()

            for batch in batches:
                loss = jax.jit(lambda p: loss_fn(p, batch))(params)
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            def train(params, batches):
                for batch in batches:
                    @jax.jit
                    def step(p):
                        return p - 0.1 * batch.mean()
                    params = step(params)
                return params
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = self.ctx.qualified_name(node.func) or ""
        if func not in COMPILING or not node.args:
            return
        if self._new_each_iteration(node.args[0], node):
            if not self._per_configuration(node.args[0], node):
                self.report(node, self.summary.format(func=func.rpartition(".")[2]))
            return
        owner = self._new_each_call(node.args[0], node)
        if owner is not None and self.ctx.is_per_step(node):
            message = PER_CALL.format(func=func.rpartition(".")[2], owner=owner.name)
            self.report(node, message, evidence=self.ctx.step_evidence(node))

    def _new_each_call(self, wrapped: ast.expr, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """`jax.pmap(gather)(x)` called at once, outside any loop, on a function object its
        enclosing function makes at every call (a lambda, a `partial`, a function defined there):
        the enclosing function, whose every call compiles again."""
        index = self.ctx.index
        owner = index.enclosing_function(call)
        parent = index.parent(call)
        if owner is None or not (isinstance(parent, ast.Call) and parent.func is call):
            return None
        if index.enclosing_loop(call) is not None:
            return None
        if isinstance(wrapped, ast.Lambda):
            return owner
        if isinstance(wrapped, ast.Call):
            return owner if self.ctx.qualified_name(wrapped.func) in ("functools.partial", "partial") else None
        if isinstance(wrapped, ast.Name):
            defined = resolve_function(self.ctx, wrapped)
            return owner if defined and all(owner in set(index.ancestors(f)) for f in defined) else None
        return None

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        decorators = [d for d in node.decorator_list if self._compiles(d)]
        if decorators and self.ctx.index.enclosing_loop(node) is not None and not self._per_configuration(node, node):
            self.report(decorators[0], self.summary.format(func="@" + self.ctx.code(decorators[0]).split("(")[0]))

    def _per_configuration(self, wrapped: ast.AST, node: ast.AST) -> bool:
        """The function reads a variable of a loop over literal configurations (an autotuning
        sweep), itself or through the names it is built from (`f = transform(partial(g,
        axis=axis))` then `jax.pmap(f.apply)`): a compilation per configuration is the point."""
        loop = self.ctx.index.enclosing_loop(node)
        if (
            isinstance(loop, (ast.For, ast.AsyncFor))
            and isinstance(loop.iter, (ast.Tuple, ast.List))
            and all(isinstance(e, (ast.Name, ast.Attribute, ast.Constant)) for e in loop.iter.elts)
        ):
            return True  # `for wrapper in (jax.jit, eqx.filter_jit):`: as many compiles as written items
        sweep = sweep_variables(self.ctx, node)
        return bool(sweep) and reads_any(self.ctx, wrapped, sweep)

    def _compiles(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if self.ctx.qualified_name(target) in COMPILING:
            return True
        return (
            isinstance(decorator, ast.Call)
            and self.ctx.qualified_name(decorator.func) in ("functools.partial", "partial")
            and bool(decorator.args)
            and self.ctx.qualified_name(decorator.args[0]) in COMPILING
        )

    def _new_each_iteration(self, wrapped: ast.expr, call: ast.Call) -> bool:
        loop = self.ctx.index.enclosing_loop(call)
        if loop is None:
            return False
        if isinstance(wrapped, ast.Lambda):
            return True
        if isinstance(wrapped, ast.Call):
            return self.ctx.qualified_name(wrapped.func) in ("functools.partial", "partial")
        if isinstance(wrapped, ast.Attribute):
            return is_bound_method(self.ctx, wrapped, loop)
        if isinstance(wrapped, ast.Name):  # a function defined in the loop, or a name the loop rebinds
            defined = [
                f for f in self.ctx.index.functions.get(wrapped.id, []) if loop in set(self.ctx.index.ancestors(f))
            ]
            return bool(defined)
        return False
