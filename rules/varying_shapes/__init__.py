"""Shapes that change from step to step: batches padded to their own longest example, and sizes
read from tensor data (a new compiled graph for every distinct value)."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA31"
CATEGORIES = ("varying_shape",)
