"""torch.compile rules (DYN1xx graph breaks, DYN2xx recompilations): hazards inside the functions
Dynamo traces (see `xlalint.analysis.compiled`), each proven under Dynamo in
tests/rules/test_dynamo_rules.py. Preview: off by default."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "DYN"
CATEGORIES = ("item_sync", "control_flow_on_tensor", "dynamic_shape", "varying_shape", "other")
