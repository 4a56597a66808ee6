"""Host syncs on a per-step path: reading a device tensor's value from Python."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA1"
CATEGORIES = ("item_sync",)
