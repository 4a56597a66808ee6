"""Who reduces a step's gradients under `torch.nn.parallel.DistributedDataParallel` (DDP), and when:
the model a training path runs through a DDP wrapper, the micro-batches of a gradient-accumulation
loop, and the `no_sync()` contexts that keep DDP from reducing them (`FileContext.data_parallel`,
asked by XLA705 and XLA708).

Facts this rests on (torch 2.x, `torch/nn/parallel/distributed.py`, shown under gloo in
tests/test_ddp_collectives.py): DDP's reducer all-reduces the gradients during the backward of a
forward run *through the wrapper*, bucket by bucket. A forward of the wrapped module itself (the
`model` of `ddp = DDP(model)`) arms no hook: its backward reduces nothing. A forward run under
`with ddp.no_sync():` (or with `ddp.require_backward_grad_sync = False`) reduces nothing either,
whatever surrounds its backward; one under `no_sync` whose backward runs outside it still does not
reduce, and a backward under `no_sync` whose forward ran outside it still does.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .index import FUNCTIONS, LOOPS
from .names import dotted_name, last_part, method_name
from .steps import is_step_loop, local_callees_of

if TYPE_CHECKING:
    from .barriers import StepBarriers
    from .file import File

# The DDP class by the names torch exports it under.
DDP_CLASSES = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel",
}
GRAD_SYNC_FLAG = "require_backward_grad_sync"


@dataclass(frozen=True)
class DdpForward:
    """A call that runs a model's forward through a DDP wrapper: `call` (`ddp_model(x)`), and `wrap`,
    the `DistributedDataParallel(...)` construction it reaches."""

    call: ast.Call
    wrap: ast.Call


class DataParallel:
    """The DDP wrappers of a file and the training paths that run a forward through one."""

    def __init__(self, ctx: File, barriers: StepBarriers) -> None:
        self.ctx = ctx
        self.barriers = barriers
        self._wraps: dict[ast.AST, ast.Call | None] = {}

    # -- wrappers --------------------------------------------------------------------------------
    def is_wrap(self, call: ast.AST) -> bool:
        """`call` constructs a DDP wrapper (`DDP(model, ...)`, whatever the import's alias)."""
        return isinstance(call, ast.Call) and self.ctx.qualified_name(call.func) in DDP_CLASSES

    def wrap_of(self, expr: ast.expr) -> ast.Call | None:
        """The DDP construction `expr` (a name, `self.model`, a parameter) holds: its assignment in
        this file, or what the module's calls of its function pass for it."""
        if expr in self._wraps:
            return self._wraps[expr]
        found: ast.Call | None = None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            found = next((v for v in self.barriers.values(expr) if isinstance(v, ast.Call) and self.is_wrap(v)), None)
        self._wraps[expr] = found
        return found

    def forward(self, call: ast.Call) -> DdpForward | None:
        """`call` runs a forward through a DDP wrapper: `ddp_model(x)` or `ddp_model.forward(x)`."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return None
        wrap = self.wrap_of(func)
        return DdpForward(call, wrap) if wrap is not None else None

    # -- the training paths ------------------------------------------------------------------------
    def tops(self, node: ast.AST, acted_on: frozenset[str] = frozenset()) -> list[tuple[ast.AST, frozenset]]:
        """The step loops (or, where none is seen, the functions) that run `node` each step, through
        the module's calls, with the gates between `node` and each; inside a `torch_xla.step()` /
        `StepTrace` block, the loop around it. A loop over the objects `node` acts on (`acted_on`:
        `for loss in losses: loss.backward()`) is no step loop of its own."""
        found: list[tuple[ast.AST, frozenset]] = []
        for path in self.barriers.paths(node, acted_on):
            top, gates = path.top, path.gates
            if path.compiled:
                enclosing = self._enclosing_top(path.top)
                if enclosing is None:
                    continue
                top, gates = enclosing, gates | self.barriers.gates(path.top, enclosing)
            if (top, gates) not in found:
                found.append((top, gates))
        return found

    def _enclosing_top(self, node: ast.AST) -> ast.AST | None:
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, LOOPS) and self.ctx.index.field_of(child) == "body" and is_step_loop(self.ctx, anc):
                return anc
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return anc
            child = anc
        return None

    def forwards_run_by(self, top: ast.AST) -> list[tuple[DdpForward, frozenset]]:
        """The DDP forwards `top` runs, directly or through the module's functions, with the gates
        between each and `top`; not a wrap made only off XLA (`if device == "cuda": model =
        DDP(model)`)."""
        found = []
        for call, gates in self.barriers.calls_run_by(top):
            forward = self.forward(call)
            if forward is not None and not self.ctx.in_non_xla_code(forward.wrap):
                found.append((forward, gates))
        return found

    # -- gradient synchronisation ------------------------------------------------------------------
    def without_sync(self, forward: ast.Call) -> bool:
        """The forward may run without DDP's reduction: under `with m.no_sync():` or a context that
        may be one (`ctx = m.no_sync() if ... else nullcontext()`), or the file sets
        `require_backward_grad_sync`, by which DDP skips the reduction of chosen micro-batches."""
        if self.sets_grad_sync_flag:
            return True
        return any(
            isinstance(anc, (ast.With, ast.AsyncWith))
            and any(self._may_be_no_sync(i.context_expr, 0) for i in anc.items)
            for anc in self.ctx.index.ancestors(forward)
        )

    def under_no_sync(self, forward: ast.Call) -> bool:
        """The forward always runs under `with m.no_sync():`: DDP never reduces its gradients."""
        return any(
            isinstance(anc, (ast.With, ast.AsyncWith))
            and any(
                isinstance(i.context_expr, ast.Call) and method_name(i.context_expr) == "no_sync" for i in anc.items
            )
            for anc in self.ctx.index.ancestors(forward)
        )

    def _may_be_no_sync(self, expr: ast.expr, depth: int) -> bool:
        """`expr`, a `with` item, may be DDP's `no_sync()`: it names `no_sync`, holds a value that
        does, or calls a function of this module whose body does, or one named for sync control
        (`maybe_no_sync(model, last)`, `sync_context(...)`) that this module does not define."""
        if depth > 4:
            return False
        for node in ast.walk(expr):
            if isinstance(node, ast.Call) and method_name(node) == "no_sync":
                return True
            if isinstance(node, ast.Attribute) and node.attr == "no_sync":
                return True  # `sync_ctx = model.no_sync` then `with sync_ctx():`
        if isinstance(expr, ast.Call):
            callees = list(local_callees_of(self.ctx, expr))
            if callees:
                return any(isinstance(n, ast.Attribute) and n.attr == "no_sync" for f in callees for n in ast.walk(f))
            if "sync" in last_part(dotted_name(expr.func)).lower():
                return True
            expr = expr.func
        if isinstance(expr, ast.Name):
            return any(self._may_be_no_sync(v, depth + 1) for v in self.ctx.values_in_scope(expr))
        return False

    @property
    def sets_grad_sync_flag(self) -> bool:
        """The file assigns a module's `require_backward_grad_sync` (nanoGPT's way to skip DDP's
        all-reduce on all micro-batches but the last)."""
        for node in self.ctx.index.of_type(ast.Attribute):
            if node.attr == GRAD_SYNC_FLAG and isinstance(node.ctx, ast.Store):
                return True
        return False

    # -- branches ----------------------------------------------------------------------------------
    def exclusive(self, first: ast.AST, second: ast.AST) -> bool:
        """`first` and `second` sit on opposite sides of the same test (`if args.ddp: model =
        DDP(model)` ... `if args.ddp: opt.step() else: xm.optimizer_step(opt)`): no run takes both."""
        one, other = self._conditions(first), self._conditions(second)
        return any((test, not holds) in other for test, holds in one)

    def _conditions(self, node: ast.AST) -> set[tuple[str, bool]]:
        found = set()
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)):
                field = self.ctx.index.field_of(child)
                if field in ("body", "orelse"):
                    test, holds = anc.test, field == "body"
                    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                        test, holds = test.operand, not holds
                    found.add((ast.dump(test), holds))
            child = anc
        return found


def short_code(ctx: File, node: ast.AST, limit: int = 50) -> str:
    """`node`'s source on one line, cut to `limit` characters, for a message."""
    code = " ".join(ctx.code(node).split())
    return code if len(code) <= limit else code[: limit - 3] + "..."


def describe_wrap(ctx: File, wrap: ast.Call) -> str:
    """`ddp_model = DDP(model, ...)` named by what it wraps, for a chain's message."""
    wrapped = ctx.code(wrap.args[0]) if wrap.args else "a model"
    name = dotted_name(wrap.func) or "DistributedDataParallel"
    return f"`{wrapped}` wrapped in `{name}`: DDP all-reduces its gradients in every backward"
