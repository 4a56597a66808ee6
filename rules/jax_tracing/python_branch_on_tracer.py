"""JAX103 python-branch-on-tracer: Flags Python control flow on a traced value inside a function JAX
stages out."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import is_traced_value
from xlalint.analysis.names import param_default
from xlalint.rule import Invalid, Rule, Valid


class PythonBranchOnTracer(Rule):
    """## What it does
    Flags Python control flow on a traced value inside a function JAX stages out: `if x > 0:`,
    `while err > tol:`, `assert jnp.all(x >= 0)`, `x and y`, `not x`, a conditional expression.
    A bare truth test of a pytree's field (`if state.dynamic_scale:`) is left alone: it tests for
    `None` or an empty container, which Python may decide while tracing; so is one of a parameter
    annotated as a tuple, list or dict (`limits: Tuple[Array, Array]`): its truth is its length.

    ## Why is this bad?
    Python decides a branch while tracing, when the value does not exist yet: JAX raises
    `TracerBoolConversionError`. Marking the argument static compiles one program per value (a
    recompilation for each new value); the data-dependent forms are `jnp.where` (both sides computed,
    elementwise choice), `lax.cond`/`lax.switch` (one side run), and `lax.while_loop`.

    ## Example
    ```python
    @jax.jit
    def relu_or_zero(x, t):
        if t > 0:
            return jax.nn.relu(x)
        return jnp.zeros_like(x)
    ```

    Use instead:
    ```python
    @jax.jit
    def relu_or_zero(x, t):
        return jnp.where(t > 0, jax.nn.relu(x), jnp.zeros_like(x))
    ```

    ## Fix safety
    No automatic fix: `jnp.where` computes both sides, `lax.cond` needs both branches to return the
    same shapes, and which suits the code is the author's choice.

    ## References
    - JAX docs, "Control flow and logical operators with JIT" (`TracerBoolConversionError`)
    """

    code, name, category = "JAX103", "python-branch-on-tracer", "control_flow_on_tensor"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "Python branches on a traced value inside a function JAX traces: the value does not exist yet"
    hint = "use `jnp.where`, `lax.cond`/`lax.switch`, `lax.while_loop`, or mark the argument static"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="training")
            def dropout(x, key, training):
                if training and x.ndim > 1:  # a static argument and metadata
                    return x * jax.random.bernoulli(key, 0.9, x.shape) / 0.9
                return x
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def relu_or_zero(x, t):
                return jnp.where(t > 0, jax.nn.relu(x), jnp.zeros_like(x))
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def train_step(state, grads):
                dynamic_scale = state.dynamic_scale
                if dynamic_scale:  # a pytree field that may be None: Python decides, as intended
                    grads = dynamic_scale.unscale(grads)
                return state.apply_gradients(grads=grads)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def relu_or_zero(x, t):
                if t > 0:
                    return jax.nn.relu(x)
                return jnp.zeros_like(x)
            """,
            line=6,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            def solve(x):
                err = jnp.abs(x).max()
                while err > 1e-3:
                    x = x / 2
                    err = jnp.abs(x).max()
                return x

            solve_fast = jax.jit(solve)
            """,
            line=6,
        ),
    ]

    def visit_If(self, node: ast.If) -> None:
        self._check(node.test, node)

    def visit_While(self, node: ast.While) -> None:
        self._check(node.test, node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._check(node.test, node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._check(node.test, node)

    def _check(self, test: ast.expr, node: ast.AST) -> None:
        parts = test.values if isinstance(test, ast.BoolOp) else [test]
        for part in parts:
            if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
                part = part.operand
            if is_traced_value(self.ctx, part) and not self._optional_field(part) and not self._container(part):
                self.report(test)
                return

    def _optional_field(self, expr: ast.expr, depth: int = 0) -> bool:
        """`if dynamic_scale:` with `dynamic_scale = state.dynamic_scale`: the truth of a pytree's
        field is usually a test for `None` or an empty container, which JAX leaves to Python; an
        array's truth is a comparison, a reduction, a jnp result, or a flag passed as an argument."""
        if isinstance(expr, ast.Attribute):
            return True
        if isinstance(expr, ast.Name) and depth < 4:
            values = self.ctx.reaching_values(expr)  # none: a parameter (`if training:`), reported
            if not values:  # ... unless it defaults to None (`existing_prefix=None`): a None test
                return self._defaults_to_none(expr)
            return all(self._optional_field(v, depth + 1) for v in values)
        return False

    def _container(self, expr: ast.expr) -> bool:
        """`if limits:` of a parameter annotated as a tuple, list or dict (`Tuple[Array, Array]`):
        a pytree container's truth is its length, which Python knows while tracing."""
        if not isinstance(expr, ast.Name):
            return False
        param = self.ctx.parameter(expr)
        return param is not None and param.annotation is not None and _container_type(param.annotation)

    def _defaults_to_none(self, name: ast.Name) -> bool:
        param = self.ctx.parameter(name)
        arguments = self.ctx.index.parent(param) if param is not None else None
        func = self.ctx.index.parent(arguments) if arguments is not None else None
        if param is None or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        default = param_default(func, param)
        return isinstance(default, ast.Constant) and default.value is None


# annotations of containers (`typing` names and builtins): their truth is their length
CONTAINERS = {"Tuple", "tuple", "List", "list", "Dict", "dict", "Sequence", "Mapping", "MutableMapping", "NamedTuple"}


def _container_type(annotation: ast.expr) -> bool:
    """`Tuple[Array, Array]`, `list[jax.Array]`, `Optional[Dict[str, Array]]`, `"Tuple[...]"`."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):  # `Tuple[...] | None`
        sides = [annotation.left, annotation.right]
        return all(_none(s) or _container_type(s) for s in sides) and not all(_none(s) for s in sides)
    head = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    name = head.attr if isinstance(head, ast.Attribute) else head.id if isinstance(head, ast.Name) else ""
    if name == "Optional" and isinstance(annotation, ast.Subscript):
        return _container_type(annotation.slice)
    return name in CONTAINERS


def _none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None
