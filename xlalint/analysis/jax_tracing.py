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
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .index import FUNCTIONS, target_names
from .names import dotted_name, is_number, keyword, keyword_value, param_default, positional

if TYPE_CHECKING:
    from .file import File

# transformations whose function runs on tracers (not `jax.grad`: outside jit it sees values)
TRACING = {
    "jax.jit",
    "jax.pmap",
    "jax.vmap",
    "jax.checkpoint",
    "jax.remat",
    "jax.shard_map",
    "jax.experimental.shard_map.shard_map",
    "jax.experimental.pjit.pjit",
    "flax.linen.jit",
    "flax.nnx.jit",
    "flax.nnx.pmap",
    "flax.nnx.vmap",
    "flax.nnx.shard_map",
    "flax.nnx.remat",
    *(f"equinox.filter_{t}" for t in ("jit", "vmap", "pmap", "checkpoint")),
}
# Equinox's filtered transformations trace only the arrays they are given: any other argument (a
# Python number, a bool, a function, a module's static field) is static, a compile-time constant
FILTERED = {"equinox.filter_jit", "equinox.filter_vmap", "equinox.filter_pmap", "equinox.filter_checkpoint"}
SHARD_MAPS = {"jax.shard_map", "jax.experimental.shard_map.shard_map", "flax.nnx.shard_map"}
# control-flow primitives: (qualified name, positions of the functions they trace)
CONTROL_FLOW = {
    "jax.lax.scan": (0,),
    "jax.lax.fori_loop": (2,),
    "jax.lax.while_loop": (0, 1),
    "jax.lax.cond": (1, 2),
    "jax.lax.map": (0,),
    "jax.lax.associative_scan": (0,),
}
# functions that call the function they are given on the leaves of the pytrees that follow it
TREE_MAPS = {"jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map", "equinox.filter", "optax.tree_map_params"}


def resolve_function(ctx: File, name: ast.Name) -> list[ast.AST]:
    """The functions a bare name refers to where it is used: those defined in the innermost
    enclosing scope that defines one of that name (a local `update_fn` in one test is not the
    `update_fn` another test jits); methods are never reached by a bare name."""
    if not ctx.defines_function(name.id):
        return []
    for scope in ctx.index.ancestors(name):
        if isinstance(scope, (*FUNCTIONS, ast.Lambda, ast.Module)):
            here = ctx.functions_in_scope(name.id, scope)  # not every `def body` of the module
            if here:
                return list(here)
    return []


def _staging_targets(ctx: File, call: ast.Call) -> list[ast.expr]:
    """The function expressions a staging call traces: `jax.jit(f)`, `partial(jax.jit, f)`, the
    bodies of `lax.scan(f, ...)`, `lax.cond(p, f, g)`, `lax.switch(i, [f, g])`."""
    name = ctx.qualified_name(call.func) or ""
    args = positional(call)
    if name in TRACING and args:
        return [args[0]]
    if _is_partial_of_tracing(ctx, call) and len(args) > 1:
        return [args[1]]
    if name in CONTROL_FLOW:
        return [args[p] for p in CONTROL_FLOW[name] if p < len(args)]
    if name == "jax.lax.switch" and len(args) > 1 and isinstance(args[1], (ast.List, ast.Tuple)):
        return list(args[1].elts)
    return []


def traced_functions(ctx: File) -> set[ast.AST]:
    """The functions (and lambdas) of this module that JAX runs on tracers."""
    traced: set[ast.AST] = set()

    def add(expr: ast.expr | None) -> None:
        if isinstance(expr, ast.Lambda):
            traced.add(expr)
        elif isinstance(expr, ast.Name):
            traced.update(resolve_function(ctx, expr))

    for node in (*ctx.index.by_type.get(ast.FunctionDef, ()), *ctx.index.by_type.get(ast.AsyncFunctionDef, ())):
        if any(_is_tracing(ctx, d) for d in node.decorator_list):
            traced.add(node)
    for node in ctx.index.calls:  # the index's lists: no second walk of the module
        for target in _staging_targets(ctx, node):
            add(target)
    # what a traced function calls in this module runs traced too, and so do functions defined in it
    pending = list(traced)
    while pending:
        func = pending.pop()
        within = ctx.index.within  # (the nodes `ast.walk` would find, without walking)
        inner: list[ast.AST] = [*within(ast.FunctionDef, func), *within(ast.AsyncFunctionDef, func)]
        inner += within(ast.Lambda, func)
        found = [n for n in inner if n is not func]
        for call in within(ast.Call, func):
            if isinstance(call.func, ast.Name):
                found += resolve_function(ctx, call.func)
        for callee in found:
            if callee not in traced:
                traced.add(callee)
                pending.append(callee)
    return traced


def _is_tracing(ctx: File, decorator: ast.expr) -> bool:
    """`@jax.jit`, `@jax.jit(static_argnames=...)`, `@partial(jax.jit, ...)`."""
    if ctx.qualified_name(decorator) in TRACING:
        return True
    if isinstance(decorator, ast.Call):
        return ctx.qualified_name(decorator.func) in TRACING or _is_partial_of_tracing(ctx, decorator)
    return False


def _is_partial_of_tracing(ctx: File, call: ast.Call) -> bool:
    return (
        ctx.qualified_name(call.func) in ("functools.partial", "partial")
        and bool(call.args)
        and ctx.qualified_name(call.args[0]) in TRACING
    )


def _transformation(ctx: File, spec: ast.expr) -> str:
    """The transformation a decorator or staging call applies: `jax.jit`, `equinox.filter_jit`."""
    if isinstance(spec, ast.Call):
        if _is_partial_of_tracing(ctx, spec):
            return ctx.qualified_name(spec.args[0]) or ""
        return ctx.qualified_name(spec.func) or ""
    return ctx.qualified_name(spec) or ""


def enclosing_traced(ctx: File, node: ast.AST) -> ast.AST | None:
    """The innermost traced function or lambda around `node`, if any; None also where a tracer
    never goes: the body of `if isinstance(x, np.ndarray):` (true only for host arrays)."""
    traced = ctx.cached(traced_functions)
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.If) and ctx.index.field_of(child) == "body" and _tests_host_array(ctx, anc.test):
            return None
        if anc in traced:
            return anc
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            return None
        child = anc
    return None


def _tests_host_array(ctx: File, test: ast.expr) -> bool:
    """`isinstance(x, np.ndarray)` (or a tuple of NumPy types): never true of a tracer."""
    if not (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
        and len(test.args) == 2
    ):
        return False
    kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    return all((ctx.qualified_name(k) or "").startswith("numpy.") for k in kinds)


# values known while tracing: an array's metadata, and what jnp computes from metadata only
STATIC_ATTRIBUTES = {
    "shape",
    "ndim",
    "dtype",
    "size",
    "itemsize",
    "nbytes",
    "aval",
    "sharding",
    "weak_type",
    "out_sharding",
    "sharding_names",
    "metadata",
}  # a Flax Variable's metadata too
# a module's attributes are its static structure (`model.dim`, `model.num_heads`); its arrays live in
# Variables, read through `.value` (or `[...]`), and what an array attribute computes
MODULE_PARAMETER = re.compile(r"^(model|module|net|network|mdl|m|self|layer|block|encoder|decoder)$|_(model|module)$")
ARRAY_ATTRIBUTES = {"T", "mT", "real", "imag", "value"}
STATIC_FUNCTIONS = {
    "jax.numpy.shape",
    "jax.numpy.ndim",
    "jax.numpy.size",
    "jax.numpy.result_type",
    "jax.numpy.dtype",
    "jax.numpy.iinfo",
    "jax.numpy.finfo",
    "len",
    "isinstance",
    "type",
}
MAX_DEPTH = 8
Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda  # what JAX stages: a def or a lambda


def traced_parameters(ctx: File, func: ast.AST) -> set[str]:
    """Parameters of `func` that hold tracers: those of a function JAX stages out itself (decorated,
    wrapped by `jax.jit(f)`, a control-flow body), minus `static_argnums`/`static_argnames`, the
    `in_axes=None` arguments of `vmap` (passed through as they are) and, under Equinox's filtered
    transformations, every parameter not annotated as an array (non-arrays are static there). A
    helper only called from traced code is left out: its callers may pass static Python values."""
    staging = ctx.cached(staged_functions).get(func)
    if staging is None or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()  # (staged: always a def or a lambda)
    names = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    bodies = [c for c in staging if ctx.qualified_name(c.func) in CONTROL_FLOW]
    if bodies and len(bodies) == len(staging):
        # a control-flow body gets as many tracers as the primitive passes (`fori_loop`: the index
        # and the carry); later parameters keep their Python defaults (`causal: bool = False`)
        return set(names[: max(_passed(ctx, c) for c in bodies)])
    specs = [c for c in staging if c not in bodies]
    decorators = [d for d in getattr(func, "decorator_list", []) if _is_tracing(ctx, d)]
    if (
        decorators
        and any(_transformation(ctx, d) in FILTERED for d in decorators)
        or any(_transformation(ctx, c) in FILTERED for c in specs)
    ):
        return {
            a.arg
            for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)
            if a.arg in names and _annotated_array(a)
        }
    static = _static_names(func, specs) | _unmapped(ctx, func, specs) | _defaults_kept(ctx, func)
    return {n for n in names if n not in static}


def _defaults_kept(ctx: File, func: ast.AST) -> set[str]:
    """Parameters with a Python literal default (`*, row_chunk_size: int = 16`) that no call of
    the function in this module passes: `jit` binds the default while tracing, a Python value.
    (A caller that passes one makes it a tracer: then it counts as traced.)"""
    if not isinstance(func, FUNCTIONS):
        return set()
    positional = [*func.args.posonlyargs, *func.args.args]
    kept = {a.arg for a in (*positional, *func.args.kwonlyargs) if isinstance(param_default(func, a), ast.Constant)}
    if not kept:
        return set()
    order = [a.arg for a in positional]
    if order and order[0] in ("self", "cls"):
        order = order[1:]
    for call in ctx.calls_of(func.name):
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return set()  # `f(*args, **kw)`: anything may be passed
        kept -= {k.arg for k in call.keywords} | set(order[: len(call.args)])
    return kept


def _annotated_array(arg: ast.arg) -> bool:
    """`x: Array`, `x: jax.Array`, `x: Float[Array, "n"]`, `x: jnp.ndarray`, `x: NamedArray`."""
    if arg.annotation is None:
        return False
    text = ast.unparse(arg.annotation)
    return "Array" in text or "ndarray" in text


def _unmapped(ctx: File, func: Function, specs: list[ast.Call]) -> set[str]:
    """The parameters a `vmap` passes through unmapped (`in_axes` None at their position), or a
    `shard_map` does not shard (`in_specs` None): their Python values reach the function as they
    are (a config value, `cp_size`)."""
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    unmapped: set[str] = set()
    for spec in specs:
        transformation = _transformation(ctx, spec)
        if transformation in SHARD_MAPS:
            axes = keyword(spec, "in_specs")
            value = axes.value if axes is not None else None
        elif transformation in ("jax.vmap", "flax.nnx.vmap"):
            axes = keyword(spec, "in_axes")
            value = axes.value if axes is not None else None
            if value is None and not _is_partial_of_tracing(ctx, spec) and len(spec.args) > 1:
                value = spec.args[1]
        else:
            continue
        if isinstance(value, (ast.Tuple, ast.List)):
            unmapped |= {
                params[i]
                for i, e in enumerate(value.elts)
                if i < len(params) and isinstance(e, ast.Constant) and e.value is None
            }
    return unmapped


# how many arguments a control-flow primitive passes the functions it traces
PASSED = {
    "jax.lax.scan": 2,
    "jax.lax.fori_loop": 2,
    "jax.lax.while_loop": 1,
    "jax.lax.map": 1,
    "jax.lax.associative_scan": 2,
}


def _passed(ctx: File, call: ast.Call) -> int:
    """`lax.cond(pred, f, g, *operands)` passes the operands."""
    name = ctx.qualified_name(call.func) or ""
    if name in PASSED:
        return PASSED[name]
    if any(isinstance(a, ast.Starred) for a in call.args):
        return 1 << 16
    return max(len(call.args) - 3, 0)


def _static_names(func: Function, staging: list[ast.Call]) -> set[str]:
    """The parameters `static_argnames`/`static_argnums` of these staging calls make static."""
    args = [*func.args.posonlyargs, *func.args.args]  # a decorated method counts `self` (static_argnums=0)
    static: set[str] = set()
    for spec in staging:
        for kw in spec.keywords:
            values = kw.value.elts if isinstance(kw.value, (ast.Tuple, ast.List)) else [kw.value]
            if kw.arg == "static_argnames":
                static |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            elif kw.arg == "static_argnums":
                static |= {
                    args[v.value].arg
                    for v in values
                    if isinstance(v, ast.Constant) and isinstance(v.value, int) and -len(args) <= v.value < len(args)
                }
    return static


def staged_functions(ctx: File) -> dict[ast.AST, list[ast.Call]]:
    """The functions JAX stages out directly (not the helpers they call), each with the decorators
    and calls that stage it (a `jax.jit` call's keywords give the static arguments; a control-flow
    primitive's call, how many arguments it passes)."""
    traced = ctx.cached(traced_functions)
    if not traced:
        return {}  # only traced functions are staged: no walk of a module that traces nothing
    by_function: dict[ast.AST, list[ast.Call]] = {}  # function -> the `jax.jit(f, ...)` calls naming it
    staged_lambdas: set[ast.AST] = set()
    for node in ast.walk(ctx.tree):
        if not isinstance(node, ast.Call):
            continue
        for target in _staging_targets(ctx, node):
            if isinstance(target, ast.Name):
                for func in resolve_function(ctx, target):
                    by_function.setdefault(func, []).append(node)
            elif isinstance(target, ast.Lambda):
                staged_lambdas.add(target)
    staged: dict[ast.AST, list[ast.Call]] = {}
    for func in sorted(traced, key=lambda f: ctx.index.order.get(f, 0)):  # source order: the last wins
        if isinstance(func, ast.Lambda):
            if func in staged_lambdas:
                staged[func] = []  # a lambda given to a primitive or to jax.jit
            continue
        if not isinstance(func, FUNCTIONS):
            continue  # (never: traced code is a def or a lambda)
        decorators = [d for d in func.decorator_list if _is_tracing(ctx, d)]
        if decorators or func in by_function:
            staged[func] = [d for d in decorators if isinstance(d, ast.Call)] + by_function.get(func, [])
    return staged


def is_traced_value(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
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
        if owner is None:
            return False
        leaves = _tree_map_operand(ctx, owner, expr.id)
        if leaves is not None:  # `jax.tree.map(lambda s: int(s), tree)`: `s` is a leaf of `tree`
            return is_traced_value(ctx, leaves, depth + 1)
        return expr.id in traced_parameters(ctx, owner)
    if isinstance(expr, ast.Attribute):
        if expr.attr in STATIC_ATTRIBUTES:
            return False
        if _module_root(ctx, expr):
            if expr.attr not in ARRAY_ATTRIBUTES:
                return False  # `model.dim`: a module's plain attribute is static structure
            root = expr.value
            while isinstance(root, ast.Attribute):
                root = root.value
            return is_traced_value(ctx, root, depth + 1)  # `model.kernel.value`: a Variable's array
        return is_traced_value(ctx, expr.value, depth + 1)
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
        if isinstance(expr.func, ast.Attribute) and expr.func.attr.startswith(PYTHON_PREDICATES):
            return False  # `mask.is_causal()`, `a.is_traced()`: a Python bool
        if isinstance(expr.func, ast.Attribute) and expr.func.attr not in ("item", "tolist"):
            return is_traced_value(ctx, expr.func.value, depth + 1)  # `x.sum()`, `x.astype(...)`
    return False


# methods that answer about an object, not its values (`mask.is_causal()` of a module whose field is
# static, Equinox's `is_traced()`): a jax.Array has no such method, so they return Python values
PYTHON_PREDICATES = ("is_", "has_")


def _tree_map_operand(ctx: File, func: ast.AST, param: str) -> ast.expr | None:
    """For a function handed to `jax.tree.map(f, t0, t1, ...)`, the pytree whose leaves its
    parameter `param` receives."""
    call = ctx.index.parent(func)
    if (
        not isinstance(func, (ast.Lambda, *FUNCTIONS))
        or not isinstance(call, ast.Call)
        or (ctx.qualified_name(call.func) or "") not in TREE_MAPS
    ):
        return None
    args = positional(call)
    if not args or args[0] is not func:
        return None
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if param not in params:
        return None
    position = params.index(param) + 1
    return args[position] if position < len(args) else None


def _module_root(ctx: File, attribute: ast.Attribute) -> bool:
    """`model.dim`, `self.encoder.num_layers`: an attribute chain on a parameter that holds a
    module (by its name, or an annotation naming a Module/Model class)."""
    root: ast.expr = attribute
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    if MODULE_PARAMETER.search(root.id):
        return True
    param = ctx.parameter(root)
    return (
        param is not None
        and param.annotation is not None
        and re.search(r"(Module|Model)\b", ast.unparse(param.annotation)) is not None
    )


def _binding_function(ctx: File, name: ast.Name) -> ast.AST | None:
    """The function or lambda whose parameter `name` is."""
    for anc in ctx.index.ancestors(name):
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            params = {a.arg for a in (*anc.args.posonlyargs, *anc.args.args, *anc.args.kwonlyargs)}
            if name.id in params:
                return anc
    return None


# jnp functions whose result is boolean, elementwise on their arguments
BOOLEAN_FUNCTIONS = {
    "isnan",
    "isinf",
    "isfinite",
    "isneginf",
    "isposinf",
    "logical_and",
    "logical_or",
    "logical_not",
    "logical_xor",
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "isclose",
    "signbit",
}


def is_boolean_mask(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is evidently a boolean array: a comparison, `~m`, `m & n`, `jnp.isnan(x)`,
    `x.astype(bool)`, `jnp.all(m, axis=...)`, or a name holding one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Compare):
        return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in expr.ops)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert):
        return is_boolean_mask(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return is_boolean_mask(ctx, expr.left, depth + 1) and is_boolean_mask(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return bool(values) and all(is_boolean_mask(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Call):
        name = ctx.qualified_name(expr.func) or ""
        head, _, func = name.rpartition(".")
        if head == "jax.numpy" and func in BOOLEAN_FUNCTIONS:
            return True
        if head == "jax.numpy" and func in ("all", "any") and expr.args:
            return True
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "astype" and expr.args:
            target = expr.args[0]
            return (isinstance(target, ast.Name) and target.id == "bool") or ctx.qualified_name(target) in (
                "jax.numpy.bool_",
                "numpy.bool_",
            )
    return False


def elementwise_of(ctx: File, mask: ast.expr, array: ast.expr, depth: int = 0) -> bool:
    """`mask` has the shape of `array` (a name), evidently: comparisons of it with numbers,
    `jnp.isnan(array)` and the like, and `~`, `&`, `|` of such masks."""
    if depth > MAX_DEPTH or not isinstance(array, ast.Name):
        return False
    if isinstance(mask, ast.Name):
        values = ctx.reaching_values(mask)
        return len(values) == 1 and elementwise_of(ctx, values[0], array, depth + 1)
    if isinstance(mask, ast.Compare):
        operands = [mask.left, *mask.comparators]
        same = [o for o in operands if isinstance(o, ast.Name) and o.id == array.id]
        return len(same) == 1 and all(o in same or is_number(o) for o in operands)
    if isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert):
        return elementwise_of(ctx, mask.operand, array, depth + 1)
    if isinstance(mask, ast.BinOp) and isinstance(mask.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return elementwise_of(ctx, mask.left, array, depth + 1) and elementwise_of(ctx, mask.right, array, depth + 1)
    if isinstance(mask, ast.Call) and len(mask.args) == 1 and not mask.keywords:
        head, _, func = (ctx.qualified_name(mask.func) or "").rpartition(".")
        arg = mask.args[0]
        return (
            head == "jax.numpy"
            and func in ("isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit")
            and isinstance(arg, ast.Name)
            and arg.id == array.id
        )
    return False


# transformations that compile: a new function object given to one compiles again
COMPILING = {"jax.jit", "jax.pmap", "jax.experimental.pjit.pjit", "equinox.filter_jit"}


@dataclass(frozen=True)
class JittedCallable:
    """A name the module calls a jitted function by, with the function's parameters
    (in order, `self` left out) and which of them are static."""

    func: ast.AST
    params: tuple[str, ...]
    static: frozenset[str]
    filtered: bool = False  # Equinox's filter_jit: static by type (non-arrays), not by declaration
    owner: ast.AST | None = None  # for `self.<name>`: the class whose methods call it so


def jitted_callables(ctx: File) -> dict[str, JittedCallable]:
    """`@jax.jit`-decorated functions by their name, `step = jax.jit(f, static_argnums=...)` by
    `step`, decorated methods by `self.<name>`: what a call `step(...)` (`self.update(...)`) in
    this module runs."""
    found: dict[str, JittedCallable] = {}
    for func, staging in ctx.cached(staged_functions).items():
        if not isinstance(func, FUNCTIONS):  # a lambda (staged: a def or a lambda)
            continue
        params = tuple(a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs))
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        traced = traced_parameters(ctx, func)
        if any(_is_tracing(ctx, d) for d in func.decorator_list):
            method = isinstance(ctx.index.parent(func), ast.ClassDef)
            found[f"self.{func.name}" if method else func.name] = _decorated(ctx, func)
        for call in staging:
            parent = ctx.index.parent(call)
            if (
                call in func.decorator_list
                or not isinstance(parent, ast.Assign)
                or len(parent.targets) != 1
                or ctx.qualified_name(call.func) not in COMPILING
            ):
                continue
            target = parent.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = _callable(ctx, func, params, [call], traced)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and ctx.qualified_name(call.func) not in FILTERED
                and f"self.{target.attr}" not in found
            ):  # `self._update = jax.jit(update)` in a method: what `self._update(...)` runs in its class
                owner = ctx.index.enclosing_class(call)
                found[f"self.{target.attr}"] = replace(_callable(ctx, func, params, [call], traced), owner=owner)
    return found


def _decorated_memo(ctx: File) -> dict[ast.AST, JittedCallable]:
    return {}  # `_decorated`'s answers for one file (see File.cached)


def _decorated(ctx: File, func: ast.FunctionDef | ast.AsyncFunctionDef) -> JittedCallable:
    """What calling a `@jax.jit`-decorated function runs (computed once per function)."""
    memo = ctx.cached(_decorated_memo)
    cached = memo.get(func)
    if cached is not None:
        return cached
    params = tuple(a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs))
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    decorators = [d for d in func.decorator_list if _is_tracing(ctx, d)]
    found = memo[func] = _callable(ctx, func, params, decorators, traced_parameters(ctx, func))
    return found


def _callable(
    ctx: File, func: Function, params: tuple[str, ...], specs: list[ast.expr], traced: set[str]
) -> JittedCallable:
    """Under `filter_jit` every parameter not traced (not annotated as an array) is static."""
    if any(_transformation(ctx, s) in FILTERED for s in specs):
        return JittedCallable(func, params, frozenset(p for p in params if p not in traced), filtered=True)
    return JittedCallable(func, params, frozenset(_static_names(func, [s for s in specs if isinstance(s, ast.Call)])))


def jitted_target(ctx: File, call: ast.Call) -> JittedCallable | None:
    """The jitted function of this module that `call` runs: `step(...)`, or `self.update(...)`
    inside the class whose method `update` is jitted."""
    func = call.func
    if isinstance(func, ast.Name):
        defined = resolve_function(ctx, func)  # the `forward` defined here, not another test's
        for candidate in defined:
            if (
                isinstance(candidate, FUNCTIONS)
                and candidate in ctx.cached(staged_functions)
                and any(_is_tracing(ctx, d) for d in candidate.decorator_list)
            ):
                return _decorated(ctx, candidate)
        target = ctx.cached(jitted_callables).get(func.id)
        if target is not None and getattr(target.func, "name", None) == func.id and target.func not in defined:
            return None
        return target
    name = dotted_name(func) or ""
    head, _, attr = name.partition(".")
    if head not in ("self", "cls") or "." in attr:
        return None
    target = ctx.cached(jitted_callables).get(f"self.{attr}")
    if target is None:
        return None
    owner = target.owner if target.owner is not None else ctx.index.parent(target.func)
    return target if owner is ctx.index.enclosing_class(call) else None


def is_constant_sweep(ctx: File, iterable: ast.expr, depth: int = 0) -> bool:
    """A loop over literal configurations (`for block in (64, 128)`, `itertools.product((1, 2),
    ("a", "b"))`): a few values chosen on purpose, each worth its own compilation (autotuning,
    benchmarks), unlike a loop over steps or data."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)):
        return all(_constant(e) for e in iterable.elts)
    if isinstance(iterable, ast.Name):
        values = ctx.reaching_values(iterable)
        return bool(values) and all(is_constant_sweep(ctx, v, depth + 1) for v in values)
    if isinstance(iterable, ast.Call):
        name = ctx.qualified_name(iterable.func) or ""
        if name in ("itertools.product", "zip", "enumerate", "reversed", "sorted"):
            return bool(iterable.args) and all(is_constant_sweep(ctx, a, depth + 1) for a in iterable.args)
    return False


def _constant(expr: ast.expr) -> bool:
    if isinstance(expr, (ast.Tuple, ast.List)):
        return all(_constant(e) for e in expr.elts)
    return isinstance(expr, ast.Constant) or is_number(expr)


def sweep_variables(ctx: File, node: ast.AST) -> set[str]:
    """The names bound by loops around `node` that sweep literal configurations."""
    names: set[str] = set()
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (ast.For, ast.AsyncFor)) and is_constant_sweep(ctx, anc.iter):
            names |= set(target_names(anc.target))
    return names


def reads_any(ctx: File, expr: ast.AST, names: set[str], depth: int = 0) -> bool:
    """`expr` reads one of `names`, directly or through the values of the names it reads."""
    if depth > MAX_DEPTH:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            if node.id in names:
                return True
            if isinstance(node.ctx, ast.Load) and any(
                reads_any(ctx, v, names, depth + 1) for v in ctx.reaching_values(node)
            ):
                return True
    return False


def is_bound_method(ctx: File, attribute: ast.Attribute, loop: ast.AST) -> bool:
    """`obj.method` evidently makes a new bound-method object at each evaluation: `self.apply` for
    a method the enclosing class defines, or `obj.apply` where the loop itself creates `obj` from a
    class of this module. A field that holds a function (`tx.update` of an optax
    `GradientTransformation`, a NamedTuple) is the same object each time: a cache hit."""
    owner = attribute.value
    if not isinstance(owner, ast.Name):
        return False
    if owner.id in ("self", "cls"):
        cls = ctx.index.enclosing_class(attribute)
        return cls is not None and any(isinstance(f, FUNCTIONS) and f.name == attribute.attr for f in cls.body)
    inside = set()
    for value in ctx.reaching_values(owner):
        if loop in set(ctx.index.ancestors(value)) and isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            classes = [
                c
                for c in ctx.index.by_type.get(ast.ClassDef, ())
                if isinstance(c, ast.ClassDef) and c.name == value.func.id
            ]
            if any(isinstance(f, FUNCTIONS) and f.name == attribute.attr for c in classes for f in c.body):
                inside.add(value)
    return bool(inside)


# what a JAX training step computes: gradients, and the updates they make
GRADIENTS = {
    "jax.grad",
    "jax.value_and_grad",
    "optax.apply_updates",
    "equinox.filter_grad",
    "equinox.filter_value_and_grad",
    "flax.nnx.grad",
    "flax.nnx.value_and_grad",
}


def jitted_trains(ctx: File, call: ast.Call) -> bool:
    """`call` runs a jitted function of this module that computes gradients or applies them (a JAX
    training step, whatever it is called): the loop calling it is a step loop."""
    target = jitted_target(ctx, call)
    return target is not None and computes_gradients(ctx, target.func)


def computes_gradients(ctx: File, func: ast.AST) -> bool:
    """`func` computes gradients or applies them: `jax.grad`, `value_and_grad`, `optax.apply_updates`,
    a TrainState's `apply_gradients` (read once per function, asked at every call of it)."""
    cache = ctx.gradients_cache
    if func not in cache:
        cache[func] = any(
            isinstance(node, ast.Call)
            and (
                (ctx.qualified_name(node.func) or "") in GRADIENTS
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "apply_gradients")
            )  # flax's TrainState
            for node in ast.walk(func)
        )
    return cache[func]


def is_numpy_function(ctx: File, func: ast.expr) -> bool:
    """`np.asarray`, `np.append`, `np.mean`: a NumPy function (not `np.random.*`, not a dtype), which
    converts a JAX array it is given to a host array: a read of a device array, an error on a tracer."""
    name = ctx.qualified_name(func) or ""
    head, _, attr = name.rpartition(".")
    return head == "numpy" and attr not in NUMPY_NOT_READING and not attr[:1].isupper()


# NumPy names that read no array's values: dtypes and type helpers, and the functions that call the
# array's own method when it has one (`np.argmax(x)` is `x.argmax()`: a JAX array, on the device)
NUMPY_NOT_READING = {
    "dtype",
    "float32",
    "float64",
    "float16",
    "int32",
    "int64",
    "int8",
    "uint8",
    "bool_",
    "iinfo",
    "finfo",
    "result_type",
    "promote_types",
    "issubdtype",
    "shape",
    "ndim",
    "size",
    "isscalar",
    "broadcast_shapes",
    "argmax",
    "argmin",
    "mean",
    "sum",
    "max",
    "min",
    "amax",
    "amin",
    "std",
    "var",
    "round",
    "around",
    "any",
    "all",
    "prod",
    "cumsum",
    "cumprod",
    "ptp",
    "take",
    "reshape",
    "transpose",
    "squeeze",
    "repeat",
    "swapaxes",
    "nonzero",
    "searchsorted",
    "diagonal",
    "trace",
    "argsort",
    "compress",
    "choose",
    "ravel",
}


# what JAX computes outside jit, on the device: a jitted function's results, jnp and random arrays
DEVICE_PREFIXES = ("jax.numpy.", "jax.random.", "jax.nn.", "jax.lax.", "jax.device_put")


def is_device_array(ctx: File, expr: ast.expr, depth: int = 0, *, computed: bool = False) -> bool:
    """`expr`, outside traced code, is evidently a JAX array on the device: the result of a jitted
    function of this module (or of `jax.jit(f)(...)`), an element of it, a jnp/random result, or
    arithmetic or a method on one. With `computed`, only what a jitted function computed (and jnp
    operations on it) counts: not an array made by eager jnp/random calls from host data."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Name):
        return any(is_device_array(ctx, v, depth + 1, computed=computed) for v in ctx.reaching_values(expr))
    if isinstance(expr, ast.Subscript):  # `metrics["loss"]`, `out[0]`
        return is_device_array(ctx, expr.value, depth + 1, computed=computed)
    if isinstance(expr, ast.BinOp):
        return is_device_array(ctx, expr.left, depth + 1, computed=computed) or is_device_array(
            ctx, expr.right, depth + 1, computed=computed
        )
    if isinstance(expr, ast.Call):
        func = expr.func
        name = ctx.qualified_name(func) or ""
        if on_host_device(ctx, expr) or (name == "jax.device_put" and _placed_on_cpu(ctx, expr)):
            return False  # made under `jax.default_device(cpu)`, or put there: a host array
        if jitted_target(ctx, expr) is not None or ctx.trains_externally(expr):
            return True  # a jitted function's results; a training step of another module's
        if isinstance(func, ast.Call) and (ctx.qualified_name(func.func) or "") in COMPILING:
            return True  # `jax.jit(f)(x)`
        if name.startswith(DEVICE_PREFIXES) and name not in STATIC_FUNCTIONS:
            return not computed or any(
                is_device_array(ctx, a, depth + 1, computed=True)
                for a in (*expr.args, *(k.value for k in expr.keywords))
            )
        method = _local_method(ctx, expr)
        if method is not None and _returns_device_array(ctx, method, depth + 1, computed=computed):
            return True  # `trainer.train_step(batch)` returning what its jitted update computed
        if isinstance(func, ast.Attribute) and func.attr in ("mean", "sum", "max", "min", "astype", "reshape"):
            return is_device_array(ctx, func.value, depth + 1, computed=computed)
    return False


def on_host_device(ctx: File, node: ast.AST) -> bool:
    """`node` runs in the body of `with jax.default_device(cpu):` (in the same function): the arrays
    it makes live in host memory, and reading one waits for no accelerator."""
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            return False
        if isinstance(anc, (ast.With, ast.AsyncWith)) and any(
            isinstance(item.context_expr, ast.Call)
            and ctx.qualified_name(item.context_expr.func) == "jax.default_device"
            and any(is_cpu_device(ctx, a) for a in positional(item.context_expr)[:1])
            for item in anc.items
        ):
            return True
    return False


def _placed_on_cpu(ctx: File, call: ast.Call) -> bool:
    """`jax.device_put(x, cpu)`: the copy lives in host memory."""
    args = positional(call)
    target = args[1] if len(args) > 1 else keyword_value(call, "device")
    return target is not None and is_cpu_device(ctx, target)


def is_cpu_device(ctx: File, expr: ast.expr, depth: int = 0) -> bool:
    """`jax.devices("cpu")[0]`, `jax.local_devices(backend="cpu")[0]`, or a name holding one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return bool(values) and all(is_cpu_device(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        expr = expr.value
    if not isinstance(expr, ast.Call) or ctx.qualified_name(expr.func) not in ("jax.devices", "jax.local_devices"):
        return False
    backend = positional(expr)[:1] or [k.value for k in expr.keywords if k.arg == "backend"]
    return bool(backend) and isinstance(backend[0], ast.Constant) and backend[0].value == "cpu"


# Base classes of JAX neural-network modules: their forward runs when the module is applied, inside
# the (jitted) step that applies it, with the shapes its structure fixes
MODULE_BASES = {"flax.linen.Module", "flax.nnx.Module", "equinox.Module", "haiku.Module"}


def in_module_forward(ctx: File, node: ast.AST) -> bool:
    """`node` is in the forward of a Flax, Equinox or Haiku module class (of this module's classes,
    directly or through bases defined here): its `__call__` or a `@compact` method, or a function
    defined inside one. (Not any method: a `generate` loop over new tokens is an eager driver.)"""
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, FUNCTIONS):
            cls = ctx.index.parent(anc)
            if (
                isinstance(cls, ast.ClassDef)
                and (anc.name == "__call__" or any(_compact(d) for d in anc.decorator_list))
                and is_module_class(ctx, cls)
            ):
                return True
    return False


def _compact(decorator: ast.expr) -> bool:
    """`@nn.compact`, `@compact`."""
    return (dotted_name(decorator) or "").rpartition(".")[2] == "compact"


def is_module_class(ctx: File, cls: ast.ClassDef, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    for base in cls.bases:
        if ctx.qualified_name(base) in MODULE_BASES:
            return True
        if isinstance(base, ast.Name):
            local = [
                c for c in ctx.index.by_type.get(ast.ClassDef, ()) if isinstance(c, ast.ClassDef) and c.name == base.id
            ]
            if any(c is not cls and is_module_class(ctx, c, depth + 1) for c in local):
                return True
    return False


def _local_method(ctx: File, call: ast.Call) -> ast.AST | None:
    """The method of a class of this module that `call` runs: `self.m(...)` in the class, or
    `obj.m(...)` where `obj` is evidently an instance of it (`obj = Trainer(...)`)."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    owner = func.value
    if owner.id == "self":
        cls = ctx.index.enclosing_class(call)
    else:
        values = ctx.reaching_values(owner)
        names = {v.func.id for v in values if isinstance(v, ast.Call) and isinstance(v.func, ast.Name)}
        if len(names) != 1 or len(values) != len([v for v in values if isinstance(v, ast.Call)]):
            return None
        classes = [
            c for c in ctx.index.by_type.get(ast.ClassDef, ()) if isinstance(c, ast.ClassDef) and c.name in names
        ]
        cls = classes[0] if len(classes) == 1 else None
    if cls is None:
        return None
    methods = [f for f in cls.body if isinstance(f, FUNCTIONS) and f.name == func.attr]
    return methods[0] if len(methods) == 1 else None


def _returns_device_array(ctx: File, func: ast.AST, depth: int, *, computed: bool = False) -> bool:
    """Some `return` of `func` (its own, not a nested function's) hands back a device array, or a
    tuple holding one."""
    pending = list(ast.iter_child_nodes(func))
    while pending:
        node = pending.pop()
        if isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if any(is_device_array(ctx, v, depth, computed=computed) for v in values):
                return True
        pending.extend(ast.iter_child_nodes(node))
    return False
