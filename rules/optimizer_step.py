"""Optimizer steps on XLA: the gradient all-reduce and the per-step barrier."""

from __future__ import annotations

import re

import ast

from xlalint.analysis.guards import words
from xlalint.analysis.index import FUNCTIONS, LOOPS
from xlalint.analysis.names import (dotted_name, function_params, has_star_args, is_constant, last_part,
                                    method_name, receiver)
from xlalint.analysis.steps import DEVICE_LOADER, is_step_loop
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.apply import importable
from xlalint.fixing.context import CstContext
from xlalint.rule import Invalid, Rule, Valid

# Receivers named like an optimizer (`optimizer`, `self.opt`, `g_optim`, `optimizers[0]`).
OPTIMIZER_NAME = re.compile(r"(^|_)(optim|optimizer|optimiser|opt)s?$|optimi[sz]er", re.I)
# ... but never these: they have a `.step()` of their own that is not an optimizer step.
NOT_OPTIMIZER = re.compile(r"sched|lr|prof|ema|swa|scaler|warmup|averag|plateau|callback|hook", re.I)
# Optimizer classes outside `torch.optim` (timm, transformers, apex, bitsandbytes, ...).
OPTIMIZER_CLASS = re.compile(
    r"^(SGD|ASGD|Adam|AdamW|Adamax|NAdam|RAdam|Adagrad|Adadelta|Adafactor|RMSprop|Rprop|LBFGS|Lamb|Lars|"
    r"Lion|Adan|SparseAdam|FusedAdam|FusedLAMB|\w*Optimizer)$"
)

# Per-step barriers: once one of these runs every step, the step graph is cut (and gradients reduced).
BARRIER_CALLS = {
    "torch_xla.sync",
    "torch_xla.step",
    "torch_xla.compile",
    "torch_xla.core.xla_model.mark_step",
    "torch_xla.core.xla_model.optimizer_step",
    "torch_xla.core.xla_model.reduce_gradients",
    "xlalint.runtime.optimizer_step",
    "xlalint.runtime.sync",
}
# Spelled through a wrapper or a differently named import: judge by the called name alone.
BARRIER_NAMES = {"mark_step", "optimizer_step", "reduce_gradients", "xla_sync", "sync_xla"}
# Identifiers whose presence means a framework reduces gradients and inserts the barrier itself:
# DDP, XLA FSDP / FSDPv2, ZeRO, SPMD, HF accelerate, Lightning.
FRAMEWORK_NAMES = {
    "DistributedDataParallel", "XlaFullyShardedDataParallel", "FullyShardedDataParallel",
    "SpmdFullyShardedDataParallel", "FSDPv2", "ZeroRedundancyOptimizer", "mark_sharding", "use_spmd",
    "Accelerator", "AcceleratedOptimizer", "accelerator", "LightningModule", "LightningOptimizer",
    "manual_backward", "Fabric", "precision_plugin", "PrecisionPlugin", "XLAPrecision", "XLAStrategy",
}
FRAMEWORK_MODULES = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric",
                     "torch_xla.distributed.fsdp", "torch_xla.distributed.spmd",
                     "torch_xla.distributed.zero_redundancy_optimizer", "torch.nn.parallel",
                     "torch.distributed.fsdp")



class OptimizerStepWithoutBarrier(Rule):
    """## What it does
    Flags a plain `optimizer.step()` (or `optimizer.step(closure)`) on a per-step path of a
    torch_xla training loop that has no step barrier: no `torch_xla.sync()` / `xm.mark_step()`,
    no `xm.optimizer_step(...)` / `xm.reduce_gradients(...)`, no device loader (`MpDeviceLoader`,
    `ParallelLoader`, `per_device_loader`), not inside `torch_xla.step()` / `torch_xla.compile`.
    Files that train under DDP, XLA FSDP / FSDPv2, ZeRO, SPMD, HF accelerate or Lightning are
    skipped: those frameworks reduce gradients and insert the barrier themselves.

    ## Why is this bad?
    XLA tensors are lazy. Without a barrier, nothing ever cuts the step's graph: every iteration
    appends to one ever-growing graph that is compiled anew at each accidental sync (logging,
    checkpointing), or keeps growing until the device runs out of memory. In multi-process data
    parallel training, a plain `optimizer.step()` also skips the gradient all-reduce, so replicas
    silently drift apart.

    Note that `xm.optimizer_step(optimizer)` alone does not fix the barrier: its default is
    `barrier=False`, it only reduces gradients (measured on torch_xla's CPU backend: about 20 steps/s
    without a barrier against about 800 steps/s with one). Pass `barrier=True`, call
    `torch_xla.sync()` once per step, or iterate a `MpDeviceLoader`.

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
    The fix is unsafe: on XLA, `xlalint.runtime.optimizer_step` now all-reduces gradients across
    replicas (when there are several) and runs the step barrier, which changes what is computed in
    multi-replica training and where graphs are cut. On CPU/GPU it is exactly `optimizer.step()`.
    A closure is passed on as `optimizer_args={"closure": closure}`.

    ## Known problems
    The barrier is searched in the step loops that run the call and in the module-local functions
    they call; when the call sits in a function whose loop is in another module, a barrier anywhere
    on a per-step path of the file (or a device loader anywhere in it) counts. Gradient reduction
    done by a framework configured in another file is not visible.
    """

    code, name, category = "XLA401", "optimizer-step-without-barrier", "optimizer_step"
    summary = "`{receiver}.step()` in an XLA training loop without a step barrier or gradient reduction"
    hint = ("use `xlalint.runtime.optimizer_step(optimizer, barrier=True)` (or `xm.optimizer_step(optimizer, "
            "barrier=True)`), or call `torch_xla.sync()` once per step / iterate a `MpDeviceLoader`")
    xla_only = True
    fix_availability = "always"

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
            from torch.nn.parallel import DistributedDataParallel as DDP
            ddp_model = DDP(model, gradient_as_bucket_view=True)
            for x, y in loader:
                loss_fn(ddp_model(x), y).backward()
                optimizer.step()
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
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._framework: bool | None = None
        self._file_barrier: bool | None = None

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "step":
            return
        closure = _closure_argument(node)
        if closure is False:
            return
        recv = receiver(node)
        if not self._is_optimizer(recv):
            return
        if not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        if self._inside_wrapper_step(node) or self._framework_handles_steps() or self._has_barrier(node):
            return
        # the receiver as written, its own parentheses included: `(opt).step()`
        spelled = self.ctx.code(node.func).rsplit(".", 1)[0].rstrip()
        self.report(node, self.summary.format(receiver=spelled),
                    fix=lambda cctx: _fix(cctx, node, with_closure=closure is not None))

    # -- the receiver -------------------------------------------------------------------------
    def _is_optimizer(self, recv: ast.expr | None) -> bool:
        base = recv.value if isinstance(recv, ast.Subscript) else recv  # optimizers[i].step()
        name = dotted_name(base)
        if not name:
            return False
        last = last_part(name)
        if NOT_OPTIMIZER.search(last):
            return False
        values = self.ctx.assigned_values(base)
        for value in values:
            if isinstance(value, ast.Call):
                qualified = self.ctx.qualified_name(value.func) or ""
                if qualified.startswith("torch.optim.lr_scheduler") or NOT_OPTIMIZER.search(last_part(qualified)):
                    return False
                if qualified.startswith("torch.optim.") or OPTIMIZER_CLASS.match(last_part(qualified)):
                    return True
        return bool(OPTIMIZER_NAME.search(last))

    # -- what already provides the barrier ---------------------------------------------------------
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

    def _framework_handles_steps(self) -> bool:
        if self._framework is None:
            names = self.ctx.index.all_names
            modules = [b.qualified for b in self.ctx.index.imports.values()]
            self._framework = bool(FRAMEWORK_NAMES & names) or any(
                m == prefix or m.startswith(prefix + ".") for m in modules for prefix in FRAMEWORK_MODULES
            ) or self._any_device_loader()
        return self._framework

    def _any_device_loader(self) -> bool:
        # A device loader is usually built in `main()` and iterated in another function: file-wide.
        return any(DEVICE_LOADER.match(last_part(dotted_name(call.func))) for call in self.ctx.index.calls)

    def _is_barrier(self, call: ast.Call) -> bool:
        qualified = self.ctx.qualified_name(call.func) or ""
        if qualified in BARRIER_CALLS:
            return True
        name = last_part(dotted_name(call.func))
        if name in BARRIER_NAMES:
            return True
        return name == "sync" and qualified.split(".")[0] in ("torch_xla", "torchax", "xlalint")

    def _body_has_barrier(self, owner: ast.AST) -> bool:
        """A barrier call in `owner`'s body or in a module-local function it calls (transitively)."""
        seen: set[ast.AST] = set()
        work = [owner]
        while work:
            current = work.pop()
            if current in seen:
                continue
            seen.add(current)
            for call in self.ctx.calls_within(current):
                if self._is_barrier(call):
                    return True
                name = dotted_name(call.func)
                if not name:
                    continue
                parts = name.split(".")
                if len(parts) == 1 or (len(parts) == 2 and parts[0] in ("self", "cls")):
                    work.extend(self.ctx.index.functions.get(parts[-1], ()))
        return False

    def _under_step_context(self, node: ast.AST) -> bool:
        """Inside `with torch_xla.step():` or a function compiled with `torch_xla.compile`."""
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)):
                for item in anc.items:
                    call = item.context_expr
                    if isinstance(call, ast.Call) and self.ctx.qualified_name(call.func) in ("torch_xla.step",
                                                                                            "torch_xla.compile"):
                        return True
            if isinstance(anc, FUNCTIONS):
                for target in anc.decorator_list:
                    target = target.func if isinstance(target, ast.Call) else target
                    if self.ctx.qualified_name(target) in ("torch_xla.compile", "torch_xla.step"):
                        return True  # @torch_xla.compile
                if self._compiled_by_name(anc.name):
                    return True
        return False

    def _compiled_by_name(self, name: str) -> bool:
        for call in self.ctx.index.calls:
            if self.ctx.qualified_name(call.func) == "torch_xla.compile":
                target = _first_argument(call)
                if isinstance(target, (ast.Starred, ast.keyword)):
                    target = target.value
                if target is not None and last_part(dotted_name(target)) == name:
                    return True
        return False

    def _running_loops(self, node: ast.AST) -> tuple[list[ast.AST], bool]:
        """The step loops (or functions) that run `node`, and whether all of them were found in this
        file. Walks up to the innermost step loop; from a function, to the loops calling it."""
        owners: list[ast.AST] = []
        complete = True
        pending: list[ast.AST] = [node]
        seen: set[ast.AST] = set()
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            func = None
            for anc in self.ctx.index.ancestors(current):
                if isinstance(anc, LOOPS) and is_step_loop(self.ctx, anc):
                    owners.append(anc)
                    break
                if isinstance(anc, FUNCTIONS):
                    func = anc
                    break
            else:
                continue
            if func is None:
                continue
            owners.append(func)
            callers = self._call_sites(func.name)
            if not callers:
                complete = False
            pending.extend(callers)
        return owners, complete

    def _call_sites(self, name: str) -> list[ast.Call]:
        sites = []
        for call in self.ctx.index.calls:
            called = dotted_name(call.func)
            if not called:
                continue
            parts = called.split(".")
            if parts[-1] == name and (len(parts) == 1 or (len(parts) == 2 and parts[0] in ("self", "cls"))):
                sites.append(call)
        return sites

    def _has_barrier(self, node: ast.Call) -> bool:
        if self._under_step_context(node):
            return True
        # the step loops that run the call, with the functions they call: a barrier elsewhere in the
        # file (e.g. once per epoch, or in another loop) does not cut this loop's graph
        owners, complete = self._running_loops(node)
        for owner in owners:
            if self._under_step_context(owner) or self._body_has_barrier(owner):
                return True
        if not complete:
            # the loop is elsewhere (a library calls this step function): trust a per-step barrier
            # anywhere in the file
            return self._file_has_barrier()
        return False

    def _file_has_barrier(self) -> bool:
        if self._file_barrier is None:
            self._file_barrier = any(
                self._is_barrier(call) and self.ctx.is_per_step(call, periodic=True)
                for call in self.ctx.index.calls
            )
        return self._file_barrier


# -- the fix, built on libcst --------------------------------------------------------------------
def _fix(cctx: CstContext, node: ast.Call, *, with_closure: bool) -> Fix | None:
    call = cctx.locate(node)
    if call is None:
        return None
    spelled, request = importable(cctx, "xlalint.runtime", "optimizer_step")
    text = f"{spelled}({cctx.code(call.func.value)}, barrier=True"
    if with_closure:  # the call's one argument, positional or `closure=`
        text += f', optimizer_args={{"closure": {cctx.code(call.args[0].value)}}}'
    text += ")"
    return Fix.replace(call, cctx.parse_expression(text), title=f"Replace with `{spelled}(..., barrier=True)`",
                       safe=False, imports=[request])


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
