"""JAX rules (JAX1xx): code that cannot run, or recompiles, inside functions JAX traces."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "JAX1"
CATEGORIES = ("item_sync", "control_flow_on_tensor", "dynamic_shape", "varying_shape", "other")
