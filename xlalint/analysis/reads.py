"""Which arguments a function reads to the host every time it runs.

`def validate(targets): if targets.max().item() >= n: raise ...` costs nothing where it is defined:
its cost lands at each call that passes a device tensor every step. The project index records,
per function, the parameters whose values (or values computed from them) it converts to Python
(`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float(t.sum())`) on every call; a rule then reports
the per-step calls that pass a device tensor for one of them.
"""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING

from .file import ParamRead
from .index import COMPREHENSIONS, Function, target_names
from .names import argument, dotted_name, method_name, param_default, receiver
from .steps import in_raise, local_callees_of, runs_less_often
from .tensors import TensorInference

if TYPE_CHECKING:
    from .file import File

READ_METHODS = {"item": ".item()", "tolist": ".tolist()", "cpu": ".cpu()", "numpy": ".numpy()"}
# `float(t.sum())`: a conversion of a tensor op's result (not of a number computed earlier)
TENSOR_RESULTS = {
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "norm",
    "any",
    "all",
    "argmax",
    "argmin",
    "prod",
    "std",
    "var",
    "median",
    "count_nonzero",
    "float",
    "double",
    "long",
    "int",
    "detach",
    "squeeze",
}
# going through these makes a parameter's value module weights: it was a model, not a tensor
MODULE_WEIGHTS = {"parameters", "named_parameters", "buffers", "named_buffers"}
MAX_DEPTH = 8  # assignments followed back from a read
METADATA_METHODS = {"size", "dim", "numel", "nelement", "ndimension", "get_device", "is_floating_point"}
METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"}


def parameter_reads(ctx: File, func: ast.FunctionDef) -> list[ParamRead]:
    """The host reads in `func` of values computed from its parameters, on every call: not behind
    a gate, not off XLA, not in an error being raised (nested functions are their own); also those
    of the functions of this module it hands them to on every call (`def masked_l1(p, t, mask):
    return _masked_mean(abs(p - t), mask)` branches on `mask` where `_masked_mean` does)."""
    cache = ctx.param_reads_cache
    if func not in cache:
        cache[func] = []  # a recursive call adds nothing
        cache[func] = _parameter_reads(ctx, func)
    return cache[func]


def _parameter_reads(ctx: File, func: ast.FunctionDef) -> list[ParamRead]:
    params = ctx.call_parameters(func)
    positions = {p.arg: i for i, p in enumerate(params)}
    named = [p.arg for p in (*params, *func.args.kwonlyargs)]
    stars = {a.arg: star for a, star in ((func.args.vararg, "*"), (func.args.kwarg, "**")) if a is not None}
    names = [*named, *stars]
    if not names:
        return []
    if func.args.vararg is not None:
        positions[func.args.vararg.arg] = len(params)
    origins = _Origins(ctx, set(names), set(stars))
    found: list[ParamRead] = []
    reads = [(call, *host_read(call, given=True)) for call in ctx.calls_within(func)]
    reads += [(test, what, operand) for test, what, operand in branch_reads(ctx, func)]
    for call, what, operand in reads:
        if what is None or operand is None:  # (no read has no operand: host_read gives both or neither)
            continue
        sources = [o for o in map(origins.of, _uses(operand)) if o is not None]
        if not sources or in_raise(ctx, call) or ctx.in_non_xla_code(call) or runs_less_often(ctx, call, func):
            continue
        if isinstance(operand, ast.Name) and ctx.cached(TensorInference).narrowed_to_host(operand):
            continue  # `if not torch.is_tensor(v): v = float(v)`: read only when no tensor is given
        unless = only_without(ctx, call, func, names)
        option, value = _only_with_option(ctx, call, func, names)
        returned = what not in BRANCHES.values() and _returned(ctx, call)
        for origin, through in dict.fromkeys(sources):
            found.append(
                ParamRead(
                    origin,
                    positions.get(origin),
                    call.lineno,
                    what,
                    _through(operand, through),
                    unless or "",
                    positions.get(unless) if unless else None,
                    returned,
                    option or "",
                    positions.get(option) if option else None,
                    repr(value) if option else "",
                    bool(option) and _default_is(func, option, value),
                    stars.get(origin, ""),
                    ",".join(named) if origin in stars else "",
                )
            )
    found += _forwarded_reads(ctx, func, origins, positions)
    return found


def _forwarded_reads(ctx: File, func: ast.FunctionDef, origins: _Origins, positions: dict[str, int]):
    """The reads of the functions of this module `func` calls on every call, of values computed
    from `func`'s parameters that it passes them (each read at its own line)."""
    found: list[ParamRead] = []
    for call in ctx.calls_within(func):
        callees = list(local_callees_of(ctx, call))
        if len(callees) != 1 or callees[0] is func:
            continue
        reads = [r for r in parameter_reads(ctx, callees[0]) if not (r.star or r.option or r.unless)]
        if not reads or in_raise(ctx, call) or ctx.in_non_xla_code(call) or runs_less_often(ctx, call, func):
            continue
        for read in reads:
            value = argument(call, read.position, read.param)
            if value is None or moved_to_device_later(ctx, value, call):
                continue
            for name in _uses(value):
                origin = origins.of(name)
                if origin is None or origin[0] not in origins.params or origin[0] in origins.stars:
                    continue
                returned = read.returned and _returned(ctx, call)
                through = read.through or _through(value, origin[1])
                found.append(
                    ParamRead(origin[0], positions.get(origin[0]), read.line, read.what, through, returned=returned)
                )
                break
    return found


# Branching on one of these decides on the host: a sync. By the name called, on a tensor method or
# a torch function (`torch.min(y) < -1`, `if mask.any():`, `while err.abs().max() > tol:`).
REDUCTIONS = {
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "norm",
    "any",
    "all",
    "prod",
    "std",
    "var",
    "count_nonzero",
    "isnan",
    "isinf",
    "isfinite",
    "equal",
    "allclose",
}
BRANCHES = {ast.If: "if", ast.While: "while", ast.IfExp: "if"}
BRANCH_TYPES = tuple(BRANCHES)


def branch_reads(ctx: File, func: ast.AST):
    """(the branch's test, "if"/"while", the tensor reduced) for each test in `func` (not in nested
    functions) that decides on a reduction of a tensor: the host reads its value."""
    for node in ctx.index.in_scope(BRANCH_TYPES, func):
        if not isinstance(node, (ast.If, ast.While, ast.IfExp)):  # (all are: in_scope gives BRANCH_TYPES)
            continue
        for part in ast.walk(node.test):
            operand = _reduced(ctx, part)
            if operand is not None:
                yield node.test, BRANCHES[type(node)], operand
                break


def _reduced(ctx: File, node: ast.AST) -> ast.expr | None:
    """`torch.min(y)` -> y, `y.abs().max()` -> `y.abs()`; None for anything else (`max(a, b)`,
    `np.max(a)`, `self.max()`)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.func.attr not in REDUCTIONS:
        return None
    qualified = ctx.qualified_name(node.func) or ""
    if qualified.startswith("torch."):
        return node.args[0] if node.args else None
    head = qualified.split(".")[0]
    if head in ("numpy", "np", "math", "self", "cls", "builtins") or head in ctx.index.imports:
        return None
    return node.func.value


def is_branch(read: ParamRead) -> bool:
    """The helper branches on the value (see `branch_reads`): a control-flow read, not a conversion."""
    return read.what in BRANCHES.values()


def state_reads(ctx: File, func: Function) -> list[tuple[int, str]]:
    """(line, read) for the host reads `func` makes on every call, itself or through the functions
    of this module it calls, of device tensors it is not given: its object's weights, gradients or
    state (`th.norm(p.grad).item()` for each `p` in `self.master_params`). Its callers pay them."""
    found: list[tuple[int, str]] = []
    pending, seen = [func], set[ast.AST]()
    while pending:
        owner = pending.pop()
        if owner in seen or len(seen) > 20:
            continue
        seen.add(owner)
        params = {p.arg for p in (*owner.args.posonlyargs, *owner.args.args, *owner.args.kwonlyargs)} - {"self", "cls"}
        origins = _Origins(ctx, params)
        for call in ctx.calls_within(owner):
            if runs_less_often(ctx, call, owner) or in_raise(ctx, call) or ctx.in_non_xla_code(call):
                continue
            what, operand = host_read(call)
            if (
                what is not None
                and ctx.tensor_kind(operand).on_device
                and not any(origins.of(name) is not None for name in _uses(operand))
            ):
                found.append((call.lineno, what))
            pending.extend(local_callees_of(ctx, call))
    return sorted(found)


def _returned(ctx: File, call: ast.Call) -> bool:
    """`call` is part of the value its function returns (`return [int(h.item()) for h in hs]`)."""
    for anc in ctx.index.ancestors(call):
        if isinstance(anc, ast.Return):
            return True
        if isinstance(anc, ast.stmt):
            return False
    return False


def _only_with_option(ctx: File, node: ast.AST, func: ast.AST, params: list[str]):
    """(parameter, constant) when `node` runs only in the branch of `if p == constant:` (the string
    options of losses and metrics: `reduction="mean"`), else (None, None)."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return None, None
        if isinstance(anc, ast.If) and ctx.index.field_of(child) == "body":
            test = anc.test
            if (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)
                and isinstance(test.left, ast.Name)
                and test.left.id in params
                and isinstance(test.comparators[0], ast.Constant)
            ):
                return test.left.id, test.comparators[0].value
        child = anc
    return None, None


def _default_is(func: ast.FunctionDef, param: str, value: object) -> bool:
    """The default of `param` is the constant `value`."""
    arg = next((a for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs) if a.arg == param), None)
    default = param_default(func, arg) if arg is not None else None
    return isinstance(default, ast.Constant) and default.value == value


def host_read(call: ast.Call, *, given: bool = False) -> tuple[str | None, ast.expr | None]:
    """(".item()", receiver) for a host read, else (None, None). `given`: also `float(v)` of a
    plain name (`self.sum += float(val) * n` in a meter's `update`): a read where the value passed
    is a device tensor, which only the call site can tell (elsewhere `float(v)` is mostly of a
    number)."""
    method = method_name(call)
    if method in READ_METHODS and not call.args and not call.keywords:
        return READ_METHODS[method], receiver(call)
    name = dotted_name(call.func)
    if name in ("float", "int", "bool") and len(call.args) == 1 and not call.keywords:
        operand = call.args[0]
        if isinstance(operand, ast.Call) and method_name(operand) in TENSOR_RESULTS:
            return f"{name}()", operand
        if given and name == "float" and isinstance(operand, ast.Name):
            return f"{name}()", operand
    return None, None


class _Origins:
    """Which parameter a name's value at a use is computed from, following the assignments that
    reach the use (`n = sum(...); n = torch.as_tensor(n); n.item()` reads the second). Values
    converted to Python on the way (`n = int(t.max().item())`) are not followed: they are numbers."""

    def __init__(self, ctx: File, params: set[str], stars: frozenset[str] | set[str] = frozenset()) -> None:
        self.ctx = ctx
        self.params = params
        self.stars = stars  # `*args`, `**kwargs`: parameters `FileContext.parameter` does not list
        self.memo: dict[ast.Name, tuple[str, str] | None] = {}

    def of(self, name: ast.Name, depth: int = 0) -> tuple[str, str] | None:
        if name in self.memo:
            return self.memo[name]
        self.memo[name] = None  # a cycle through a loop adds nothing
        found = self._compute(name, depth) if depth <= MAX_DEPTH else None
        self.memo[name] = found
        return found

    def _compute(self, name: ast.Name, depth: int) -> tuple[str, str] | None:
        if name not in self.ctx.index.parents:
            return None  # part of a value the index derived (`a, b = t` gives `a` the value `t[0]`)
        values = self.ctx.reaching_values(name)
        if not values:
            values = self.ctx.loop_iterables(name)
        if not values:
            if name.id in self.stars:
                func = self.ctx.index.enclosing_function(name)
                star = [a for a in (func.args.vararg, func.args.kwarg) if a is not None] if func is not None else []
                return (name.id, "") if any(a.arg == name.id for a in star) else None
            return (name.id, "") if name.id in self.params and self.ctx.parameter(name) is not None else None
        for value in values:
            if _converted(value):
                continue
            for use in _uses(value):
                origin = self.of(use, depth + 1)
                if origin is not None:
                    return origin[0], _through(value, origin[1])
        return None


def _uses(expr: ast.AST | None) -> list[ast.Name]:
    """The names whose values `expr` uses: not their metadata (`len(t)`, `t.shape`, `t.size(0)`,
    `t.device`), which is known on the host, nor names a comprehension binds."""
    found: list[ast.Name] = []
    stack = [expr] if expr is not None else []
    while stack:
        node = stack.pop()
        if _metadata(node):
            continue
        if isinstance(node, ast.Name):
            found.append(node)
        elif isinstance(node, COMPREHENSIONS):
            # `sum(len(t["boxes"]) for t in targets)` uses the elements' metadata only
            bound = {name for g in node.generators for name in target_names(g.target)}
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            parts += [test for g in node.generators for test in g.ifs]
            used = [n for part in parts for n in _uses(part)]
            found += [n for n in used if n.id not in bound]
            if any(n.id in bound for n in used):
                stack.extend(g.iter for g in node.generators)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _metadata(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return method_name(node) in METADATA_METHODS or dotted_name(node.func) in ("len", "isinstance", "type")
    return isinstance(node, ast.Attribute) and node.attr in METADATA_ATTRIBUTES


def only_without(ctx: File, node: ast.AST, func: ast.AST, params: list[str]) -> str | None:
    """The parameter `node` runs only without: in the body of `if p is None:` / `if not p:`, or the
    `else` of `if p is not None:` / `if p:`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return None
        if isinstance(anc, ast.If):
            field = ctx.index.field_of(child)
            name, absent = _tests_absent(anc.test)
            if name in params and (field == "body") == absent and field in ("body", "orelse"):
                return name
        child = anc
    return None


def _tests_absent(test: ast.expr) -> tuple[str | None, bool]:
    """("p", True) for `p is None` / `not p`, ("p", False) for `p is not None` / `p`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return test.operand.id, True
    if isinstance(test, ast.Name):
        return test.id, False
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        if isinstance(test.ops[0], ast.Is):
            return test.left.id, True
        if isinstance(test.ops[0], ast.IsNot):
            return test.left.id, False
    return None, False


def _converted(value: ast.expr) -> bool:
    """`float(...)`, `x.item()`, `x > 0`: a Python value, whatever it came from (metadata such as
    `len(x)` or `x.shape[0]` uses no value at all: see `_uses`)."""
    if isinstance(value, ast.Call):
        return method_name(value) in READ_METHODS or dotted_name(value.func) in ("float", "int", "bool", "str")
    return isinstance(value, (ast.Compare, ast.Constant, ast.JoinedStr))


def _through(value: ast.expr, before: str) -> str:
    """What `value` reaches, given what the names it uses reached (`before`)."""
    nodes = list(ast.walk(value))
    weights = before in ("weights", "grads") or any(
        isinstance(n, ast.Call) and method_name(n) in MODULE_WEIGHTS for n in nodes
    )
    if weights and (before == "grads" or any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in nodes)):
        return "grads"
    return "weights" if weights else ""


# -- at the call sites ---------------------------------------------------------------------------------


def argument_reads(ctx: File, call: ast.Call, *, through: str, branches: bool = False):
    """(the helper as called, where it reads, the read, the argument read) for each host read of an
    argument by the project function `call` runs (of a helper in the same module, only the reads it
    returns: the others are reported where they are). An argument moved to the device later in the
    caller (`check(y); y = y.to(device)`) is still on the host here. `branches`: the helper's
    branches on the argument (`if torch.min(y) < -1:`), instead of its conversions."""
    found = ctx.helper_reads(call)
    if found is None:
        return
    helper, path, reads = found
    here = os.path.abspath(str(ctx.path))
    for read in sorted(reads, key=lambda r: r.line):
        if is_branch(read) != branches:
            continue
        if read.unless:
            given = argument(call, read.unless_position, read.unless)
            if given is not None and not (isinstance(given, ast.Constant) and given.value is None):
                continue  # `length_to_mask(length, max_len)`: the read computes a default not needed
        if read.option:
            given = argument(call, read.option_position, read.option)
            if given is None and not read.option_default:
                continue
            if isinstance(given, ast.Constant) and repr(given.value) != read.option_value:
                continue  # `compute_top_k(..., reduction="none")`: the reading branch is not taken
        values = _star_arguments(call, read) if read.star else [argument(call, read.position, read.param)]
        for value in values:
            if read.through == through and value is not None and not moved_to_device_later(ctx, value, call):
                yield helper, f"{os.path.relpath(path, os.path.dirname(here))}:{read.line}", read, value


def _star_arguments(call: ast.Call, read: ParamRead) -> list[ast.expr]:
    """What `call` passes into the `*args` / `**kwargs` parameter `read` is of: the extra positional
    arguments and `*seq` (for `*`), the keywords naming no other parameter and `**mapping` (for `**`)."""
    if read.star == "*":
        start = read.position or 0
        return [a.value if isinstance(a, ast.Starred) else a for a in call.args[start:]]
    named = set(read.named.split(","))
    return [kw.value for kw in call.keywords if kw.arg not in named]


def read_cause(ctx: File, call: ast.Call, read: ParamRead) -> tuple[str, int] | None:
    """The cause of a finding at `call` for `read` (see `Rule.report`): the read's file ("" for
    this one) and line."""
    found = ctx.helper_reads(call)
    if found is None:
        return None
    path = found[1]
    same = os.path.abspath(path) == os.path.abspath(str(ctx.path))
    return ("" if same else path, read.line)


def moved_to_device_later(ctx: File, value: ast.expr, call: ast.Call) -> bool:
    """`value` is a name that its scope later rebinds to itself moved to a device (`y = y.to(d)`)."""
    if not isinstance(value, ast.Name):
        return False
    order = ctx.index.order
    for later in ctx.index.assignments.get(ctx.index.scope_of(value), {}).get(value.id, []):
        if (
            order.get(later, 0) > order[call]
            and isinstance(later, ast.Call)
            and method_name(later) in ("to", "cuda", "xla")
            and dotted_name(receiver(later)) == value.id
        ):
            return True
    return False
