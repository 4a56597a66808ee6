"""xlalint runtime: small, device-agnostic replacements that ``xlalint fix`` rewrites code to call.

Each function behaves like the torch call it replaces on CPU/GPU and avoids an
XLA performance hazard on XLA devices:

* ``optimizer_step``: ``optimizer.step()`` plus, on XLA, the gradient
  all-reduce and the per-step barrier (XLA401).
* ``clip_grad_norm_``: ``torch.nn.utils.clip_grad_norm_`` without host syncs (XLA501, XLA502).
* ``sync``: ``torch_xla.sync()`` when torch_xla is in use, a no-op elsewhere.

This package imports only torch and the standard library; torch_xla is
imported lazily, and only when tensors already live on an XLA device.
"""

from ._clip import clip_grad_norm_
from ._optim import optimizer_step
from ._xla import sync

__all__ = ["clip_grad_norm_", "optimizer_step", "sync"]
