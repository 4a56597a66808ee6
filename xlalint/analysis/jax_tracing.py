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



# values known while tracing: an array's metadata, and what jnp computes from metadata only
STATIC_ATTRIBUTES = {"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "aval", "sharding", "weak_type"}
STATIC_FUNCTIONS = {"jax.numpy.shape", "jax.numpy.ndim", "jax.numpy.size", "jax.numpy.result_type",
                    "jax.numpy.dtype", "jax.numpy.iinfo", "jax.numpy.finfo", "len", "isinstance", "type"}
MAX_DEPTH = 8


def traced_parameters(ctx: "FileContext", func: ast.AST) -> set[str]:
    """Parameters of `func` that hold tracers: those of a function JAX stages out itself (decorated,
    wrapped by `jax.jit(f)`, a control-flow body), minus `static_argnums`/`static_argnames`. A
    helper only called from traced code is left out: its callers may pass static Python values."""
    staging = ctx.jax_staged.get(func)
    if staging is None:
        return set()
    args = [*func.args.posonlyargs, *func.args.args]
    names = [a.arg for a in (*args, *func.args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
        args = args[1:]
    static: set[str] = set()
    for spec in staging:
        for kw in spec.keywords:
            values = kw.value.elts if isinstance(kw.value, (ast.Tuple, ast.List)) else [kw.value]
            if kw.arg == "static_argnames":
                static |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            elif kw.arg == "static_argnums":
                static |= {args[v.value].arg for v in values if isinstance(v, ast.Constant)
                           and isinstance(v.value, int) and -len(args) <= v.value < len(args)}
    return {n for n in names if n not in static}


def staged_functions(ctx: "FileContext") -> dict[ast.AST, list[ast.Call]]:
    """The functions JAX stages out directly (not the helpers they call), each with the decorators
    and calls that stage it (their keywords give the static arguments; none for a control-flow body)."""
    by_name: dict[str, list[ast.Call]] = {}  # function name -> the `jax.jit(name, ...)` calls naming it
    for node in ast.walk(ctx.tree):
        if not isinstance(node, ast.Call):
            continue
        qualified = ctx.qualified_name(node.func) or ""
        args = positional(node)
        if qualified in TRACING and args and isinstance(args[0], ast.Name):
            by_name.setdefault(args[0].id, []).append(node)
        elif qualified in CONTROL_FLOW:
            for position in CONTROL_FLOW[qualified]:
                if position < len(args) and isinstance(args[position], ast.Name):
                    by_name.setdefault(args[position].id, [])
    staged: dict[ast.AST, list[ast.Call]] = {}
    for func in ctx.jax_traced:
        if isinstance(func, ast.Lambda):
            if isinstance(ctx.index.parent(func), ast.Call):
                staged[func] = []  # a lambda given to a primitive or to jax.jit
            continue
        decorators = [d for d in func.decorator_list if _is_tracing(ctx, d)]
        if decorators or func.name in by_name:
            staged[func] = [d for d in decorators if isinstance(d, ast.Call)] + by_name.get(func.name, [])
    return staged


def is_traced_value(ctx: "FileContext", expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is (computed from) a tracer inside the function JAX traces around it: a traced
    parameter, a jnp/lax result, or arithmetic on one; not its metadata (`x.shape[0]`, `x.ndim`)."""
    if depth > MAX_DEPTH:
        return False
    func = enclosing_traced(ctx, expr)
    if func is None:
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if values:
            return any(is_traced_value(ctx, v, depth + 1) for v in values)
        owner = _binding_function(ctx, expr)
        return owner is not None and expr.id in traced_parameters(ctx, owner)
    if isinstance(expr, ast.Attribute):
        return expr.attr not in STATIC_ATTRIBUTES and is_traced_value(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Subscript):
        return is_traced_value(ctx, expr.value, depth + 1)
    if isinstance(expr, (ast.BinOp,)):
        return is_traced_value(ctx, expr.left, depth + 1) or is_traced_value(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.UnaryOp):
        return is_traced_value(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops):
            return False
        return any(is_traced_value(ctx, e, depth + 1) for e in (expr.left, *expr.comparators))
    if isinstance(expr, ast.Call):
        name = ctx.qualified_name(expr.func) or ""
        if name in STATIC_FUNCTIONS:
            return False
        if name.startswith(("jax.numpy.", "jax.lax.", "jax.nn.", "jax.scipy.")):
            return any(is_traced_value(ctx, a, depth + 1) for a in (*expr.args, *(k.value for k in expr.keywords)))
        if isinstance(expr.func, ast.Attribute) and expr.func.attr not in ("item", "tolist"):
            return is_traced_value(ctx, expr.func.value, depth + 1)  # `x.sum()`, `x.astype(...)`
    return False


def _binding_function(ctx: "FileContext", name: ast.Name) -> ast.AST | None:
    """The function or lambda whose parameter `name` is."""
    for anc in ctx.index.ancestors(name):
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            params = {a.arg for a in (*anc.args.posonlyargs, *anc.args.args, *anc.args.kwonlyargs)}
            if name.id in params:
                return anc
    return None
