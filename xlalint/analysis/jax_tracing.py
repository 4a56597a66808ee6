"""Which functions JAX traces: their arguments are tracers, with shapes but no values.

A function runs traced when it is decorated with a transformation that stages it out
(`@jax.jit`, `@partial(jax.jit, static_argnames=...)`, `@jax.pmap`, `@jax.vmap`, `shard_map`,
`@jax.checkpoint`), wrapped by one anywhere in its module (`step = jax.jit(train_step)`), passed as
the body of a structured control-flow primitive (`lax.scan`, `lax.fori_loop`, `lax.while_loop`,
`lax.cond`, `lax.switch`, `lax.map`), or called from a traced function of the same module. Inside,
an operation whose output shape depends on values, or a Python conversion of a value, cannot be
traced (`ConcretizationTypeError`, `TracerBoolConversionError`).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .index import FUNCTIONS
from .names import positional

if TYPE_CHECKING:
    from .context import FileContext

# transformations whose function runs on tracers (not `jax.grad`: outside jit it sees values)
TRACING = {"jax.jit", "jax.pmap", "jax.vmap", "jax.checkpoint", "jax.remat", "jax.shard_map",
           "jax.experimental.shard_map.shard_map", "jax.experimental.pjit.pjit", "flax.linen.jit",
           "equinox.filter_jit"}
# control-flow primitives: (qualified name, positions of the functions they trace)
CONTROL_FLOW = {"jax.lax.scan": (0,), "jax.lax.fori_loop": (2,), "jax.lax.while_loop": (0, 1),
                "jax.lax.cond": (1, 2), "jax.lax.map": (0,), "jax.lax.associative_scan": (0,)}


def traced_functions(ctx: "FileContext") -> set[ast.AST]:
    """The functions (and lambdas) of this module that JAX runs on tracers."""
    by_name: dict[str, list[ast.AST]] = {}
    for node in ast.walk(ctx.tree):
        if isinstance(node, FUNCTIONS):
            by_name.setdefault(node.name, []).append(node)
    traced: set[ast.AST] = set()

    def add(expr: ast.expr | None) -> None:
        if isinstance(expr, ast.Lambda):
            traced.add(expr)
        elif isinstance(expr, ast.Name):
            traced.update(by_name.get(expr.id, ()))

    for node in ast.walk(ctx.tree):
        if isinstance(node, FUNCTIONS) and any(_is_tracing(ctx, d) for d in node.decorator_list):
            traced.add(node)
        elif isinstance(node, ast.Call):
            name = ctx.qualified_name(node.func) or ""
            if name in TRACING and node.args:
                add(node.args[0])  # `jax.jit(train_step)`
            elif _is_partial_of_tracing(ctx, node) and len(node.args) > 1:
                add(node.args[1])  # `partial(jax.jit, static_argnums=1)(f)` is rare; `partial(jax.jit, f)`
            elif name in CONTROL_FLOW:
                args = positional(node)
                for position in CONTROL_FLOW[name]:
                    if position < len(args):
                        add(args[position])
            elif name == "jax.lax.switch" and len(node.args) > 1:
                branches = node.args[1]
                for branch in branches.elts if isinstance(branches, (ast.List, ast.Tuple)) else []:
                    add(branch)
    # what a traced function calls in this module runs traced too, and so do functions defined in it
    pending = list(traced)
    while pending:
        func = pending.pop()
        for node in ast.walk(func):
            found: list[ast.AST] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                found = by_name.get(node.func.id, [])
            elif isinstance(node, (*FUNCTIONS, ast.Lambda)) and node is not func:
                found = [node]
            for callee in found:
                if callee not in traced:
                    traced.add(callee)
                    pending.append(callee)
    return traced


def _is_tracing(ctx: "FileContext", decorator: ast.expr) -> bool:
    """`@jax.jit`, `@jax.jit(static_argnames=...)`, `@partial(jax.jit, ...)`."""
    if ctx.qualified_name(decorator) in TRACING:
        return True
    if isinstance(decorator, ast.Call):
        return ctx.qualified_name(decorator.func) in TRACING or _is_partial_of_tracing(ctx, decorator)
    return False


def _is_partial_of_tracing(ctx: "FileContext", call: ast.Call) -> bool:
    return ctx.qualified_name(call.func) in ("functools.partial", "partial") and bool(call.args) and \
        ctx.qualified_name(call.args[0]) in TRACING


def enclosing_traced(ctx: "FileContext", node: ast.AST) -> ast.AST | None:
    """The innermost traced function or lambda around `node`, if any."""
    traced = ctx.jax_traced
    for anc in ctx.index.ancestors(node):
        if anc in traced:
            return anc
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            return None
    return None

