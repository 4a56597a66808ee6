"""Optimizer steps on XLA: the per-step barrier, and the gradient all-reduce.

Two concerns that the rules below keep apart:

- The *step barrier* (`torch_xla.sync()` / `xm.mark_step()`, `xm.optimizer_step(opt, barrier=True)`,
  a device loader (`MpDeviceLoader`, `ParallelLoader(...).per_device_loader(device)`) that syncs at
  every batch, `torch_xla.step()` / `torch_xla.compile`) must run every step, or the lazy graph grows
  across steps. HF accelerate (its prepared data loader is an `MpDeviceLoader`) and Lightning own it
  for the loops they drive.
- The *gradient reduction* across replicas: `xm.optimizer_step` / `xm.reduce_gradients` do it; DDP,
  XLA FSDP / FSDPv2, ZeRO and SPMD do it themselves, and none of them adds the barrier.
"""

from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.analysis.guards import ALMOST_ALWAYS, EVERY_N, periodic_polarity, skips_rest, words
from xlalint.analysis.index import FUNCTIONS, LOOPS, target_names
from xlalint.analysis.names import (dotted_name, function_params, has_star_args, is_constant, keyword, last_part,
                                    method_name, param_default, positional, receiver, string_value)
from xlalint.analysis.steps import DEVICE_LOADER, gated_by, is_step_loop, local_callees_of
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

# Receivers named like an optimizer (`optimizer`, `self.opt`, `g_optim`, `optimizers[0]`).
OPTIMIZER_NAME = re.compile(r"(^|_)(optim|optimizer|optimiser|opt)s?$|optimi[sz]er", re.I)
# ... but never these: they have a `.step()` of their own that is not an optimizer step.
NOT_OPTIMIZER = re.compile(r"sched|lr|prof|ema|swa|scaler|warmup|averag|plateau|callback|hook", re.I)
# Optimizer classes outside `torch.optim` (timm, transformers, apex, bitsandbytes, ...).
OPTIMIZER_CLASS = re.compile(
    r"^(SGD|ASGD|Adam|AdamW|Adamax|NAdam|RAdam|Adagrad|Adadelta|Adafactor|RMSprop|Rprop|LBFGS|Lamb|Lars|"
    r"Lion|Adan|SparseAdam|FusedAdam|FusedLAMB|\w*Optimizer)$"
)

XM_OPTIMIZER_STEP = "torch_xla.core.xla_model.optimizer_step"
XM_REDUCE_GRADIENTS = "torch_xla.core.xla_model.reduce_gradients"
RUNTIME_OPTIMIZER_STEP = "xlalint.runtime.optimizer_step"
# Calls that cut the step's graph wherever they run (`torch_xla.step()` as the call of a `with`).
SYNC_CALLS = {
    "torch_xla.sync",
    "torch_xla.step",
    "torch_xla.debug.profiler.StepTrace",
    "torch_xla.compile",
    "torch_xla.core.xla_model.mark_step",
    "xlalint.runtime.sync",
}
# Spelled through a wrapper or a differently named import: judged by the called name alone.
SYNC_NAMES = {"mark_step", "xla_sync", "sync_xla"}
# Run inside one of these, a step is cut by the compiled program's own execution.
COMPILE_CALLS = {"torch_xla.compile", "torch_xla.step", "torch_xla.experimental.compile"}
# ... and blocks under these `with`s end in a sync (`StepTrace.__exit__` calls `torch_xla.sync()`).
STEP_CONTEXTS = COMPILE_CALLS | {"torch_xla.debug.profiler.StepTrace"}
# The frameworks that own the step barrier of the loops they drive: the data loader accelerate
# prepares for XLA is an `MpDeviceLoader`; Lightning's XLA strategy wraps the loader the same way.
FRAMEWORK_MODULES = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric")
# The methods through which they hand back the objects they manage.
PREPARE_METHODS = {"prepare", "prepare_optimizer", "prepare_data_loader", "setup", "setup_optimizers",
                   "setup_dataloaders"}
# Wrappers that reduce the gradients themselves (and never add a barrier), by the name of what is
# called in torch / torch_xla; the value names them in messages.
GRADIENT_REDUCERS = {
    "DistributedDataParallel": "DDP",
    "XlaFullyShardedDataParallel": "XLA FSDP",
    "FullyShardedDataParallel": "FSDP",
    "fully_shard": "FSDP",
    "SpmdFullyShardedDataParallel": "FSDPv2",
    "ZeroRedundancyOptimizer": "ZeRO",
    "use_spmd": "SPMD",
    "mark_sharding": "SPMD",
}
# Iterating these wraps another iterable without changing what a step is.
ITERABLE_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "reversed", "trange", "islice", "chain", "cycle"}
# `torch.utils.data.DataLoader` and friends: host-side loaders, no barrier.
PLAIN_LOADER = re.compile(r"^(DataLoader|StatefulDataLoader)$")

DEVICE, PLAIN, UNKNOWN = "device", "plain", "unknown"  # what a loop's batches come from
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


_ANALYSES: "weakref.WeakKeyDictionary[FileContext, StepBarriers]" = weakref.WeakKeyDictionary()


def step_barriers(ctx: FileContext) -> "StepBarriers":
    """The file's barrier analysis, shared by the rules of this module."""
    found = _ANALYSES.get(ctx)
    if found is None:
        found = _ANALYSES[ctx] = StepBarriers(ctx)
    return found


class StepBarriers:
    """Where a file's step barriers run, what its step loops iterate, and who owns the step."""

    def __init__(self, ctx: FileContext) -> None:
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
        # `trainer.optimizer_step()`, `self.optimizer_step()` defined elsewhere: can't tell, assume it cuts
        return name == "optimizer_step" and not qualified.startswith(("torch_xla.", "xlalint.")) and \
            not any(True for _ in local_callees_of(self.ctx, call))

    def barriers(self, top: ast.AST) -> list[tuple[ast.Call, frozenset]]:
        """The barrier calls that `top` (a loop or function) runs, directly or through module-local
        functions, with the gates between each and `top`; none in code that never runs on XLA."""
        found = self._barriers.get(top)
        if found is None:
            found = self._barriers[top] = [(c, g) for c, g in self._calls_run_by(top)
                                            if self.is_barrier(c) and not self.ctx.in_non_xla_code(c)]
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
                if isinstance(earlier, ast.If) and not earlier.orelse and skips_rest(earlier.body) and \
                        periodic_polarity(earlier.test) == ALMOST_ALWAYS:
                    return ("every", _cadence(earlier.test))  # `if (i + 1) % k: continue`
        return ("other", self.ctx.index.order.get(parent, 0), field)

    # -- the loops that run a node -------------------------------------------------------------------
    def paths(self, node: ast.AST, acted_on: set[str] = frozenset()) -> list[StepPath]:
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
            top = None
            child = start
            for anc in self.ctx.index.ancestors(start):
                if gated_by(self.ctx, child, anc):
                    gates = gates | {self._gate_key(child, anc)}
                field = self.ctx.index.field_of(child)
                if isinstance(anc, LOOPS) and (field == "body" or (field == "test" and isinstance(anc, ast.While))) \
                        and is_step_loop(self.ctx, anc) and not (first and _iterates_names(anc, acted_on)):
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

    def call_sites(self, func: ast.AST) -> list[tuple[ast.Call, int]]:
        """Calls of `func` in this module (`f(...)`, `self.f(...)`, `Cls(...)` for `__init__`), each
        with the number of leading parameters the call does not pass (`self`)."""
        found = self._call_sites.get(func)
        if found is None:
            found = self._call_sites[func] = self._find_call_sites(func)
        return found

    def _find_call_sites(self, func: ast.AST) -> list[tuple[ast.Call, int]]:
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
        """DEVICE when the loop's batches come from a device loader (which syncs at every batch), or
        one a framework prepared; PLAIN when from a host loader, `range`, or nothing; else UNKNOWN.
        `next(it)` in the body counts as iterating `it`."""
        kind = self._loop_kinds.get(loop)
        if kind is None and self._inner_steps(loop):
            kind = self._loop_kinds[loop] = UNKNOWN
        if kind is None:
            kinds = [self.loader_kind(loop.iter)] if isinstance(loop, (ast.For, ast.AsyncFor)) else [PLAIN]
            for call in self.ctx.calls_within(loop):
                if dotted_name(call.func) == "next" and call.args:
                    kinds.append(self.loader_kind(call.args[0]))
                elif method_name(call) in ("next", "__next__") and not call.args:
                    kinds.append(self.loader_kind(receiver(call)))
            kind = self._loop_kinds[loop] = _combine(kinds)
        return kind

    def _inner_steps(self, loop: ast.AST) -> bool:
        """`for d_step in range(n):` inside a step function, or inside a nested function handed to
        its caller (`def train(x, y): ...; return train`): steps within one batch, whose barrier
        is the business of the loop that calls the function."""
        if not (isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Call)
                and dotted_name(loop.iter.func) == "range"):
            return False
        func = self.ctx.index.enclosing_function(loop)
        return func is not None and (self.ctx.is_step_function(func) or self.ctx.index.enclosing_function(func) is not None)

    def loader_kind(self, expr: ast.expr | None, depth: int = 0) -> str:
        if expr is None or depth > MAX_DEPTH:
            return UNKNOWN
        if isinstance(expr, ast.Call):
            called = dotted_name(expr.func)
            name = last_part(called)
            if DEVICE_LOADER.match(name) or self.framework_prepared(expr):
                return DEVICE
            if called == "range" or PLAIN_LOADER.match(name):
                return PLAIN
            if name in ITERABLE_WRAPPERS:
                args = [a for a in expr.args if not isinstance(a, ast.Starred)]
                kinds = [self.loader_kind(a, depth + 1) for a in (args if name in ("zip", "chain") else args[:1])]
                return _combine(kinds) if kinds else UNKNOWN
            callees = list(local_callees_of(self.ctx, expr))
            if callees:  # a loader built by a function of this module: what it returns
                returned = [r.value for f in callees for r in ast.walk(f) if isinstance(r, ast.Return)
                            and r.value is not None and self.ctx.index.enclosing_function(r) is f]
                return _combine([self.loader_kind(v, depth + 1) for v in returned]) if returned else UNKNOWN
            if isinstance(expr.func, ast.Attribute):
                # `metric_logger.log_every(loader, ...)`: a method around a loader it is given
                if any(self.loader_kind(a, depth + 1) == DEVICE for a in expr.args[:2]):
                    return DEVICE
            return UNKNOWN
        if isinstance(expr, ast.IfExp):
            # `pl.MpDeviceLoader(loader, device) if xla else loader`
            return _combine([self.loader_kind(expr.body, depth + 1), self.loader_kind(expr.orelse, depth + 1)])
        if isinstance(expr, (ast.Name, ast.Attribute)):
            if isinstance(expr, ast.Name) and self._data_parallel_loader(expr):
                return DEVICE
            values = self.values(expr)
            return _combine([self.loader_kind(v, depth + 1) for v in values]) if values else UNKNOWN
        return UNKNOWN

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
            if args and last_part(dotted_name(args[0])) == func.name and any(
                    isinstance(v, ast.Call) and self.ctx.qualified_name(v.func) ==
                    "torch_xla.distributed.data_parallel.DataParallel" for v in self.values(call.func)):
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
            if isinstance(value, ast.Call) and (self.framework_prepared(value) or (
                    method_name(value) == "optimizers" and self.in_framework_class(value))):
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
            for local in self.ctx.index.by_type.get(ast.ClassDef, ()):
                if local.name == name and local is not cls and self._framework_class(local, depth + 1):
                    return True
        return False

    @cached_property
    def has_device_loader(self) -> bool:
        """A device loader (or a framework-prepared object) is built somewhere in this file's XLA
        code: where a loop's loader can't be traced, it may well be that one."""
        return any((DEVICE_LOADER.match(last_part(dotted_name(c.func))) or self.framework_prepared(c))
                   and not self.ctx.in_non_xla_code(c) for c in self.ctx.index.calls)

    @cached_property
    def has_per_step_barrier(self) -> bool:
        return any(self.is_barrier(c) and self.ctx.is_per_step(c, periodic=True) and not self.ctx.in_non_xla_code(c)
                   for c in self.ctx.index.calls)

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

    # -- receivers -------------------------------------------------------------------------------------
    def is_optimizer(self, recv: ast.expr | None) -> bool:
        base = recv.value if isinstance(recv, ast.Subscript) else recv  # optimizers[i].step()
        name = dotted_name(base)
        if not name:
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
    if DEVICE in kinds:
        return DEVICE
    if kinds and all(k == PLAIN for k in kinds):
        return PLAIN
    return UNKNOWN


def _framework_name(qualified: str | None) -> bool:
    return bool(qualified) and qualified.split(".")[0] in FRAMEWORK_MODULES


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


def _iterates_names(loop: ast.AST, names: set[str]) -> bool:
    return isinstance(loop, (ast.For, ast.AsyncFor)) and bool(names & set(target_names(loop.target)))


def _names_in(expr: ast.AST | None) -> set[str]:
    """The names an object is reached through: `opt` for `opt`, `self.opt`'s `self`, `opts` and `i` for
    `opts[i]`; none for a computed value (`model(x).loss`)."""
    if isinstance(expr, ast.Subscript):
        return _names_in(expr.value) | {n.id for n in ast.walk(expr.slice) if isinstance(n, ast.Name)}
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


class OptimizerStepWithoutBarrier(Rule):
    """## What it does
    Flags a plain `optimizer.step()` (or `optimizer.step(closure)`) on a per-step path of a
    torch_xla training loop when nothing cuts that loop's graph every step: no `torch_xla.sync()` /
    `xm.mark_step()` or `xm.optimizer_step(..., barrier=True)` on the loop's path (as often as the
    step runs), the loop does not iterate a device loader (`MpDeviceLoader`,
    `ParallelLoader(...).per_device_loader(device)`, a loader prepared by HF accelerate), and the
    step does not run inside `torch_xla.step()`, `torch_xla.compile` or
    `torch.compile(..., backend="openxla")`. Optimizers prepared by accelerate or Fabric, and steps
    in Lightning modules, are left alone: those frameworks own the barrier of the loops they drive.

    Under DDP, XLA FSDP / FSDPv2, ZeRO or SPMD (or after `xm.reduce_gradients`) the gradients are
    already reduced, but none of those adds the barrier: a loop without one is still reported, and
    its fix adds only the barrier.

    ## Why is this bad?
    XLA tensors are lazy. Without a barrier, nothing ever cuts the step's graph: every iteration
    appends to one ever-growing graph that is compiled anew at each accidental sync (logging,
    checkpointing), or keeps growing until the device runs out of memory. In multi-process data
    parallel training without a wrapper that reduces gradients, a plain `optimizer.step()` also
    skips the gradient all-reduce, so replicas silently drift apart.

    Note that `xm.optimizer_step(optimizer)` alone does not add the barrier: its default is
    `barrier=False`, it only reduces gradients (measured on torch_xla's CPU backend: about 20 steps/s
    without a barrier against about 800 steps/s with one). See XLA403.

    ## Example
    ```python
    import torch_xla

    device = torch_xla.device()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    import torch_xla
    from xlalint.runtime import optimizer_step

    device = torch_xla.device()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer_step(optimizer, barrier=True)  # all-reduce, step, torch_xla.sync()
    ```

    ## Fix safety
    Without a gradient-reducing wrapper, the fix is unsafe: on XLA, `xlalint.runtime.optimizer_step`
    all-reduces gradients across replicas (when there are several) and runs the step barrier, which
    changes what is computed in multi-replica training and where graphs are cut. On CPU/GPU it is
    exactly `optimizer.step()`. A closure is passed on as `optimizer_args={"closure": closure}`.

    Where DDP, FSDP, ZeRO, SPMD or `xm.reduce_gradients` already reduce the gradients, reducing them
    again would be redundant or wrong: the fix adds `xlalint.runtime.sync()` (`torch_xla.sync()` on
    XLA, a no-op elsewhere) after the step instead, which computes the same values. It is unsafe
    all the same, as every fix of this rule: the added `from xlalint.runtime import ...` makes the
    code import the linter at run time, and the training environment may not have it (the pre-commit
    fix hook runs in an environment of its own). Only in a file that already imports xlalint is the
    barrier fix safe.
    There is no fix when the step is part of a `return` or a compound statement.

    ## Known problems
    The barrier is searched on the paths from the step to the step loops of this file that run it
    (through module-local calls). When nothing in the file calls the function holding the step,
    or the loop's loader can't be traced, a per-step barrier or a device loader anywhere in the
    file counts. Gradient reduction by a wrapper set up in another file is not visible.

    ## References
    - `optimizer_step` (`barrier=False` by default): torch_xla/core/xla_model.py at v2.9.0
    - `PerDeviceLoader.next` syncs every batch: torch_xla/distributed/parallel_loader.py at v2.9.0
    - docs/source/learn/pytorch-on-xla-devices.md and docs/source/learn/xla-advanced.md
      ("Data Loading") at v2.9.0
    - "do not call `xm.optimizer_step`" under FSDP: docs/source/perf/fsdp_collectives.md at v2.9.0
    - accelerate wraps prepared loaders in `MpDeviceLoaderWrapper(xpl.MpDeviceLoader)`:
      huggingface/accelerate src/accelerate/data_loader.py
    - Lightning's XLA strategy `process_dataloader` returns a `MpDeviceLoader`, its XLA precision
      plugins sync after the step: Lightning-AI/pytorch-lightning src/lightning/fabric/strategies/xla.py,
      src/lightning/pytorch/plugins/precision/xla.py
    """

    code, name, category = "XLA401", "optimizer-step-without-barrier", "optimizer_step"
    summary = "`{receiver}.step()` in an XLA training loop without a step barrier or gradient reduction"
    hint = ("cut the graph once per step: iterate a `MpDeviceLoader` or call `torch_xla.sync()` after the step; "
            "where nothing else reduces the gradients, `xm.optimizer_step(optimizer, barrier=True)` does both")
    reduced = ("`{receiver}.step()` in an XLA training loop without a step barrier: {reducer} already reduces "
               "the gradients, but nothing cuts the step's graph")
    xla_only = True
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import torch_xla
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl
            device_loader = pl.MpDeviceLoader(loader, device)
            for x, y in device_loader:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            try:
                import torch_xla.core.xla_model as xm
            except ImportError:
                xm = None
            for x, y in loader:
                loss_fn(model(x), y).backward()
                optimizer.step()
                scheduler.step()
                if xm is not None:
                    xm.mark_step()
            """
        ),
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                optimizer.step()
                lr_scheduler.step()
                prof.step()
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl
            from torch.nn.parallel import DistributedDataParallel as DDP

            def train(ddp_model, loader, optimizer):
                for x, y in loader:
                    loss_fn(ddp_model(x), y).backward()
                    optimizer.step()  # DDP reduced the gradients, the device loader syncs

            def main():
                ddp_model = DDP(model, gradient_as_bucket_view=True)
                train(ddp_model, pl.MpDeviceLoader(train_loader, device), optimizer)
            """
        ),
        Valid(
            """
            import torch_xla

            def train_step(x, y):
                loss_fn(model(x), y).backward()
                optimizer.step()

            for x, y in loader:
                with torch_xla.step():
                    train_step(x, y)
            """
        ),
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                scaler.step(optimizer)
                scaler.update()
                ema.step()
            """
        ),
        Valid(
            """
            import torch_xla

            class Lookahead(torch.optim.Optimizer):
                def step(self, closure=None):
                    loss = self.base_optimizer.step(closure)
                    self._update_slow_weights()
                    return loss
            """
        ),
        Valid(
            """
            import torch_xla
            optimizer.step()  # one warm-up step at setup, outside any loop
            """
        ),
        Valid(
            """
            import torch_xla

            def train_step(x, y):
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()

            compiled_step = torch_xla.compile(train_step)
            for x, y in loader:
                compiled_step(x, y)
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            def train_step(model, x, y, optimizer):
                loss_fn(model(x), y).backward()
                optimizer.step()

            dynamo_step = torch.compile(train_step, backend="openxla")
            for x, y in loader:
                dynamo_step(model, x, y, optimizer)
            """
        ),
        Valid(
            """
            import torch_xla
            from torch_xla.amp import syncfree
            for x, y in loader:
                scaler.scale(loss_fn(model(x), y)).backward()
                optimizer.step(found_inf=found_inf)  # a syncfree optimizer's own signature
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for i, (x, y) in enumerate(loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    xm.mark_step()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss_fn(model(x), y).backward()
                if use_tpu:
                    xm.optimizer_step(optimizer, barrier=True)
                else:
                    optimizer.step()  # never runs on XLA
            """
        ),
        Valid(
            """
            import torch_xla
            from accelerate import Accelerator

            accelerator = Accelerator()
            model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
            for batch in train_loader:  # a MpDeviceLoader on XLA: it syncs every batch
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
            """
        ),
        Valid(
            """
            import torch_xla
            import lightning as L

            class LitModel(L.LightningModule):
                def training_step(self, batch, batch_idx):
                    opt = self.optimizers()
                    opt.zero_grad()
                    self.manual_backward(self.model(batch).loss)
                    opt.step()  # Lightning's XLA strategy owns the barrier
            """
        ),
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                for opt in (g_optimizer, d_optimizer):
                    opt.step()
                torch_xla.sync()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def pretrain(model, loader, optimizer):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer, barrier=True)

            def finetune(model, loader, optimizer):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    optimizer.step()  # this loop has no barrier of its own
            """,
            line=11,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from xlalint.runtime import optimizer_step

            def pretrain(model, loader, optimizer):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer, barrier=True)

            def finetune(model, loader, optimizer):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    optimizer_step(optimizer, barrier=True)  # this loop has no barrier of its own
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla

            class Trainer:
                def step(self, batch):
                    loss = self.model(**batch).loss
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()

                def fit(self, loader):
                    for batch in loader:
                        self.step(batch)
            """,
            line=7,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for i, (x, y) in enumerate(loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()  # gradient accumulation: still no barrier anywhere in the loop
                    optimizer.zero_grad()
            """,
            line=5,
        ),
        Invalid(
            """
            import torch_xla
            device = torch_xla.device()
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
            """,
            line=7,
            expected_replacement="""
            import torch_xla
            from xlalint.runtime import optimizer_step

            device = torch_xla.device()
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer_step(optimizer, barrier=True)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                xm.mark_step()  # once per epoch: the step graph still grows for a whole epoch
            """,
            line=6,
        ),
        Invalid(
            """
            import torch_xla

            class Trainer:
                def __init__(self, model):
                    self.opt = torch.optim.LBFGS(model.parameters())

                def fit(self, loader):
                    for x, y in loader:
                        def closure():
                            self.opt.zero_grad()
                            loss = self.loss_fn(self.model(x), y)
                            loss.backward()
                            return loss
                        self.opt.step(closure)
            """,
            line=14,
            expected_replacement="""
            import torch_xla
            from xlalint.runtime import optimizer_step

            class Trainer:
                def __init__(self, model):
                    self.opt = torch.optim.LBFGS(model.parameters())

                def fit(self, loader):
                    for x, y in loader:
                        def closure():
                            self.opt.zero_grad()
                            loss = self.loss_fn(self.model(x), y)
                            loss.backward()
                            return loss
                        optimizer_step(self.opt, barrier=True, optimizer_args={"closure": closure})
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def train_step(model, batch, optimizer):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                return loss

            def train(model, loader, optimizer, epochs):
                for epoch in range(epochs):
                    for batch in loader:
                        train_step(model, batch, optimizer)
                    xm.master_print(f"epoch {epoch} done")
            """,
            line=6,
        ),
        Invalid(
            """
            import torch
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            ddp_model = DDP(model, gradient_as_bucket_view=True)
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, drop_last=True)
            for x, y in train_loader:
                optimizer.zero_grad()
                loss_fn(ddp_model(x), y).backward()
                optimizer.step()  # DDP reduced the gradients; nothing cuts the graph
            """,
            line=10,
            expected_replacement="""
            import torch
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP
            from xlalint.runtime import sync

            ddp_model = DDP(model, gradient_as_bucket_view=True)
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, drop_last=True)
            for x, y in train_loader:
                optimizer.zero_grad()
                loss_fn(ddp_model(x), y).backward()
                optimizer.step()  # DDP reduced the gradients; nothing cuts the graph
                sync()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            accelerator = torch.accelerator.current_accelerator()
            for x, y in loader:
                loss_fn(model(x), y).backward()
                optimizer.step()  # `torch.accelerator` is no HF accelerate
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "step":
            return
        closure = _closure_argument(node)
        if closure is False:
            return
        barriers = step_barriers(self.ctx)
        recv = receiver(node)
        if not barriers.is_optimizer(recv):
            return
        if not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        if self._inside_wrapper_step(node) or barriers.in_framework_class(node) or barriers.framework_owns(recv):
            return
        paths = barriers.paths(node, _names_in(recv))
        if all(self._has_barrier(path) for path in paths):
            return
        # the receiver as written, its own parentheses included: `(opt).step()`
        spelled = self.ctx.code(node.func).rsplit(".", 1)[0].rstrip()
        reducer = barriers.gradient_reducer(recv, paths)
        if reducer is not None:
            statement = _simple_statement(self.ctx, node)
            self.report(node, self.reduced.format(receiver=spelled, reducer=reducer),
                        fix=(lambda cctx: _insert_sync_after(cctx, statement)) if statement is not None else None)
            return
        self.report(node, self.summary.format(receiver=spelled),
                    fix=lambda cctx: _fix(cctx, node, with_closure=closure is not None))

    def _has_barrier(self, path: StepPath) -> bool:
        barriers = step_barriers(self.ctx)
        if barriers.covered(path):
            return True
        if path.in_loop:
            kind = barriers.loop_kind(path.top)
            return kind == DEVICE or (kind == UNKNOWN and barriers.has_device_loader)
        # nothing here calls the function holding the step: its loop is elsewhere (a library, another
        # module); trust a per-step barrier or a device loader anywhere in the file
        return barriers.has_per_step_barrier or barriers.has_device_loader

    def _inside_wrapper_step(self, node: ast.AST) -> bool:
        """`def step(self, closure=None): ... self.inner.step(closure)` in an optimizer class: a wrapper
        delegating to the optimizer it wraps; the wrapper's caller owns the loop and the barrier."""
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, FUNCTIONS):
                if anc.name != "step":
                    return False
                cls = self.ctx.index.enclosing_class(anc)
                if cls is None:
                    return False
                names = {p.arg for p in function_params(anc)}
                bases = {last_part(dotted_name(b)) for b in cls.bases}
                return "closure" in names or bool(OPTIMIZER_NAME.search(cls.name)) or any(
                    OPTIMIZER_NAME.search(b) or OPTIMIZER_CLASS.match(b) for b in bases if b)
        return False


# -- fixes, built on libcst ------------------------------------------------------------------------
def _fix(cctx: CstContext, node: ast.Call, *, with_closure: bool) -> Fix | None:
    call = cctx.locate(node)
    if call is None:
        return None
    spelled, request = cctx.importable("xlalint.runtime", "optimizer_step")
    text = f"{spelled}({cctx.code(call.func.value)}, barrier=True"
    if with_closure:  # the call's one argument, positional or `closure=`
        text += f', optimizer_args={{"closure": {cctx.code(call.args[0].value)}}}'
    text += ")"
    return Fix.replace(call, cctx.parse_expression(text), title=f"Replace with `{spelled}(..., barrier=True)`",
                       safe=False, imports=[request])


SIMPLE_STATEMENTS = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)


def _simple_statement(ctx: FileContext, node: ast.AST) -> ast.stmt | None:
    """The simple statement whose evaluation runs `node` (not in a lambda or comprehension, whose
    body runs at another time or several times): a barrier goes right after it."""
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return None
        if isinstance(anc, ast.stmt):
            return anc if isinstance(anc, SIMPLE_STATEMENTS) else None
    return None


def _insert_sync_after(cctx: CstContext, statement: ast.stmt) -> Fix | None:
    """`xlalint.runtime.sync()` right after `statement`, on a line of its own (or after a `;` when the
    statement shares its line)."""
    small = cctx.locate(statement)
    line = cctx.parent(small) if small is not None else None
    if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return None
    spelled, request = cctx.importable("xlalint.runtime", "sync")
    barrier = cst.Expr(cctx.parse_expression(f"{spelled}()"))
    title = f"Add `{spelled}()` (a step barrier) after it"
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        replacement = cst.FlattenSentinel([line, cst.SimpleStatementLine(body=[barrier])])
    else:
        body = list(line.body)
        position = next(i for i, s in enumerate(body) if s is small)
        if position == len(body) - 1 and isinstance(small.semicolon, cst.Semicolon):
            barrier = barrier.with_changes(semicolon=small.semicolon)  # keep a trailing `;` last
            body[position] = small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        body.insert(position + 1, barrier)
        replacement = line.with_changes(body=body)
    return Fix.replace(line, replacement, title=title, safe=True, imports=[request])


def _first_argument(call: ast.Call) -> ast.Starred | ast.keyword | ast.expr | None:
    """The call's first argument as written, positional or keyword (`f(a=1, *rest)`)."""
    return min([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset), default=None)


def _closure_argument(call: ast.Call):
    """None for `step()`, the closure expression for `step(closure)` / `step(closure=c)`, False for
    anything else (`step(found_inf=...)`, `step(**kwargs)`, a scaler's `step(optimizer)`)."""
    args = [*call.args, *call.keywords]
    if not args:
        return None
    if len(args) != 1 or has_star_args(call):
        return False
    if call.keywords:
        return call.keywords[0].value if call.keywords[0].arg == "closure" else False
    value = call.args[0]
    if is_constant(value, None):
        return False
    # `scaler.step(optimizer)` style: an optimizer passed positionally is not a closure
    name = last_part(dotted_name(value))
    if OPTIMIZER_NAME.search(name):
        return False
    return value


SCALER_NAME = re.compile(r"(^|_)(grad_?)?scaler$", re.I)
SCALER_CLASS = re.compile(r"^(GradScaler|ShardedGradScaler)$")
# torch_xla's sync-free optimizers take the scaler's `found_inf` as a tensor: no host read.
SYNCFREE_MODULE = "torch_xla.amp.syncfree"
SCALING_WORD = re.compile(r"scal|amp|fp16|half|precision", re.I)


class GradScalerStep(Rule):
    """## What it does
    Flags `scaler.step(optimizer)` of an fp16 `GradScaler` on a per-step path, in any file (what
    would run on XLA once this code moves there).

    ## Why is this bad?
    `GradScaler.step` decides whether to skip the step from the `found_inf` flags it gathered while
    unscaling, and reads them on the host (`sum(v.item() for v in found_inf...)` in
    `torch/amp/grad_scaler.py`): a device-to-host sync on every step, right where the step's graph
    should be built in one piece. Nor does it all-reduce gradients or cut the graph on XLA. TPUs
    train in bfloat16, which needs no loss scaling at all.

    ## Example
    ```python
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    Use instead:
    ```python
    for x, y in loader:
        with torch.autocast(device_type="xla", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer_step(optimizer, barrier=True)  # from xlalint.runtime
    ```

    Or keep fp16 with `torch_xla.amp.GradScaler` and a `torch_xla.amp.syncfree` optimizer, whose
    `step(found_inf=...)` takes the flag as a tensor.

    ## Known problems
    Reported only where a training loop of the same file runs the step, and not when the scaler
    path is one branch of a choice (`if scaler:`, `if use_grad_scaling:`): framework hooks such as
    AMP precision plugins are picked per device by their framework. Not reported in files using
    `torch_xla.amp.syncfree` optimizers.
    """

    code, name, category = "XLA402", "grad-scaler-step", "optimizer_step"
    summary = "`GradScaler.step()` reads `found_inf` on the host every step and adds no XLA step barrier"
    hint = "train in bfloat16 without a scaler on TPU, or use torch_xla.amp.GradScaler with a syncfree optimizer"

    VALID = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler()
            scaler.step(optimizer)  # once, not in a training loop
            """
        ),
        Valid(
            """
            import torch
            from torch_xla.amp import syncfree
            optimizer = syncfree.AdamW(model.parameters())
            scaler = torch.amp.GradScaler()
            for x, y in loader:
                scaler.scale(loss_fn(model(x), y)).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Valid(
            """
            class WrappedOptimizer:
                def step(self, closure=None):
                    if self.scaler is not None:
                        self.scaler.step(self.optimizer, closure)
                    else:
                        self.optimizer.step(closure)
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss_fn(model(x), y).backward()
                scheduler.step(epoch)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """,
            line=7,
        ),
        Invalid(
            """
            class Trainer:
                def optimizer_step(self):
                    self.scaler.unscale_(self.optimizer)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()

                def train(self):
                    for batch in self.train_loader:
                        self.scaler.scale(self.compute(batch)).backward()
                        self.optimizer_step()
            """,
            line=4,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "step" or isinstance(_first_argument(node), (ast.keyword, type(None))):
            return
        scaler = receiver(node)
        if not self._is_scaler(scaler) or not self.ctx.is_per_step(node, periodic=True):
            return
        if self.ctx.in_non_xla_code(node) or self._uses_syncfree() or not self._in_this_files_loop(node):
            return
        if self._scaling_is_optional(node):
            return
        self.report(node)

    def _in_this_files_loop(self, node: ast.AST) -> bool:
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, LOOPS) and self.ctx.index.field_of(child) == "body" and is_step_loop(self.ctx, anc):
                return True
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return anc in self.ctx.loop_reachable_functions
            child = anc
        return False

    def _scaling_is_optional(self, node: ast.AST) -> bool:
        """Under `if scaler:` / `if use_grad_scaling:`: the other branch serves devices without it."""
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, ast.If) and self.ctx.index.field_of(child) == "body" and any(
                    SCALING_WORD.search(w) for w in words(anc.test)):
                return True
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return False
            child = anc
        return False

    def _is_scaler(self, expr: ast.expr | None) -> bool:
        name = dotted_name(expr)
        if not name:
            return False
        for value in self.ctx.assigned_values(expr):
            if isinstance(value, ast.Call) and SCALER_CLASS.match(last_part(dotted_name(value.func))):
                return True
        return bool(SCALER_NAME.search(last_part(name)))

    def _uses_syncfree(self) -> bool:
        return any(b.qualified.startswith(SYNCFREE_MODULE) for b in self.ctx.index.imports.values())


class XlaOptimizerStepWithoutBarrier(Rule):
    """## What it does
    Flags `xm.optimizer_step(optimizer)` with `barrier` left out or `False` in a step loop that has
    no other barrier: its batches come from a plain data loader (or `range`), not a device loader;
    no `torch_xla.sync()` / `xm.mark_step()` runs as often as the step; and the step does not run
    inside `torch_xla.step()`, `torch_xla.compile` or `torch.compile(..., backend="openxla")`.

    ## Why is this bad?
    `xm.optimizer_step` all-reduces the gradients and steps the optimizer, but its `barrier`
    defaults to `False`: it cuts the graph only when asked to. Its docstring says the barrier is
    unnecessary with torch_xla's `ParallelLoader` or `DataParallel`, whose loader syncs at every
    batch; the "Data Loading" notes of the advanced guide add that without `MpDeviceLoader` you
    need `barrier=True` or an explicit `torch_xla.sync()`. With a plain `DataLoader` nothing cuts the graph: every iteration appends to
    one lazy graph that grows until an accidental sync compiles it (anew each time) or the device
    runs out of memory.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss_fn(model(data), target).backward()
        xm.optimizer_step(optimizer)
    ```

    Use instead:
    ```python
    import torch_xla.core.xla_model as xm

    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss_fn(model(data), target).backward()
        xm.optimizer_step(optimizer, barrier=True)
    ```

    Or iterate `pl.MpDeviceLoader(train_loader, device)`, which also overlaps the upload of the next
    batch with the step.

    ## Fix safety
    The fix sets `barrier=True`: the same reduction and the same step, followed by
    `torch_xla.sync()`, which computes the same values. It is safe.

    ## Known problems
    Reported only when the loop's loader is traced, in this file, to a host loader (`DataLoader`,
    `range`, a module-local function returning one); a loader passed in from elsewhere may be a
    device loader.

    ## References
    - `optimizer_step(..., barrier=False)` and its docstring: torch_xla/core/xla_model.py at v2.9.0
    - docs/source/learn/xla-advanced.md ("Data Loading") and
      docs/source/learn/trace-vs-execution-time.md at v2.9.0
    """

    code, name, category = "XLA403", "xla-optimizer-step-without-barrier", "optimizer_step"
    summary = ("`xm.optimizer_step` without `barrier=True` in a loop over a plain data loader: nothing cuts the "
               "step's graph")
    hint = "pass `barrier=True`, or iterate a `pl.MpDeviceLoader(loader, device)`"
    xla_only = True
    fix_availability = "always"

    VALID = [
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            model = MNIST().train().to(device)
            optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            for data, target in train_loader:
                optimizer.zero_grad()
                data, target = data.to(device), target.to(device)
                loss = loss_fn(model(data), target)
                loss.backward()
                xm.optimizer_step(optimizer, barrier=True)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                mp_device_loader = pl.MpDeviceLoader(train_loader, device)
                for data, target in mp_device_loader:
                    optimizer.zero_grad()
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)  # the device loader syncs every batch

            torch_xla.launch(_mp_fn, args=())
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def train_loop_fn(loader):
                for step, (data, target) in enumerate(loader):
                    optimizer.zero_grad()
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)

            def _mp_fn(index):
                train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=128, drop_last=True)
                para_loader = pl.ParallelLoader(train_loader, [device])
                train_loop_fn(para_loader.per_device_loader(device))
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            for data, target in train_loader:
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer)
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train(model, loader, optimizer):
                for data, target in loader:  # whatever the caller passes: maybe a device loader
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
            for data, target in train_loader:
                with torch_xla.step():
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, drop_last=True)
            for data, target in train_loader:
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer, barrier=args.sync_every_step)  # the caller decides
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer)
            """,
            line=11,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)
            for data, target in train_loader:
                data, target = data.to(device), target.to(device)
                optimizer.zero_grad()
                loss_fn(model(data), target).backward()
                xm.optimizer_step(optimizer, barrier=True)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train_epoch(model, loader, optimizer):
                for step, (data, target) in enumerate(loader):
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer, barrier=False)
                    if step % 100 == 0:
                        xm.mark_step()  # every 100 steps: the graph spans 100 steps

            train_epoch(model, DataLoader(dataset, batch_size=32), optimizer)
            """,
            line=7,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train_epoch(model, loader, optimizer):
                for step, (data, target) in enumerate(loader):
                    loss_fn(model(data), target).backward()
                    xm.optimizer_step(optimizer, barrier=True)
                    if step % 100 == 0:
                        xm.mark_step()  # every 100 steps: the graph spans 100 steps

            train_epoch(model, DataLoader(dataset, batch_size=32), optimizer)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for step in range(num_steps):
                loss_fn(model(inputs), labels).backward()
                xm.optimizer_step(
                    optimizer,
                )
            """,
            line=4,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            for step in range(num_steps):
                loss_fn(model(inputs), labels).backward()
                xm.optimizer_step(
                    optimizer, barrier=True,
                )
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != XM_OPTIMIZER_STEP or barrier_argument(node, default=False) is not False:
            return
        if not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        barriers = step_barriers(self.ctx)
        paths = barriers.paths(node, _names_in(node.args[0] if node.args else None))
        if not paths or any(not p.in_loop or p.compiled for p in paths):
            return  # a loop this file can't see, or a compiled step
        if all(barriers.covered(p) or barriers.loop_kind(p.top) != PLAIN for p in paths):
            return
        self.report(node, fix=lambda cctx: _fix_barrier_argument(cctx, node))


def _fix_barrier_argument(cctx: CstContext, node: ast.Call) -> Fix | None:
    call = cctx.locate(node)
    if not isinstance(call, cst.Call):
        return None
    true = cst.Name("True")
    title = "Pass `barrier=True`"
    for position, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == "barrier") or (arg.keyword is None and position == 1
                                                                             and not arg.star):
            return Fix.replace(arg.value, true, title=title, safe=True)
    new = cst.Arg(value=true, keyword=cst.Name("barrier"),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    args = list(call.args)
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma stays last: `f(\n    opt,\n)`
        new = new.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return Fix.replace(call, call.with_changes(args=args), title=title, safe=True)


class GradientAccumulationWithoutBarrier(Rule):
    """## What it does
    Flags the `.backward()` of a gradient-accumulation loop on XLA whose only step barrier runs with
    the optimizer step, every N iterations (`if (i + 1) % accumulation_steps == 0:`): the backward runs
    every iteration, nothing cuts the graph between micro-batches, and the loop does not iterate a
    device loader.

    ## Why is this bad?
    XLA tensors are lazy: until the barrier, every micro-batch's forward and backward is appended to
    one graph. With N micro-batches per step the graph holds N copies of the model's forward and
    backward, with every micro-batch's inputs: compile time grows with N, and so can device memory,
    instead of staying at one micro-batch's worth (the docs' Stable Diffusion example shows what a
    loop without a barrier inside does to compile times). A barrier after each backward keeps one
    small graph per micro-batch, compiled once and reused; the accumulated gradients stay on the
    device between them.

    ## Example
    ```python
    import torch_xla.core.xla_model as xm

    for i, (x, y) in enumerate(train_loader):
        loss = loss_fn(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            xm.mark_step()
    ```

    Use instead:
    ```python
    import torch_xla.core.xla_model as xm
    from xlalint.runtime import sync

    for i, (x, y) in enumerate(train_loader):
        loss = loss_fn(model(x), y) / accumulation_steps
        loss.backward()
        sync()  # torch_xla.sync() on XLA, a no-op elsewhere
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
            xm.mark_step()
    ```

    Or iterate a `pl.MpDeviceLoader`, which syncs at every batch.

    ## Fix safety
    The fix adds `xlalint.runtime.sync()` (`torch_xla.sync()` when torch_xla is in use, else a
    no-op) right after the backward. It changes where graphs are cut, not what they compute: the
    same gradients are accumulated. It is unsafe all the same: the added `from xlalint.runtime
    import sync` makes the code import the linter at run time, and the training environment may not
    have it (the pre-commit fix hook runs in an environment of its own). In a file that already
    imports xlalint it is safe.

    ## Known problems
    Reported only when the loop and its loader are in this file and the loader is a host loader
    (`DataLoader`, `range`). Accumulation over an inner loop of micro-batches is not recognised.

    ## References
    - docs/source/learn/xla-examples.md (a loop without a barrier builds one huge graph) and
      docs/source/learn/xla-advanced.md ("Graphs") at v2.9.0
    - `PerDeviceLoader.next` syncs every batch: torch_xla/distributed/parallel_loader.py at v2.9.0
    """

    code, name, category = "XLA404", "gradient-accumulation-without-barrier", "optimizer_step"
    summary = ("`.backward()` every micro-batch but a step barrier only every N: one XLA graph spans all "
               "accumulated micro-batches")
    hint = "call `torch_xla.sync()` (or `xlalint.runtime.sync()`) after each backward, or iterate a `MpDeviceLoader`"
    xla_only = True
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import torch_xla
            for i, (x, y) in enumerate(train_loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                torch_xla.sync()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            device_loader = pl.MpDeviceLoader(train_loader, torch_xla.device())
            for i, (x, y) in enumerate(device_loader):  # syncs at every batch
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    xm.optimizer_step(optimizer)
                    optimizer.zero_grad()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=32, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss_fn(model(x), y).backward()
                xm.optimizer_step(optimizer, barrier=True)  # steps and syncs every iteration
                if i % log_every == 0:
                    xm.mark_step()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla

            def micro_step(x, y):
                (loss_fn(model(x), y) / accumulation_steps).backward()

            compiled = torch_xla.compile(micro_step)
            for i, (x, y) in enumerate(torch.utils.data.DataLoader(dataset, batch_size=8)):
                compiled(x, y)
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            for i, (x, y) in enumerate(train_loader):
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()  # no barrier at all: XLA401's finding
                    optimizer.zero_grad()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    xm.mark_step()
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch_xla.core.xla_model as xm
            from xlalint.runtime import sync

            train_loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
            for i, (x, y) in enumerate(train_loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                sync()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    xm.mark_step()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader

            def train(model, dataset, optimizer, accum):
                for step, batch in enumerate(DataLoader(dataset, batch_size=4)):
                    model(**batch).loss.div(accum).backward()
                    if (step + 1) % accum != 0:
                        continue
                    xm.optimizer_step(optimizer, barrier=True)
                    optimizer.zero_grad()
            """,
            line=6,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch.utils.data import DataLoader
            from xlalint.runtime import sync

            def train(model, dataset, optimizer, accum):
                for step, batch in enumerate(DataLoader(dataset, batch_size=4)):
                    model(**batch).loss.div(accum).backward()
                    sync()
                    if (step + 1) % accum != 0:
                        continue
                    xm.optimizer_step(optimizer, barrier=True)
                    optimizer.zero_grad()
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "backward":
            return
        barriers = step_barriers(self.ctx)
        recv = receiver(node)
        if not self.ctx.is_per_step(node) or self.ctx.in_non_xla_code(node) or barriers.in_framework_class(node):
            return
        paths = barriers.paths(node, _names_in(recv))
        if not paths or any(not p.in_loop or p.compiled for p in paths):
            return
        if not any(self._accumulates_without_barrier(p) for p in paths):
            return
        statement = _simple_statement(self.ctx, node)
        self.report(node, fix=(lambda cctx: _insert_sync_after(cctx, statement)) if statement is not None else None)

    def _accumulates_without_barrier(self, path: StepPath) -> bool:
        """The loop runs the backward every iteration; its optimizer steps and its barriers run only
        every N iterations; its batches come from a host loader."""
        barriers = step_barriers(self.ctx)
        if path.gates or barriers.covered(path) or barriers.loop_kind(path.top) != PLAIN:
            return False
        found = barriers.barriers(path.top)
        steps = barriers.optimizer_steps(path.top)
        return bool(found) and bool(steps) and all(_every_n(g) for _, g in [*found, *steps])


def _every_n(gates: frozenset) -> bool:
    return bool(gates) and any(key[0] == "every" for key in gates)
