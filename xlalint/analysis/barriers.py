"""The step model of torch_xla code: where a file's step barriers run, what its step loops iterate,
who owns the step (a compiled step, a framework) and who reduces the gradients. One analysis per
file (`FileContext.barriers`), shared by the optimizer-step (XLA40x) and clipping (XLA50x) rules."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from .guards import ALMOST_ALWAYS, EVERY_N, periodic_polarity, skips_rest
from .index import FUNCTIONS, LOOPS, Function, target_names
from .loaders import moves_batches_by_hand
from .names import (
    dotted_name,
    has_star_args,
    is_constant,
    keyword,
    last_part,
    method_name,
    param_default,
    positional,
    receiver,
    string_value,
)
from .project import passed_device_loader
from .steps import gated_by, is_step_loop, local_callees_of
from .vocabulary import (
    COMPILE_CALLS,
    DEVICE_LOADER,
    EARLY_REDUCTION,
    FRAMEWORK_MODULES,
    GRADIENT_REDUCER_MODULES,
    GRADIENT_REDUCERS,
    ITERABLE_WRAPPERS,
    LATE_REDUCTION,
    NOT_OPTIMIZER,
    OPTIMIZER_CLASS,
    OPTIMIZER_NAME,
    PLAIN_LOADER,
    PREPARE_METHODS,
    REPLICA_LAUNCH,
    RUNTIME_OPTIMIZER_STEP,
    STEP_CONTEXTS,
    SYNC_CALLS,
    SYNC_NAMES,
    WORLD_SIZE,
    XM_OPTIMIZER_STEP,
    XM_REDUCE_GRADIENTS,
)

if TYPE_CHECKING:
    from .file import File

DEVICE_BATCHES, PLAIN_BATCHES, UNKNOWN_BATCHES = "device", "plain", "unknown"  # what a loop's batches come from
MAX_DEPTH = 5


@dataclass(frozen=True)
class StepPath:
    """One way a node runs per step: `top` is the step loop that runs it (through module-local
    calls), or the function / lambda nothing in this file calls; `gates` are the every-N (and other)
    conditions between the node and `top`; `compiled` when it runs in a compiled step."""

    top: ast.AST
    gates: frozenset
    compiled: bool = False

    @property
    def in_loop(self) -> bool:
        return isinstance(self.top, LOOPS)


class StepBarriers:
    """Where a file's step barriers run, what its step loops iterate, and who owns the step."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx
        self._barriers: dict[ast.AST, list[tuple[ast.Call, frozenset]]] = {}
        self._steps: dict[ast.AST, list[tuple[ast.Call, frozenset]]] = {}
        self._loop_kinds: dict[ast.AST, str] = {}
        self._call_sites: dict[ast.AST, list[tuple[ast.Call, int]]] = {}

    # -- barriers --------------------------------------------------------------------------------
    def is_barrier(self, call: ast.Call) -> bool:
        """`call` cuts the step's graph: a sync, `xm.optimizer_step(..., barrier=True)`, the runtime's
        `optimizer_step`, or a wrapper named like one that this file does not define."""
        qualified = self.ctx.qualified_name(call.func) or ""
        if qualified in SYNC_CALLS:
            return True
        if qualified == XM_OPTIMIZER_STEP:
            return barrier_argument(call, default=False) is not False
        if qualified == RUNTIME_OPTIMIZER_STEP:
            return barrier_argument(call, default=True) is not False
        name = last_part(dotted_name(call.func))
        if name in SYNC_NAMES:
            return True
        if name == "sync" and qualified.split(".")[0] in ("torch_xla", "torchax", "xlalint"):
            return True
        if isinstance(call.func, ast.Name) and not call.args and self.aliases_barrier(call.func):
            return True
        # `trainer.optimizer_step()`, `self.optimizer_step()` defined elsewhere: can't tell, assume it cuts
        return (
            name == "optimizer_step"
            and not qualified.startswith(("torch_xla.", "xlalint."))
            and not any(True for _ in local_callees_of(self.ctx, call))
        )

    def aliases_barrier(self, name: ast.Name) -> bool:
        """`name` is bound to a barrier function, not called there: `sync = xm.mark_step`,
        `sync = getattr(torch_xla, "sync", None) or xm.mark_step` (the newer API where there is
        one), with a no-op (`sync = lambda: None`) where torch_xla is missing, which needs no
        barrier. Every value it is assigned is one of those, and one is a barrier."""
        if name.id in self.ctx.index.functions:
            return False  # a function of this module of that name
        kinds = [self._barrier_reference(v) for v in self.ctx.values_in_scope(name)]
        return bool(kinds) and None not in kinds and True in kinds

    def _barrier_reference(self, value: ast.expr) -> bool | None:
        """True for a reference to a barrier function, False for a no-op lambda, else None."""
        if isinstance(value, ast.Lambda):
            body = value.body
            return False if isinstance(body, ast.Constant) and body.value is None else None
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
            kinds = [self._barrier_reference(v) for v in value.values]
            return True if True in kinds and None not in kinds else None
        if isinstance(value, ast.Call) and dotted_name(value.func) == "getattr" and len(value.args) >= 2:
            # `getattr(torch_xla, "sync", None)`: the function, or None where it is missing
            module, attribute = value.args[0], string_value(value.args[1])
            qualified = self.ctx.qualified_name(module) or ""
            return True if attribute is not None and f"{qualified}.{attribute}" in SYNC_CALLS else None
        if isinstance(value, (ast.Name, ast.Attribute)):
            return True if (self.ctx.qualified_name(value) or "") in SYNC_CALLS else None
        return None

    def barriers(self, top: ast.AST) -> list[tuple[ast.Call, frozenset]]:
        """The barrier calls that `top` (a loop or function) runs, directly or through module-local
        functions, with the gates between each and `top`; none in code that never runs on XLA."""
        found = self._barriers.get(top)
        if found is None:
            found = self._barriers[top] = [
                (c, g) for c, g in self._calls_run_by(top) if self.is_barrier(c) and not self.ctx.in_non_xla_code(c)
            ]
        return found

    def optimizer_steps(self, top: ast.AST) -> list[tuple[ast.Call, frozenset]]:
        """The optimizer steps `top` runs (`opt.step()`, `scaler.step(opt)`, `xm.optimizer_step(opt)`),
        with their gates."""
        found = self._steps.get(top)
        if found is None:
            found = self._steps[top] = [(c, g) for c, g in self._calls_run_by(top) if self.is_optimizer_step(c)]
        return found

    def is_optimizer_step(self, call: ast.Call) -> bool:
        if self.ctx.qualified_name(call.func) in (XM_OPTIMIZER_STEP, RUNTIME_OPTIMIZER_STEP):
            return True
        if last_part(dotted_name(call.func)) == "optimizer_step":  # a trainer's own wrapper
            return True
        if method_name(call) != "step":
            return False
        if self.is_optimizer(receiver(call)):
            return True
        first = positional(call)[:1]  # `scaler.step(optimizer)`
        return bool(first) and self.is_optimizer(first[0])

    def calls_run_by(self, top: ast.AST) -> list[tuple[ast.Call, frozenset]]:
        """The calls `top` (a loop or function) runs, directly or through module-local functions,
        with the gates between each and `top`."""
        return self._calls_run_by(top)

    def _calls_run_by(self, top: ast.AST) -> list[tuple[ast.Call, frozenset]]:
        found: list[tuple[ast.Call, frozenset]] = []
        stack: list[tuple[ast.AST, frozenset]] = [(top, frozenset())]
        seen: set[tuple[ast.AST, frozenset]] = set()
        while stack:
            owner, inherited = stack.pop()
            if (owner, inherited) in seen or len(seen) > 200:
                continue
            seen.add((owner, inherited))
            for call in self.ctx.calls_within(owner):
                gates = inherited | self.gates(call, owner)
                found.append((call, gates))
                for func in local_callees_of(self.ctx, call):
                    stack.append((func, gates))
        return found

    def covered(self, path: StepPath) -> bool:
        """A barrier runs on `path` whenever the node does: in a compiled step, or a barrier on the
        same path whose gates are among the node's (`if (i + 1) % k == 0: opt.step(); sync()`)."""
        return path.compiled or any(gates <= path.gates for _, gates in self.barriers(path.top))

    # -- gates -----------------------------------------------------------------------------------
    def gates(self, node: ast.AST, owner: ast.AST) -> frozenset:
        """The conditions between `node` and `owner` under which `node` runs less often than
        `owner`'s body: every-N tests, keyed by their cadence (`("every", "accum")`), and others,
        keyed by position."""
        keys = set()
        child = node
        for anc in self.ctx.index.ancestors(node):
            if gated_by(self.ctx, child, anc):
                keys.add(self._gate_key(child, anc))
            if anc is owner or isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                break
            child = anc
        return frozenset(keys)

    def _gate_key(self, child: ast.AST, parent: ast.AST) -> tuple:
        field = self.ctx.index.field_of(child)
        if isinstance(parent, ast.If):
            polarity = periodic_polarity(parent.test)
            if (field == "body" and polarity == EVERY_N) or (field == "orelse" and polarity == ALMOST_ALWAYS):
                return ("every", _cadence(parent.test))
        if isinstance(parent, ast.BoolOp):
            for value in parent.values:
                if value is child:
                    break
                if periodic_polarity(value) == EVERY_N:
                    return ("every", _cadence(value))
        block = getattr(parent, field or "", None)
        if isinstance(child, ast.stmt) and isinstance(block, list):
            for earlier in block:
                if earlier is child:
                    break
                if (
                    isinstance(earlier, ast.If)
                    and not earlier.orelse
                    and skips_rest(earlier.body)
                    and periodic_polarity(earlier.test) == ALMOST_ALWAYS
                ):
                    return ("every", _cadence(earlier.test))  # `if (i + 1) % k: continue`
        return ("other", self.ctx.index.order.get(parent, 0), field)

    # -- the loops that run a node -------------------------------------------------------------------
    def paths(self, node: ast.AST, acted_on: set[str] | frozenset[str] = frozenset()) -> list[StepPath]:
        """The step loops that run `node`: up to the innermost step loop around it, and from a
        function to its call sites in this module. A loop over the very objects `node` acts on
        (`for opt in optimizers: opt.step()`) is no step loop of its own."""
        found: list[StepPath] = []
        pending: list[tuple[ast.AST, frozenset, bool]] = [(node, frozenset(), True)]
        seen: set[ast.AST] = set()
        while pending:
            start, gates, first = pending.pop()
            if start in seen or len(seen) > 100:
                continue
            seen.add(start)
            if self.compiled_context(start):
                found.append(StepPath(start, gates, compiled=True))
                continue
            top: ast.For | ast.AsyncFor | ast.While | Function | ast.Lambda | None = None
            child = start
            for anc in self.ctx.index.ancestors(start):
                if gated_by(self.ctx, child, anc):
                    gates = gates | {self._gate_key(child, anc)}
                field = self.ctx.index.field_of(child)
                if (
                    isinstance(anc, LOOPS)
                    and (field == "body" or (field == "test" and isinstance(anc, ast.While)))
                    and is_step_loop(self.ctx, anc)
                    and not (first and _iterates_names(anc, acted_on))
                ):
                    top = anc
                    break
                if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                    top = anc
                    break
                child = anc
            if top is None or isinstance(top, (*LOOPS, ast.Lambda)):
                found.append(StepPath(top if top is not None else self.ctx.tree, gates))
                continue
            sites = [site for site, _ in self.call_sites(top)]
            if not sites:
                found.append(StepPath(top, gates))
            pending.extend((site, gates, False) for site in sites)
        return found

    def call_sites(self, func: Function) -> list[tuple[ast.Call, int]]:
        """Calls of `func` in this module (`f(...)`, `self.f(...)`, `Cls(...)` for `__init__`), each
        with the number of leading parameters the call does not pass (`self`)."""
        found = self._call_sites.get(func)
        if found is None:
            found = self._call_sites[func] = self._find_call_sites(func)
        return found

    def _find_call_sites(self, func: Function) -> list[tuple[ast.Call, int]]:
        index = self.ctx.index
        cls = index.enclosing_class(func)
        if func.name == "__init__" and cls is not None:
            return [(c, 1) for c in index.calls if last_part(dotted_name(c.func)) == cls.name]
        method = cls is not None and not any(dotted_name(d) == "staticmethod" for d in func.decorator_list)
        sites = []
        for call in index.calls:
            called = dotted_name(call.func)
            if not called:
                continue
            parts = called.split(".")
            if parts[-1] != func.name:
                continue
            if len(parts) == 1:
                sites.append((call, 0))
            elif len(parts) == 2 and parts[0] in ("self", "cls"):
                sites.append((call, 1 if method else 0))
        return sites

    # -- compiled steps ---------------------------------------------------------------------------
    def compiled_context(self, node: ast.AST) -> bool:
        """Inside `with torch_xla.step():` (or a profiler `StepTrace`), or a function compiled with
        `torch_xla.compile` or `torch.compile(..., backend="openxla")` (as a decorator or by name)."""
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)):
                for item in anc.items:
                    call = item.context_expr
                    if isinstance(call, ast.Call) and self.ctx.qualified_name(call.func) in STEP_CONTEXTS:
                        return True
            if isinstance(anc, FUNCTIONS):
                for decorator in anc.decorator_list:
                    if self._compiles(decorator):
                        return True
                if anc.name in self._compiled_names:
                    return True
        return False

    def _compiles(self, expr: ast.expr) -> bool:
        """`torch_xla.compile` / `torch.compile(backend="openxla")`, bare or called (a decorator)."""
        call = expr if isinstance(expr, ast.Call) else None
        qualified = self.ctx.qualified_name(call.func if call else expr)
        if qualified in COMPILE_CALLS:
            return True
        if qualified == "torch.compile" and call is not None:
            backend = string_value(_keyword_value(call, "backend"))
            return backend is not None and backend.startswith("openxla")
        return False

    @cached_property
    def _compiled_names(self) -> set[str]:
        """Functions passed to `torch_xla.compile(f)` / `torch.compile(f, backend="openxla")`."""
        names = set()
        for call in self.ctx.index.calls:
            if self._compiles(call) and call.args:
                name = last_part(dotted_name(call.args[0]))
                if name:
                    names.add(name)
        return names

    # -- what a loop iterates ------------------------------------------------------------------------
    def loop_kind(self, loop: ast.AST) -> str:
        """DEVICE_BATCHES when the loop's batches come from a device loader (which syncs at every batch), or
        one a framework prepared; PLAIN_BATCHES when from a host loader, `range`, or nothing; else UNKNOWN_BATCHES.
        `next(it)` in the body counts as iterating `it`."""
        kind = self._loop_kinds.get(loop)
        if kind is None and self._inner_steps(loop):
            kind = self._loop_kinds[loop] = UNKNOWN_BATCHES
        if kind is None:
            kinds = [self.loader_kind(loop.iter)] if isinstance(loop, (ast.For, ast.AsyncFor)) else [PLAIN_BATCHES]
            for call in self.ctx.calls_within(loop):
                if dotted_name(call.func) == "next" and call.args:
                    kinds.append(self.loader_kind(call.args[0]))
                elif method_name(call) in ("next", "__next__") and not call.args:
                    kinds.append(self.loader_kind(receiver(call)))
            kind = _combine(kinds)
            if kind == UNKNOWN_BATCHES and not self.has_device_loader and moves_batches_by_hand(self.ctx, loop):
                kind = PLAIN_BATCHES  # the batches moved to the device by hand come from a host loader
            self._loop_kinds[loop] = kind
        return kind

    def _inner_steps(self, loop: ast.AST) -> bool:
        """`for d_step in range(n):` inside a step function, or inside a nested function handed to
        its caller (`def train(x, y): ...; return train`): steps within one batch, whose barrier
        is the business of the loop that calls the function."""
        if not (
            isinstance(loop, (ast.For, ast.AsyncFor))
            and isinstance(loop.iter, ast.Call)
            and dotted_name(loop.iter.func) == "range"
        ):
            return False
        func = self.ctx.index.enclosing_function(loop)
        return func is not None and (
            self.ctx.is_step_function(func) or self.ctx.index.enclosing_function(func) is not None
        )

    def loader_kind(self, expr: ast.expr | None, depth: int = 0) -> str:
        if expr is None or depth > MAX_DEPTH:
            return UNKNOWN_BATCHES
        if isinstance(expr, ast.Call):
            called = dotted_name(expr.func)
            name = last_part(called)
            if DEVICE_LOADER.match(name) or self.framework_prepared(expr):
                return DEVICE_BATCHES
            if called == "range" or PLAIN_LOADER.match(name):
                return PLAIN_BATCHES
            if name in ITERABLE_WRAPPERS:
                args = [a for a in expr.args if not isinstance(a, ast.Starred)]
                kinds = [self.loader_kind(a, depth + 1) for a in (args if name in ("zip", "chain") else args[:1])]
                return _combine(kinds) if kinds else UNKNOWN_BATCHES
            callees = list(local_callees_of(self.ctx, expr))
            if callees:  # a loader built by a function of this module: what it returns
                returned = [
                    r.value
                    for f in callees
                    for r in ast.walk(f)
                    if isinstance(r, ast.Return) and r.value is not None and self.ctx.index.enclosing_function(r) is f
                ]
                return _combine([self.loader_kind(v, depth + 1) for v in returned]) if returned else UNKNOWN_BATCHES
            if isinstance(expr.func, ast.Attribute):
                # `metric_logger.log_every(loader, ...)`: a method around a loader it is given
                if any(self.loader_kind(a, depth + 1) == DEVICE_BATCHES for a in expr.args[:2]):
                    return DEVICE_BATCHES
            return UNKNOWN_BATCHES
        if isinstance(expr, ast.IfExp):
            # `pl.MpDeviceLoader(loader, device) if xla else loader`
            return _combine([self.loader_kind(expr.body, depth + 1), self.loader_kind(expr.orelse, depth + 1)])
        if isinstance(expr, (ast.Name, ast.Attribute)):
            if isinstance(expr, ast.Name) and (
                self._data_parallel_loader(expr) or passed_device_loader(self.ctx, expr)
            ):
                return DEVICE_BATCHES
            values = self.values(expr)
            return _combine([self.loader_kind(v, depth + 1) for v in values]) if values else UNKNOWN_BATCHES
        return UNKNOWN_BATCHES

    def _data_parallel_loader(self, name: ast.Name) -> bool:
        """The loader parameter of a function run by torch_xla's threaded `dp.DataParallel`, which
        calls `loop_fn(model, device_loader, device, context)` with a `per_device_loader`."""
        param = self.ctx.parameter(name)
        if param is None or self.ctx.reaching_values(name):
            return False
        func = self.ctx.index.parent(self.ctx.index.parent(param))
        if not isinstance(func, FUNCTIONS):
            return False
        params = [*func.args.posonlyargs, *func.args.args]
        if param not in params or params.index(param) != 1:
            return False
        for call in self.ctx.index.calls:
            args = positional(call)
            if (
                args
                and last_part(dotted_name(args[0])) == func.name
                and any(
                    isinstance(v, ast.Call)
                    and self.ctx.qualified_name(v.func) == "torch_xla.distributed.data_parallel.DataParallel"
                    for v in self.values(call.func)
                )
            ):
                return True
        return False

    def values(self, expr: ast.expr, depth: int = 0) -> list[ast.expr]:
        """What `expr` (a name or `self.x`) may hold: its assignments in this file, and for a
        parameter, what the module's call sites pass (or its default)."""
        if depth > MAX_DEPTH:
            return []
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return []
        values = self.ctx.assigned_values(expr)
        if values or not isinstance(expr, ast.Name):
            return self._leaves(values, depth)
        param = self.ctx.parameter(expr)
        if param is None:
            return []
        func = self.ctx.index.parent(self.ctx.index.parent(param))
        if not isinstance(func, FUNCTIONS):
            return []
        found: list[ast.expr] = []
        params = [*func.args.posonlyargs, *func.args.args]
        for site, skipped in self.call_sites(func):
            value = _keyword_value(site, param.arg)
            if value is None and param in params:
                args = positional(site)
                position = params.index(param) - skipped
                if 0 <= position < len(args):
                    value = args[position]
            if value is None and not has_star_args(site):
                value = param_default(func, param)
            if value is not None:
                found.append(value)
        return self._leaves(found, depth)

    def _leaves(self, values: list[ast.expr], depth: int) -> list[ast.expr]:
        """Names among `values` replaced by what they hold (dropped when that is unknown), and both
        sides of a conditional."""
        if depth > MAX_DEPTH:
            return []
        leaves: list[ast.expr] = []
        for value in values:
            if isinstance(value, ast.IfExp):  # `A(...) if c else B(...)`: either
                leaves.extend(self._leaves([value.body, value.orelse], depth + 1))
                continue
            if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):  # `given or A(...)`
                leaves.extend(self._leaves(value.values, depth + 1))
                continue
            inner = value.value if isinstance(value, ast.Subscript) else value
            if isinstance(inner, (ast.Name, ast.Attribute)) and not _is_self(inner):
                leaves.extend(self.values(value, depth + 1))
            else:
                leaves.append(value)
        return leaves

    # -- the frameworks that own the barrier ---------------------------------------------------------
    @cached_property
    def imports_framework(self) -> bool:
        return any(_framework_name(b.qualified) for b in self.ctx.index.imports.values())

    def framework_object(self, expr: ast.expr | None) -> bool:
        """An `Accelerator` / `Fabric` (or another object of those frameworks), by its construction
        in this file; when nothing here assigns it, any object of a file that imports them."""
        if expr is None:
            return False
        if _framework_name(self.ctx.qualified_name(expr)):
            return True
        values = self.values(expr)
        if any(isinstance(v, ast.Call) and _framework_name(self.ctx.qualified_name(v.func)) for v in values):
            return True
        return not values and self.imports_framework and not isinstance(expr, ast.Call)

    def framework_prepared(self, call: ast.Call) -> bool:
        """`accelerator.prepare(...)`, `fabric.setup_dataloaders(...)`: handed back by a framework."""
        return method_name(call) in PREPARE_METHODS and self.framework_object(receiver(call))

    def framework_owns(self, optimizer: ast.expr) -> bool:
        """The optimizer was prepared by accelerate / Fabric, or is a Lightning module's own
        (`self.optimizers()`); when nothing in this file assigns it, any optimizer of a file that
        imports those frameworks."""
        values = self.values(optimizer)
        for value in values:
            if isinstance(value, ast.Subscript):
                value = value.value
            if isinstance(value, ast.Call) and (
                self.framework_prepared(value)
                or (method_name(value) == "optimizers" and self.in_framework_class(value))
            ):
                return True
        return not values and self.imports_framework

    def in_framework_class(self, node: ast.AST) -> bool:
        """In a class derived (in this file) from a Lightning class: `LightningModule`, `Callback`."""
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, ast.ClassDef) and self._framework_class(anc, 0):
                return True
        return False

    def _framework_class(self, cls: ast.ClassDef, depth: int) -> bool:
        if depth > MAX_DEPTH:
            return False
        for base in cls.bases:
            if _framework_name(self.ctx.qualified_name(base)):
                return True
            name = dotted_name(base)
            for local in self.ctx.index.of_type(ast.ClassDef):
                if local.name == name and local is not cls and self._framework_class(local, depth + 1):
                    return True
        return False

    @cached_property
    def has_device_loader(self) -> bool:
        """A device loader (or a framework-prepared object) is built somewhere in this file's XLA
        code: where a loop's loader can't be traced, it may well be that one."""
        return any(
            (DEVICE_LOADER.match(last_part(dotted_name(c.func))) or self.framework_prepared(c))
            and not self.ctx.in_non_xla_code(c)
            for c in self.ctx.index.calls
        )

    @cached_property
    def has_per_step_barrier(self) -> bool:
        return any(
            self.is_barrier(c) and self.ctx.is_per_step(c, periodic=True) and not self.ctx.in_non_xla_code(c)
            for c in self.ctx.index.calls
        )

    # -- gradient reduction ------------------------------------------------------------------------------
    def gradient_reducer(self, optimizer: ast.expr | None, paths: list[StepPath]) -> str | None:
        """What already reduces this optimizer's gradients: a ZeRO optimizer, `xm.reduce_gradients`
        on the step's path, or DDP / FSDP / FSDPv2 / SPMD set up in this file's XLA code."""
        for value in self.values(optimizer) if optimizer is not None else ():
            if isinstance(value, ast.Call) and self._reducer(value) == "ZeRO":
                return "ZeRO"
        for path in paths:
            if any(self.ctx.qualified_name(c.func) == XM_REDUCE_GRADIENTS for c, _ in self._calls_run_by(path.top)):
                return "`xm.reduce_gradients`"
        for call in self.ctx.index.calls:
            what = self._reducer(call)
            if what and not self.ctx.in_non_xla_code(call):
                return what
        return None

    def _reducer(self, call: ast.Call) -> str | None:
        qualified = self.ctx.qualified_name(call.func) or ""
        if qualified.split(".")[0] not in ("torch", "torch_xla"):
            return None
        return GRADIENT_REDUCERS.get(last_part(qualified))

    # -- who reduces the gradients, and when -----------------------------------------------------------
    @cached_property
    def replicated_data_parallel(self) -> bool:
        """The file runs several replicas of a data-parallel step (it launches them, feeds each its own
        device loader, or asks how many; or a module of the project that launches replicas calls it),
        and no wrapper owns the gradient reduction: none of `GRADIENT_REDUCERS` is named and none of
        `GRADIENT_REDUCER_MODULES` imported, anywhere in it."""
        index = self.ctx.index
        owned = bool(GRADIENT_REDUCERS.keys() & index.all_names) or any(
            b.qualified == m or b.qualified.startswith(m + ".")
            for b in index.imports.values()
            for m in GRADIENT_REDUCER_MODULES
        )
        return not owned and (self.ctx.project.replicas or any(self._replicas(call) for call in index.calls))

    def _replicas(self, call: ast.Call) -> bool:
        qualified = self.ctx.qualified_name(call.func)
        return (
            qualified in REPLICA_LAUNCH
            or qualified in WORLD_SIZE
            or bool(DEVICE_LOADER.match(last_part(dotted_name(call.func)) or method_name(call) or ""))
        )

    def late_reduction(self, node: ast.Call) -> ast.Call | None:
        """The optimizer step that reduces the gradients (`xm.optimizer_step(...)`) after `node` in the
        same step, when no reduction (`xm.reduce_gradients`, an all-reduce) runs before `node`."""
        scope = self.ctx.index.scope_of(node)
        if isinstance(scope, ast.Lambda):
            return None
        order = self.ctx.index.order
        calls = self.ctx.calls_within(scope)
        if any(order[c] < order[node] and self.ctx.qualified_name(c.func) in EARLY_REDUCTION for c in calls):
            return None
        for call in calls:
            if (
                order[call] > order[node]
                and self.ctx.qualified_name(call.func) in LATE_REDUCTION
                and self.same_step(node, call)
            ):
                return call
        return None

    def same_step(self, first: ast.AST, second: ast.AST) -> bool:
        """`second` runs after `first` in the same step: not in another branch of an `if`/`try`, and
        neither sits in a step loop of its own that the other is outside of."""
        around_second = set(self.ctx.index.ancestors(second))
        below, common = first, None
        for anc in self.ctx.index.ancestors(first):
            if anc in around_second:
                common = anc
                break
            below = anc
        if common is None:
            return False
        other = next(a for a in [second, *self.ctx.index.ancestors(second)] if self.ctx.parent(a) is common)
        fields = self.ctx.index.field_of(below), self.ctx.index.field_of(other)
        if isinstance(common, (ast.If, ast.IfExp)) and fields[0] != fields[1]:
            return False
        if isinstance(below, (ast.ExceptHandler, ast.match_case)) or isinstance(
            other, (ast.ExceptHandler, ast.match_case)
        ):
            return False
        for node in (first, second):
            for anc in self.ctx.index.ancestors(node):
                if anc is common:
                    break
                if isinstance(anc, LOOPS) and is_step_loop(self.ctx, anc):
                    return False
        return True

    # -- receivers -------------------------------------------------------------------------------------
    def is_optimizer(self, recv: ast.expr | None) -> bool:
        base = recv.value if isinstance(recv, ast.Subscript) else recv  # optimizers[i].step()
        name = dotted_name(base)
        if base is None or not name:
            return False
        last = last_part(name)
        if NOT_OPTIMIZER.search(last):
            return False
        for value in self.ctx.assigned_values(base):
            if isinstance(value, ast.Call):
                qualified = self.ctx.qualified_name(value.func) or ""
                if qualified.startswith("torch.optim.lr_scheduler") or NOT_OPTIMIZER.search(last_part(qualified)):
                    return False
                if qualified.startswith("torch.optim.") or OPTIMIZER_CLASS.match(last_part(qualified)):
                    return True
        return bool(OPTIMIZER_NAME.search(last))


def _combine(kinds: list[str]) -> str:
    if DEVICE_BATCHES in kinds:
        return DEVICE_BATCHES
    if kinds and all(k == PLAIN_BATCHES for k in kinds):
        return PLAIN_BATCHES
    return UNKNOWN_BATCHES


def _framework_name(qualified: str | None) -> bool:
    return qualified is not None and qualified != "" and qualified.split(".")[0] in FRAMEWORK_MODULES


def _is_self(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id in ("self", "cls")


def _keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    found = keyword(call, name)
    return found.value if found is not None else None


def _cadence(test: ast.expr) -> str:
    """What an every-N test counts in: the modulus of `step % N` (whatever the phase), else the test
    itself without its negations (`should_log`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return ast.dump(node.right)
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return ast.dump(test)


def _iterates_names(loop: ast.AST, names: set[str] | frozenset[str]) -> bool:
    return isinstance(loop, (ast.For, ast.AsyncFor)) and bool(names & set(target_names(loop.target)))


def names_in(expr: ast.AST | None) -> set[str]:
    """The names an object is reached through: `opt` for `opt`, `self.opt`'s `self`, `opts` and `i` for
    `opts[i]`; none for a computed value (`model(x).loss`)."""
    if isinstance(expr, ast.Subscript):
        return names_in(expr.value) | {n.id for n in ast.walk(expr.slice) if isinstance(n, ast.Name)}
    name = dotted_name(expr)
    return {name.split(".")[0]} if name else set()


def barrier_argument(call: ast.Call, *, default: bool):
    """`optimizer_step(opt, barrier=...)`: True/False when written as a constant or absent (`default`),
    None when it can't be told (a variable, `*args`, `**kwargs`)."""
    value = _keyword_value(call, "barrier")
    if value is None:
        args = positional(call)
        if len(args) > 1:
            value = args[1]
        elif has_star_args(call):
            return None
        else:
            return default
    if is_constant(value, True):
        return True
    if is_constant(value, False):
        return False
    return None
