"""XLA707 host-built-tensor-in-step: Flags a tensor a torch factory builds on the host from values
fixed across steps and moves to the device with `.to(device)`, on a per-step path of torch_xla code."""

from __future__ import annotations

import ast

from xlalint.analysis.evidence import invariance_evidence
from xlalint.analysis.names import keyword, positional
from xlalint.analysis.uploads import Upload, host_upload
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid


class HostBuiltTensorInStep(Rule):
    """## What it does
    Flags a tensor built on the host by a torch factory (`torch.zeros`, `ones`, `full`, `empty`,
    `arange`, `linspace`, `logspace`, `eye`, `tensor`, `as_tensor`, `from_numpy`, with no `device=`
    or a CPU one) and moved to the device with `.to(device)`, `.to(x.device)` or
    `.to(device=...)`, when the line runs every step of torch_xla code (in a training loop, a
    function it calls, a module's `forward`) and the factory's arguments are the same at every
    step: literals, sizes read from shapes (`x.shape[-1]`, `x.size(0)`, which are Python ints on
    XLA), attributes set once in `__init__`, and parameters every caller in the project passes such
    values for (a `functools.partial` of the function, called later, counts as a call). Casts on
    the way (`torch.from_numpy(a).float().to(d)`) and a name assigned the factory's result are seen
    too. Code that runs on XLA: files that use torch_xla, and the modules of a project that does
    (its models, its helpers) unless they are its CUDA path.

    ## Why is this bad?
    On torch_xla, a CPU tensor moved with `.to(device)` becomes device data: its bytes are copied
    from the host to the device (counted by `TransferToDeviceTime` in the metrics report) every
    time the line runs, and the graph takes it as an input instead of computing it. A factory given
    `device=` is an operation of the graph (`torch.zeros(n, device=d)` is a broadcast constant): no
    transfer. Measured with torch 2.8 and torch_xla 2.8 on the CPU device, `torch.ones(n).to(dev)`
    in a five-step loop made 5 host-to-device transfers, `torch.ones(n, device=dev)` none. A table
    read from numpy at every call (`torch.from_numpy(self.alphas).to(t.device)[t]`) sends the
    whole table at every call, several times a step when a helper does it for each schedule. The
    same holds under torchax's eager mode, where the project's tests count it: a 4096-element
    `torch.linspace(...).to("jax")` is converted to a device array, all 4096 elements, at each of
    three calls (a transfer JAX's transfer guard refuses), and the factory given the device
    converts no host tensor.

    Not reported:
    - a factory given the device (`torch.linspace(a, b, n, device=x.device)`);
    - data that changes every step: the batch and values built from it
      (`torch.tensor(batch["ids"]).to(device)`), a loop's variable, a list or tensor filled in the
      call (`lengths.append(n)`, `t[:, :n] = x`); that is the input pipeline's transfer, which a
      device loader overlaps with the step, or another hazard;
    - random factories (`torch.rand`, `randn`, `randint`): built on the device they draw from
      another generator, so the numbers change;
    - code that runs once (`__init__`, set-up before the loop) or behind a step gate, code off
      XLA (a CUDA-only branch, a module of the project's CUDA path) and projects that do not use
      torch_xla. (A loop over evaluation batches is per step too: each batch uploads again.)

    A factory whose arguments come from callers in other modules is reported as `possible`.

    ## Example
    ```python
    class PatchGrid(nn.Module):
        def forward(self, images):
            h, w = images.shape[-2:]
            xs = torch.linspace(-1, 1, w).to(images.device)
            return images * xs
    ```

    Use instead:
    ```python
    class PatchGrid(nn.Module):
        def forward(self, images):
            h, w = images.shape[-2:]
            xs = torch.linspace(-1, 1, w, device=images.device)
            return images * xs
    ```

    ## Fix safety
    The fix passes the device to the factory (`torch.linspace(a, b, n).to(d)` becomes
    `torch.linspace(a, b, n, device=d)`) when the factory computes its values (`zeros`, `ones`,
    `full`, `empty`, `arange`, `linspace`, `logspace`, `eye`) and `.to` is given the device alone on
    the factory's own result: the same values, dtype and device. It is safe. A move that also casts
    (`.to(d, torch.long)`) is not fixed: computing in the target dtype can round differently.

    A tensor copied from host data (`torch.tensor`, `torch.as_tensor`, `torch.from_numpy`) has no
    local fix: `device=` on these still copies the data from the host. Build it once on the device:
    in `__init__`, as a buffer (`self.register_buffer("table", torch.from_numpy(table))`, which
    `model.to(device)` moves once), or pass Python scalars instead of one-element tensors.

    ## References
    - [PyTorch on XLA devices (torch_xla v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/pytorch-on-xla-devices.md):
      tensors created on the XLA device are lazy; data copied from the CPU is device data
    - [Troubleshooting, metrics (torch_xla v2.9.0)](https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md):
      `TransferToDeviceTime` counts host-to-device transfers
    - [`torch.nn.Module.register_buffer`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_buffer)
    """

    code, name, category = "XLA707", "host-built-tensor-in-step", "other"
    evidence = ("step",)
    summary = "`torch.{factory}(...)` is built on the host and copied to the device at every step"
    hint = "pass `device=` to the factory, or build the tensor once (in `__init__`, as a buffer)"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            class Grid(torch.nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.register_buffer("xs", torch.linspace(-1, 1, n).to("cpu"))
                    self.ys = torch.arange(n).to(xm.xla_device())  # once

                def forward(self, x):
                    w = x.shape[-1]
                    return x * torch.linspace(-1, 1, w, device=x.device) + self.xs
            """
        ),
        Valid(
            """
            import torch
            import torch_xla.core.xla_model as xm

            device = xm.xla_device()
            for batch in loader:
                ids = torch.tensor(batch["ids"]).to(device)  # the batch: new data every step
                noise = torch.randn(ids.shape).to(device)  # random: another generator on the device
                loss = model(ids, noise)
                loss.backward()
                xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            import torch

            class Grid(torch.nn.Module):  # no torch_xla in this file
                def forward(self, x):
                    return x * torch.linspace(-1, 1, x.shape[-1]).to(x.device)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla

            class Grid(torch.nn.Module):
                def forward(self, x):
                    w = x.shape[-1]
                    xs = torch.linspace(-1, 1, w).to(x.device)
                    return x * xs
            """,
            line=7,
            expected_replacement="""
            import torch
            import torch_xla

            class Grid(torch.nn.Module):
                def forward(self, x):
                    w = x.shape[-1]
                    xs = torch.linspace(-1, 1, w, device=x.device)
                    return x * xs
            """,
        ),
        Invalid(
            """
            import numpy as np
            import torch
            import torch_xla.core.xla_model as xm

            def extract(table, t):
                return torch.from_numpy(table).to(device=t.device)[t].float()

            class Diffusion:
                def __init__(self, steps):
                    self.alphas = np.linspace(1e-4, 0.02, steps)

                def loss(self, model, x, t):
                    return (model(x, t) - extract(self.alphas, t) * x).pow(2).mean()

            for x, t in loader:
                loss = diffusion.loss(model, x, t)
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        upload = host_upload(self.ctx, node)
        if upload is None or not self.ctx.runs_hot(node) or not self._on_xla():
            return
        constant = invariance_evidence(self.ctx, upload)
        if constant is None:
            return
        fix = (lambda cctx: _device_on_factory(cctx, upload)) if _fixable(upload) else None
        evidence = self.ctx.step_evidence(node) & constant
        self.report(node, self.summary.format(factory=upload.name), fix=fix, evidence=evidence)

    def _on_xla(self) -> bool:
        """A file that uses torch_xla, or a module of a project that does and that is not its CUDA
        path (`placed_off_xla`): a model's or a helper's module runs on the XLA device its training
        script puts the tensors on, without importing torch_xla itself. (Asked here, of files with
        an upload in per-step code, not of every file: the project's facts are questions too.)"""
        return self.ctx.uses_xla or (self.ctx.project.project_uses_xla and not self.ctx.placed_off_xla)


def _fixable(upload: Upload) -> bool:
    """`torch.<computed>(...).to(d)` / `.to(device=d)` (and `non_blocking=`): the device alone."""
    move = upload.move
    extra = [k for k in move.keywords if k.arg not in ("device", "non_blocking")]
    return upload.direct and upload.generated and not extra and len(positional(move)) == len(move.args) <= 1


def _device_on_factory(cctx, upload: Upload):
    from xlalint.fixing.cst_names import with_keyword

    move = cctx.locate(upload.move)
    factory = cctx.locate(upload.factory)
    target = cctx.locate(upload.target)
    if move is None or factory is None or target is None:
        return None
    device = keyword(upload.factory, "device")
    title = "Pass the device to the factory" + (" (instead of the CPU)" if device is not None else "")
    return Fix.replace(move, with_keyword(factory, "device", target), title=title, safe=True)
