"""Per-step paths: code that runs on every training (or evaluation) iteration.

A node is per-step when, walking up, it sits in the body of a step loop (a loop that calls
`.backward()`, steps an optimizer, calls a step function or iterates a data loader) or in a step
function (`forward`, `training_step`, ..., or a module-local function called from either), before
reaching a function boundary. Step-closure callbacks and every-N-steps blocks are not per-step.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from .guards import is_periodic, returns
from .index import FUNCTIONS
from .names import dotted_name, last_part, method_name, receiver

if TYPE_CHECKING:
    from .context import FileContext

STEP_FUNCTION = re.compile(
    r"^(forward|_forward|forward_\w+|\w*training_step|\w*train_step|\w*_step_fn|step_fn|train_fn|step|"
    r"validation_step|test_step|predict_step|eval_step|evaluation_step|train_batch|train_on_batch|"
    r"compute_loss|backward|optimizer_step|update|on_train_batch_(start|end)|on_before_optimizer_step|"
    r"on_after_backward|on_before_backward|on_before_zero_grad|"
    # per-batch callback hooks of trainers (Lightning, ignite, composer, HF)
    r"(on_)?(train_)?(batch|step|iter|iteration)_(end|start|begin|completed|started)|"
    r"(after|before)_(train_)?(iter|step|batch)|"
    # loss functions run once per step
    r"(\w+_)?loss(es)?|loss_\w+)$"
)
# Calls that make the loop around them a training-step loop.
STEP_CALL = re.compile(
    r"^(training_step|train_step|train_batch|train_on_batch|\w*_step_fn|step_fn|_?train_one_step|run_step|"
    r"optimizer_step|reduce_gradients|backward|manual_backward)$"
)
NOT_STEP_FUNCTION = re.compile(r"(^|_)(log|plot|save|load|print|show|init|build|setup|register|get_loss_name)", re.I)
# `__call__` counts when the class is a loss or metric (called once per step by design).
CALLABLE_CLASS = re.compile(r"(Loss|Criterion|Metric)", re.I)
OPTIMIZER = re.compile(r"(^|_)(optim|optimizer|optimiser|opt)s?$|optimizer", re.I)
DEVICE_LOADER = re.compile(r"^(MpDeviceLoader|ParallelLoader|per_device_loader)$")
BATCH_ITERABLE = re.compile(r"(loader|dataloader|batches|data_iter|train_iter|dataset_iter)s?$", re.I)
LOOPS = (ast.For, ast.AsyncFor, ast.While)


def is_step_function(ctx: "FileContext", func: ast.AST) -> bool:
    return func in ctx.step_functions


def compute_step_functions(ctx: "FileContext") -> set[ast.AST]:
    """Step functions by name, plus module-local functions they or a step loop call (transitively)."""
    index = ctx.index
    result: set[ast.AST] = set()
    work: list[ast.AST] = []
    for defs in index.functions.values():
        for func in defs:
            if (is_named_step(ctx, func) or ctx.externally_per_step(func)) and not ctx.is_step_closure(func):
                result.add(func)
                work.append(func)
    work.extend(loop for loop in index.loops if is_step_loop(ctx, loop))
    seen: set[ast.AST] = set()
    while work:
        body_owner = work.pop()
        if body_owner in seen:
            continue
        seen.add(body_owner)
        for callee in _local_callees(ctx, body_owner):
            if callee not in result:
                result.add(callee)
                work.append(callee)
    return result


def is_named_step(ctx: "FileContext", func: ast.AST) -> bool:
    """A step function by its name alone (`forward`, `training_step`, a loss, a per-batch hook)."""
    name = func.name
    if STEP_FUNCTION.match(name) and not NOT_STEP_FUNCTION.search(name):
        return True
    if name == "__call__":
        cls = ctx.index.enclosing_class(func)
        return cls is not None and bool(CALLABLE_CLASS.search(cls.name))
    return False


def loop_reachable_functions(ctx: "FileContext") -> set[ast.AST]:
    """Functions that a step loop of this file calls, directly or through module-local calls
    (unlike step functions, not functions that are per-step by their name alone)."""
    result: set[ast.AST] = set()
    work: list[ast.AST] = [loop for loop in ctx.index.loops if is_step_loop(ctx, loop)]
    seen: set[ast.AST] = set()
    while work:
        owner = work.pop()
        if owner in seen:
            continue
        seen.add(owner)
        for callee in _local_callees(ctx, owner):
            result.add(callee)
            work.append(callee)
    return result


def _local_callees(ctx: "FileContext", owner: ast.AST):
    """FunctionDefs of this module called from `owner`'s body (`f(...)` or `self.f(...)`)."""
    index = ctx.index
    for call in ctx.calls_within(owner):
        if _gated(ctx, call, owner):
            continue
        name = dotted_name(call.func)
        if not name:
            continue
        parts = name.split(".")
        if len(parts) == 1 or (len(parts) == 2 and parts[0] in ("self", "cls")):
            for func in index.functions.get(parts[-1], ()):
                if not ctx.is_step_closure(func):
                    yield func


def _gated(ctx: "FileContext", node: ast.AST, owner: ast.AST) -> bool:
    """`node` runs only every N steps or off XLA, or in a nested loop of its own, within `owner`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(child, ast.stmt) and _after_periodic_return(ctx, anc, child):
            return True  # the statement's own block: checked before leaving through `owner`
        if anc is owner:
            return False
        field = ctx.index.field_of(child)
        if isinstance(anc, ast.If) and field == "body" and is_periodic(anc.test):
            return True
        if isinstance(anc, LOOPS) and field == "body" and isinstance(owner, LOOPS):
            return True  # a nested loop is a step loop of its own, the outer one is per epoch
        child = anc
    return False


def is_step_loop(ctx: "FileContext", loop: ast.AST) -> bool:
    cache = ctx.step_loop_cache
    if loop not in cache:
        cache[loop] = _is_step_loop(ctx, loop)
    return cache[loop]


def _is_step_loop(ctx: "FileContext", loop: ast.AST) -> bool:
    if isinstance(loop, (ast.For, ast.AsyncFor)) and iterates_batches(ctx, loop.iter):
        return True
    for call in ctx.calls_within(loop):
        if _gated(ctx, call, loop):
            continue
        method = method_name(call)
        if method == "backward":
            return True
        if method == "step" and OPTIMIZER.search(dotted_name(receiver(call)) or ""):
            return True
        if STEP_CALL.match(last_part(dotted_name(call.func))):
            return True
    return False


def iterates_batches(ctx: "FileContext", iterable: ast.expr) -> bool:
    """`for batch in loader`, `enumerate(tqdm(train_loader))`, `pl.MpDeviceLoader(...)`."""
    while isinstance(iterable, ast.Call) and last_part(dotted_name(iterable.func)) in ("enumerate", "tqdm", "iter", "zip"):
        if not iterable.args:
            return False
        iterable = iterable.args[0]
    if isinstance(iterable, ast.Call):
        return bool(DEVICE_LOADER.match(last_part(dotted_name(iterable.func))))
    name = dotted_name(iterable)
    if not name:
        return False
    if BATCH_ITERABLE.search(last_part(name)):
        return True
    return any(
        isinstance(value, ast.Call) and DEVICE_LOADER.match(last_part(dotted_name(value.func)))
        for value in ctx.assigned_values(iterable)
    )


def is_per_step(ctx: "FileContext", node: ast.AST, *, periodic: bool = False) -> bool:
    """True when `node` runs once per training/evaluation step. With `periodic=True`, also when it
    runs every N steps (`if step % accumulate == 0:`): what a step barrier must cover."""
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child)
        if not periodic and isinstance(child, ast.stmt) and _after_periodic_return(ctx, anc, child):
            return False  # `if not self._should_log(step): return` above it
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            if ctx.is_step_closure(anc):
                return False
            return isinstance(anc, FUNCTIONS) and is_step_function(ctx, anc)
        if not periodic:
            if isinstance(anc, ast.If) and field == "body" and is_periodic(anc.test):
                return False
            if isinstance(anc, ast.BoolOp) and isinstance(anc.op, ast.And) and after_periodic_operand(anc, child):
                return False  # `step % N == 0 and loss.item() > x`
        if isinstance(anc, (ast.For, ast.AsyncFor)) and field == "body" and is_step_loop(ctx, anc):
            return True
        if isinstance(anc, ast.While) and field in ("body", "test") and is_step_loop(ctx, anc):
            return True
        child = anc
    return False


def after_periodic_operand(boolop: ast.BoolOp, operand: ast.AST) -> bool:
    """`operand` of `a and b and ...` comes after an every-N-steps test."""
    for value in boolop.values:
        if value is operand:
            return False
        if is_periodic(value):
            return True
    return False


def _after_periodic_return(ctx: "FileContext", parent: ast.AST, statement: ast.stmt) -> bool:
    """An earlier `if <every-N-steps test>: return` in the statement's block gates it."""
    block = getattr(parent, ctx.index.field_of(statement) or "", None)
    if not isinstance(block, list):
        return False
    for earlier in block:
        if earlier is statement:
            return False
        if isinstance(earlier, ast.If) and not earlier.orelse and is_periodic(earlier.test) and returns(earlier.body):
            return True
    return False


# Functions that run once per call on batch data, whoever calls them: losses, criteria and input
# checks of losses/metrics (`_check_inputs`, `*_tensor_validation`), metric updates. Their callers
# are often in another module, where the per-step analysis of this file cannot see them.
PER_CALL_FUNCTION = re.compile(
    r"(^|_)(loss|losses|criterion)($|_)|[A-Za-z0-9]Loss$|^_*check_|_validation$|"
    r"^_*validate_(input|tensor|target|pred)|[a-z0-9]_update$"
)
MAX_CALL_SITE_DEPTH = 2


def compute_per_call_functions(ctx: "FileContext") -> set[ast.AST]:
    """Per-call functions by name, and the module-local functions they call."""
    result: set[ast.AST] = set()
    work = [f for defs in ctx.index.functions.values() for f in defs if PER_CALL_FUNCTION.search(f.name)]
    while work:
        func = work.pop()
        if func in result or ctx.is_step_closure(func):
            continue
        result.add(func)
        work.extend(_local_callees(ctx, func))
    return result


def _call_sites(ctx: "FileContext", func: ast.AST) -> list[ast.Call]:
    name = func.name
    return [c for c in ctx.index.calls if (dotted_name(c.func) or "") in (name, f"self.{name}", f"cls.{name}")]


def runs_hot(ctx: "FileContext", node: ast.AST, depth: int = 0) -> bool:
    """`node` runs every step (or on every call of a loss/metric check) and may run on XLA.

    A helper that is per-step only because a step function calls it (not by its own name) is
    judged by its call sites in this module: when every one of them is off XLA
    (`if not self.tpu: self._check(...)`), every N steps, or not per step, so is the helper.
    """
    func = ctx.index.enclosing_function(node)
    if ctx.is_per_step(node) and not _excluded_here(ctx, node):
        if func is None or depth > MAX_CALL_SITE_DEPTH or STEP_FUNCTION.match(func.name) \
                or ctx.externally_per_step(func) or _in_step_loop_within(ctx, node, func):
            return True
        sites = _call_sites(ctx, func)
        per_call = func in ctx.per_call_functions
        return not sites or any(
            runs_hot(ctx, site, depth + 1) or (per_call and not _site_excluded(ctx, site)) for site in sites
        )
    if func is not None and func in ctx.per_call_functions and not _site_excluded(ctx, node):
        sites = _call_sites(ctx, func)
        return not sites or any(not _site_excluded(ctx, site) for site in sites)
    return False


def _in_step_loop_within(ctx: "FileContext", node: ast.AST, func: ast.AST) -> bool:
    """Per-step because a step loop inside `func` runs it, whoever calls `func`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return False
        field = ctx.index.field_of(child)
        if isinstance(anc, (ast.For, ast.AsyncFor)) and field == "body" and is_step_loop(ctx, anc):
            return True
        if isinstance(anc, ast.While) and field in ("body", "test") and is_step_loop(ctx, anc):
            return True
        child = anc
    return False


def _excluded_here(ctx: "FileContext", node: ast.AST) -> bool:
    """Never on XLA, or building an error being raised (runs once, when failing)."""
    if ctx.in_non_xla_code(node):
        return True
    return in_raise(ctx, node)


def in_raise(ctx: "FileContext", node: ast.AST) -> bool:
    """`node` is part of a `raise` statement (its message runs once, when failing)."""
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.Raise):
            return True
        if isinstance(anc, ast.stmt):
            return False
    return False


def _site_excluded(ctx: "FileContext", node: ast.AST, depth: int = 0) -> bool:
    """`node` never runs on XLA, runs only every N steps, or builds an error being raised; or its
    function is only called from such places."""
    if ctx.in_non_xla_code(node):
        return True
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child)
        if isinstance(anc, ast.Raise) or (isinstance(anc, ast.If) and field == "body" and is_periodic(anc.test)):
            return True
        if isinstance(child, ast.stmt) and _after_periodic_return(ctx, anc, child):
            return True
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            break
        child = anc
    func = ctx.index.enclosing_function(node)
    if func is None or depth > MAX_CALL_SITE_DEPTH or STEP_FUNCTION.match(func.name):
        return False
    sites = _call_sites(ctx, func)
    return bool(sites) and all(_site_excluded(ctx, site, depth + 1) for site in sites)
