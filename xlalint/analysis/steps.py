"""Per-step paths: code that runs on every training (or evaluation) iteration.

A node is per-step when, walking up, it sits in the body of a step loop or in a step function,
before reaching a function boundary, and no gate in between makes it run less often:

- A *step loop* is recognised by what its body does, whatever it iterates: it runs a backward, an
  optimizer step, a step function, a function that trains (in this module or, through the
  project index, another), or a model or criterion on the data the loop yields. A loop over a
  data loader (`MpDeviceLoader`, `train_loader`, `log_every(loader)`) is one too.
- A *step function* is named like one (`forward`, `training_step`, a loss, a per-batch hook),
  is called every step from a step loop or step function of this module, or of another module
  (`FileContext.external_steps`). A function that iterates a data loader itself is an epoch-level
  function: its loop body is per step, the rest is not.
- *Gates*: a block that runs every N steps (`if step % N == 0:`, after `if step % N: continue`,
  under `should_log`), only off XLA, only when the caller opts into a non-default option
  (`if ignore_index is not None:`), inside a `raise`, or in an `xm.add_step_closure` callback.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePath
from typing import TYPE_CHECKING

from . import jax_tracing
from .guards import ALMOST_ALWAYS, EVERY_N, is_periodic, periodic_polarity, skips_rest
from .index import COMPREHENSIONS, FUNCTIONS, LOOPS, Function, loop_bindings
from .names import (
    argument,
    dotted_name,
    function_params,
    is_constant,
    last_part,
    method_name,
    param_default,
    positional,
    receiver,
    subscript_indices,
)
from .vocabulary import DEVICE_LOADER, FRAMEWORK_MODULES, ITERABLE_WRAPPERS, NOT_OPTIMIZER, OPTIMIZER_NAME, SYNC_NAMES

if TYPE_CHECKING:
    from .file import File

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
# Calls that make the loop around them a training-step loop (library methods among them, whose
# definitions the project index cannot see).
STEP_CALL = re.compile(
    r"^(training_step|train_step|train_batch|train_on_batch|\w*_step_fn|step_fn|_?train_one_step|run_step|"
    r"optimizer_step|reduce_gradients|backward|manual_backward|fit_batch|_?train_(one_)?batch|train_iter(ation)?|"
    r"training_iteration|run_iter|run_batch)$"
)
NOT_STEP_FUNCTION = re.compile(
    r"(^|_)(log|plot|save|load|print|show|init|build|setup|register|get_loss_name)|"
    r"^test_(?!step$)",
    re.I,
)  # `test_weighted_loss` is a unit test, `test_step` a hook
# `__call__` counts when the class is a loss or metric (called once per step by design).
CALLABLE_CLASS = re.compile(r"(Loss|Criterion|Metric)", re.I)
BATCH_ITERABLE = re.compile(r"(loader|dataloader|batches|data_iter|train_iter|dataset_iter)s?$", re.I)
# Called objects whose result is a model output: running one on the batch is a (training or
# evaluation) step.
MODEL_CALLEE = re.compile(
    r"^(self|model|module|net|network|encoder|decoder|criterion|loss|loss_fn|lossfn|loss_func|"
    r"loss_function|head|backbone|classifier|generator|discriminator|lm|lm_head|ddp_model|"
    r"wrapped_model|student|teacher|layer|block|embed|embedding|embeddings|critic|actor|policy|"
    r"policy_net|value_net|q_net|unet|vae|transformer|mlp)$|(_model|_net|_loss|_fn|_criterion|_head|_encoder|"
    r"_decoder|_layer)$",
    re.I,
)
# Callees that run a model or a criterion on a batch (narrower than MODEL_CALLEE: no `self`, no
# `*_fn` helpers, no layers applied in a loop over layers).
FORWARD_CALLEE = re.compile(
    r"^(model|module|net|network|encoder|decoder|criterion|loss_fn|lossfn|loss_func|loss_function|backbone|"
    r"classifier|generator|discriminator|ddp_model|wrapped_model|student|teacher|unet|vae|transformer|policy|"
    r"policy_net|value_net|q_net|critic|actor)$|(_model|_net|_criterion)$",
    re.I,
)
# `load_model(...)`, `build_sub_model(...)`, `unwrap_model(m)`: helpers named for the model they
# load, build or unwrap, which run no model on anything.
MODEL_HANDLER = re.compile(
    r"^_*(load|build|create|get|make|init|initiali[sz]e|setup|prepare|save|convert|unwrap|wrap|copy|export|"
    r"freeze|register|instantiate|fetch|download|print|log|show|describe|count)_",
    re.I,
)
TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


# -- step functions ------------------------------------------------------------------------------------


def is_step_function(ctx: File, func: ast.AST) -> bool:
    return func in ctx.step_functions


def compute_step_functions(ctx: File) -> set[ast.AST]:
    """Step functions by name or by other modules' calls, plus the module-local functions they or
    a step loop call (transitively)."""
    index = ctx.index
    result: set[ast.AST] = set()
    work: list[ast.AST] = []
    for defs in index.functions.values():
        for func in defs:
            if (is_named_step(ctx, func) or ctx.externally_per_step(func)) and not ctx.is_step_closure(func):
                result.add(func)
                work.append(func)
    work.extend(loop for loop in index.loops if is_step_loop(ctx, loop) and not offline_loop(ctx, loop))
    seen: set[ast.AST] = set()
    while work:
        body_owner = work.pop()
        if body_owner in seen:
            continue
        seen.add(body_owner)
        for callee in _local_callees(ctx, body_owner):
            if callee not in result and not owns_loader_loop(ctx, callee):
                # a callee that iterates a loader itself runs an epoch per call: its loop body is
                # per step, the rest of it (a reduce after the loop) once per epoch
                result.add(callee)
                work.append(callee)
    return result


def is_named_step(ctx: File, func: Function) -> bool:
    """A step function by its name alone (`forward`, `training_step`, a loss, a per-batch hook),
    unless it iterates a data loader itself (`def train_fn(loader): for batch in loader: ...`) or
    calls a function of this module that does (`def train_fn(rank): ... train_one_epoch(...)`, a
    process entry above the epochs)."""
    name = func.name
    if name == "__call__":
        cls = ctx.index.enclosing_class(func)
        return cls is not None and bool(CALLABLE_CLASS.search(cls.name))
    if NOT_STEP_FUNCTION.search(name):
        return False
    if name.lstrip("_").startswith("forward_") and not _framework_forward(ctx, func):
        return False  # `forward_module` of a C-code generator: no nn.Module's forward
    if not STEP_FUNCTION.match(name):
        return overrides_model_hook(ctx, func)
    return (
        not owns_loader_loop(ctx, func)
        and not runs_epochs(ctx, func)
        and not uncalled_hook(ctx, func)
        and not ctx.unused_function(func)
    )


# Libraries whose classes give `forward`, `training_step` and the like their role (beside torch and JAX).
FRAMEWORKS = {
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "transformers",
    "accelerate",
    "timm",
    "diffusers",
    "composer",
    "ignite",
    "deepspeed",
    "fairseq",
    "speechbrain",
    "torchmetrics",
    "ultralytics",
    "peft",
    "trl",
}


def _framework_forward(ctx: File, func: Function) -> bool:
    """A `forward` is a framework's role in a class, or where a framework is imported (a functional
    `forward(params, x)` of a torch or JAX module); a module-level `forward_*` of a module importing
    none (numpy, pandas: a code generator) is just a name."""
    params = function_params(func)
    if not isinstance(ctx.index.parent(func), ast.Module) or not ctx.index.imports:
        return True
    if params and params[0].arg == "self":
        return True  # a method set on a class elsewhere
    return (
        ctx.imports_torch
        or ctx.imports_jax
        or any(b.qualified.split(".")[0] in FRAMEWORKS for b in ctx.index.imports.values())
    )


def runs_epochs(ctx: File, func: ast.AST) -> bool:
    """`func` calls a function of this module that iterates a data loader itself: an epoch."""
    return any(owns_loader_loop(ctx, callee) for callee in _local_callees(ctx, func))


# Names of per-batch hooks that some caller must run (a framework's base class, or the project's
# own loop): `update`, `on_batch_end`, `after_step`.
HOOK_NAME = re.compile(
    r"^(update|on_\w+|(after|before)_\w+|\w*(batch|step|iter|iteration)_(end|start|begin|completed|started))$"
)
# Bases that call none of their subclasses' hooks (a `torch.nn.Module` calls `forward` only).
PLAIN_BASES = {"object", "Module", "nn.Module", "torch.nn.Module", "ABC", "abc.ABC"}
# Receivers of an `update(...)` that is no hook: dicts, sets, progress bars, the environment.
OTHER_UPDATE = re.compile(r"(^|\.)(__dict__|environ|kwargs|\w*config|\w*cfg|\w*args|\w*dict|pbar|\w*_bar|bar|state)$")


def uncalled_hook(ctx: File, func: Function) -> bool:
    """A method named like a per-batch hook (`update`, `on_batch_end`) of a class no framework
    calls it from (no base but `object`/`nn.Module`, or classes of this module with none), which
    nothing in the project calls or hands on: its name is no evidence that it runs every step."""
    cls = ctx.index.enclosing_class(func)
    if cls is None or ctx.index.parent(func) is not cls or not HOOK_NAME.match(func.name):
        return False
    if not _plain_class(ctx, cls, 0):
        return False
    if ctx.externally_called(func) or func.name in ctx.project.hook_calls:
        return False
    return func.name not in ctx.hook_names_used and not _handed_on(ctx, cls)


def _handed_on(ctx: File, cls: ast.ClassDef) -> bool:
    """An instance of `cls` is handed to other code (`Trainer(callbacks=[Checkpoint()])`), which
    may call its hooks by their names."""
    for call in ctx.index.calls:
        if dotted_name(call.func) == cls.name:
            parent = ctx.parent(call)
            if isinstance(parent, (ast.Call, ast.keyword, ast.List, ast.Tuple, ast.Set, ast.Dict)):
                return True
    return False


def _plain_class(ctx: File, cls: ast.ClassDef, depth: int) -> bool:
    for base in cls.bases:
        written = dotted_name(base) or ""
        if written in PLAIN_BASES:
            continue
        local = [c for c in ctx.index.of_type(ast.ClassDef) if c.name == written]
        if depth < 3 and len(local) == 1 and local[0] is not cls and _plain_class(ctx, local[0], depth + 1):
            continue
        return False
    return not cls.keywords  # `metaclass=...`: anything may call it


def other_update(ctx: File, call: ast.Call) -> bool:
    """`d.update(...)` of a dict, set or progress bar (`{}`, `dict(...)`, `tqdm(...)`, `os.environ`,
    `self.__dict__`, `kwargs`): no call of a project hook."""
    if method_name(call) != "update":
        return False
    recv = receiver(call)
    name = dotted_name(recv) or ""
    if OTHER_UPDATE.search(name):
        return True
    values = ctx.assigned_values(recv) if isinstance(recv, (ast.Name, ast.Attribute)) and name else []
    if isinstance(recv, ast.Name) and not values:
        param = ctx.parameter(recv)
        return param is not None and ctx.index.field_of(param) == "kwarg"
    return bool(values) and all(
        isinstance(v, (ast.Dict, ast.DictComp, ast.Set, ast.SetComp))
        or (
            isinstance(v, ast.Call)
            and last_part(dotted_name(v.func)) in ("dict", "set", "defaultdict", "OrderedDict", "Counter", "tqdm")
        )
        for v in values
    )


# Model libraries whose models call overridable methods of their own from `forward`.
MODEL_LIBRARIES = ("transformers.", "diffusers.", "timm.")
MODEL_CLASS = re.compile(r"(Model|For[A-Z]\w*|Transformer|Encoder|Decoder)$")
# Arguments of a model's forward pass, as these libraries name them.
MODEL_INPUTS = {
    "input_ids",
    "inputs_embeds",
    "attention_mask",
    "pixel_values",
    "hidden_states",
    "position_ids",
    "image_features",
    "encoder_hidden_states",
    "labels",
    "token_type_ids",
    "decoder_input_ids",
}


def overrides_model_hook(ctx: File, func: Function) -> bool:
    """A method of a subclass of a library model (`class M(LlavaForConditionalGeneration)`) that
    takes the batch's tensors (`input_ids`, `attention_mask`, ...): it overrides a hook that the
    library's `forward` calls (`_merge_input_ids_with_image_features`, `_update_causal_mask`), so it
    runs in every forward although nothing in the project calls it."""
    cls = ctx.index.enclosing_class(func)
    if cls is None or ctx.index.parent(func) is not cls:
        return False
    if sum(arg.arg in MODEL_INPUTS for arg in function_params(func)) < 2:
        return False
    return any(
        (ctx.qualified_name(base) or "").startswith(MODEL_LIBRARIES)
        and MODEL_CLASS.search(last_part(dotted_name(base)))
        for base in cls.bases
    )


def owns_loader_loop(ctx: File, func: ast.AST) -> bool:
    return any(
        isinstance(loop, (ast.For, ast.AsyncFor)) and iterates_batches(ctx, loop.iter) for loop in ctx.loops_of(func)
    )


def loop_reachable_functions(ctx: File) -> set[ast.AST]:
    """Functions that a step loop of this file calls, directly or through module-local calls
    (unlike step functions, not functions that are per-step by their name alone)."""
    result: set[ast.AST] = set()
    work: list[ast.AST] = [loop for loop in ctx.index.loops if is_step_loop(ctx, loop) and not offline_loop(ctx, loop)]
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


def _local_callees(ctx: File, owner: ast.AST):
    """FunctionDefs of this module called (ungated) from `owner`'s body (`f(...)` or `self.f(...)`)."""
    for call in ctx.calls_within(owner):
        if not runs_less_often(ctx, call, owner):
            yield from local_callees_of(ctx, call)


def local_callees_of(ctx: File, call: ast.Call):
    name = dotted_name(call.func)
    if not name:
        return
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[0] in ("self", "cls")):
        method_call = len(parts) == 2
        for func in ctx.index.functions.get(parts[-1], ()):
            # `self.main(x)` calls a method (or a submodule held in `self.main`), never the
            # module's `def main()`; a bare `f(x)` never calls a method
            if isinstance(ctx.index.parent(func), ast.ClassDef) is not method_call:
                continue
            if not ctx.is_step_closure(func):
                yield func


# -- gates -------------------------------------------------------------------------------------------


def gated_by(ctx: File, child: ast.AST, parent: ast.AST) -> bool:
    """`child`, held by `parent`, runs less often than `parent`: every N steps, or only when the
    caller opts into an option. Kept per node: every walk up from a node below asks it again."""
    known = ctx.gate_cache.get(child)
    if known is None:
        known = ctx.gate_cache[child] = _gated_by(ctx, child, parent)
    return known


def _gated_by(ctx: File, child: ast.AST, parent: ast.AST) -> bool:
    field = ctx.index.field_of(child)
    if isinstance(parent, ast.If):
        key = (parent, field)
        gates = ctx.if_gate_cache.get(key)
        if gates is None:  # asked for every node below the `if`: its blocks are read once
            gates = ctx.if_gate_cache[key] = _if_gates(ctx, parent, field)
        if gates:
            return True
    elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And) and after_periodic_operand(parent, child):
        return True  # `step % N == 0 and loss.item() > x`
    elif isinstance(parent, ast.ExceptHandler) and field == "body":
        return True  # runs when the step failed: recovery, not the step
    return isinstance(child, ast.stmt) and _after_gating_exit(ctx, child)


def _if_gates(ctx: File, parent: ast.If, field: str | None) -> bool:
    """What `gated_by` says of the `field` block of an `if`, whatever node of it is asked about."""
    polarity = periodic_polarity(parent.test)
    if field == "body" and (
        polarity == EVERY_N
        or opt_in(ctx, parent)
        or off_at_step_calls(ctx, parent)
        or _counter_bounded(ctx, parent)
        or _leaves_loop(ctx, parent)
        or _lazily_initialised(ctx, parent)
    ):
        return True
    if field in ("body", "orelse") and _latched(parent, field):
        return True
    if field == "body" and isinstance(parent.body[-1], ast.Raise):
        return True  # `if bad: print(t); raise ValueError(...)`: runs once, when failing
    if field == "orelse" and polarity == ALMOST_ALWAYS:
        return True  # the `else` of `if step % N:`
    return field == _EVAL_ONLY_FIELD.get(_training_test(parent.test))  # `if not self.training:`: inference only


def _leaves_loop(ctx: File, node: ast.If) -> bool:
    """`if loss_is_nan: print(...); sys.exit(1)` in a loop: the block ends the loop, so it runs
    at most once per run of it."""
    last = node.body[-1] if node.body else None
    exits = isinstance(last, (ast.Return, ast.Break, ast.Raise)) or (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and dotted_name(last.value.func) in ("sys.exit", "exit", "quit", "os._exit")
    )
    return exits and ctx.index.enclosing_loop(node) is not None


_EVAL_ONLY_FIELD: dict[bool | None, str] = {False: "body", True: "orelse"}


def _training_test(test: ast.expr) -> bool | None:
    """True for `self.training` (or `training and ...`), False for `not model.training` (or an
    `and` requiring it); None when the test does not pin a module's training mode."""
    if isinstance(test, ast.Attribute) and test.attr == "training":
        return True
    if (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Attribute)
        and test.operand.attr == "training"
    ):
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        modes = {_training_test(value) for value in test.values} - {None}
        if modes == {False}:
            return False  # `if training and x` does not pin eval: its `else` also runs in training
    return None


def _latched(node: ast.If, field: str) -> bool:
    """`if not self._checked: ...; self._checked = True` (or the `else` of `if self._checked:`):
    the block sets the flag it tests, so it runs on the first pass only (a one-time validation
    or warm-up), not every step."""
    test, first_pass = node.test, "orelse"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, first_pass = test.operand, "body"
    if field != first_pass:
        return False
    block = getattr(node, first_pass)
    flag = dotted_name(test)
    if (
        isinstance(test, ast.Call)
        and dotted_name(test.func) == "getattr"
        and len(test.args) >= 2
        and isinstance(test.args[1], ast.Constant)
        and isinstance(test.args[1].value, str)
    ):
        owner = dotted_name(test.args[0])
        flag = owner and f"{owner}.{test.args[1].value}"
    return bool(flag) and any(
        isinstance(n, ast.Assign)
        and is_constant(n.value, True)
        and any(dotted_name(target) == flag for target in n.targets)
        for statement in block
        for n in ast.walk(statement)
    )


def _lazily_initialised(ctx: File, node: ast.If) -> bool:
    """`if self.sampler is None: self.sampler = build(...)`, or `if self.index is None:
    self._init_index(t)` where that method assigns `self._index` (the attribute behind a property):
    the block fills in the attribute it tests, so it runs on the first call only (lazy set-up), not
    every step."""
    test = node.test
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and is_constant(test.comparators[0], None)
    ):
        return False
    attribute = dotted_name(test.left)
    if not attribute or "." not in attribute:
        return False
    owner, _, attr = attribute.rpartition(".")
    names = {attribute, f"{owner}._{attr}"}
    bodies: list[ast.AST] = list(node.body)
    for statement in node.body:  # one level of helpers: `self._init_x(...)`
        for call in ast.walk(statement):
            if isinstance(call, ast.Call) and owner in ("self", "cls"):
                for func in local_callees_of(ctx, call):
                    bodies.extend(func.body)
    for body in bodies:
        for assign in ast.walk(body):
            if (
                isinstance(assign, (ast.Assign, ast.AnnAssign))
                and assign.value is not None
                and not is_constant(assign.value, None)
            ):
                targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
                if any(dotted_name(t) in names for target in targets for t in ast.walk(target)):
                    return True
    return False


def _counter_bounded(ctx: File, node: ast.If) -> bool:
    """`if batch_idx == 1:`, `if j <= 4:`, `if it == 0 or it in log_iters:`, `if i == last_step:`:
    a loop counter tested against fixed values holds on a fixed number of iterations (debug output
    for the first batches, the chosen log steps, the last one), not every step. An `and` holds
    when one operand is so bounded; an `or` only when each is (or is an every-N-steps test)."""
    counters = _loop_counters(ctx, node)
    return bool(counters) and _bounded_test(node.test, counters)


# A flag that holds on one iteration: `if is_last:`, `... or last_step`, `if final_batch:`.
ONE_ITERATION_FLAG = re.compile(r"^_*(is_)?(last|final|first)(_(step|iter|iteration|batch|epoch))?$")


def _bounded_test(test: ast.expr, counters: set[str]) -> bool:
    if isinstance(test, ast.BoolOp):
        bounded = [_bounded_test(v, counters) or is_periodic(v) for v in test.values]
        return any(bounded) if isinstance(test.op, ast.And) else all(bounded)
    if isinstance(test, ast.Name):
        return bool(ONE_ITERATION_FLAG.match(test.id))
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)):
        return False
    if test.left.id not in counters:
        return False
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, ast.In):
        return True  # `it in log_iters`: the iterations listed
    if isinstance(op, (ast.Lt, ast.LtE)):
        return isinstance(right, ast.Constant) and type(right.value) is int
    if isinstance(op, ast.Eq):  # one iteration: a constant, or a bound (`step == total_steps - 1`)
        return (isinstance(right, ast.Constant) and type(right.value) is int) or not _mentions(right, counters)
    return False


def _loop_counters(ctx: File, node: ast.AST) -> set[str]:
    """Names counting the iterations of the loops around `node`: `enumerate`'s index, a `range`
    loop's variable, a name the loop increments (`step += 1`)."""
    counters: set[str] = set()
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            break
        if isinstance(anc, LOOPS):
            counters |= loop_counters(ctx, anc)
    return counters


def loop_counters(ctx: File, loop: ast.For | ast.AsyncFor | ast.While) -> frozenset[str]:
    """The names one loop counts its iterations in (its body is walked once, not once per `if` in it)."""
    found = ctx.loop_counter_cache.get(loop)
    if found is None:
        counters: set[str] = set()
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            counters |= {
                name
                for name, iterable in loop_bindings(loop.target, loop.iter)
                if isinstance(iterable, ast.Call) and dotted_name(iterable.func) == "range"
            }
        counters |= {
            n.target.id
            for n in assignments_in_body(ctx, loop)
            if isinstance(n, ast.AugAssign)
            and isinstance(n.op, ast.Add)
            and isinstance(n.target, ast.Name)
            and is_constant(n.value, 1)
        }
        found = ctx.loop_counter_cache[loop] = frozenset(counters)
    return found


def after_periodic_operand(boolop: ast.BoolOp, operand: ast.AST) -> bool:
    """`operand` of `a and b and ...` comes after an every-N-steps test."""
    for value in boolop.values:
        if value is operand:
            return False
        if is_periodic(value):
            return True
    return False


def _after_gating_exit(ctx: File, statement: ast.stmt) -> bool:
    """An earlier `if step % N: continue`, `if not should_log(step): return` or `if option is None:
    return` in the statement's block: the statement runs only when that test fails."""
    return ctx.index.after_in_block(statement, "gating-exit", lambda earlier: _gating_exit(ctx, earlier))


def _gating_exit(ctx: File, earlier: ast.stmt) -> bool:
    if isinstance(earlier, ast.If) and not earlier.orelse and skips_rest(earlier.body):
        return periodic_polarity(earlier.test) == ALMOST_ALWAYS or _option_absent(ctx, earlier.test)
    # `try: return fast(...) except OOM: ...` then a fallback: only after an error
    return (
        isinstance(earlier, TRY)
        and bool(earlier.handlers)
        and isinstance(earlier.body[-1], ast.Return)
        and not earlier.orelse
        and not earlier.finalbody
    )


def opt_in(ctx: File, node: ast.If) -> bool:
    """`if ignore_index is not None:` / `if normalize:` where the tested name is a parameter whose
    default is None/False and the block uses it as a value: the block runs only when the caller
    asks for a non-default behaviour. (A block that calls or uses an attribute of the name, as in
    `if writer is not None: writer.add_scalar(...)`, runs whenever the object is provided.)"""
    return any(_option_value(ctx, name, node.body) for name in _tested_present(node.test))


def off_at_step_calls(ctx: File, node: ast.If) -> bool:
    """`if return_indices:` where `return_indices` is a parameter that every call of the function
    running every step passes as a false constant (`f(x, return_indices=False)` in the forward),
    while other calls (generation, analysis) take the default: the block runs at no step. Only
    for a function no framework or other module runs every step by itself."""
    test = node.test
    param = ctx.parameter(test) if isinstance(test, ast.Name) else None
    func = ctx.index.parent(ctx.index.parent(param)) if param is not None else None
    if param is None or not isinstance(func, FUNCTIONS) or ctx.index.enclosing_function(node) is not func:
        return False
    busy = ctx.analysis_cache.setdefault("off-at-step-calls", set())
    if not isinstance(busy, set) or func in busy:
        return False  # asked again while deciding (a recursive function): not shown
    if STEP_FUNCTION.match(func.name) or ctx.externally_per_step(func):
        return False
    position = ctx.call_position(func, param)
    busy.add(func)
    try:
        hot = [site for site in ctx.calls_of(func.name) if ctx.is_per_step(site)]
    finally:
        busy.discard(func)
    if not hot:
        return False
    for site in hot:
        passed = argument(site, position, param.arg)
        if not (isinstance(passed, ast.Constant) and not passed.value and passed.value != ""):
            return False  # a string constant is a value the block may use, not an off switch
    return True


def _tested_present(test: ast.expr) -> list[ast.Name]:
    """Names the test requires to be present: `x is not None`, `x`, and the `and` of such tests."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [n for v in test.values for n in _tested_present(v)]
    if isinstance(test, ast.Name):
        return [test]
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.left, ast.Name)
        and is_constant(test.comparators[0], None)
    ):
        return [test.left]
    return []


def _option_absent(ctx: File, test: ast.expr) -> bool:
    """`if option is None: return` before the statement."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.left, ast.Name)
        and is_constant(test.comparators[0], None)
    ):
        func = ctx.index.enclosing_function(test)
        return func is not None and _option_value(ctx, test.left, func.body)
    return False


def _option_value(ctx: File, name: ast.Name, body: list[ast.stmt]) -> bool:
    param = ctx.parameter(name)
    if param is None:
        return False
    func = ctx.index.parent(ctx.index.parent(param))
    default = param_default(func, param) if func is not None else None
    if not (is_constant(default, None) or is_constant(default, False)):
        return False
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name.id:
                return False
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name.id:
                return False
    return True


def runs_less_often(ctx: File, node: ast.AST, owner: ast.AST) -> bool:
    """`node` runs less often than `owner`'s body: behind a gate, off XLA, or in a nested loop
    of its own when `owner` is a loop."""
    child = node
    for anc in ctx.index.ancestors(node):
        if gated_by(ctx, child, anc):
            return True  # checked before leaving through `owner`: a gate in its own block counts
        if anc is owner:
            return False
        if isinstance(anc, LOOPS) and ctx.index.field_of(child) == "body" and isinstance(owner, LOOPS):
            return True  # a nested loop is a step loop of its own, the outer one is per epoch
        child = anc
    return False


# -- step loops --------------------------------------------------------------------------------------


def is_step_loop(ctx: File, loop: ast.AST) -> bool:
    cache = ctx.step_loop_cache
    if loop not in cache:
        cache[loop] = False  # a loop reached again while deciding (through `trains`) is not yet one
        cache[loop] = _is_step_loop(ctx, loop)
    return cache[loop]


def _is_step_loop(ctx: File, loop: ast.AST) -> bool:
    if isinstance(loop, (ast.For, ast.AsyncFor)) and (iterates_batches(ctx, loop.iter) or _slices_batches(ctx, loop)):
        return True
    data = loop_data(ctx, loop)
    targets = (
        {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        if isinstance(loop, (ast.For, ast.AsyncFor))
        else set()
    )
    for call in ctx.calls_within(loop):
        if runs_less_often(ctx, call, loop):
            continue
        if _training_call(ctx, call) and (dotted_name(receiver(call)) or "").split(".")[0] in targets:
            continue  # `for opt in optimizers: opt.step()` applies one step to each: no step loop
        if _training_call(ctx, call) or ctx.trains_externally(call):
            return True
        if any(trains(ctx, func) for func in local_callees_of(ctx, call)):
            return True
        if data and _forward_on(call, data):
            return True
    return False


def module_trains(ctx: File) -> bool:
    """Some statement of the module runs a backward, an optimizer step or a train step (here, or in
    a function of another module it calls)."""
    # the module's own calls first: the project's facts are asked only of a module that has none
    return any(_training_call(ctx, call) for call in ctx.index.calls) or any(
        ctx.trains_externally(call) for call in ctx.index.calls
    )


def offline_loop(ctx: File, loop: ast.AST) -> bool:
    """A loop of a module that never trains, in code no other module calls: a prediction,
    evaluation, export or analysis script run on its own, whose loop over data is no training step
    (its results are wanted on the host). A function another module calls (an `evaluate` the
    training script runs every epoch) is judged where it is called."""
    func = ctx.index.enclosing_function(loop)
    if func is not None and is_named_step(ctx, func):
        return False  # a loop of a `forward` runs with the step that calls it
    if ctx.module_trains:
        return False
    if func is None or ctx.externally_called(func):
        return func is None
    # called every step from elsewhere, unless only from code that is a step on guessed evidence
    return not ctx.externally_per_step(func) or ctx.externally_guessed_step(func)


def fixed_values_loop(loop: ast.AST) -> bool:
    """`for path in ["a.yaml", "b.yaml"]:`: a loop over a few constants written out, which runs a
    fixed number of times (a sweep, a smoke test's cases), not once per batch of a run."""
    return (
        isinstance(loop, (ast.For, ast.AsyncFor))
        and isinstance(loop.iter, (ast.List, ast.Tuple, ast.Set))
        and bool(loop.iter.elts)
        and all(isinstance(e, ast.Constant) for e in loop.iter.elts)
    )


def runs_bounded(ctx: File, func: Function, depth: int = 0) -> bool:
    """Every run of `func` is seen, and each runs a fixed number of times: a module-level function
    of an application's module that nothing imports, called (never handed on) only outside loops or
    in loops over fixed values, from module level or from functions that are so bounded themselves.
    A function that trains so runs a few steps (a smoke test), not the steps of a training run."""
    if depth > 3 or not isinstance(ctx.index.parent(func), ast.Module) or not ctx.application_module:
        return False
    if ctx.externally_called(func) or ctx.externally_per_step(func) or func.name in ctx.project.imported:
        return False
    uses = [n for n in ctx.index.name_uses.get(func.name, ()) if isinstance(n.ctx, ast.Load)]
    if not uses:
        return False
    for use in uses:
        call = ctx.index.parent(use)
        if not (isinstance(call, ast.Call) and call.func is use):
            return False  # handed on (`xmp.spawn(fn)`, a callback): its runs are not seen
        caller = ctx.index.enclosing_function(call)
        for anc in ctx.index.ancestors(call):
            if anc is caller:
                break
            if isinstance(anc, (ast.While, ast.Lambda, *COMPREHENSIONS)) or (
                isinstance(anc, (ast.For, ast.AsyncFor)) and not fixed_values_loop(anc)
            ):
                return False
        if caller is not None and (caller is func or not runs_bounded(ctx, caller, depth + 1)):
            return False
    return True


def _slices_batches(ctx: File, loop: ast.For | ast.AsyncFor) -> bool:
    """`for i in range(0, n, chunk): x = feats[i : i + chunk]`: mini-batches cut from a tensor by a
    strided counter, each one computed on in its own iteration, as a loader's batches are."""
    iterable = loop.iter
    if not (
        isinstance(iterable, ast.Call)
        and dotted_name(iterable.func) == "range"
        and len(iterable.args) == 3
        and isinstance(loop.target, ast.Name)
    ):
        return False
    counter = loop.target.id
    for stmt in loop.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and ctx.tensor_kind(node.value).on_device:
                indices = subscript_indices(node)
                first = indices[0] if indices else None
                # a window on the batch axis: `[i : i + chunk]`, `[i : min(i + chunk, n), :]`
                if isinstance(first, ast.Slice) and all(
                    bound is not None and _mentions(bound, {counter}) for bound in (first.lower, first.upper)
                ):
                    return True
    return False


def _training_call(ctx: File, call: ast.Call) -> bool:
    """A backward, an optimizer step or a step call."""
    method = method_name(call)
    if method == "backward":
        return True
    if method == "step" and OPTIMIZER_NAME.search(dotted_name(receiver(call)) or ""):
        return True
    if method == "step" and call.args and OPTIMIZER_NAME.search(last_part(dotted_name(call.args[0])) or ""):
        return True  # `scaler.step(optimizer)`: the scaler steps the optimizer it is given
    if STEP_CALL.match(last_part(dotted_name(call.func))):
        return True
    return ctx.imports_jax and jax_tracing.jitted_trains(ctx, call)


def trains(ctx: File, func: ast.AST) -> bool:
    """`func`, or a module-local function it calls, runs one backward or optimizer step per call.
    (A function that runs them in a loop of its own trains an epoch: calling it is no step.)"""
    cache = ctx.trains_cache
    if func not in cache:
        cache[func] = False  # recursion
        if _trains_own_batches(ctx, func):
            # `def run_epoch(loader): for b in loader: ...step...` then a flush `opt.step()` after the
            # loop for the last accumulated micro-batches: once per epoch, so calling it is no step
            return False
        # a jitted JAX step that computes gradients trains, whatever calls it
        cache[func] = (
            ctx.imports_jax
            and func in ctx.cached(jax_tracing.staged_functions)
            and jax_tracing.computes_gradients(ctx, func)
        ) or any(
            not runs_less_often(ctx, call, func)
            and not in_loop_within(ctx, call, func)
            and (
                _training_call(ctx, call)
                or ctx.trains_externally(call)
                or any(trains(ctx, f) for f in local_callees_of(ctx, call))
            )
            for call in ctx.calls_within(func)
        )
    return cache[func]


def _trains_own_batches(ctx: File, func: ast.AST) -> bool:
    """`func` iterates a loader's batches in a loop of its own that trains: it runs an epoch."""
    return any(
        isinstance(loop, (ast.For, ast.AsyncFor)) and iterates_batches(ctx, loop.iter) and loop_trains(ctx, loop)
        for loop in ctx.loops_of(func)
    )


def loop_trains(ctx: File, loop: ast.AST) -> bool:
    """`loop` is a step loop that trains: a backward or an optimizer step runs in every iteration,
    in its body or in a function it calls (of this module or, through the project index, another)."""
    return is_step_loop(ctx, loop) and any(
        not runs_less_often(ctx, call, loop)
        and (
            _training_call(ctx, call)
            or ctx.trains_externally(call)
            or any(trains(ctx, f) for f in local_callees_of(ctx, call))
        )
        for call in ctx.calls_within(loop)
    )


# Calls that cut the step's graph, by the called name: a barrier of any spelling makes a helper's
# caller none of our business.
BARRIER_NAMES = SYNC_NAMES | {"sync", "optimizer_step", "StepTrace", "wait_device_ops"}


def unbarriered_optimizer_step(ctx: File, func: ast.AST) -> int | None:
    """The line of the plain optimizer step (`opt.step()`, `scaler.step(opt)`) `func` runs on every
    call, through the functions of this module it calls, when nothing there cuts the graph: a
    helper such as `mp_trainer.optimize(opt)` whose caller's loop owns the barrier. None for an
    optimizer's own `step` (a wrapper), a function that loops over steps itself (its loop is
    judged where it is), and in modules of frameworks that own the barrier."""
    if getattr(func, "name", "") in ("step", "optimizer_step") or any(
        b.qualified.split(".")[0] in FRAMEWORK_MODULES for b in ctx.index.imports.values()
    ):
        return None
    if any(is_step_loop(ctx, loop) for loop in ctx.loops_of(func)):
        return None
    found = None
    pending, seen = [func], set[ast.AST]()
    while pending:
        owner = pending.pop()
        if owner in seen or len(seen) > 20:
            continue
        seen.add(owner)
        for call in ctx.calls_within(owner):
            name = last_part(dotted_name(call.func))
            if name in BARRIER_NAMES or (
                name in ("step", "compile") and (ctx.qualified_name(call.func) or "").startswith("torch_xla")
            ):
                return None
            if runs_less_often(ctx, call, owner) or in_loop_within(ctx, call, owner):
                continue
            if found is None and _plain_optimizer_step(call):
                found = call.lineno
            pending.extend(local_callees_of(ctx, call))
    return found


def _plain_optimizer_step(call: ast.Call) -> bool:
    if method_name(call) != "step":
        return False
    recv = last_part(dotted_name(receiver(call)))
    if recv and OPTIMIZER_NAME.search(recv) and not NOT_OPTIMIZER.search(recv):
        return True
    first = positional(call)[:1]  # `scaler.step(optimizer)`
    name = last_part(dotted_name(first[0])) if first else ""
    return (
        bool(name)
        and bool(OPTIMIZER_NAME.search(name))
        and not NOT_OPTIMIZER.search(name)
        and "scaler" in (recv or "").lower()
    )


def in_loop_within(ctx: File, node: ast.AST, owner: ast.AST) -> bool:
    """`node` sits in the body of a loop (or comprehension) inside `owner`."""
    for anc in ctx.index.ancestors(node):
        if anc is owner:
            return False
        if isinstance(anc, (*LOOPS, ast.comprehension, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            return True
    return False


def loop_data(ctx: File, loop: ast.AST) -> set[str]:
    """Names holding what a `for` loop yields: its targets, and names the body assigns from them
    (`images = batch[0].to(device)`, `x, y = batch`), not names of what is called on them."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return set()
    # what it iterates, not counters: `range(...)` items and `enumerate`'s index are no data
    data = {
        name
        for name, iterable in loop_bindings(loop.target, loop.iter)
        if not (isinstance(iterable, ast.Call) and dotted_name(iterable.func) == "range")
    }
    # each assignment's value read once: the names it reads as data, and the names it binds
    assignments = [
        (
            _read_names(n.value),
            [name for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for name in _bound_names(t)],
        )
        for n in assignments_in_body(ctx, loop)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
    ]
    for _ in range(3):  # a few rounds of `a = f(batch); b = a.to(d)`
        for reads, bound in assignments:
            if not reads.isdisjoint(data):
                data.update(bound)
    return data


def assignments_in_body(ctx: File, loop: ast.AST) -> list[ast.AST]:
    """The assignments (`=`, `x: T =`, `+=`) anywhere in a loop's body, in the order a walk of each
    of its statements meets them (`ast.walk`: by depth, then in source order)."""
    return ctx.cached(_assignments_by_loop).get(loop, [])


def _assignments_by_loop(ctx: File) -> dict[ast.AST, list[ast.AST]]:
    """Each loop's `assignments_in_body`, from one pass over the file's assignments (walking each
    loop's body instead walked an outer loop's inner loops again, for each question asked)."""
    index = ctx.index
    found: dict[ast.AST, list[tuple[tuple[int, int, int], ast.AST]]] = {}
    for kind in (ast.Assign, ast.AnnAssign, ast.AugAssign):
        for node in index.by_type.get(kind, ()):
            child, depth = node, 0
            for anc in index.ancestors(node):
                if isinstance(anc, LOOPS) and index.field_of(child) == "body":
                    key = (index.order[child], depth, index.order[node])
                    found.setdefault(anc, []).append((key, node))
                child, depth = anc, depth + 1
    return {loop: [node for _, node in sorted(items, key=lambda item: item[0])] for loop, items in found.items()}


def _bound_names(target: ast.expr):
    """Names an assignment target binds: `x`, `x, (y, *z)`; not the object an item or attribute
    is stored into (`metadata["fold"] = ...` mutates `metadata`, it does not make it loop data)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound_names(element)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _mentions(expr: ast.AST, names: set[str]) -> bool:
    """`expr` reads one of `names` as data (a callee's name is not data: `layer(x)`)."""
    return not _read_names(expr).isdisjoint(names)


def _read_names(expr: ast.AST) -> set[str]:
    """The names `expr` reads as data (a callee's name is not data: `layer(x)`)."""
    nodes = list(ast.walk(expr))
    callees = {n.func for n in nodes if isinstance(n, ast.Call)}
    return {n.id for n in nodes if isinstance(n, ast.Name) and n not in callees}


def _forward_on(call: ast.Call, data: set[str]) -> bool:
    """`model(x)`, `self.net(images)`, `criterion(out, y)` with an argument from the loop's data."""
    name = dotted_name(call.func)
    if not name or name.count(".") > 1 or name.split(".")[0] in data:
        return False
    if not FORWARD_CALLEE.search(last_part(name)) or MODEL_HANDLER.match(last_part(name)):
        return False
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(_mentions(a, data) for a in args)


def iterates_batches(ctx: File, iterable: ast.expr, depth: int = 0) -> bool:
    """`for batch in loader`, `enumerate(tqdm(train_loader))`, `pl.MpDeviceLoader(...)`,
    `metric_logger.log_every(loader, ...)`, or a variable holding one of those."""
    if depth > 3:
        return False
    if isinstance(iterable, ast.Call):
        callee = last_part(dotted_name(iterable.func))
        if DEVICE_LOADER.match(callee):
            return True
        if callee in ITERABLE_WRAPPERS or isinstance(iterable.func, ast.Attribute):
            # a wrapper (or a method such as `log_every`) around a loader it is given
            return any(iterates_batches(ctx, a, depth + 1) for a in iterable.args[:2])
        return False
    name = dotted_name(iterable)
    if not name:
        return False
    if BATCH_ITERABLE.search(last_part(name)):
        return True
    values = ctx.assigned_values(iterable)
    return any(isinstance(v, ast.Call) and DEVICE_LOADER.match(last_part(dotted_name(v.func))) for v in values) or any(
        iterates_batches(ctx, v, depth + 1) for v in values if isinstance(v, (ast.Call, ast.Name))
    )


# -- per-step ----------------------------------------------------------------------------------------


def is_per_step(ctx: File, node: ast.AST, *, periodic: bool = False) -> bool:
    """True when `node` runs once per training/evaluation step. With `periodic=True`, also when it
    runs every N steps (`if step % accumulate == 0:`): what a step barrier must cover."""
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child)
        if not periodic and gated_by(ctx, child, anc):
            return False
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            if ctx.is_step_closure(anc):
                return False
            return isinstance(anc, FUNCTIONS) and is_step_function(ctx, anc)
        if _runs_each_iteration(ctx, anc, field):
            return periodic or not _periodic_pass(ctx, anc)
        child = anc
    return False


def _runs_each_iteration(ctx: File, loop: ast.AST, field: str | None) -> bool:
    """`loop` is a step loop, and its `field` (the body; a `while`'s test too) runs every step. (The
    loop of a script that never trains is one too, with only possible evidence: `offline_loop`.)"""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return field == "body" and is_step_loop(ctx, loop)
    return isinstance(loop, ast.While) and field in ("body", "test") and is_step_loop(ctx, loop)


def _periodic_pass(ctx: File, loop: ast.AST) -> bool:
    """`loop` runs inside a gate of an outer loop (`if step % eval_every == 0:`) and does not
    iterate batches: a pass over a few things every N steps (`for split, ds in evals.items():`),
    not an evaluation loop over a loader, whose iterations are steps of their own."""
    if isinstance(loop, (ast.For, ast.AsyncFor)) and iterates_batches(ctx, loop.iter):
        return False
    child = loop
    for anc in ctx.index.ancestors(loop):
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            return False
        if gated_by(ctx, child, anc):
            return any(isinstance(a, LOOPS) for a in ctx.index.ancestors(anc))
        child = anc
    return False


# Functions that run once per call on batch data, whoever calls them: losses, criteria and input
# checks of losses/metrics (`_check_inputs`, `*_tensor_validation`), metric updates. Their callers
# may be in code the project index cannot see (a library's users); when callers are visible, they
# decide instead.
PER_CALL_FUNCTION = re.compile(
    r"(^|_)(loss|losses|criterion)($|_)|[A-Za-z0-9]Loss$|^_*check_|_validation$|"
    r"^_*validate_(input|tensor|target|pred)|[a-z0-9]_update$"
)
# ... but not tests (`test_metric_update`) or one-off checks of the set-up (`check_init`).
NOT_PER_CALL = re.compile(r"^_*test|(^|_)(init|setup|config|version|available|import|env|install)", re.I)
MAX_CALL_SITE_DEPTH = 2


def compute_per_call_functions(ctx: File) -> set[ast.AST]:
    """Per-call functions by name (with no caller in the project), and the module-local functions
    they call."""
    result: set[ast.AST] = set()
    work = [
        f
        for defs in ctx.index.functions.values()
        for f in defs
        if PER_CALL_FUNCTION.search(f.name)
        and not NOT_PER_CALL.search(f.name)
        and not _call_sites(ctx, f)
        and not ctx.externally_called(f)
        and not ctx.unused_function(f)  # no caller outside an application's project either
    ]
    while work:
        func = work.pop()
        if func in result or ctx.is_step_closure(func):
            continue
        result.add(func)
        work.extend(_local_callees(ctx, func))
    return result


def _call_sites(ctx: File, func: Function) -> list[ast.Call]:
    return ctx.calls_of(func.name)


def runs_hot(ctx: File, node: ast.AST, depth: int = 0) -> bool:
    """`node` runs every step (or on every call of a loss/metric check) and may run on XLA.

    A helper that is per-step only because a step function calls it (not by its own name) is
    judged by its call sites in this module: when every one of them is off XLA
    (`if not self.tpu: self._check(...)`), every N steps, or not per step, so is the helper.
    """
    func = ctx.index.enclosing_function(node)
    if ctx.is_per_step(node) and not _excluded_here(ctx, node):
        if (
            func is None
            or depth > MAX_CALL_SITE_DEPTH
            or STEP_FUNCTION.match(func.name)
            or ctx.externally_per_step(func)
            or _in_step_loop_within(ctx, node, func)
        ):
            return True
        sites = _call_sites(ctx, func)
        if not sites:
            return True
        return any(runs_hot(ctx, site, depth + 1) for site in sites if not _passes_past(ctx, site, node, func))
    if func is not None and func in ctx.per_call_functions and not _site_excluded(ctx, node):
        return True
    return False


def _in_step_loop_within(ctx: File, node: ast.AST, func: ast.AST) -> bool:
    """Per-step because a step loop inside `func` runs it, whoever calls `func`."""
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return False
        field = ctx.index.field_of(child)
        if _runs_each_iteration(ctx, anc, field):
            return not _periodic_pass(ctx, anc)
        child = anc
    return False


def _passes_past(ctx: File, call: ast.Call, node: ast.AST, func: Function) -> bool:
    """`call` of `func` passes a constant that keeps `node` from running: `node` is in a block of
    an `if mode == "epoch":` (or `!=`) on a parameter of `func`, and the test, with the constant
    `call` passes for it (`self._log("batch", ...)`), leads elsewhere."""
    params = [*func.args.posonlyargs, *func.args.args]
    child = node
    for anc in ctx.index.ancestors(node):
        if anc is func:
            return False
        field = ctx.index.field_of(child)
        test = anc.test if isinstance(anc, ast.If) and field in ("body", "orelse") else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            sides = (test.left, test.comparators[0])
            name = next((side.id for side in sides if isinstance(side, ast.Name)), None)
            wanted = next((side for side in sides if isinstance(side, ast.Constant)), None)
            param = next((p for p in [*params, *func.args.kwonlyargs] if p.arg == name), None)
            if param is not None and wanted is not None:
                passed = argument(call, ctx.call_position(func, param), param.arg)
                if isinstance(passed, ast.Constant):
                    holds = (passed.value == wanted.value) == isinstance(test.ops[0], ast.Eq)
                    if holds != (field == "body"):
                        return True
        child = anc
    return False


def _excluded_here(ctx: File, node: ast.AST) -> bool:
    """Never on XLA, building an error being raised (runs once, when failing), or a check of a
    verification script."""
    if ctx.in_non_xla_code(node):
        return True
    return in_raise(ctx, node) or verification_check(ctx, node)


# Comparisons a verification script checks results with (`torch.allclose`, `torch.testing.assert_close`).
CHECK_CALLS = {"allclose", "equal", "assert_close", "assert_allclose", "assert_equal", "assert_array_equal"}
# unittest's assertion methods and their look-alikes (`self.assertEqual`, `self.assertAllClose`).
UNITTEST_ASSERTION = re.compile(r"^assert[A-Z_]")
# Folders of a package that hold its verification scripts (`accelerate/test_utils/scripts/...`).
VERIFICATION_FOLDERS = {"test_utils", "testing_utils", "test_scripts"}


# Folders of a project that hold its test suite, helpers included (`test/distributed_util.py`).
TEST_FOLDERS = {"test", "tests"}


def is_verification_module(path, root=None) -> bool:
    """A script that verifies rather than trains: `test_*.py`, `*_test.py`, a module under a
    package's `test_utils/`, or one under a `test/` or `tests/` folder of its project (`root`): a
    test suite's helpers check too. A `tests` folder above the project's root, which may hold a
    whole project, does not count."""
    parts = PurePath(str(path)).parts
    name = parts[-1] if parts else ""
    if name.startswith("test_") or name.endswith("_test.py") or VERIFICATION_FOLDERS & set(parts[:-1]):
        return True
    if root is None:
        return False
    try:
        inside = PurePath(str(path)).relative_to(root).parts[:-1]
    except ValueError:
        return False
    return bool(TEST_FOLDERS & set(inside))


# What pytest and unittest run as tests: `test*` functions, `Test*` classes, `TestCase` subclasses,
# and the fixtures they ask for (each once per test, never once per training step).
TEST_FUNCTION = re.compile(r"^test")
TEST_CLASS = re.compile(r"^Test")


def _test_entry(node: ast.AST) -> bool:
    if isinstance(node, ast.ClassDef):
        return bool(TEST_CLASS.match(node.name)) or any(
            last_part(dotted_name(b)).endswith("TestCase") for b in node.bases
        )
    if not isinstance(node, FUNCTIONS):
        return False
    decorators = [last_part(dotted_name(d.func if isinstance(d, ast.Call) else d)) for d in node.decorator_list]
    return bool(TEST_FUNCTION.match(node.name)) or "fixture" in decorators


def test_code(ctx: File) -> dict[ast.AST, str]:
    """The module-level functions and classes of a test module that run only as tests: the tests
    and fixtures themselves, and the helpers used by nothing else in the module (nor imported by
    other modules), to a fixed point. Each maps to the name of a test that runs it: the test runner
    runs it once per test, not once per training step (a script's `main`, which trains, is none)."""
    cached = ctx.analysis_cache.get("test-code")
    if isinstance(cached, dict):
        return cached
    found: dict[ast.AST, str] = {}
    if ctx.verification_module:
        tops = [n for n in ctx.tree.body if isinstance(n, (*FUNCTIONS, ast.ClassDef))]
        found = {n: n.name for n in tops if _test_entry(n)}
        changed = bool(found)
        while changed:
            changed = False
            for node in tops:
                if node in found or node.name in ctx.project.imported or ctx.externally_called(node):
                    continue
                uses = [n for n in ctx.index.name_uses.get(node.name, ()) if isinstance(n.ctx, ast.Load)]
                owners = [o for o in (_top_level(ctx, n) for n in uses) if o is not None and o is not node]
                if owners and len(owners) == len(uses) and all(o in found for o in owners):
                    found[node] = found[owners[0]]
                    changed = True
    ctx.analysis_cache["test-code"] = found
    return found


def _top_level(ctx: File, node: ast.AST) -> ast.AST | None:
    """The module-level function or class holding `node` (None at module level)."""
    for anc in (node, *ctx.index.ancestors(node)):
        if ctx.index.parent(anc) is ctx.tree:
            return anc if isinstance(anc, (*FUNCTIONS, ast.ClassDef)) else None
    return None


def test_entry(ctx: File, node: ast.AST) -> str | None:
    """The test that runs `node`, when it runs only as part of a test module's tests."""
    found = test_code(ctx)
    top = _top_level(ctx, node) if found else None
    return found.get(top) if top is not None else None


def verification_check(ctx: File, node: ast.AST) -> bool:
    """In a verification script, `node` is part of a check of results: an `assert`'s test, a
    comparison such as `torch.allclose(a, b)`, or the test of an `if` that holds one
    (`if not torch.allclose(out, ref): raise ...`). It runs to check, not to train."""
    if not ctx.verification_module:
        return False
    for anc in (node, *ctx.index.ancestors(node)):
        if isinstance(anc, ast.Assert):
            return True
        if isinstance(anc, ast.Call) and _is_check_call(anc):
            return True
        if isinstance(anc, (ast.If, ast.While)):
            return any(
                isinstance(n, ast.Call) and last_part(dotted_name(n.func)) in CHECK_CALLS for n in ast.walk(anc.test)
            ) and any(n is node for n in ast.walk(anc.test))
        if isinstance(anc, ast.stmt):
            return False
    return False


def _is_check_call(call: ast.Call) -> bool:
    """`torch.allclose(a, b)`, or a test case's assertion method (`self.assertEqual(out, ref)`)."""
    dotted = dotted_name(call.func) or ""
    name = last_part(dotted)
    return name in CHECK_CALLS or bool(UNITTEST_ASSERTION.match(name)) and dotted.startswith("self.")


def in_raise(ctx: File, node: ast.AST) -> bool:
    """`node` builds the error of a failing check: part of a `raise`, or of an `assert`'s message
    (evaluated only when the assertion fails)."""
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.Raise):
            return True
        if isinstance(anc, ast.Assert):
            return ctx.index.field_of(child) == "msg"
        if isinstance(anc, ast.stmt):
            return False
        child = anc
    return False


def _site_excluded(ctx: File, node: ast.AST) -> bool:
    """`node` never runs on XLA, runs behind a gate, or builds an error being raised, within its
    function."""
    if ctx.in_non_xla_code(node):
        return True
    if in_raise(ctx, node) or verification_check(ctx, node):
        return True
    child = node
    for anc in ctx.index.ancestors(node):
        if gated_by(ctx, child, anc):
            return True
        if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
            break
        child = anc
    return False


def is_test_module(path) -> bool:
    """A test module (`test_*.py`, `*_test.py`, under `tests/`): its loops check results, they do
    not train."""
    parts = PurePath(str(path)).parts
    name = parts[-1] if parts else ""
    return name.startswith("test_") or name.endswith("_test.py") or bool({"tests", "test"} & set(parts[:-1]))
