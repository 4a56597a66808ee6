"""Removed and deprecated torch_xla APIs, read from the migration table `xla_migrations.toml`.

TorchFix's model: the moves are data, read by the one migration engine (`xlalint.rules._migration`,
which also reads the TorchTPU table). `status` picks the code
(removed -> XLA601, deprecated -> XLA602), `kind` what is matched (a function, a module, an
environment variable the code sets, or one argument value of a call), `fix` the applicability and
`params` which arguments carry over.
Names are resolved through the file's imports, so `import torch_xla.core.xla_model as foo;
foo.mark_step()` and `from torch_xla.core import xla_model` are found too.
Findings and what their fixes do are decided on `ast`; the fixes are built on libcst
(`xlalint.rules._migration.fixes`).
"""

from ._common import TABLE, MigrationTableError, load_table  # the migration table, as data (tests read it)

__all__ = ["TABLE", "MigrationTableError", "load_table"]

# The family's codes start with CODES and its rules' categories are among CATEGORIES; the registry
# (xlalint.rules) checks every rule module of this package against them.
CODES = "XLA6"
CATEGORIES = ("deprecated_xla_api",)
