"""XLA tensor quirks: behaviour of XLA tensors that differs from CPU/CUDA tensors."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA7"
CATEGORIES = ("other",)
