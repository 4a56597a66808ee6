"""Where a torch object's tensors live: on the XLA device, evidently elsewhere, or unknown, by how it
was built and moved (`torch.zeros(..., device=xm.xla_device())`, `model.to(device)`, `.cpu()`),
through names, containers, copies and call sites. Used by XLA701 (`torch.save` of XLA tensors)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

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
from .vocabulary import DEVICE_LOADER, FACTORIES, LIKE_FACTORIES, XM

if TYPE_CHECKING:
    from .file import File

# Calls that return the XLA device.
XLA_DEVICE_CALLS = {"torch_xla.device", f"{XM}.xla_device", "torch_xla.torch_xla.device"}
# Device strings of other backends (`torch.device("cuda:0")`, `.to("cpu")`).
OTHER_DEVICES = {"cpu", "cuda", "mps", "xpu", "meta", "hpu", "npu", "mtia", "jax"}
# Calls that return their first argument, or a copy of it on the same device.
PASS_THROUGH = {"copy.deepcopy", "copy.copy", "dict", "list", "tuple", "collections.OrderedDict"}
# Methods whose result is on the host, or on another backend's device.
OFF_XLA_METHODS = {"cpu", "cuda", "numpy", "tolist", "item"}
# Module/tensor methods that move the object (in place for modules): a placement of their receiver.
MOVES = {"to", "cpu", "cuda"}
# Methods only a module has: their receiver is a module, not a tensor.
MODULE_METHODS = {
    "parameters",
    "named_parameters",
    "state_dict",
    "load_state_dict",
    "train",
    "eval",
    "modules",
    "children",
    "named_modules",
    "zero_grad",
    "register_forward_hook",
    "apply",
}
# Methods whose result holds the receiver's parameters, state or storage, on its device.
SAME_PLACE = {
    "state_dict",
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "detach",
    "clone",
    "float",
    "half",
    "bfloat16",
    "double",
    "contiguous",
    "values",
    "items",
}
MAX_DEPTH = 16  # expression levels followed (names, calls, containers), cycles aside


def _any(results) -> bool | None:
    """True if one of `results` is, False if all are False (and there is one), else None."""
    results = list(results)
    if any(r is True for r in results):
        return True
    return False if results and all(r is False for r in results) else None


def move_targets(call: ast.Call) -> list[ast.expr]:
    """What `x.to(...)` may name as its device: `device=`, and its first argument (a device or a
    dtype: `Placement.device` tells)."""
    return [t for t in [keyword_value(call, "device"), *positional(call)[:1]] if t is not None]


def _device_string(text: str) -> bool | None:
    kind = text.split(":")[0].strip().lower()
    if kind == "xla":
        return True
    return False if kind in OTHER_DEVICES else None


class Placement:
    """Whether an expression's tensors live on the XLA device: True, False (evidently elsewhere), or
    None (unknown)."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx
        self.seen: set[ast.AST] = set()

    def of(self, expr: ast.expr | None, depth: int = 0) -> bool | None:
        if expr is None or depth > MAX_DEPTH or expr in self.seen:
            return None
        self.seen.add(expr)
        try:
            return self._of(expr, depth + 1)
        finally:
            self.seen.discard(expr)

    def _of(self, expr: ast.expr, depth: int) -> bool | None:
        if isinstance(expr, ast.Dict):
            return _any(self.of(v, depth) for v in expr.values)
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            return _any(self.of(e.value if isinstance(e, ast.Starred) else e, depth) for e in expr.elts)
        if isinstance(expr, ast.DictComp):
            return self.of(expr.value, depth)
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.of(expr.elt, depth)
        if isinstance(expr, (ast.Constant, ast.JoinedStr)):
            return False
        if isinstance(expr, ast.BinOp):
            return _any(self.of(side, depth) for side in (expr.left, expr.right))
        if isinstance(expr, ast.Subscript):
            return self.of(expr.value, depth)
        if isinstance(expr, ast.Call):
            return self._call(expr, depth)
        if isinstance(expr, ast.Name):
            return self._name(expr, depth)
        if isinstance(expr, ast.Attribute):
            return self._attribute(expr, depth)
        return None

    def _call(self, call: ast.Call, depth: int) -> bool | None:
        qualified = self.ctx.qualified_name(call.func) or ""
        method = method_name(call)
        args = positional(call)
        if qualified in PASS_THROUGH:
            return self.of(args[0], depth) if args else None
        if method in OFF_XLA_METHODS:
            return False
        if method == "to":
            for target in move_targets(call):
                device = self.device(target, depth)
                if device is not None:
                    return device
            return self.of(receiver(call), depth)  # `.to(dtype)`: where the receiver is
        if method in SAME_PLACE:
            return self.of(receiver(call), depth)
        if qualified.startswith("torch."):
            tail = last_part(qualified)
            device_arg = keyword_value(call, "device")
            if device_arg is not None:  # `torch.randn(n, device=d)`, `nn.Linear(4, 4, device=d)`
                return self.device(device_arg, depth)
            if tail in FACTORIES:
                return False  # created on the CPU
            if tail in LIKE_FACTORIES:
                return self.of(args[0], depth) if args else None
            return _any(self.of(a, depth) for a in args)  # `torch.stack(ts)`, `torch.optim.SGD(model.parameters())`
        # an optimizer (or anything) built over a model's parameters holds state where they are
        parameters = [
            n
            for a in [*call.args, *(k.value for k in call.keywords)]
            for n in ast.walk(a)
            if isinstance(n, ast.Call) and method_name(n) in ("parameters", "named_parameters")
        ]
        if parameters:
            return _any(self.of(p, depth) for p in parameters)
        return None

    def _name(self, name: ast.Name, depth: int) -> bool | None:
        order = self.ctx.index.order
        here = order[name]
        values = self.ctx.reaching_values(name)
        before = [v for v in values if order[v] < here]
        moves = [call for call in self._moves(self.ctx.index.scope_of(name), name.id) if order[call] < here]
        latest = max([*before, *moves], key=order.__getitem__, default=None)
        if latest is not None:
            return self.of(latest, depth)
        if values:  # assigned only later in the scope: a loop carries it round
            return _any(self.of(v, depth) for v in values)
        iterables = self.ctx.loop_iterables(name)
        if iterables:
            return _any(self._elements(it, depth) for it in iterables)
        if self.ctx.parameter(name) is not None:
            return self._passed(name, depth)
        return None

    def _attribute(self, node: ast.Attribute, depth: int) -> bool | None:
        name = dotted_name(node)
        if not name:
            return None
        if node.attr == "device":
            return None
        found = [self.of(v, depth) for v in self.ctx.attribute_values(name)]
        found += [self.of(m, depth) for m in self._moves(None, name)]
        if not found:
            # a parameter's gradient or data, a wrapper's wrapped module: where their owner is
            return self.of(node.value, depth) if node.attr in ("grad", "data", "module") else None
        if any(f is False for f in found):
            return None if any(f is True for f in found) else False
        return True if any(f is True for f in found) else None

    def _moves(self, scope: ast.AST | None, name: str) -> list[ast.Call]:
        """Statements `name.to(...)` / `name.cpu()` / `name.cuda()`: they move a module in place.
        In `scope` only (a local name), or anywhere in the file (`self.model`)."""
        calls = self.ctx.calls_within(scope) if scope is not None else self.ctx.index.calls
        return [
            c
            for c in calls
            if method_name(c) in MOVES and isinstance(self.ctx.parent(c), ast.Expr) and dotted_name(receiver(c)) == name
        ]

    def _elements(self, iterable: ast.expr, depth: int) -> bool | None:
        """Where the items of `for x in iterable` live."""
        if isinstance(iterable, ast.Call) and DEVICE_LOADER.match(
            last_part(dotted_name(iterable.func)) or method_name(iterable) or ""
        ):
            return True  # a per-device loader yields XLA tensors
        if isinstance(iterable, ast.Call) and method_name(iterable) in ("items", "values", "parameters", "buffers"):
            return self.of(receiver(iterable), depth)
        return None

    def _passed(self, name: ast.Name, depth: int) -> bool | None:
        """What this module's calls of the enclosing function pass for the parameter `name`."""
        param = self.ctx.parameter(name)
        values = self.ctx.arguments_for(param) if param is not None else []
        return _any([self.of(v, depth) for v in values if v is not None])

    def device(self, expr: ast.expr, depth: int = 0) -> bool | None:
        """Whether the device `expr` names is the XLA device."""
        if depth > MAX_DEPTH:
            return None
        depth += 1
        text = string_value(expr)
        if text is not None:
            return _device_string(text)
        if isinstance(expr, ast.JoinedStr):
            head = expr.values[0] if expr.values else None
            return (
                _device_string(head.value) if isinstance(head, ast.Constant) and isinstance(head.value, str) else None
            )
        if isinstance(expr, ast.IfExp):
            return _any(self.device(side, depth) for side in (expr.body, expr.orelse))
        if isinstance(expr, ast.BoolOp):
            return _any(self.device(v, depth) for v in expr.values)
        if isinstance(expr, ast.Call):
            qualified = self.ctx.qualified_name(expr.func)
            if qualified in XLA_DEVICE_CALLS:
                return True
            if qualified == "torch.device" and expr.args:
                return self.device(expr.args[0], depth)
            return None
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            if values:
                return _any(self.device(v, depth) for v in values)
            if self.ctx.parameter(expr) is not None:
                return self._passed_device(expr, depth)
            return None
        if isinstance(expr, ast.Attribute):
            name = dotted_name(expr)
            values = self.ctx.attribute_values(name) if name else []
            return _any(self.device(v, depth) for v in values) if values else None
        return None

    def _passed_device(self, name: ast.Name, depth: int) -> bool | None:
        param = self.ctx.parameter(name)
        values = self.ctx.arguments_for(param) if param is not None else []
        return _any([self.device(v, depth) for v in values if v is not None])


# -- a module placed off XLA ------------------------------------------------------------------------------

# A string that names XLA or a TPU as a word ("xla:0", "--use_tpu", "TPUs"), not inside another
# word ("output" holds "tpu").
NAMES_XLA = re.compile(r"(?<![a-z])(xla|tpu)s?(?![a-z])", re.I)
# Names of a device argument (`.to(device)`, `.to(self.device)`, `.to(args.dev)`), as opposed to a dtype.
DEVICE_NAME = ("device", "dev", "rank", "local_rank", "gpu")


# Libraries that choose the device for the code they run (`accelerator.device`, `self.device` in a
# LightningModule): on a TPU host they hand it an XLA device without the project importing torch_xla.
DEVICE_CHOOSERS = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "composer", "ignite")


# What `off_xla_placement` finds of a module's own devices.
ONLY_OFF_XLA, ALSO_CHOSEN = "only", "also-chosen"

# `torch.autocast("cuda")`, `torch.amp.autocast(device_type="mps")`: the code they wrap computes on the
# device type they name; `torch.cuda.amp.autocast()` names CUDA by its module.
AUTOCASTS = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
BACKEND_AUTOCASTS = {"torch.cuda.amp.autocast": "cuda", "torch.cpu.amp.autocast": "cpu"}
# `torch.cuda.set_device(rank)`: the process computes on a CUDA device.
CUDA_BINDINGS = {"torch.cuda.set_device"}
# `torch.cuda.current_device()`: the CUDA device the process is bound to (its index), as a device.
CUDA_CURRENT = {"torch.cuda.current_device"}


def off_xla_placement(ctx: File, *, device_from_elsewhere: bool = False) -> str | None:
    """How the module puts its tensors on another backend, from one pass over its device arguments:
    a device it names resolves to `"cuda"`, `"cuda:0"` or `"mps"` (`.cuda()`, `torch.device("cuda"
    if ... else "cpu")`, `device = "cuda"` then `.to(device)`, `torch.cuda.current_device()`), or
    the code it runs computes on such a device (`torch.autocast("cuda")` or `torch.cuda.amp.autocast()`
    switched on, `torch.cuda.set_device(rank)`), or `device_from_elsewhere` (it takes its device from
    a project function of such code, see `returns_device`); and nothing in it names XLA or a TPU.
    `ONLY_OFF_XLA` when every device it names resolves so; `ALSO_CHOSEN` when some device is a
    parameter or another call's result (one a caller could make XLA where the project runs on XLA
    elsewhere; in a project with no XLA code no caller can). None when it shows no such placement,
    or imports a library that picks the device for the code it runs (Accelerate, Lightning: on a
    TPU host it hands that code an XLA device)."""
    if any(b.qualified.split(".")[0] in DEVICE_CHOOSERS for b in ctx.index.imports.values()):
        return None
    found, chosen = device_from_elsewhere, False
    for call in ctx.index.calls:
        for given in _device_arguments(call):
            kinds = _device_kinds(ctx, given, 0)
            if kinds is None:
                chosen = True  # a device a caller chooses
                # unless chosen otherwise: a parameter's or a command-line option's default
                defaults = _default_kinds(ctx, given, 0)
                if defaults is not None and True in defaults:
                    return None  # `device="xla"` by default
                found = found or any(k != "cpu" for k in defaults or () if isinstance(k, str))
            elif True in kinds:
                return None  # XLA's device
            else:
                found = found or any(k != "cpu" for k in kinds if isinstance(k, str))
        if method_name(call) == "cuda":
            found = True
        kinds = _computes_on(ctx, call)
        if kinds is not None:
            if True in kinds:
                return None  # `torch.autocast("xla")`
            found = found or any(k != "cpu" for k in kinds if isinstance(k, str))
    if not found or any(
        isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMES_XLA.search(node.value)
        for node in ctx.index.by_type.get(ast.Constant, ())
    ):
        return None
    return ALSO_CHOSEN if chosen else ONLY_OFF_XLA


def _default_kinds(ctx: File, expr: ast.expr, depth: int) -> set[str | bool] | None:
    """The device strings `expr` holds unless its caller or user chooses another: a parameter's
    default (`def __init__(self, device="cuda")`), a command-line option's (`add_argument("--device",
    default="cuda")` read as `args.device`), through assignments, `torch.device(...)` and either
    side of a conditional. None when no such default is seen."""
    if depth > 6:
        return None
    known = _device_kinds(ctx, expr, depth + 1)
    if known is not None:
        return known
    if isinstance(expr, ast.IfExp):
        sides = [_default_kinds(ctx, side, depth + 1) for side in (expr.body, expr.orelse)]
        return None if all(k is None for k in sides) else set().union(*(k for k in sides if k is not None))
    if isinstance(expr, ast.Call):
        if dotted_name(expr.func) in ("torch.device", "device") and positional(expr):
            return _default_kinds(ctx, positional(expr)[0], depth + 1)
        return None
    if isinstance(expr, ast.Name):
        param = ctx.parameter(expr)
        if param is not None:
            default = param_default(ctx.index.parent(ctx.index.parent(param)), param)
            return _device_kinds(ctx, default, depth + 1) if default is not None else None
        found: set[str | bool] = set()
        for value in ctx.values_in_scope(expr):
            kinds = _default_kinds(ctx, value, depth + 1)
            if kinds is None:
                return None
            found |= kinds
        return found or None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id != "self":
        return _option_default(ctx, expr.attr, depth)  # `args.device`
    return None


def _option_default(ctx: File, option: str, depth: int) -> set[str | bool] | None:
    """The device kinds of the defaults of the module's command-line options named `option`
    (`parser.add_argument("--device", default="cuda")`, or `dest="device"`)."""
    found: set[str | bool] = set()
    for call in ctx.index.calls:
        if method_name(call) != "add_argument":
            continue
        dest = string_value(keyword_value(call, "dest"))
        flags = [string_value(a) or "" for a in positional(call)]
        names = {dest} if dest else {f.lstrip("-").replace("-", "_") for f in flags if f}
        if option not in names:
            continue
        default = keyword_value(call, "default")
        kinds = _device_kinds(ctx, default, depth + 1) if default is not None else None
        if kinds is None:
            return None
        found |= kinds
    return found or None


def _computes_on(ctx: File, call: ast.Call) -> set[str | bool] | None:
    """The device types the code `call` wraps or binds computes on: an autocast region it switches
    on (`torch.autocast("cuda", dtype=...)`, `torch.cuda.amp.autocast()`), a process bound to a CUDA
    device (`torch.cuda.set_device(rank)`). None for other calls, for a device type the module does
    not resolve (`x.device.type`: wherever `x` is), and for an autocast switched off
    (`enabled=False`: a region kept in full precision, on whatever device it runs)."""
    qualified = ctx.qualified_name(call.func) or ""
    if qualified in CUDA_BINDINGS:
        return {"cuda"}
    if qualified in BACKEND_AUTOCASTS:
        kinds: set[str | bool] | None = {BACKEND_AUTOCASTS[qualified]}
    elif qualified in AUTOCASTS:
        given = keyword_value(call, "device_type") or next(iter(positional(call)), None)
        kinds = _device_kinds(ctx, given, 0) if given is not None else None
    else:
        return None
    enabled = keyword_value(call, "enabled")
    if isinstance(enabled, ast.Constant) and enabled.value is False:
        return None
    return kinds


def _device_arguments(call: ast.Call) -> list[ast.expr]:
    """What `call` takes as a device: `torch.device(d)`, `.to(d)` (when `d` is no dtype), `device=d`."""
    found = [kw.value for kw in call.keywords if kw.arg == "device"]
    name = dotted_name(call.func) or ""
    args = positional(call)
    if name in ("torch.device", "device") and args:
        found.append(args[0])
    elif method_name(call) == "to" and args and _device_like(args[0]):
        found.append(args[0])
    return found


def _device_like(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    if isinstance(expr, ast.Call):
        return dotted_name(expr.func) in ("torch.device", "device", *CUDA_CURRENT)
    name = last_part(dotted_name(expr) or "").lower()
    return any(part in name for part in DEVICE_NAME)


def _device_kinds(ctx: File, expr: ast.expr, depth: int) -> set[str | bool] | None:
    """The device strings `expr` may hold ("cuda", "cpu", ... or True for XLA); None when it may be
    anything (a parameter, a call's result, a tensor's `.device`)."""
    if depth > 6:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        kind = expr.value.split(":")[0].strip().lower()
        return {True} if kind == "xla" else ({kind} if kind in OTHER_DEVICES else None)
    if isinstance(expr, ast.JoinedStr) and expr.values and isinstance(expr.values[0], ast.Constant):
        return _device_kinds(ctx, expr.values[0], depth + 1)  # f"cuda:{rank}"
    if isinstance(expr, ast.IfExp):
        body, orelse = _device_kinds(ctx, expr.body, depth + 1), _device_kinds(ctx, expr.orelse, depth + 1)
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, ast.Call):
        if dotted_name(expr.func) in XLA_DEVICE_CALLS:
            return {True}
        if dotted_name(expr.func) in CUDA_CURRENT:
            return {"cuda"}
        if dotted_name(expr.func) in ("torch.device", "device") and positional(expr):
            return _device_kinds(ctx, positional(expr)[0], depth + 1)
        return None
    if isinstance(expr, (ast.Name, ast.Attribute)):
        # every branch's value: `device = "cuda:0" if ... elif ...: "mps" else: "cpu"`
        values = ctx.values_in_scope(expr) if isinstance(expr, ast.Name) else ctx.assigned_values(expr)
        if not values:
            return None
        kinds: set[str | bool] = set()
        for value in values:
            found = _device_kinds(ctx, value, depth + 1)
            if found is None:
                return None
            kinds |= found
        return kinds
    return None
