"""Python control flow on device tensors: the truth value of a lazy tensor is a host sync."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA2"
CATEGORIES = ("control_flow_on_tensor",)
