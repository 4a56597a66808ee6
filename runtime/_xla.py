"""Lazy access to torch_xla, and the step barrier.

torch_xla is never imported eagerly: the runtime must work (and stay cheap to
import) on CPU/GPU installs, and importing torch_xla has side effects (it
monkeypatches torch.nn.utils and may initialise a PJRT client).
"""

from __future__ import annotations

import sys
from types import ModuleType

import torch

# Device types whose tensors are traced/lazy XLA values: reading a value on the
# host (``bool(t)``, ``.item()``) forces a graph execution there ('xla' is
# torch_xla, 'jax' is torchax). The runtime never reads tensor values on them.
LAZY_DEVICE_TYPES = frozenset({"xla", "jax"})


def is_lazy_device(device: torch.device) -> bool:
    return device.type in LAZY_DEVICE_TYPES


def xla_model() -> ModuleType | None:
    """``torch_xla.core.xla_model``, or None when torch_xla cannot be imported."""
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        return None
    return xm


def _runtime_initialized(torch_xla: ModuleType) -> bool:
    # An uninitialised runtime has no pending device work, and calling sync()
    # would create a PJRT client (possibly grabbing a TPU/GPU) as a side effect.
    probe = getattr(getattr(torch_xla, "_XLAC", None), "_xla_runtime_is_initialized", None)
    return True if probe is None else bool(probe())


def sync(wait: bool = False) -> None:
    """Step barrier: ``torch_xla.sync(wait=wait)`` where torch_xla is in use, else a no-op.

    "In use" means torch_xla is already imported (``sys.modules``) and its
    runtime is initialised; this function never imports torch_xla itself.
    On torch_xla releases without ``torch_xla.sync`` (before 2.4) it calls
    ``xm.mark_step(wait=wait)`` instead.
    """
    torch_xla = sys.modules.get("torch_xla")
    if torch_xla is None or not _runtime_initialized(torch_xla):
        return
    tx_sync = getattr(torch_xla, "sync", None)
    if tx_sync is not None:
        tx_sync(wait=wait)
        return
    xm = xla_model()
    if xm is not None:  # torch_xla < 2.8 has no torch_xla.sync
        xm.mark_step(wait=wait)  # noqa: XLA602
