"""Per-step paths: code that runs on every training (or evaluation) iteration.

A node is per-step when, walking up, it sits in the body of a step loop (a loop that calls
`.backward()`, steps an optimizer, calls a step function or iterates a data loader) or in a step
function (`forward`, `training_step`, ..., or a module-local function called from either), before
reaching a function boundary. Step-closure callbacks and every-N-steps blocks are not per-step.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import libcst as cst

from .guards import is_periodic
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


def is_step_function(ctx: "FileContext", func: cst.FunctionDef) -> bool:
    return id(func) in ctx.step_functions


def compute_step_functions(ctx: "FileContext") -> set[int]:
    """Step functions by name, plus module-local functions they or a step loop call (transitively)."""
    index = ctx.index
    result: set[int] = set()
    work: list[cst.CSTNode] = []
    for defs in index.functions.values():
        for func in defs:
            if is_named_step(ctx, func) and not ctx.is_step_closure(func):
                result.add(id(func))
                work.append(func)
    work.extend(loop for loop in index.loops if is_step_loop(ctx, loop))
    seen: set[int] = set()
    while work:
        body_owner = work.pop()
        if id(body_owner) in seen:
            continue
        seen.add(id(body_owner))
        for callee in _local_callees(ctx, body_owner):
            if id(callee) not in result:
                result.add(id(callee))
                work.append(callee)
    return result


def is_named_step(ctx: "FileContext", func: cst.FunctionDef) -> bool:
    """A step function by its name alone (`forward`, `training_step`, a loss, a per-batch hook)."""
    name = func.name.value
    if STEP_FUNCTION.match(name) and not NOT_STEP_FUNCTION.search(name):
        return True
    if name == "__call__":
        cls = ctx.index.enclosing_class(func)
        return cls is not None and bool(CALLABLE_CLASS.search(cls.name.value))
    return False


def loop_reachable_functions(ctx: "FileContext") -> set[int]:
    """Functions that a step loop of this file calls, directly or through module-local calls
    (unlike step functions, not functions that are per-step by their name alone)."""
    result: set[int] = set()
    work: list[cst.CSTNode] = [loop for loop in ctx.index.loops if is_step_loop(ctx, loop)]
    seen: set[int] = set()
    while work:
        owner = work.pop()
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        for callee in _local_callees(ctx, owner):
            result.add(id(callee))
            work.append(callee)
    return result


def _local_callees(ctx: "FileContext", owner: cst.CSTNode):
    """FunctionDefs of this module called from `owner`'s body (`f(...)` or `self.f(...)`)."""
    index = ctx.index
    body = owner.body
    for call in ctx.calls_within(body):
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


def _gated(ctx: "FileContext", node: cst.CSTNode, owner: cst.CSTNode) -> bool:
    """`node` runs only every N steps or off XLA, or in a nested loop of its own, within `owner`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is owner:
            return False
        if isinstance(anc, cst.If) and child is anc.body and is_periodic(anc.test):
            return True
        if isinstance(anc, cst.IndentedBlock) and _after_periodic_return(anc, child):
            return True
        if isinstance(anc, (cst.For, cst.While)) and child is anc.body and isinstance(owner, (cst.For, cst.While)):
            return True  # a nested loop is a step loop of its own, the outer one is per epoch
        child = anc
    return False


def is_step_loop(ctx: "FileContext", loop: cst.For | cst.While) -> bool:
    key = id(loop)
    if key not in ctx.step_loop_cache:
        ctx.step_loop_cache[key] = _is_step_loop(ctx, loop)
    return ctx.step_loop_cache[key]


def _is_step_loop(ctx: "FileContext", loop: cst.For | cst.While) -> bool:
    if isinstance(loop, cst.For) and iterates_batches(ctx, loop.iter):
        return True
    for call in ctx.calls_within(loop.body):
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


def iterates_batches(ctx: "FileContext", iterable: cst.BaseExpression) -> bool:
    """`for batch in loader`, `enumerate(tqdm(train_loader))`, `pl.MpDeviceLoader(...)`."""
    while isinstance(iterable, cst.Call) and last_part(dotted_name(iterable.func)) in ("enumerate", "tqdm", "iter", "zip"):
        if not iterable.args:
            return False
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call):
        return bool(DEVICE_LOADER.match(last_part(dotted_name(iterable.func))))
    name = dotted_name(iterable)
    if not name:
        return False
    if BATCH_ITERABLE.search(last_part(name)):
        return True
    return any(
        isinstance(value, cst.Call) and DEVICE_LOADER.match(last_part(dotted_name(value.func)))
        for value in ctx.assigned_values(iterable)
    )


def is_per_step(ctx: "FileContext", node: cst.CSTNode, *, periodic: bool = False) -> bool:
    """True when `node` runs once per training/evaluation step. With `periodic=True`, also when it
    runs every N steps (`if step % accumulate == 0:`): what a step barrier must cover."""
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            if ctx.is_step_closure(anc):
                return False
            return isinstance(anc, cst.FunctionDef) and is_step_function(ctx, anc)
        if not periodic and isinstance(anc, cst.If) and child is anc.body and is_periodic(anc.test):
            return False
        if not periodic and isinstance(anc, cst.BooleanOperation) and isinstance(anc.operator, cst.And) \
                and child is anc.right and is_periodic(anc.left):
            return False  # `step % N == 0 and loss.item() > x`
        if not periodic and isinstance(anc, cst.IndentedBlock) and _after_periodic_return(anc, child):
            return False  # `if not self._should_log(step): return` above it
        if isinstance(anc, cst.For) and child is anc.body and is_step_loop(ctx, anc):
            return True
        if isinstance(anc, cst.While) and child in (anc.body, anc.test) and is_step_loop(ctx, anc):
            return True
        child = anc
    return False


def _after_periodic_return(block: cst.IndentedBlock, statement: cst.CSTNode) -> bool:
    """An earlier `if <every-N-steps test>: return` in the block gates `statement`."""
    for earlier in block.body:
        if earlier is statement:
            return False
        if isinstance(earlier, cst.If) and earlier.orelse is None and is_periodic(earlier.test) \
                and _returns(earlier.body):
            return True
    return False


def _returns(body: cst.BaseSuite) -> bool:
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = statements[-1] if statements else None
    small = last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body else None
    return isinstance(small, cst.Return)


# Functions that run once per call on batch data, whoever calls them: losses, criteria and input
# checks of losses/metrics (`_check_inputs`, `*_tensor_validation`), metric updates. Their callers
# are often in another module, where the per-step analysis of this file cannot see them.
PER_CALL_FUNCTION = re.compile(
    r"(^|_)(loss|losses|criterion)($|_)|[A-Za-z0-9]Loss$|^_*check_|_validation$|"
    r"^_*validate_(input|tensor|target|pred)|[a-z0-9]_update$"
)
MAX_CALL_SITE_DEPTH = 2


def compute_per_call_functions(ctx: "FileContext") -> set[int]:
    """Per-call functions by name, and the module-local functions they call."""
    result: set[int] = set()
    work = [f for defs in ctx.index.functions.values() for f in defs if PER_CALL_FUNCTION.search(f.name.value)]
    while work:
        func = work.pop()
        if id(func) in result or ctx.is_step_closure(func):
            continue
        result.add(id(func))
        work.extend(_local_callees(ctx, func))
    return result


def _enclosing_function(ctx: "FileContext", node: cst.CSTNode) -> cst.FunctionDef | None:
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, cst.Lambda):
            return None
        if isinstance(anc, cst.FunctionDef):
            return anc
    return None


def _call_sites(ctx: "FileContext", func: cst.FunctionDef) -> list[cst.Call]:
    name = func.name.value
    return [c for c in ctx.index.calls if (dotted_name(c.func) or "") in (name, f"self.{name}", f"cls.{name}")]


def runs_hot(ctx: "FileContext", node: cst.CSTNode, depth: int = 0) -> bool:
    """`node` runs every step (or on every call of a loss/metric check) and may run on XLA.

    A helper that is per-step only because a step function calls it (not by its own name) is
    judged by its call sites in this module: when every one of them is off XLA
    (`if not self.tpu: self._check(...)`), every N steps, or not per step, so is the helper.
    """
    func = _enclosing_function(ctx, node)
    if ctx.is_per_step(node) and not _excluded_here(ctx, node):
        if func is None or depth > MAX_CALL_SITE_DEPTH or STEP_FUNCTION.match(func.name.value) \
                or _in_step_loop_within(ctx, node, func):
            return True
        sites = _call_sites(ctx, func)
        per_call = id(func) in ctx.per_call_functions
        return not sites or any(
            runs_hot(ctx, site, depth + 1) or (per_call and not _site_excluded(ctx, site)) for site in sites
        )
    if func is not None and id(func) in ctx.per_call_functions and not _site_excluded(ctx, node):
        sites = _call_sites(ctx, func)
        return not sites or any(not _site_excluded(ctx, site) for site in sites)
    return False


def _in_step_loop_within(ctx: "FileContext", node: cst.CSTNode, func: cst.FunctionDef) -> bool:
    """Per-step because a step loop inside `func` runs it, whoever calls `func`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return False
        if isinstance(anc, (cst.For, cst.While)) and child is anc.body and is_step_loop(ctx, anc):
            return True
        child = anc
    return False


def _excluded_here(ctx: "FileContext", node: cst.CSTNode) -> bool:
    """Never on XLA, or building an error being raised (runs once, when failing)."""
    if ctx.in_non_xla_code(node):
        return True
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, cst.Raise):
            return True
        if isinstance(anc, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    return False


def _site_excluded(ctx: "FileContext", node: cst.CSTNode, depth: int = 0) -> bool:
    """`node` never runs on XLA, runs only every N steps, or builds an error being raised; or its
    function is only called from such places."""
    if ctx.in_non_xla_code(node):
        return True
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, cst.Raise) or (isinstance(anc, cst.If) and child is anc.body and is_periodic(anc.test)):
            return True
        if isinstance(anc, cst.IndentedBlock) and _after_periodic_return(anc, child):
            return True
        if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
            break
        child = anc
    func = _enclosing_function(ctx, node)
    if func is None or depth > MAX_CALL_SITE_DEPTH or STEP_FUNCTION.match(func.name.value):
        return False
    sites = _call_sites(ctx, func)
    return bool(sites) and all(_site_excluded(ctx, site, depth + 1) for site in sites)
