"""XLA109 helper-read-in-step: Flags a per-step call of a function of another module of the project
that reads the device tensor it is given to the host (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`,
`float(t.sum())`) on every call."""

from __future__ import annotations

import ast
import os

from xlalint.analysis.reads import argument_reads, read_cause
from xlalint.analysis.tensors import holds_device_tensors
from xlalint.rule import Invalid, Rule, Valid


class HelperReadInStep(Rule):
    """## What it does
    Flags a per-step call of a function of another module of the project that reads the device
    tensor it is given to the host (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float(t.sum())`)
    on every call: an input check, a metric or a logging helper, a meter or logger object whose
    `update` converts what it is given (`metric_logger.update(**losses)` reading each value of its
    `**kwargs`, `meter.update(loss)` doing `float(val)`), resolved through the class of the receiver
    where the project creates the instance. A helper in the same module is
    per step itself, and its read is reported where it is, by XLA101-XLA103; its calls are reported
    too when it returns what it read (`sizes = grid_sizes(coords)` hands host numbers back, like a
    `.tolist()` at the call); the read is then their related location (SARIF), not a finding of
    its own, unless the helper runs every step by its own name (a loss): then the read is the one
    finding and names the calls. A read in the branch of a string option (`if reduction == "mean":`)
    counts only at calls that select it. A call of a method that reads device tensors of its own
    object on every call (`mp_trainer.optimize(opt)` computing the gradient norm with a
    `.item()` per parameter) is reported in code that runs on XLA.

    ## Why is this bad?
    The read is a host sync like any other `.item()` in the loop: the pending graph compiles and
    runs there and the step is cut in two. Inside the helper it looks harmless (the helper may also
    be called with CPU tensors, before `.to(device)`); the cost is at the call that hands it a device
    tensor every step, so that call is reported, with the line of the read.

    ## Example
    ```python
    # checks.py
    def check_targets(targets, num_classes):
        if targets.max().item() >= num_classes:
            raise ValueError("label out of range")

    # train.py
    from checks import check_targets

    for x, y in pl.MpDeviceLoader(loader, device):
        check_targets(y, num_classes)
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
    ```

    Use instead:
    ```python
    for x, y in loader:  # check on the host, before the batch moves to the device
        check_targets(y, num_classes)
        x, y = x.to(device), y.to(device)
        ...
    ```
    or check every N steps, or once on the dataset.

    ## Fix safety
    No automatic fix.
    """

    code, name, category = "XLA109", "helper-read-in-step", "item_sync"
    evidence = ("step",)
    summary = (
        "`{helper}()` reads the device tensor passed as `{param}` to the host ({what} at {where}): a sync every step"
    )
    state = "`{helper}()` reads a device tensor of its own to the host (`{what}` at {where}) on every call: a sync every step"
    hint = "check or log on the host before `.to(device)`, every N steps, or keep the helper's result on the device"

    CHECKS = {
        "checks.py": """
        def check_targets(targets, num_classes):
            if targets.max().item() >= num_classes:
                raise ValueError("label out of range")
        """
    }

    TRAINER = {
        "fp16_util.py": """
        import numpy as np
        import torch as th

        class MixedPrecisionTrainer:
            def __init__(self, model):
                self.master_params = list(model.parameters())
                self.steps = th.tensor(0)

            def optimize(self, opt):
                grad_norm = self._grad_norm()
                opt.step()
                return grad_norm

            def _grad_norm(self):
                total = 0.0
                for p in self.master_params:
                    total += th.norm(p.grad, p=2, dtype=th.float32).item() ** 2
                return np.sqrt(total)

            def count(self):
                self.steps += 1
                return int(self.steps.item())  # a CPU tensor
        """
    }

    METERS = {
        "meters.py": """
        import torch

        class MetricLogger:
            def __init__(self, delimiter="  "):
                self.meters = {}

            def update(self, **kwargs):
                for k, v in kwargs.items():
                    if isinstance(v, torch.Tensor):
                        v = v.item()
                    self.meters.setdefault(k, []).append(v)

        class AverageMeter:
            def __init__(self):
                self.sum, self.count = 0.0, 0

            def update(self, val, n=1):
                self.sum += float(val) * n
                self.count += n

        class LazyMeter:
            def update(self, val, n=1):
                if not torch.is_tensor(val):
                    val = float(val)  # only numbers are converted; tensors stay on the device
                self.last = val
        """
    }

    VALID = [
        Valid(
            """
            import torch_xla
            from meters import AverageMeter, LazyMeter, MetricLogger

            metric_logger, meter, lazy = MetricLogger(), AverageMeter(), LazyMeter()
            for step, (x, y) in enumerate(pl.MpDeviceLoader(loader, torch_xla.device())):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                metric_logger.update(lr=optimizer.param_groups[0]["lr"], step=step)  # host numbers
                meter.update(x.shape[0])
                lazy.update(loss)  # kept as a tensor
                if step % 100 == 0:
                    metric_logger.update(loss=loss)  # every N steps
            """,
            modules=METERS,
        ),
        Valid(
            """
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)  # no XLA in this file
            for x, y in loader:
                loss_fn(model(x), y).backward()
                mp_trainer.optimize(opt)
            """,
            modules=TRAINER,
        ),
        Valid(
            """
            import torch_xla
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in pl.MpDeviceLoader(loader, torch_xla.device()):
                loss_fn(model(x), y).backward()
                opt.step()
                mp_trainer.count()
            """,
            modules=TRAINER,
        ),
        Valid(
            """
            def top_k(logits, labels, k, reduction="mean"):
                hits = (logits.topk(k).indices == labels[:, None]).float().sum(-1)
                if reduction == "mean":
                    return hits.mean().item()
                return hits

            for x, y in pl.MpDeviceLoader(loader, device):
                logits = model(x)
                accuracy = top_k(logits, y, 5, reduction="none")  # the reading branch is not taken
                loss_fn(logits, y).backward()
                xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            from checks import check_targets

            loader = DataLoader(dataset, batch_size=32)
            for x, y in loader:  # host tensors
                check_targets(y, num_classes)
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            modules=CHECKS,
        ),
        Valid(
            """
            from checks import check_targets

            for step, (x, y) in enumerate(pl.MpDeviceLoader(loader, device)):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                if step % 100 == 0:
                    check_targets(y, num_classes)
            """,
            modules=CHECKS,
        ),
        Valid(
            """
            def check_targets(targets, num_classes):  # the read itself is reported, as XLA101
                if targets.max().item() >= num_classes:
                    raise ValueError("label out of range")

            for x, y in pl.MpDeviceLoader(loader, device):
                check_targets(y, num_classes)
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla
            import meters

            metric_logger = meters.MetricLogger(delimiter="  ")
            for images, targets in pl.MpDeviceLoader(loader, torch_xla.device()):
                loss_dict = model(images, targets)
                losses = sum(loss for loss in loss_dict.values())
                losses.backward()
                xm.optimizer_step(optimizer)
                metric_logger.update(loss=losses, **loss_dict)
            """,
            line=10,
            modules=METERS,
        ),
        Invalid(
            """
            import torch_xla
            from meters import AverageMeter

            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.losses = AverageMeter()

                def train_step(self, x, y):
                    loss = loss_fn(self.model(x), y)
                    loss.backward()
                    self.losses.update(loss.detach(), x.size(0))
                    return loss
            """,
            line=12,
            modules=METERS,
        ),
        Invalid(
            """
            import torch_xla
            from fp16_util import MixedPrecisionTrainer

            mp_trainer = MixedPrecisionTrainer(model)
            for x, y in pl.MpDeviceLoader(loader, torch_xla.device()):
                loss_fn(model(x), y).backward()
                mp_trainer.optimize(opt)
            """,
            line=7,
            modules=TRAINER,
        ),
        Invalid(
            """
            from checks import check_targets

            for x, y in pl.MpDeviceLoader(loader, device):
                check_targets(y, num_classes)
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            line=4,
            modules=CHECKS,
        ),
        Invalid(
            """
            def grid_sizes(coords):
                return [int(n.item()) for n in coords.amax(dim=1) + 1]

            class PosEmbed(nn.Module):
                def forward(self, x, coords):
                    sizes = grid_sizes(coords)  # host numbers handed back
                    return x + self.interpolate(sizes)
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        for helper, where, read, value in argument_reads(self.ctx, node, through=""):
            if holds_device_tensors(self.ctx, value) and self.ctx.runs_hot(node):
                self.report(
                    node,
                    self.summary.format(
                        helper=helper, param=read.star + read.param, what=f"`{read.what}`", where=where
                    ),
                    cause=read_cause(self.ctx, node, read),
                )
                return
        for helper, path, detail in self.ctx.helper_calls(node, "reads_state"):
            if self.ctx.uses_xla and self.ctx.runs_hot(node):
                line, _, what = detail.partition(":")
                where = f"{os.path.relpath(path, os.path.dirname(os.path.abspath(str(self.ctx.path))))}:{line}"
                self.report(node, self.state.format(helper=helper, what=what, where=where))
                return
