"""Why a finding holds: the evidence chain behind the per-step and device-value judgements.

`steps.runs_hot` and `tensors.TensorInference.kind` answer yes or no; a finding also needs to say
*why*, and how sure it is (`diagnostics.HIGH` / `POSSIBLE`):

- *runs every step*: the code is reached from a loop that trains (a backward, an optimizer step or
  a step call in the loop) or iterates a data loader's batches, or from a role the frameworks
  define (`forward` of a module class, a loss or metric class, Lightning's `training_step`, a
  trainer's `compute_loss`, a per-batch hook), or from a function that itself runs a backward or
  optimizer step, through resolved calls of this module or, by the project index, another one. A
  function taken for a step function by its name alone (`def train_step(...)` with no loop, role or
  training call behind it) is a guess: the finding is `possible`.
- *a device value*: its origin is seen (moved to a device, a model's output, a gradient, a batch of
  a device loader, an op on such values, a parameter of a framework role). A value that is a tensor
  only by its name, or whose origin is not seen, is a guess: `possible`.

Each link is a `diagnostics.Step` (a place and a short message); rules ask through
`FileContext.step_evidence` / `value_evidence` (see `Rule.report`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..diagnostics import HIGH, POSSIBLE, Location, Step
from ..source import stat_or_none
from .index import FUNCTIONS
from .names import dotted_name, last_part, method_name, receiver
from .project import loss_names, project_root
from .steps import (
    CALLABLE_CLASS,
    NOT_STEP_FUNCTION,
    _runs_each_iteration,
    _training_call,
    fixed_values_loop,
    is_named_step,
    is_step_loop,
    iterates_batches,
    local_callees_of,
    offline_loop,
    overrides_model_hook,
    runs_bounded,
    runs_less_often,
    test_entry,
    trains,
)
from .tensors import Kind, TensorInference, passed_by_project, returned_values
from .vocabulary import XLA_MODULES

if TYPE_CHECKING:
    from .file import File
    from .uploads import Upload

MAX_CHAIN = 4  # links shown: the root, the calls nearest to the finding
MAX_VALUE_DEPTH = 8

# Bases that make a class no framework class (its `forward` is only a name).
PLAIN_BASES = {"object", "ABC", "abc.ABC", "Protocol", "typing.Protocol", "Generic", "NamedTuple", "Enum"}
# Methods a framework calls every step on its subclasses: a module's forward, a loss's or metric's
# call and update, Lightning's and trainers' step hooks, per-batch callbacks.
ROLE_METHODS = {
    "forward",
    "__call__",
    "training_step",
    "validation_step",
    "test_step",
    "predict_step",
    "compute_loss",
    "training_step_end",
    "update",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_optimizer_step",
    "on_after_backward",
    "on_before_backward",
    "on_before_zero_grad",
    "optimizer_step",
}


# Of those, the methods the project's own code calls (a metric's `update`): they run where it does.
USER_DRIVEN = {"update"}
# Per-batch callbacks a trainer runs on every step (Lightning, ignite, composer, HF).
BATCH_HOOK = re.compile(
    r"^((on_)?(train_)?(batch|step|iter|iteration)_(end|start|begin|completed|started)|"
    r"(after|before)_(train_)?(iter|step|batch))$"
)
# Loss functions and loss classes' methods by what they compute (`dice_loss`, `loss_labels`, `ForCTCLoss`).
LOSS_FUNCTION = re.compile(r"(^|_)loss(es)?($|_)|[A-Za-z0-9]Loss$")


@dataclass(frozen=True)
class Evidence:
    """A judgement's confidence and its chain of steps (root first)."""

    confidence: str
    chain: tuple[Step, ...] = ()

    def __and__(self, other: Evidence) -> Evidence:
        """Both judgements hold: possible when either is, the chains one after the other."""
        confidence = POSSIBLE if POSSIBLE in (self.confidence, other.confidence) else HIGH
        return Evidence(confidence, self.chain + other.chain)


def _at(ctx: File, node: ast.AST, message: str) -> Step:
    line = getattr(node, "lineno", 1)
    return Step(Location(line, ctx.text.column(line, getattr(node, "col_offset", 0)) + 1), message)


def seen(ctx: File, node: ast.AST, why: str) -> Evidence:
    """High evidence of one fact the analysis shows at `node` (a loader built for training)."""
    return Evidence(HIGH, (_at(ctx, node, why),))


def xla_evidence(ctx: File, assume_xla: bool, xla_device: bool) -> Evidence:
    """Why the file's code runs on XLA, for a finding whose hazard is XLA's alone: its torch_xla
    (or torchax) import, a device from a project function that returns an XLA device, or
    `--assume-xla`."""
    for binding in ctx.index.imports.values():
        if binding.qualified.split(".")[0] in XLA_MODULES:
            return seen(ctx, binding.statement, f"XLA code: imports `{binding.qualified}`")
    if xla_device:
        return Evidence(
            HIGH, (Step(Location(1, 1), "XLA code: its device comes from a project function that returns one"),)
        )
    return Evidence(HIGH, (Step(Location(1, 1), "XLA code: `--assume-xla`"),) if assume_xla else ())


def _code(node: ast.AST, limit: int = 40) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- runs every step ---------------------------------------------------------------------------------


def step_evidence(ctx: File, node: ast.AST) -> Evidence:
    """Why `node` runs every step (the loop or role, the calls on the way), and how sure that is.
    Code that runs only as a test module's tests is possible whatever its chain: a test runs once."""
    found = _step_evidence(ctx, node)
    test = test_evidence(ctx, node)
    return found if test is None else Evidence(POSSIBLE, (*test.chain, *found.chain)[:MAX_CHAIN])


def test_evidence(ctx: File, node: ast.AST) -> Evidence | None:
    """Possible evidence when `node` runs only as part of a test module's tests (`steps.test_code`)."""
    test = test_entry(ctx, node)
    if test is None:
        return None
    return Evidence(POSSIBLE, (_at(ctx, node, f"runs only in tests (`{test}`): once per test, not per training step"),))


def _step_evidence(ctx: File, node: ast.AST) -> Evidence:
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child)
        if isinstance(anc, FUNCTIONS):
            return function_evidence(ctx, anc)
        if isinstance(anc, ast.Lambda):
            break
        if _runs_each_iteration(ctx, anc, field):
            return loop_evidence(ctx, anc)
        child = anc
    return Evidence(POSSIBLE)


def loop_evidence(ctx: File, loop: ast.AST) -> Evidence:
    """A step loop that trains is high evidence, and so is a loop over batches in a file that
    trains (its validation); one in a file that never trains (an offline evaluation, inference or
    analysis script) may as well run once: possible."""
    step = loop_step(ctx, loop)
    if fixed_values_loop(loop):  # `for cfg in ["a.yaml", "b.yaml"]:`: a few runs, not a run of steps
        count = len(cast("ast.List", cast("ast.For", loop).iter).elts)
        return Evidence(POSSIBLE, (replace(step, message=f"{step.message}, over {count} fixed values"),))
    if step.message.startswith("training loop"):
        return Evidence(HIGH, (step,))
    if _prediction_generator(ctx, loop):
        why = f"{step.message}, a prediction generator: each batch's result is handed to its caller"
        return Evidence(POSSIBLE, (replace(step, message=why),))
    if not offline_loop(ctx, loop):  # a validation loop of a training program: it runs while training
        return Evidence(HIGH, (replace(step, message=step.message.replace(", with no training step seen", "")),))
    return Evidence(POSSIBLE, (step,))


# Context managers and decorators that switch autograd off: the code they wrap only predicts.
NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}


def _prediction_generator(ctx: File, loop: Any) -> bool:
    """A loop over batches that trains nothing, in a generator that yields in the loop's body with
    autograd off (`with torch.no_grad():` around the loop or the yield, or on the function): a
    prediction generator, which hands each batch's result to whatever consumes it, at its pace.
    Its host copies are its output, not a cost of a training step."""
    func = ctx.index.enclosing_function(loop)
    if not isinstance(func, FUNCTIONS) or not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    if not iterates_batches(ctx, loop.iter):
        return False
    yields = [
        n
        for statement in loop.body
        for n in ast.walk(statement)
        if isinstance(n, (ast.Yield, ast.YieldFrom)) and ctx.index.enclosing_function(n) is func
    ]
    if not yields:
        return False
    if any(_no_grad(ctx, d) for d in func.decorator_list):
        return True
    return all(
        any(
            isinstance(anc, (ast.With, ast.AsyncWith)) and any(_no_grad(ctx, i.context_expr) for i in anc.items)
            for anc in _ancestors_until(ctx, y, func)
        )
        for y in yields
    )


def _no_grad(ctx: File, expr: ast.expr) -> bool:
    target = expr.func if isinstance(expr, ast.Call) else expr
    return (ctx.qualified_name(target) or dotted_name(target) or "") in NO_GRAD


def _ancestors_until(ctx: File, node: ast.AST, stop: ast.AST):
    for anc in ctx.index.ancestors(node):
        if anc is stop:
            return
        yield anc


def loop_step(ctx: File, loop: Any) -> Step:
    """The step loop as a link: what makes it one (its training call, or the batches it iterates)."""
    training = _training_call_in(ctx, loop)
    if training is not None:
        return _at(ctx, loop, f"training loop at line {loop.lineno} ({_call_label(training)} at {training.lineno})")
    if isinstance(loop, (ast.For, ast.AsyncFor)) and iterates_batches(ctx, loop.iter):
        where = f"loop over the batches of `{_code(loop.iter, 30)}` (line {loop.lineno})"
    else:
        where = f"step loop at line {loop.lineno}"
    return _at(ctx, loop, f"{where}, with no training step seen")


def _call_label(call: ast.Call) -> str:
    return method_name(call) or last_part(dotted_name(call.func)) or "step"


def _training_call_in(ctx: File, owner: ast.AST) -> ast.Call | None:
    """The first backward / optimizer step / training call `owner` runs each time (itself or
    through a function of this module it calls)."""
    for call in ctx.calls_within(owner):
        if runs_less_often(ctx, call, owner):
            continue
        if _training_call(ctx, call) or ctx.trains_externally(call):
            return call
        if any(trains(ctx, f) for f in local_callees_of(ctx, call)):
            return call
    return None


def function_evidence(ctx: File, func: Any) -> Evidence:
    """Why every call of `func` is a step: see `origins`."""
    origin = origins(ctx).get(func)
    if origin is None:
        if func in ctx.per_call_functions:
            role = framework_role(ctx, func)  # a loss, run by every training step that calls it
            if role is not None:
                return Evidence(HIGH, (_at(ctx, func, role),))
            return Evidence(POSSIBLE, (_at(ctx, func, f"`{func.name}` runs on every call by its name"),))
        return Evidence(POSSIBLE)
    return origin


def origins(ctx: File) -> dict[ast.AST, Evidence]:
    """The evidence for each step function of the file, found breadth-first from the best roots:
    step loops, functions that train, framework roles and other modules' step calls (high), then
    functions that are steps by their name only (possible)."""
    cached = ctx.analysis_cache.get("step-origins")
    if cached is not None:
        return cast("dict[ast.AST, Evidence]", cached)
    result: dict[ast.AST, Evidence] = {}
    high: list[tuple[ast.AST, Evidence]] = []
    guessed: list[tuple[ast.AST, Evidence]] = []
    for loop in ctx.index.loops:
        if is_step_loop(ctx, loop):
            evidence = loop_evidence(ctx, loop)
            (high if evidence.confidence == HIGH else guessed).append((loop, evidence))
    for defs in ctx.index.functions.values():
        for func in defs:
            if func not in ctx.step_functions or ctx.is_step_closure(func):
                continue
            root = _root_evidence(ctx, func)
            if root is not None:
                (high if root.confidence == HIGH else guessed).append((func, root))
            elif is_named_step(ctx, func):
                guessed.append((func, Evidence(POSSIBLE, (_at(ctx, func, f"`{func.name}` is a step by its name"),))))
    for roots in (high, guessed):
        queue = list(roots)
        for owner, evidence in roots:
            if isinstance(owner, FUNCTIONS) and owner not in result:
                result[owner] = evidence
        while queue:
            owner, evidence = queue.pop(0)
            for call in ctx.calls_within(owner):
                if runs_less_often(ctx, call, owner):
                    continue
                for callee in local_callees_of(ctx, call):
                    if callee in result:
                        continue
                    link = _at(ctx, call, f"calls `{callee.name}` (line {call.lineno})")
                    found = Evidence(evidence.confidence, (*evidence.chain, link)[-MAX_CHAIN:])
                    result[callee] = found
                    queue.append((callee, found))
    ctx.analysis_cache["step-origins"] = result
    return result


def _root_evidence(ctx: File, func: Any) -> Evidence | None:
    """High evidence that `func` runs every step by itself: another module's step loop calls it,
    it trains (one backward or optimizer step a call), or a framework calls it each step. Possible
    evidence when the only such root is a call from code that is a step on guessed evidence itself
    (a loop of a script that never trains, a step by its name only)."""
    if ctx.externally_per_step(func) and not ctx.externally_guessed_step(func):
        return Evidence(HIGH, (_at(ctx, func, f"`{func.name}` is called every step from another module"),))
    if trains(ctx, func) and not runs_bounded(ctx, func):
        call = _training_call_in(ctx, func)
        where = f" ({_call_label(call)} at {call.lineno})" if call is not None else ""
        return Evidence(HIGH, (_at(ctx, func, f"`{func.name}` runs a training step{where}"),))
    role = framework_role(ctx, func)
    if role is not None:
        return Evidence(HIGH, (_at(ctx, func, role),))
    if ctx.externally_per_step(func):
        why = f"`{func.name}` is called every step only from code that is a step on guessed evidence"
        return Evidence(POSSIBLE, (_at(ctx, func, why),))
    return None


def framework_role(ctx: File, func: Any) -> str | None:
    """`forward` of a module class, a loss's or metric's call, a trainer's or Lightning module's
    step hook, a per-batch callback: a method a framework calls every step, on a class derived
    from another class; or a loss function, which a training step computes every step."""
    cls = ctx.index.parent(func)
    if isinstance(cls, ast.ClassDef) and ctx.unmentioned_class(cls):
        return None  # a class its application never instantiates: no framework runs any of it
    if LOSS_FUNCTION.search(func.name) and not NOT_STEP_FUNCTION.search(func.name):
        if _seen_off_steps(ctx, func) or _unnamed_loss_method(ctx, func):
            return None
        return f"`{func.name}`, a loss: computed every training step"
    if isinstance(cls, ast.ClassDef) and func.name == "__call__" and CALLABLE_CLASS.search(cls.name):
        return f"`{cls.name}.__call__`, a loss or metric: computed every training step"
    if isinstance(cls, ast.ClassDef) and overrides_model_hook(ctx, func):
        return f"`{cls.name}.{func.name}` overrides a hook the library model's forward calls every step"
    if func.name not in ROLE_METHODS and not BATCH_HOOK.match(func.name):
        return None
    if not isinstance(cls, ast.ClassDef):
        params = func.args.posonlyargs + func.args.args
        if params and params[0].arg == "self" and func.name != "__call__":
            return f"`{func.name}`, a method the framework calls every step"  # set on a class elsewhere
        return None
    bases = [dotted_name(b) or "" for b in cls.bases]
    if not bases or all(b in PLAIN_BASES for b in bases):
        return None
    if func.name in USER_DRIVEN and _hook_seen_off_steps(ctx, func.name):
        return None
    return f"`{cls.name}.{func.name}`, called by the framework every step"


def _hook_seen_off_steps(ctx: File, name: str) -> bool:
    """The project calls `.name(...)` itself, and every call is seen off the steps (behind an
    evaluation interval, once after training): a metric's `update` runs when its owner calls it,
    not by itself every step. Unknown without the project's index (one file linted alone)."""
    project = ctx.project
    return name in project.hook_calls and name not in project.stepped_hooks


def _seen_off_steps(ctx: File, func: Any) -> bool:
    """A module-level function whose calls are all seen, in this module (an application's, or a
    script's that no module imports it from), and none runs every step (`loss = eval_loss(model,
    data)` once in `main`): what it is named gives it no role."""
    if not isinstance(ctx.index.parent(func), ast.Module) or ctx.externally_called(func):
        return False
    if not (ctx.application_module or (_script(ctx) and func.name not in ctx.project.imported)):
        return False  # a library's users may call it, every step
    sites = ctx.calls_of(func.name)
    return bool(sites) and all(_seen_caller(ctx, site) and not ctx.is_per_step(site) for site in sites)


def _unnamed_loss_method(ctx: File, func: Any) -> bool:
    """A loss-named method of a class built only on the project's own classes, in a checkout that
    is no installable package, which nothing in the project names (no call, attribute or string,
    nor a string part `"loss_"` a name could be built from): nothing calls it, so it runs at no
    step. A library base (a trainer's `compute_loss`) may call it unnamed; so may the hooks any
    framework calls by name."""
    cls = ctx.index.parent(func)
    mentioned = ctx.project.loss_names
    if not isinstance(cls, ast.ClassDef) or not isinstance(ctx.index.parent(cls), ast.Module):
        return False
    if func.name in ROLE_METHODS or BATCH_HOOK.match(func.name) or not _own_bases(ctx, cls, 0):
        return False
    root = project_root(Path(str(ctx.path)).absolute())
    if any(stat_or_none(root / marker) is not None for marker in ("pyproject.toml", "setup.py", "setup.cfg")):
        return False  # an installable package: its users may call it
    if func.name in mentioned or func.name in loss_names(ctx):
        return False
    strings = [m[1:-1].lower() for m in mentioned if m.startswith('"')]
    name = func.name.lower()
    return not any(name.startswith(part) or name.endswith(part) for part in strings)


def _own_bases(ctx: File, cls: ast.ClassDef, depth: int) -> bool:
    """`cls` derives only from plain bases and classes of this module built so themselves."""
    if depth > 6:
        return False
    for base in cls.bases:
        name = dotted_name(base) or ""
        if name in PLAIN_BASES:
            continue
        local = [c for c in ctx.index.by_type.get(ast.ClassDef, ()) if isinstance(c, ast.ClassDef) and c.name == name]
        if len(local) != 1 or local[0] is cls or not _own_bases(ctx, local[0], depth + 1):
            return False
    return True


def _seen_caller(ctx: File, site: ast.Call) -> bool:
    """`site` runs where its module's analysis sees it: at module level, or in a module-level
    function or a method, not in a closure handed out (`def get_loss_fn(): def f(...): ...`)."""
    caller = ctx.index.enclosing_function(site)
    if caller is None:
        return True
    holder = ctx.index.parent(caller)
    return isinstance(holder, ast.Module) or (
        isinstance(holder, ast.ClassDef) and isinstance(ctx.index.parent(holder), ast.Module)
    )


def _script(ctx: File) -> bool:
    """The module runs as a program: `if __name__ == "__main__":` at its top level."""
    return any(
        isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and any(dotted_name(side) == "__name__" for side in (n.test.left, *n.test.comparators))
        for n in ctx.tree.body
    )


# -- a device value ----------------------------------------------------------------------------------


def value_evidence(ctx: File, expr: ast.expr | None) -> Evidence:
    """Where the value of `expr` comes from, when its origin on the device is seen (high);
    possible when it is a tensor only by its name or its origin is not seen."""
    if expr is None:
        return Evidence(POSSIBLE)
    origin = _device_origin(ctx, expr, 0)
    if origin is None:
        guess = f"`{_code(expr)}` is taken for a device tensor; its origin is not seen"
        return Evidence(POSSIBLE, (_at(ctx, expr, guess),))
    node, why = origin
    if node is expr and not why:
        return Evidence(HIGH)
    line = getattr(node, "lineno", 1)
    return Evidence(HIGH, (_at(ctx, node, why or f"value from `{_code(node)}` (line {line})"),))


def _returns_python_values(ctx: File, call: ast.Call) -> bool:
    """`call` runs a function of this module whose every `return` gives a Python value
    (`return pair.cpu().tolist()`, `return a.item(), b.item()`): its device arguments are read
    there, and what it hands back is no device value, whatever the kind of the call's value says
    (a size read from data still counts as data for the rules that ask)."""
    assert isinstance(call.func, ast.Name)
    values = returned_values(ctx, call.func.id, call)
    return bool(values) and all(ctx.cached(TensorInference).python_value(v) for v in values)


def _backpropagated(ctx: File, name: ast.Name) -> ast.Call | None:
    """A `name.backward()` call on the binding `name` reads, before or after it (`loss =
    helper(batch)`, then `loss.backward()` and `loss.item()`): whatever computed it, the value is
    the loss of the graph the step differentiates, on the device the model trains on, however
    little of its origin is seen (a helper in another module, a dict of losses)."""
    for use in ctx.index.name_uses.get(name.id, ()):
        attribute = ctx.index.parent(use)
        call = ctx.index.parent(attribute)
        if (
            use is not name
            and isinstance(attribute, ast.Attribute)
            and attribute.attr == "backward"
            and isinstance(call, ast.Call)
            and call.func is attribute
            and (ctx.same_binding(use, name) or ctx.same_binding(name, use))
        ):
            return call
    return None


def _backward_origin(ctx: File, name: ast.Name) -> tuple[ast.AST, str] | None:
    call = _backpropagated(ctx, name)
    if call is None:
        return None
    return call, f"`{name.id}.backward()` (line {call.lineno}): a tensor of the training graph"


def _device_origin(ctx: File, expr: ast.expr, depth: int) -> tuple[ast.AST, str] | None:
    """The expression that makes `expr` a device value, followed back through names, attributes,
    subscripts, methods and operations; None when none is seen. Kept per node and depth: the
    values a file's names reach (`device = xm.xla_device()`) are followed from each use."""
    if depth > MAX_VALUE_DEPTH:
        return None
    memo = ctx.cached(_origins)
    key = (expr, depth)
    if key not in memo:
        memo[key] = _origin(ctx, expr, depth)
    return memo[key]


def _origins(ctx: File) -> dict[tuple[ast.expr, int], tuple[ast.AST, str] | None]:
    return {}


def _origin(ctx: File, expr: ast.expr, depth: int) -> tuple[ast.AST, str] | None:
    kind = ctx.tensor_kind(expr)
    # the value itself is a device value; what it is computed from may be of unknown kind
    # (`outputs["logits"]` of a role's input): only host values end the search there
    if not kind.on_device and (depth == 0 or kind in (Kind.NOT_TENSOR, Kind.CPU)):
        # a name of unknown kind (the return of a helper elsewhere) that the step backpropagates
        return _backward_origin(ctx, expr) if kind == Kind.UNKNOWN and isinstance(expr, ast.Name) else None
    if isinstance(expr, ast.Name):
        for value in ctx.reaching_values(expr):
            found = _device_origin(ctx, value, depth + 1)
            if found is not None:
                return found
        iterables = ctx.loop_iterables(expr)
        if iterables:
            for iterable in iterables:  # `for n in t.amax(1):` elements of a device tensor
                found = _device_origin(ctx, iterable, depth + 1)
                if found is not None:
                    return found
            if kind == Kind.DEVICE:  # a device loader's batch
                return iterables[0], f"a batch of `{_code(iterables[0], 30)}` (line {iterables[0].lineno})"
            return None
        backward = _backward_origin(ctx, expr)
        if backward is not None:
            return backward
        param = ctx.parameter(expr)
        if param is not None:
            func = ctx.index.parent(ctx.index.parent(param))
            if isinstance(func, FUNCTIONS) and framework_role(ctx, func) is not None:
                return param, f"input `{param.arg}` of `{func.name}`"
            for passed in ctx.arguments_for(param):
                if passed is not None:
                    found = _device_origin(ctx, passed, depth + 1)
                    if found is not None:
                        return found
            if isinstance(func, FUNCTIONS) and passed_by_project(ctx, func, param, ("dev",)):
                return param, f"`{param.arg}`: a call elsewhere passes `{func.name}` a device value"
        return None
    if isinstance(expr, ast.Attribute):
        if expr.attr == "grad":
            return expr, f"a gradient `{_code(expr)}` (line {expr.lineno})"
        name = dotted_name(expr)
        for value in ctx.attribute_values(name) if name else ():
            found = _device_origin(ctx, value, depth + 1)
            if found is not None:
                return found
        return _device_origin(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _device_origin(ctx, expr.value, depth + 1)
    if isinstance(expr, (ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.IfExp, ast.Tuple, ast.List)):
        for child in ast.iter_child_nodes(expr):
            if isinstance(child, ast.expr):
                found = _device_origin(ctx, child, depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and _returns_python_values(ctx, expr):
            return None  # `loss_val, aux_val = reduced(loss, aux)`: it read them; it hands back numbers
        recv = receiver(expr) if method_name(expr) else None
        if kind == Kind.DEVICE:  # placed on a device, a model's output, a collective
            # `out.sum()`, `loss.detach()`: where the device value they compute on comes from
            found = _device_origin(ctx, recv, depth + 1) if isinstance(recv, ast.expr) else None
            return found or (expr, "")
        for operand in (recv, *expr.args):
            if isinstance(operand, ast.expr):
                found = _device_origin(ctx, operand, depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(expr, (ast.Await, ast.NamedExpr, ast.Starred)):
        return _device_origin(ctx, expr.value, depth + 1)
    return None


def invariance_evidence(ctx: File, upload: Upload) -> Evidence | None:
    """Why the uploaded tensor is the same at every step: its factory's arguments are loop-invariant
    (high), or rest on callers this module does not show (possible); None when they vary (the
    batch being moved, a loop's variable) or nothing shows they do not."""
    from .uploads import NOT_VALUES, all_invariant, invariant

    values = [*upload.factory.args, *(k.value for k in upload.factory.keywords if k.arg not in NOT_VALUES)]
    judged = all_invariant(invariant(ctx, v) for v in values)
    if judged is False:
        return None
    what = f"`torch.{upload.name}(...)`"
    if judged:
        return seen(ctx, upload.factory, f"{what} is built from values fixed across steps")
    found = seen(ctx, upload.factory, f"{what} is built from arguments its callers pass (not seen here)")
    return Evidence(POSSIBLE, found.chain)
