"""XLA708 ddp-accumulation-without-no-sync: Flags the `.backward()` of a gradient-accumulation loop
whose model runs its forward through `DistributedDataParallel` on every micro-batch, outside
`no_sync()`: DDP all-reduces the gradients at every micro-batch, not once per optimizer step."""

from __future__ import annotations

import ast

from xlalint.analysis.barriers import names_in
from xlalint.analysis.ddp import describe_wrap
from xlalint.analysis.evidence import seen
from xlalint.analysis.index import LOOPS
from xlalint.analysis.names import method_name, receiver
from xlalint.rule import Invalid, Rule, Valid


class DdpAccumulationWithoutNoSync(Rule):
    """## What it does
    Flags the `.backward()` of a gradient-accumulation loop (the backward runs every iteration, the
    optimizer steps only every N: `if (i + 1) % accumulation_steps == 0: optimizer.step()`) whose
    model runs its forward through a `torch.nn.parallel.DistributedDataParallel` (DDP) wrapper on
    every micro-batch, with no `model.no_sync()` around the forwards of the micro-batches that do
    not step.

    ## Why is this bad?
    DDP all-reduces the gradients during the backward of every forward run through the wrapper:
    with N micro-batches per optimizer step, that is N full gradient all-reduces where the step
    needs one, the last (the gradients accumulate locally, and DDP's reduction of the summed
    gradients at the last micro-batch gives the same average). On TPU the all-reduces also go into
    each micro-batch's graph. `no_sync()` skips the reduction of the forwards run under it; DDP
    reduces the accumulated gradients at the first forward and backward outside it.

    DDP decides at the *forward*: a forward under `no_sync()` is not reduced wherever its backward
    runs, and a backward under `no_sync()` whose forward ran outside it still is.

    Not reported: forwards under `with model.no_sync():` or under a context that may be one
    (`model.no_sync() if not last else contextlib.nullcontext()`); a file that sets
    `require_backward_grad_sync` (the flag `no_sync` sets); an optimizer that steps every
    micro-batch; a model that is not wrapped in DDP. FSDP's `no_sync` is not asked for: it keeps
    unsharded gradients on every replica, a memory cost FSDP code may choose not to pay.

    ## Example
    ```python
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accumulation_steps
        loss.backward()  # all-reduces the gradients at every micro-batch
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    Use instead:
    ```python
    import contextlib
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    for i, (x, y) in enumerate(loader):
        stepping = (i + 1) % accumulation_steps == 0
        with contextlib.nullcontext() if stepping else model.no_sync():
            loss = loss_fn(model(x), y) / accumulation_steps
            loss.backward()
        if stepping:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Fix safety
    There is no fix: the forward and backward must move under a context chosen by the step's
    condition, which the author writes.

    ## Known problems
    The forward must be seen on the loop's path (in the loop, or in a function of this module it
    calls); a model handed to a function of another module is not followed. Accumulation over an
    inner loop of micro-batches is not recognised.

    ## References
    - [DistributedDataParallel.no_sync](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync):
      "Context manager to disable gradient synchronizations across DDP processes ... The forward pass
      should be included inside the context manager, or else gradients will still be synchronized."
    - `torch/nn/parallel/distributed.py`: the forward arms the reducer's hooks only when
      `require_backward_grad_sync` is true; `no_sync` sets it false
    """

    code, name, category = "XLA708", "ddp-accumulation-without-no-sync", "other"
    summary = (
        "DDP all-reduces the gradients at every micro-batch's backward, but the optimizer steps only every N: "
        "run the non-stepping micro-batches under `model.no_sync()`"
    )
    message = (
        "DDP (wrapped at line {line}) all-reduces the gradients at every micro-batch's backward; the "
        "optimizer steps only every N (line {step}): N-1 of N are wasted"
    )
    hint = "run the forward and backward of the micro-batches that do not step under `model.no_sync()`"
    xla_only = True

    VALID = [
        Valid(
            """
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                if (i + 1) % accumulation_steps != 0:
                    with model.no_sync():
                        (loss_fn(model(x), y) / accumulation_steps).backward()
                else:
                    (loss_fn(model(x), y) / accumulation_steps).backward()
                    optimizer.step()
                    optimizer.zero_grad()
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import contextlib
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                stepping = (i + 1) % accumulation_steps == 0
                sync_context = contextlib.nullcontext() if stepping else model.no_sync()
                with sync_context:
                    loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                if stepping:
                    optimizer.step()
                torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                loss_fn(model(x), y).backward()
                optimizer.step()  # steps every micro-batch: each all-reduce is used
                if i % log_every == 0:
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import contextlib
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            def grad_sync(model, enabled):
                return contextlib.nullcontext() if enabled else model.no_sync()

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                stepping = (i + 1) % accumulation_steps == 0
                with grad_sync(model, stepping):
                    (loss_fn(model(x), y) / accumulation_steps).backward()
                if stepping:
                    optimizer.step()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla

            for i, (x, y) in enumerate(loader):  # no DDP: nothing is reduced per micro-batch
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for micro_step, (x, y) in enumerate(loader):
                model.require_backward_grad_sync = (micro_step + 1) % accumulation_steps == 0
                (loss_fn(model(x), y) / accumulation_steps).backward()
                if (micro_step + 1) % accumulation_steps == 0:
                    optimizer.step()
                    torch_xla.sync()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    torch_xla.sync()
            """,
            line=7,
        ),
        Invalid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            def train_loop(loader, model, optimizer, accum):
                for step, (x, y) in enumerate(loader):
                    loss = model(x, y) / accum
                    loss.backward()
                    if step % accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()

            def main(model, loader):
                model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
                train_loop(loader, model, make_optimizer(model), 4)
            """,
            line=7,
        ),
        Invalid(
            """
            import torch_xla
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y) / accumulation_steps
                with model.no_sync():  # too late: DDP armed its hooks in the forward
                    loss.backward()
                if (i + 1) % accumulation_steps == 0:
                    optimizer.step()
                    torch_xla.sync()
            """,
            line=8,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "backward" or self.ctx.in_non_xla_code(node):
            return
        barriers, ddp = self.ctx.barriers, self.ctx.data_parallel
        if barriers.in_framework_class(node):
            return
        for top, gates in ddp.tops(node, frozenset(names_in(receiver(node)))):
            if not isinstance(top, LOOPS) or _every_n(gates):
                continue
            steps = barriers.optimizer_steps(top)
            if not steps or not all(_every_n(g) for _, g in steps):
                continue
            for forward, forward_gates in ddp.forwards_run_by(top):
                if _every_n(forward_gates) or ddp.without_sync(forward.call):
                    continue
                step = steps[0][0]
                shown = (
                    seen(self.ctx, forward.wrap, describe_wrap(self.ctx, forward.wrap))
                    & seen(self.ctx, forward.call, "forward through the DDP wrapper on every micro-batch")
                    & seen(self.ctx, step, f"the optimizer steps only every N: `{self.ctx.code(step)}`")
                )
                self.report(
                    node,
                    self.message.format(line=forward.wrap.lineno, step=step.lineno),
                    evidence=shown,
                )
                return


def _every_n(gates: frozenset) -> bool:
    return any(key[0] == "every" for key in gates)
