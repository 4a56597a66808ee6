"""``optimizer_step``: one call that is right on XLA and a plain step elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

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
    """
    args = dict(optimizer_args or {})
    if _on_xla(optimizer):
        xm = xla_model()
        if xm is not None:
            return xm.optimizer_step(optimizer, barrier=barrier, optimizer_args=args)
    return optimizer.step(**args)
