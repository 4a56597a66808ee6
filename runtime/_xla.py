"""Lazy access to torch_xla, the step barrier, and TorchTPU.

torch_xla is never imported eagerly: the runtime must work (and stay cheap to
import) on CPU/GPU installs, and importing torch_xla has side effects (it
monkeypatches torch.nn.utils and may initialise a PJRT client).

TorchTPU (Google's ``torch.device("tpu")`` plug-in, torch-tpu 0.2.0) has no
torch_xla: its tensors are eager by default, like CUDA's, so there is no graph
to cut. There the barrier waits with PyTorch's public, device-generic
``torch.accelerator.synchronize()`` when asked to wait; 0.2.0 makes
``torch.tpu.synchronize()`` internal (it raises from user code with
torch >= 2.11), so the runtime never calls it.
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
    module: ModuleType = xm  # (untyped: torch_xla ships no annotations)
    return module


def _runtime_initialized(torch_xla: ModuleType) -> bool:
    # An uninitialised runtime has no pending device work, and calling sync()
    # would create a PJRT client (possibly grabbing a TPU/GPU) as a side effect.
    probe = getattr(getattr(torch_xla, "_XLAC", None), "_xla_runtime_is_initialized", None)
    return True if probe is None else bool(probe())


def on_torchtpu() -> bool:
    """The current accelerator is TorchTPU's ``tpu`` device (its plug-in renames PrivateUse1 to "tpu")."""
    current = getattr(getattr(torch, "accelerator", None), "current_accelerator", None)
    if current is None:
        return False
    try:
        device = current()
    except RuntimeError:  # no accelerator runtime usable here
        return False
    return device is not None and device.type == "tpu"


def sync(wait: bool = False) -> None:
    """Step barrier: ``torch_xla.sync(wait=wait)`` where torch_xla is in use, else a no-op,
    except that on TorchTPU ``wait=True`` waits for the device.

    "In use" means torch_xla is already imported (``sys.modules``) and its
    runtime is initialised; this function never imports torch_xla itself.
    On torch_xla releases without ``torch_xla.sync`` (before 2.4) it calls
    ``xm.mark_step(wait=wait)`` instead.

    On TorchTPU (no torch_xla; the current accelerator is ``tpu``) there is no
    graph to cut: ``wait=False`` does nothing and ``wait=True`` calls
    ``torch.accelerator.synchronize()``, the public wait for all of the
    device's streams (``torch.tpu.synchronize()`` raises in torch-tpu 0.2.0).
    A ``wait`` that is not a bool is a ``TypeError``.
    """
    if not isinstance(wait, bool):
        raise TypeError(f"sync(): argument 'wait' must be bool, not {type(wait).__name__}")
    torch_xla = sys.modules.get("torch_xla")
    if torch_xla is None or not _runtime_initialized(torch_xla):
        if wait and on_torchtpu():
            torch.accelerator.synchronize()
        return
    tx_sync = getattr(torch_xla, "sync", None)
    if tx_sync is not None:
        tx_sync(wait=wait)
        return
    xm = xla_model()
    if xm is not None:  # torch_xla < 2.8 has no torch_xla.sync
        xm.mark_step(wait=wait)  # noqa: XLA602
