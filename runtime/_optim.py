"""``optimizer_step``: one call that is right on XLA and a plain step elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from . import _args
from ._xla import xla_model


def _on_xla(optimizer: torch.optim.Optimizer) -> bool:
    return any(p.device.type == "xla" for group in optimizer.param_groups for p in group["params"])


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = True,
    optimizer_args: Mapping[str, Any] | None = None,
) -> Any:
    """Run ``optimizer.step`` and, on XLA, the gradient all-reduce and step barrier.

    * Parameters on an XLA device (``p.device.type == "xla"``) with torch_xla
      importable: delegates to ``torch_xla.core.xla_model.optimizer_step(
      optimizer, barrier=barrier, optimizer_args=optimizer_args or {})``, which
      all-reduces gradients when world_size > 1, steps, then calls
      ``torch_xla.sync()`` if ``barrier``. Note the default differs from
      ``xm.optimizer_step`` (``barrier=False``): this is the missing per-step
      barrier of XLA109.
    * Anywhere else (CPU, CUDA, torchax's 'jax' device, TorchTPU's 'tpu'
      device): exactly ``optimizer.step(**(optimizer_args or {}))``; ``barrier``
      is ignored. TorchTPU has no torch_xla and runs eagerly: there is no graph
      to cut, and gradients are reduced by DDP/FSDP2 over the "tpu" process
      group, not here.

    Pass a closure as ``optimizer_args={"closure": closure}``. Returns what
    ``optimizer.step`` returns (the closure's loss, e.g. for LBFGS).

    Do not use it under DDP/FSDP/SPMD wrappers, which reduce gradients
    themselves (it would all-reduce a second time, or, for FSDP, be wrong).

    ``TypeError`` for an ``optimizer`` without ``param_groups`` and ``step``
    (the model passed instead of its optimizer, say), a ``barrier`` that is not
    a bool (a closure passed where ``optimizer.step(closure)`` took it) and an
    ``optimizer_args`` that is not a mapping.
    """
    _check(optimizer, barrier, optimizer_args)
    args = dict(optimizer_args or {})
    if _on_xla(optimizer):
        xm = xla_model()
        if xm is not None:
            return xm.optimizer_step(optimizer, barrier=barrier, optimizer_args=args)
    return optimizer.step(**args)


def _check(optimizer: object, barrier: object, optimizer_args: object) -> None:
    # duck-typed as torch_xla's own optimizer_step: wrappers (ZeroRedundancyOptimizer, accelerate's
    # AcceleratedOptimizer) hold `param_groups` and `step` without all being torch Optimizers
    if not hasattr(optimizer, "param_groups") or not callable(getattr(optimizer, "step", None)):
        hint = ""
        if isinstance(optimizer, torch.nn.Module):
            hint = ": pass the optimizer (e.g. torch.optim.SGD(model.parameters(), lr=...)), not the model"
        raise TypeError(
            f"optimizer_step(): argument 'optimizer' must be a torch.optim.Optimizer, not {_args.describe(optimizer)}{hint}"
        )
    if not isinstance(barrier, bool):
        hint = ""
        if callable(barrier):
            hint = ": to pass a closure, use optimizer_args={'closure': closure}"
        raise TypeError(f"optimizer_step(): argument 'barrier' must be bool, not {_args.describe(barrier)}{hint}")
    if optimizer_args is not None and not isinstance(optimizer_args, Mapping):
        raise TypeError(
            "optimizer_step(): argument 'optimizer_args' must be a mapping of keyword arguments for "
            f"optimizer.step (e.g. {{'closure': closure}}), not {_args.describe(optimizer_args)}"
        )
