"""Shapes XLA cannot know ahead of time: data-dependent output shapes and step-varying input shapes."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA30"
CATEGORIES = ("dynamic_shape",)
