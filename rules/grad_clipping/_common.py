"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

CLIP_GRAD_NORM = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm",  # deprecated alias, same function
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm",
}
