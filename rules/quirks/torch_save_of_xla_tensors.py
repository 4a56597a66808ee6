"""XLA701 torch-save-of-xla-tensors: Flags `torch.save(obj, f)` in torch_xla code when `obj` is, or
evidently contains, tensors on the XLA device."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.names import (dotted_name, keyword_value, last_part, method_name, positional, receiver,
                                    string_value)
from xlalint.analysis.steps import DEVICE_LOADER
from xlalint.analysis.tensors import FACTORIES, LIKE_FACTORIES
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


XM = "torch_xla.core.xla_model"
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
MODULE_METHODS = {"parameters", "named_parameters", "state_dict", "load_state_dict", "train", "eval", "modules",
                  "children", "named_modules", "zero_grad", "register_forward_hook", "apply"}
# Methods whose result holds the receiver's parameters, state or storage, on its device.
SAME_PLACE = {"state_dict", "parameters", "named_parameters", "buffers", "named_buffers", "detach", "clone",
              "float", "half", "bfloat16", "double", "contiguous", "values", "items"}
MAX_DEPTH = 16  # expression levels followed (names, calls, containers), cycles aside


def _any(results) -> bool | None:
    """True if one of `results` is, False if all are False (and there is one), else None."""
    results = list(results)
    if any(r is True for r in results):
        return True
    return False if results and all(r is False for r in results) else None


def _device_string(text: str) -> bool | None:
    kind = text.split(":")[0].strip().lower()
    if kind == "xla":
        return True
    return False if kind in OTHER_DEVICES else None


class TorchSaveOfXlaTensors(Rule):
    """## What it does
    Flags `torch.save(obj, f)` in torch_xla code when `obj` is, or evidently contains, tensors on the
    XLA device: tensors moved there with `.to(device)` or created there (`device=...`), or the
    `state_dict()` of a model (or of an optimizer over the parameters of a model) that lives there.
    The device counts as XLA when it comes from `torch_xla.device()` / `xm.xla_device()` or is an
    `"xla"` device string.

    ## Why is this bad?
    torch_xla's troubleshooting guide ("XLA Tensor Quirks") says XLA tensors should be moved to the CPU
    before saving: saved directly, they are loaded back onto the device(s) they were saved from, so
    loading fails where that device is unavailable (a machine without TPUs, a CPU evaluation job),
    and the caller cannot choose where the loaded tensors go. torch pickles each XLA tensor through
    its own `self.cpu()` copy and rebuilds it with `.to(<saved device>)` at load time
    (`_rebuild_device_tensor_from_cpu_tensor`; recent torch lets a `map_location` given to
    `torch.load` override that device, if the loader knows to pass one). `xm.save` moves everything
    to the CPU first, with one wait and one batched transfer for all the tensors.

    `torch.save` of CPU data (`{k: v.cpu() for k, v in sd.items()}`, plain numbers) is fine and not
    reported.

    ## Example
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = Net().to(device)
    train(model)
    torch.save(model.state_dict(), "model.pt")
    ```

    Use instead:
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = torch_xla.device()
    model = Net().to(device)
    train(model)
    xm.save(model.state_dict(), "model.pt")  # CPU tensors; only the master ordinal writes
    ```

    ## Fix safety
    The fix calls `xm.save(obj, f, master_only=False)` (importing `torch_xla.core.xla_model as xm`
    when needed), for calls with exactly the two positional arguments whose XLA tensors are state
    dicts or plain tensors (not a module saved whole, whose `nn.Parameter`s `xm.save` would leave on
    the device). `master_only=False` keeps who writes:
    every process that runs the call writes, as with `torch.save`. `xm.save`'s default,
    `master_only=True`, writes only on each host's master ordinal, which silently drops per-replica
    and sharded checkpoints (FSDP shards saved to a path per rank); when only one replica should
    write, keep the call under `if xm.is_master_ordinal():` or drop `master_only=False` yourself.

    The fix is unsafe: the file then holds CPU tensors, so `torch.load` returns CPU tensors instead of
    tensors on the XLA device (`load_state_dict` copies either way, but code that uses loaded tensors
    directly with XLA tensors needs a `.to(device)`). `xm.save` also rebuilds the containers it walks:
    every dict becomes a plain `dict` (a state dict loses its `OrderedDict` type and its `_metadata`
    of module versions), tuples become lists, objects are shallow-copied, and only plain tensors are
    moved (`type(v) == torch.Tensor`): an `nn.Parameter` inside a saved object stays an XLA tensor.

    ## References
    - [Troubleshooting, "XLA Tensor Quirks" (v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md#xla-tensor-quirks):
      "XLA tensors should be moved to the CPU before saving them"
    - [PyTorch on XLA devices, "Saving and Loading XLA Tensors" (v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/pytorch-on-xla-devices.md#saving-and-loading-xla-tensors)
    - `torch_xla/core/xla_model.py` at v2.9.0: `save`, `_maybe_convert_to_cpu`
    - `torch/_tensor.py` (`Tensor._reduce_ex_internal`, the `"xla"` device branch)
    """

    code, name, category = "XLA701", "torch-save-of-xla-tensors", "other"
    summary = "`torch.save` of tensors on the XLA device: they load back only onto that device"
    hint = "move them to the CPU first, or save with `xm.save(obj, path)` (master ordinal only by default)"
    xla_only = True
    fix_availability = "sometimes"
    not_for_targets = ("torchtpu",)  # its fix writes `xm.save`, which TPU108 moves away from

    VALID = [
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            model = Net().to(device)
            torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "model.pt")
            torch.save({"epoch": epoch, "step": step, "best_accuracy": 0.91}, "progress.pt")
            """
        ),
        Valid(
            """
            import torch_xla

            model = Net()  # never moved to the XLA device
            torch.save(model.state_dict(), "init.pt")
            """
        ),
        Valid(
            """
            import torch_xla

            device = torch_xla.device()
            model.to(device)
            train(model)
            model.cpu()
            torch.save(model.state_dict(), "model.pt")
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = Net().to(device)
            torch.save(model.state_dict(), "model.pt")
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = xm.xla_device()
            model = Net().to(device)
            if device.type == "cuda":
                torch.save(model.state_dict(), "model.pt")
            else:
                xm.save(model.state_dict(), "model.pt")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla

            device = torch_xla.device()
            model = Net().to(device)
            train(model)
            torch.save(model.state_dict(), "model.pt")
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            model = Net().to(device)
            train(model)
            xm.save(model.state_dict(), "model.pt", master_only=False)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            def save_checkpoint(model, optimizer, epoch, path):
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    path,
                )

            def _mp_fn(index):
                device = xm.xla_device()
                model = Net()
                model.to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                for epoch in range(3):
                    train_epoch(model, optimizer)
                    save_checkpoint(model, optimizer, epoch, f"ckpt-{index}-{epoch}.pt")
            """,
            line=5,
            expected_replacement="""
            import torch
            import torch_xla.core.xla_model as xm

            def save_checkpoint(model, optimizer, epoch, path):
                xm.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                    path,
                    master_only=False,
                )

            def _mp_fn(index):
                device = xm.xla_device()
                model = Net()
                model.to(device)
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                for epoch in range(3):
                    train_epoch(model, optimizer)
                    save_checkpoint(model, optimizer, epoch, f"ckpt-{index}-{epoch}.pt")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            embeddings = torch.randn(1000, 64, device="xla")
            torch.save(embeddings, "embeddings.pt", pickle_protocol=4)  # extra arguments: no fix
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch.save":
            return
        args = positional(node)
        obj = args[0] if args else keyword_value(node, "obj")
        if obj is None or _Placement(self.ctx).of(obj) is not True or self.ctx.in_non_xla_code(node):
            return
        exact = len(node.args) == 2 and len(args) == 2 and not node.keywords and self._moved_by_xm_save(obj)
        self.report(node, fix=(lambda cctx: _use_xm_save(cctx, node)) if exact else None)

    def _moved_by_xm_save(self, obj: ast.expr, depth: int = 0) -> bool:
        """Every XLA tensor `obj` evidently holds is a state dict's or a plain tensor: `xm.save` moves
        only objects of type `torch.Tensor` (not the `nn.Parameter`s of a module saved whole)."""
        if depth > 3:
            return False
        if isinstance(obj, ast.Dict):
            return all(self._moved_by_xm_save(v, depth + 1) for v in obj.values)
        if isinstance(obj, (ast.List, ast.Tuple, ast.Set)):
            return all(self._moved_by_xm_save(e, depth + 1) for e in obj.elts)
        if _Placement(self.ctx).of(obj) is not True:
            return True
        if isinstance(obj, ast.Call) and method_name(obj) == "state_dict":
            return True
        if isinstance(obj, ast.Name):
            values = self.ctx.reaching_values(obj)
            if len(values) == 1 and isinstance(values[0], (ast.Dict, ast.List, ast.Tuple, ast.DictComp)):
                return self._moved_by_xm_save(values[0], depth + 1)
        if isinstance(obj, ast.DictComp):
            return True  # built of its values: plain tensors unless they are parameters themselves
        return not self._is_module(obj)

    def _is_module(self, obj: ast.expr) -> bool:
        """`obj` is used as a module somewhere in the file: called, or asked for its parameters."""
        name = dotted_name(obj)
        return bool(name) and any(
            dotted_name(call.func) == name or
            method_name(call) in MODULE_METHODS and dotted_name(receiver(call)) == name
            for call in self.ctx.index.calls)


class _Placement:
    """Whether an expression's tensors live on the XLA device: True, False (evidently elsewhere), or
    None (unknown)."""

    def __init__(self, ctx) -> None:
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
            targets = [t for t in [keyword_value(call, "device"), *args[:1]] if t is not None]
            for target in targets:
                device = self.device(target, depth)
                if device is not None:
                    return device
            return self.of(receiver(call), depth)  # `.to(dtype)`: where the receiver is
        if method in SAME_PLACE:
            return self.of(receiver(call), depth)
        if qualified.startswith("torch."):
            tail = last_part(qualified)
            device = keyword_value(call, "device")
            if device is not None:  # `torch.randn(n, device=d)`, `nn.Linear(4, 4, device=d)`
                return self.device(device, depth)
            if tail in FACTORIES:
                return False  # created on the CPU
            if tail in LIKE_FACTORIES:
                return self.of(args[0], depth) if args else None
            return _any(self.of(a, depth) for a in args)  # `torch.stack(ts)`, `torch.optim.SGD(model.parameters())`
        # an optimizer (or anything) built over a model's parameters holds state where they are
        parameters = [n for a in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(a)
                      if isinstance(n, ast.Call) and method_name(n) in ("parameters", "named_parameters")]
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
        return [c for c in calls if method_name(c) in MOVES and isinstance(self.ctx.parent(c), ast.Expr)
                and dotted_name(receiver(c)) == name]

    def _elements(self, iterable: ast.expr, depth: int) -> bool | None:
        """Where the items of `for x in iterable` live."""
        if isinstance(iterable, ast.Call) and DEVICE_LOADER.match(last_part(dotted_name(iterable.func))
                                                                  or method_name(iterable) or ""):
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
            return _device_string(head.value) if isinstance(head, ast.Constant) and isinstance(head.value, str) \
                else None
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


def _use_xm_save(cctx: CstContext, node: ast.Call) -> Fix | None:
    call = cctx.locate(node)
    if call is None or len(call.args) != 2:
        return None
    module, imports = _xla_model(cctx, call)
    first, last = call.args
    keyword = cctx.parse_expression("f(master_only=False)").args[0]
    # the new argument takes the last one's comma (a trailing comma, its line break before `)`), and
    # the last one the comma after the first (the spacing between arguments)
    args = [first, last.with_changes(comma=first.comma), keyword.with_changes(comma=last.comma)]
    replacement = call.with_changes(func=cctx.parse_expression(f"{module}.save"), args=args)
    return Fix.replace(call, replacement, title=f"Use `{module}.save(..., master_only=False)` (saves CPU tensors)",
                       safe=False, imports=imports)


def _xla_model(cctx: CstContext, call: cst.Call) -> tuple[str, list[ImportRequest]]:
    """How the fixed call spells `torch_xla.core.xla_model`, and the import it needs."""
    bound = cctx.bound_name(XM, call)
    if bound is not None:
        return bound, []
    beside = next((b.name for b in cctx.index.import_bindings
                   if b.qualified.split(".")[0] == "torch_xla" and isinstance(b.scope, cst.Module)), None)
    if "xm" not in cctx.index.bare_names:
        return "xm", [ImportRequest(XM, asname="xm", beside=beside)]
    return XM, [ImportRequest(XM, beside=beside)]
