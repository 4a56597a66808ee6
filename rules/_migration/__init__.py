"""The migration engine: one table schema and one visitor for every table of API moves.

TorchFix's model (a YAML table of deprecated symbols, one visitor that reads it): the torch_xla
moves (`rules/xla_migrations.toml`, XLA601/XLA602) and the torch_xla -> TorchTPU moves
(`rules/torchtpu/torchtpu_migrations.toml`, TPU1xx) are two tables of this one schema, read by
this one visitor; a rule is the visitor with its `table` and `code` (and its docs and examples).

It lives here, in a private module of the rules package, not in `xlalint/analysis` (judgement that
rules of unrelated families share: steps, placement, tensors) nor in `xlalint/fixing` (applying any
rule's fixes): it is rule machinery that reads rule data, shipped beside the tables it reads, and
only migration rules use it. The registry skips `_`-modules, so it defines no rule of its own.

- `table.py`: the schema (`[table]` header, `[[migration]]` rows), `load_table`, `MigrationTableError`,
  the row type `Migration` and its messages;
- `visitor.py`: `MigrationVisitor`, which finds the rows' uses (decided on `ast`);
- `resolve.py`: qualified names through the file's imports, literal values, how a fix spells a name;
- `guards.py`: version-guarded and fallback code, left alone when the table says `guards = true`;
- `fixes.py`: the fixes, built on libcst.
"""

from .table import Migration, MigrationTableError, Profile, Table, load_table
from .visitor import MigrationVisitor

__all__ = ["Migration", "MigrationTableError", "MigrationVisitor", "Profile", "Table", "load_table"]
