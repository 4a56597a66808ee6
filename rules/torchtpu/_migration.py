"""The torch_xla -> TorchTPU migration (TPU1xx): its table, `torchtpu_migrations.toml`, read by the
migration engine (`xlalint.rules._migration`), and a rule's rows as its docs list them.

Each TPU1xx rule is the engine's visitor bound to this table, restricted to its `code`. Findings are
decided on `ast`; fixes go only into plain PyTorch (`torch.device`, `torch.distributed`,
`torch.autocast`, `torch.compile`, `torch.save`, `torch.accelerator`).
"""

from __future__ import annotations

from importlib import resources

from .._migration import MigrationTableError, MigrationVisitor, Table
from .._migration import load_table as _load

TABLE_FILE = "torchtpu_migrations.toml"
TABLE: Table = _load(
    resources.files(__package__ or "xlalint.rules.torchtpu").joinpath(TABLE_FILE).read_text(encoding="utf-8"),
    TABLE_FILE,
)

__all__ = ["TABLE", "MigrationTableError", "TorchTpuMigration", "load_table", "rows_doc"]


def load_table(text: str, source: str = TABLE_FILE) -> Table:
    """A table of TorchTPU moves; a text without a `[table]` header takes the shipped table's."""
    return _load(text, source, TABLE.profile)


class TorchTpuMigration(MigrationVisitor):
    """The migration visitor reading this table (a rule sets its `code`)."""

    table = TABLE


def rows_doc(code: str) -> str:
    """The table's rows for `code`, as a Markdown list for the rule's docs."""
    lines = []
    for move in TABLE:
        if move.code != code:
            continue
        what = {
            "argument": f"`{move.name}({move.argument}={' / '.join(map(repr, move.values))})`",
            "environment": f"setting `{move.name}`",
            "module": f"imports of `{move.name}`",
        }.get(move.kind, f"`{move.name}()`")
        fix = {"safe": "safe fix", "unsafe": "unsafe fix", "none": "no fix"}[move.fix]
        lines.append(f"- {what} ({fix}): {move.note}. Checked: {move.checked}.")
    return "\n".join(lines)
