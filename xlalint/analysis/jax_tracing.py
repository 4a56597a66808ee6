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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .index import FUNCTIONS, target_names
from .names import is_number, positional

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
    names = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    bodies = [c for c in staging if ctx.qualified_name(c.func) in CONTROL_FLOW]
    if bodies and len(bodies) == len(staging):
        # a control-flow body gets as many tracers as the primitive passes (`fori_loop`: the index
        # and the carry); later parameters keep their Python defaults (`causal: bool = False`)
        return set(names[: max(_passed(ctx, c) for c in bodies)])
    static = _static_names(func, [c for c in staging if c not in bodies])
    return {n for n in names if n not in static}


# how many arguments a control-flow primitive passes the functions it traces
PASSED = {"jax.lax.scan": 2, "jax.lax.fori_loop": 2, "jax.lax.while_loop": 1, "jax.lax.map": 1,
          "jax.lax.associative_scan": 2}


def _passed(ctx: "FileContext", call: ast.Call) -> int:
    """`lax.cond(pred, f, g, *operands)` passes the operands."""
    name = ctx.qualified_name(call.func) or ""
    if name in PASSED:
        return PASSED[name]
    if any(isinstance(a, ast.Starred) for a in call.args):
        return 1 << 16
    return max(len(call.args) - 3, 0)


def _static_names(func: ast.AST, staging: list[ast.Call]) -> set[str]:
    """The parameters `static_argnames`/`static_argnums` of these staging calls make static."""
    args = [*func.args.posonlyargs, *func.args.args]  # a decorated method counts `self` (static_argnums=0)
    static: set[str] = set()
    for spec in staging:
        for kw in spec.keywords:
            values = kw.value.elts if isinstance(kw.value, (ast.Tuple, ast.List)) else [kw.value]
            if kw.arg == "static_argnames":
                static |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
            elif kw.arg == "static_argnums":
                static |= {args[v.value].arg for v in values if isinstance(v, ast.Constant)
                           and isinstance(v.value, int) and -len(args) <= v.value < len(args)}
    return static


def staged_functions(ctx: "FileContext") -> dict[ast.AST, list[ast.Call]]:
    """The functions JAX stages out directly (not the helpers they call), each with the decorators
    and calls that stage it (a `jax.jit` call's keywords give the static arguments; a control-flow
    primitive's call, how many arguments it passes)."""
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
                    by_name.setdefault(args[position].id, []).append(node)
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


# jnp functions whose result is boolean, elementwise on their arguments
BOOLEAN_FUNCTIONS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and", "logical_or",
                     "logical_not", "logical_xor", "equal", "not_equal", "greater", "greater_equal", "less",
                     "less_equal", "isclose", "signbit"}


def is_boolean_mask(ctx: "FileContext", expr: ast.expr, depth: int = 0) -> bool:
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
            return (isinstance(target, ast.Name) and target.id == "bool") or \
                ctx.qualified_name(target) in ("jax.numpy.bool_", "numpy.bool_")
    return False


def elementwise_of(ctx: "FileContext", mask: ast.expr, array: ast.expr, depth: int = 0) -> bool:
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
        return head == "jax.numpy" and func in ("isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit") \
            and isinstance(arg, ast.Name) and arg.id == array.id
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


def jitted_callables(ctx: "FileContext") -> dict[str, JittedCallable]:
    """`@jax.jit`-decorated functions by their name, `step = jax.jit(f, static_argnums=...)` by
    `step`: what a call `step(...)` in this module runs."""
    found: dict[str, JittedCallable] = {}
    for func, staging in ctx.jax_staged.items():
        if isinstance(func, ast.Lambda):
            continue
        params = tuple(a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs))
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        if any(_is_tracing(ctx, d) for d in func.decorator_list):
            decorators = [d for d in staging if d in func.decorator_list]
            found[func.name] = JittedCallable(func, params, frozenset(_static_names(func, decorators)))
        for call in staging:
            parent = ctx.index.parent(call)
            if call not in func.decorator_list and isinstance(parent, ast.Assign) and len(parent.targets) == 1 \
                    and isinstance(parent.targets[0], ast.Name) and ctx.qualified_name(call.func) in COMPILING:
                found[parent.targets[0].id] = JittedCallable(func, params, frozenset(_static_names(func, [call])))
    return found


def is_constant_sweep(ctx: "FileContext", iterable: ast.expr, depth: int = 0) -> bool:
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


def sweep_variables(ctx: "FileContext", node: ast.AST) -> set[str]:
    """The names bound by loops around `node` that sweep literal configurations."""
    names: set[str] = set()
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (ast.For, ast.AsyncFor)) and is_constant_sweep(ctx, anc.iter):
            names |= set(target_names(anc.target))
    return names


# what a JAX training step computes: gradients, and the updates they make
GRADIENTS = {"jax.grad", "jax.value_and_grad", "optax.apply_updates", "equinox.filter_grad",
             "equinox.filter_value_and_grad", "flax.nnx.grad", "flax.nnx.value_and_grad"}


def jitted_trains(ctx: "FileContext", name: str) -> bool:
    """`name` is a jitted function of this module that computes gradients or applies them (a JAX
    training step, whatever it is called): the loop calling it is a step loop."""
    target = ctx.jax_jitted.get(name)
    if target is None:
        return False
    for node in ast.walk(target.func):
        if isinstance(node, ast.Call):
            if (ctx.qualified_name(node.func) or "") in GRADIENTS:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr == "apply_gradients":
                return True  # flax's TrainState
    return False


# what JAX computes outside jit, on the device: a jitted function's results, jnp and random arrays
DEVICE_PREFIXES = ("jax.numpy.", "jax.random.", "jax.nn.", "jax.lax.", "jax.device_put")


def is_device_array(ctx: "FileContext", expr: ast.expr, depth: int = 0) -> bool:
    """`expr`, outside traced code, is evidently a JAX array on the device: the result of a jitted
    function of this module (or of `jax.jit(f)(...)`), an element of it, a jnp/random result, or
    arithmetic or a method on one."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(expr, ast.Name):
        return any(is_device_array(ctx, v, depth + 1) for v in ctx.reaching_values(expr))
    if isinstance(expr, ast.Subscript):  # `metrics["loss"]`, `out[0]`
        return is_device_array(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.BinOp):
        return is_device_array(ctx, expr.left, depth + 1) or is_device_array(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in ctx.jax_jitted:
            return True
        if isinstance(func, ast.Call) and (ctx.qualified_name(func.func) or "") in COMPILING:
            return True  # `jax.jit(f)(x)`
        name = ctx.qualified_name(func) or ""
        if name.startswith(DEVICE_PREFIXES) and name not in STATIC_FUNCTIONS:
            return True
        if isinstance(func, ast.Attribute) and func.attr in ("mean", "sum", "max", "min", "astype", "reshape"):
            return is_device_array(ctx, func.value, depth + 1)
    return False
