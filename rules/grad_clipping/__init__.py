"""Gradient clipping that syncs with the host, raises, or branches on a tensor norm."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA5"
CATEGORIES = ("clip_grad_norm",)
