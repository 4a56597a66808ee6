"""XLA401 optimizer-step-without-barrier: Flags a plain `optimizer.step()` (or
`optimizer.step(closure)`) on a per-step path of a torch_xla training loop when nothing cuts that
loop's graph every step."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING

from xlalint.analysis.barriers import DEVICE_BATCHES, UNKNOWN_BATCHES, StepPath, names_in
from xlalint.analysis.index import FUNCTIONS
from xlalint.analysis.names import (
    dotted_name,
    function_params,
    has_star_args,
    is_constant,
    last_part,
    method_name,
    receiver,
)
from xlalint.analysis.vocabulary import OPTIMIZER_CLASS, OPTIMIZER_NAME
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import insert_sync_after, simple_statement

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


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

    A per-step call of a function of another module of the project that steps an optimizer with
    no barrier of its own (`mp_trainer.optimize(opt)` running `opt.step()`) is reported at the call,
    when the loop calling it has no barrier either.

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
    hint = (
        "cut the graph once per step: iterate a `MpDeviceLoader` or call `torch_xla.sync()` after the step; "
        "where nothing else reduces the gradients, `xm.optimizer_step(optimizer, barrier=True)` does both"
    )
    helper = (
        "`{helper}()` steps the optimizer ({where}) in an XLA training loop that has no step barrier: "
        "nothing cuts the step's graph"
    )
    reduced = (
        "`{receiver}.step()` in an XLA training loop without a step barrier: {reducer} already reduces "
        "the gradients, but nothing cuts the step's graph"
    )
    xla_only = True
    fix_availability = "sometimes"

    HELPERS = {
        "fp16_util.py": """
        class MixedPrecisionTrainer:
            def __init__(self, model):
                self.model = model

            def backward(self, loss):
                loss.backward()

            def optimize(self, opt):
                grad_norm = self._grad_norm()
                opt.step()
                return grad_norm

            def optimize_and_sync(self, opt):
                opt.step()
                xm.mark_step()
        """,
        "utils.py": """
        import torch
        import torch_xla.core.xla_model as xm

        def get_device():
            return xm.xla_device()

        def get_cuda_device():
            return torch.device("cuda")
        """,
    }

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
        Valid(
            """
            import torch_xla
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in loader:
                mp_trainer.backward(loss_fn(model(x), y))
                mp_trainer.optimize(opt)
                torch_xla.sync()  # the loop cuts the graph after the helper's step
            """,
            modules=HELPERS,
        ),
        Valid(
            """
            import torch_xla
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in loader:
                mp_trainer.backward(loss_fn(model(x), y))
                mp_trainer.optimize_and_sync(opt)  # the helper syncs after its step
            """,
            modules=HELPERS,
        ),
        Valid(
            """
            from utils import get_cuda_device  # no XLA here: the device comes from CUDA

            device = get_cuda_device()
            for x, y in loader:
                loss_fn(model(x.to(device)), y.to(device)).backward()
                optimizer.step()
            """,
            modules=HELPERS,
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
        Invalid(
            """
            import torch_xla
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in loader:
                mp_trainer.backward(loss_fn(model(x), y))
                mp_trainer.optimize(opt)
            """,
            line=7,
            expected_replacement="""
            import torch_xla
            from fp16_util import MixedPrecisionTrainer
            from xlalint.runtime import sync

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in loader:
                mp_trainer.backward(loss_fn(model(x), y))
                mp_trainer.optimize(opt)
                sync()
            """,
            applicability=Applicability.UNSAFE,
            modules=HELPERS,
        ),
        Invalid(
            """
            from utils import get_device  # an XLA device: this code runs on XLA

            device = get_device()
            for x, y in loader:
                loss_fn(model(x.to(device)), y.to(device)).backward()
                optimizer.step()
            """,
            line=6,
            modules=HELPERS,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "step":
            self._visit_helper(node)
            return
        closure = _closure_argument(node)
        if closure is False:
            return
        barriers = self.ctx.barriers
        recv = receiver(node)
        if recv is None or not barriers.is_optimizer(recv):
            return
        if not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        if self._inside_wrapper_step(node) or barriers.in_framework_class(node) or barriers.framework_owns(recv):
            return
        paths = barriers.paths(node, names_in(recv))
        if all(self._has_barrier(path) for path in paths):
            return
        # the receiver as written, its own parentheses included: `(opt).step()`
        spelled = self.ctx.code(node.func).rsplit(".", 1)[0].rstrip()
        reducer = barriers.gradient_reducer(recv, paths)
        if reducer is not None:
            statement = simple_statement(self.ctx, node)
            self.report(
                node,
                self.reduced.format(receiver=spelled, reducer=reducer),
                fix=(lambda cctx: insert_sync_after(cctx, statement)) if statement is not None else None,
            )
            return
        self.report(
            node,
            self.summary.format(receiver=spelled),
            fix=lambda cctx: _fix(cctx, node, with_closure=closure is not None),
        )

    def _visit_helper(self, node: ast.Call) -> None:
        """A call of a project function in another module that steps an optimizer with no barrier
        (`mp_trainer.optimize(opt)`): the loop calling it owns the barrier."""
        found = self.ctx.helper_calls(node, "steps_optimizer")
        if not found or not self.ctx.is_per_step(node, periodic=True) or self.ctx.in_non_xla_code(node):
            return
        barriers = self.ctx.barriers
        if barriers.imports_framework or barriers.in_framework_class(node):
            return
        if all(self._has_barrier(path) for path in barriers.paths(node)):
            return
        helper, path, line = found[0]
        where = f"{os.path.relpath(path, os.path.dirname(os.path.abspath(str(self.ctx.path))))}:{line}"
        statement = simple_statement(self.ctx, node)
        self.report(
            node,
            self.helper.format(helper=helper, where=where),
            fix=(lambda cctx: insert_sync_after(cctx, statement)) if statement is not None else None,
        )

    def _has_barrier(self, path: StepPath) -> bool:
        barriers = self.ctx.barriers
        if barriers.covered(path):
            return True
        if path.in_loop:
            kind = barriers.loop_kind(path.top)
            return kind == DEVICE_BATCHES or (kind == UNKNOWN_BATCHES and barriers.has_device_loader)
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
                return (
                    "closure" in names
                    or bool(OPTIMIZER_NAME.search(cls.name))
                    or any(OPTIMIZER_NAME.search(b) or OPTIMIZER_CLASS.match(b) for b in bases if b)
                )
        return False


# -- fixes, built on libcst ------------------------------------------------------------------------
def _fix(cctx: CstContext, node: ast.Call, *, with_closure: bool) -> Fix | None:
    call = cctx.locate(node, cst.Call)
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None  # (`opt.step()`, as the rule found: a call of an attribute)
    spelled, request = cctx.importable("xlalint.runtime", "optimizer_step")
    text = f"{spelled}({cctx.code(call.func.value)}, barrier=True"
    if with_closure:  # the call's one argument, positional or `closure=`
        text += f', optimizer_args={{"closure": {cctx.code(call.args[0].value)}}}'
    text += ")"
    return Fix.replace(
        call,
        cctx.parse_expression(text),
        title=f"Replace with `{spelled}(..., barrier=True)`",
        safe=False,
        imports=[request],
    )


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
