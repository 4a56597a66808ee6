"""Tensors built on the host by a torch factory and then moved to a device (`torch.linspace(a, b,
n).to(device)`, `torch.from_numpy(table).to(t.device)`), and whether what they are built from is
the same at every call (loop-invariant: literals, sizes read from shapes, attributes set once,
arguments every caller passes such values for). Used by XLA707 (host-built tensor uploaded every step).

On a lazy XLA device a CPU tensor moved with `.to(device)` is a host-to-device transfer of its data
(device data, an input of the graph), every time the line runs; a factory given `device=` is an
operation of the graph instead (`torch.zeros(n, device=d)` a broadcast constant).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .index import FUNCTIONS
from .names import (
    dotted_name,
    keyword_value,
    last_part,
    method_name,
    param_default,
    positional,
    receiver,
    string_value,
)
from .placement import XLA_DEVICE_CALLS
from .steps import runs_hot
from .tensors import names_cpu, passed_by_project

if TYPE_CHECKING:
    from .file import File

# Factories whose values are computed from their arguments: with `device=` the device computes them.
GENERATED = {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye"}
# Factories that copy host data (a list, a scalar, a numpy array) into a new tensor: the data has to
# cross to the device once; built at every call, it crosses at every call.
FROM_DATA = {"tensor", "as_tensor", "from_numpy", "asarray"}
# Methods between the factory and the move that keep the tensor on the host (`.float()`, `.view(...)`).
HOST_SIDE = {
    "float",
    "double",
    "half",
    "bfloat16",
    "long",
    "int",
    "bool",
    "contiguous",
    "unsqueeze",
    "view",
    "reshape",
    "t",
    "flatten",
    "squeeze",
    "expand",
    "repeat",
    "type",
}
# Methods that change a list, dict or set in place.
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "setdefault", "discard"}
# Attributes and methods that read a tensor's size or type: Python values fixed by the graph's shapes.
SHAPE_ATTRIBUTES = {"shape", "ndim", "dtype", "device", "is_cuda", "itemsize"}
SHAPE_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "element_size"}
# Host functions of invariant arguments that give invariant results.
PURE_BUILTINS = {"len", "int", "float", "bool", "min", "max", "abs", "round", "tuple", "list", "range", "sum", "pow"}
PURE_MODULES = ("math", "numpy", "operator")
MAX_DEPTH = 10
MAX_PARAMETER_HOPS = 2  # parameters followed to what their callers pass, then to what theirs pass


@dataclass(frozen=True)
class Upload:
    """`move` (`.to(device)`) moves the host tensor `factory` built (`torch.<name>(...)`)."""

    move: ast.Call
    factory: ast.Call
    name: str  # the factory's name: "linspace", "from_numpy"
    direct: bool  # `move` is called on the factory's result itself (`torch.ones(n).to(d)`)
    target: ast.expr  # the device moved to

    @property
    def generated(self) -> bool:
        return self.name in GENERATED


def host_upload(ctx: File, call: ast.Call) -> Upload | None:
    """`call` moves to an accelerator a tensor a torch factory just built on the host (no `device=`,
    or a CPU one), directly or through host-side casts and a name assigned once in the function."""
    if method_name(call) != "to":
        return None
    target = move_target(ctx, call)
    if target is None:
        return None
    source = receiver(call)
    direct = True
    while isinstance(source, ast.Call) and method_name(source) in HOST_SIDE:
        source, direct = receiver(source), False
    if isinstance(source, ast.Name):
        if ctx.parameter(source) is not None or ctx.loop_iterables(source):
            return None
        values = ctx.reaching_values(source)
        func = ctx.index.enclosing_function(call)
        if len(values) != 1 or ctx.index.enclosing_function(values[0]) is not func:
            return None
        # the factory test first: `_filled` walks the whole function, and most names moved are no factory's
        if not isinstance(values[0], ast.Call) or host_factory(ctx, values[0]) is None or _filled(ctx, func, source.id):
            return None
        source, direct = values[0], False
    if not isinstance(source, ast.Call):
        return None
    name = host_factory(ctx, source)
    return Upload(call, source, name, direct, target) if name is not None else None


def _filled(ctx: File, func: ast.AST | None, name: str) -> bool:
    """The function writes into what `name` holds (`t[:, :n] = x`, `t += x`, `t.copy_(x)`,
    `t.masked_fill_(m, v)`, `rows.append(r)`): a tensor moved, or a list a tensor is built from, is
    then no constant (and what was written into it may have come from the step's data)."""
    if func is None:
        return False
    memo = ctx.cached(_filled_by_function)
    if func not in memo:
        memo[func] = _names_filled(ctx, func)
    return name in memo[func]


def _filled_by_function(ctx: File) -> dict[ast.AST, frozenset[str]]:
    """The names each function writes into, by function (asked for every name `invariant` judges)."""
    return {}


def _names_filled(ctx: File, func: ast.AST) -> frozenset[str]:
    found: set[str] = set()
    index = ctx.index
    for node in index.within(ast.Subscript, func):
        if isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
            found.add(node.value.id)
    for aug in index.within(ast.AugAssign, func):
        if isinstance(aug.target, ast.Name):
            found.add(aug.target.id)
    for call in index.within(ast.Call, func):
        method = method_name(call) or ""
        owner = receiver(call)
        if (method.endswith("_") or method in MUTATORS) and isinstance(owner, ast.Name):
            found.add(owner.id)
    return frozenset(found)


def host_factory(ctx: File, call: ast.Call) -> str | None:
    """The name of the torch factory `call` is (`linspace`), when it builds its tensor on the host
    (no `device=`, or a CPU device); random factories aside (see XLA707)."""
    qualified = ctx.qualified_name(call.func) or ""
    head, _, tail = qualified.rpartition(".")
    if head != "torch" or tail not in GENERATED | FROM_DATA:
        return None
    device = keyword_value(call, "device")
    if device is not None and not names_cpu(device):
        return None
    if any(k.arg is None for k in call.keywords):
        return None  # `torch.zeros(n, **options)`: the device may be among them
    return tail


def move_target(ctx: File, call: ast.Call) -> ast.expr | None:
    """The accelerator `x.to(...)` moves to, when the call evidently names a device (`.to(device)`,
    `.to(x.device)`, `.to(device=d)`, `.to(xm.xla_device())`); None for a dtype, a tensor, the CPU
    or another backend's literal (`"cuda"`)."""
    target = keyword_value(call, "device")
    if target is None:
        args = positional(call)
        if not args or len(call.args) != len(args):
            return None
        target = args[0]
    if names_cpu(target):
        return None
    text = string_value(target)
    if text is not None:
        return target if text.split(":")[0] == "xla" else None
    if isinstance(target, ast.Call):
        return target if ctx.qualified_name(target.func) in XLA_DEVICE_CALLS else None
    name = dotted_name(target)
    if name is None:
        return None
    tail = last_part(name).lower()
    if tail == "device" or tail.endswith("_device") or tail in ("dev", "xla_dev", "tpu"):
        return target
    return None


def invariant(ctx: File, expr: ast.expr | None, depth: int = 0, hops: int = MAX_PARAMETER_HOPS) -> bool | None:
    """`expr` has the same value at every call of its function: True when shown (literals, sizes,
    attributes assigned only outside per-step code, names assigned such values, parameters every
    caller in this module passes such values for), False when it evidently varies or nothing shows
    it, None when it rests on callers the module does not show (a parameter of a function called
    from elsewhere, an attribute of `self` set elsewhere)."""
    if expr is None:
        return True
    if depth > MAX_DEPTH:
        return False
    memo = ctx.cached(_judged)
    key = (id(expr), hops)
    if key not in memo:
        memo[key] = False  # a cycle through names or parameters shows nothing
        memo[key] = _judge(ctx, expr, depth + 1, hops)
    return memo[key]


def _judged(ctx: File) -> dict[tuple[int, int], bool | None]:
    """The file's answers of `invariant`, by node and parameter hops left (asked at every call of the
    project's functions, and again through their parameters)."""
    return {}


def _judge(ctx: File, expr: ast.expr, depth: int, hops: int) -> bool | None:
    if isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Starred):
        return invariant(ctx, expr.value, depth, hops)
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return all_invariant(invariant(ctx, e, depth, hops) for e in expr.elts)
    if isinstance(expr, ast.BinOp):
        return all_invariant(invariant(ctx, side, depth, hops) for side in (expr.left, expr.right))
    if isinstance(expr, ast.UnaryOp):
        return invariant(ctx, expr.operand, depth, hops)
    if isinstance(expr, ast.BoolOp):
        return all_invariant(invariant(ctx, v, depth, hops) for v in expr.values)
    if isinstance(expr, ast.Compare):
        return all_invariant(invariant(ctx, v, depth, hops) for v in (expr.left, *expr.comparators))
    if isinstance(expr, ast.IfExp):
        return all_invariant(invariant(ctx, v, depth, hops) for v in (expr.test, expr.body, expr.orelse))
    if isinstance(expr, ast.Subscript):
        return all_invariant(invariant(ctx, v, depth, hops) for v in (expr.value, expr.slice))
    if isinstance(expr, ast.Slice):
        return all_invariant(invariant(ctx, v, depth, hops) for v in (expr.lower, expr.upper, expr.step))
    if isinstance(expr, ast.Attribute):
        return _attribute(ctx, expr, depth, hops)
    if isinstance(expr, ast.Name):
        return _name(ctx, expr, depth, hops)
    if isinstance(expr, ast.Call):
        return _call(ctx, expr, depth, hops)
    return False  # comprehensions, lambdas, f-strings, awaits: not judged


def all_invariant(results) -> bool | None:
    """False if one is False, else None if one is None, else True."""
    found: bool | None = True
    for result in results:
        if result is False:
            return False
        if result is None:
            found = None
    return found


def _attribute(ctx: File, node: ast.Attribute, depth: int, hops: int) -> bool | None:
    if node.attr in SHAPE_ATTRIBUTES:
        return True  # `x.shape`: fixed by the graph's shapes, whatever x holds
    name = dotted_name(node)
    if name is None:
        return invariant(ctx, node.value, depth, hops)
    root = name.split(".")[0]
    if ctx.qualified_name(node) and (ctx.qualified_name(node) or "").split(".")[0] != root:
        return True  # `np.pi`, `math.tau`: an imported module's constant
    if root in ("self", "cls") and name.count(".") == 1:
        return _self_attribute(ctx, name)
    return invariant(ctx, node.value, depth, hops)  # `cfg.size`: as its root is


def _self_attribute(ctx: File, name: str) -> bool | None:
    """`self.table`: True when every assignment of it in the file is outside per-step code
    (`__init__`, a set-up method), None when the file assigns it nowhere (a base class, a caller)."""
    values = ctx.attribute_values(name)
    if not values:
        return None
    for value in values:
        func = ctx.index.enclosing_function(value)
        if func is None or func.name == "__init__":
            continue
        if runs_hot(ctx, value):
            return False
    return True


def _name(ctx: File, name: ast.Name, depth: int, hops: int) -> bool | None:
    if ctx.loop_iterables(name):
        return False  # a loop's variable: a new value every iteration
    param = ctx.parameter(name)
    if param is not None:
        return _parameter(ctx, param, depth, hops)
    values = ctx.reaching_values(name)
    if not values:
        return True if name.id in ctx.index.imports else False  # imported: a module's constant
    if _filled(ctx, ctx.index.enclosing_function(name), name.id):
        return False  # `rows = []`, then `rows.append(...)` per sample: what it holds is built here
    return all_invariant(invariant(ctx, v, depth, hops) for v in values)


def _parameter(ctx: File, param: ast.arg, depth: int, hops: int) -> bool | None:
    """A parameter is invariant when every call of its function in this module passes an invariant
    value for it (or nothing, where its default is one); None when the module calls it nowhere."""
    func = ctx.index.parent(ctx.index.parent(param))
    if not isinstance(func, FUNCTIONS) or param.arg in ("self", "cls"):
        return None if param.arg in ("self", "cls") else False
    if hops <= 0:
        return None  # what callers pass is not followed further
    if passed_by_project(ctx, func, param, ("inv",)):  # every call in the project passes the same value
        return True
    passed = ctx.arguments_for(param)
    if not passed:
        return None
    default = param_default(func, param)
    results = []
    for value in passed:
        if value is None:
            results.append(invariant(ctx, default, depth, hops - 1) if default is not None else None)
        else:
            results.append(invariant(ctx, value, depth, hops - 1))
    return all_invariant(results)


def _call(ctx: File, call: ast.Call, depth: int, hops: int) -> bool | None:
    method = method_name(call)
    if method in SHAPE_METHODS:
        return all_invariant(invariant(ctx, a, depth, hops) for a in call.args)  # `x.size(0)`: a Python int
    qualified = ctx.qualified_name(call.func) or ""
    if qualified in PURE_BUILTINS and qualified != "len":
        return all_invariant(invariant(ctx, a, depth, hops) for a in call.args)
    if qualified == "len":
        return True  # a length: a size, fixed by the graph's shapes
    if qualified.split(".")[0] in PURE_MODULES and not qualified.startswith("numpy.random"):
        return all_invariant(invariant(ctx, a, depth, hops) for a in [*call.args, *(k.value for k in call.keywords)])
    return False


# Factory keywords that do not set values (the device is judged apart).
NOT_VALUES = {"dtype", "device", "requires_grad", "pin_memory", "layout", "memory_format", "out"}
