"""xlalint runtime: small, device-agnostic replacements that ``xlalint fix`` rewrites code to call.

Each function behaves like the torch call it replaces on CPU/GPU and avoids an
XLA performance hazard on XLA devices:

* ``optimizer_step``: ``optimizer.step()`` plus, on XLA, the gradient
  all-reduce and the per-step barrier (XLA401).
* ``clip_grad_norm_``: ``torch.nn.utils.clip_grad_norm_`` without host syncs (XLA501, XLA502).
* ``sync``: ``torch_xla.sync()`` when torch_xla is in use, a no-op elsewhere
  (on TorchTPU's ``tpu`` device, ``sync(wait=True)`` waits with
  ``torch.accelerator.synchronize()``).
* ``nonzero_static``: ``torch.nonzero_static`` built on ``topk``, with no CPU
  fallback (``torch.nonzero``/``argwhere`` with a known bound).
* ``masked_sum``, ``masked_mean``, ``masked_max``, ``masked_min``,
  ``masked_count``: ``x[mask].sum()`` & co. (and per-dimension versions)
  with static shapes, selecting with ``torch.where`` so NaN/inf outside the
  mask cannot leak in.
* ``DeviceAccumulator``: a running weighted sum/mean of losses or metrics
  that stays on the device (instead of ``total += loss.item()``), read on the
  host every N steps or in an XLA step closure.
* ``bucket_size``, ``pad_to_bucket``, ``pad_sequences``: pad to a small fixed
  set of sizes, with a mask of the real entries, so XLA compiles once per
  bucket instead of once per batch shape.

This package imports only torch and the standard library; torch_xla is
imported lazily, and only when tensors already live on an XLA device.
On TorchTPU (``torch.device("tpu")``, torch-tpu 0.2.0) there is no torch_xla:
every function runs its plain-PyTorch path there (``optimizer_step`` is
``optimizer.step()``), which is right for TorchTPU's eager (CUDA-like)
default mode.
"""

from ._accumulate import DeviceAccumulator
from ._clip import clip_grad_norm_
from ._masked import masked_count, masked_max, masked_mean, masked_min, masked_sum, nonzero_static
from ._optim import optimizer_step
from ._shapes import bucket_size, pad_sequences, pad_to_bucket
from ._xla import sync

__all__ = [
    "DeviceAccumulator",
    "bucket_size",
    "clip_grad_norm_",
    "masked_count",
    "masked_max",
    "masked_mean",
    "masked_min",
    "masked_sum",
    "nonzero_static",
    "optimizer_step",
    "pad_sequences",
    "pad_to_bucket",
    "sync",
]
