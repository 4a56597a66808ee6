"""xlalint's own comments: `# noqa` codes that no longer suppress anything."""

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA9"
CATEGORIES = ("other",)
