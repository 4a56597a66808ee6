"""The torch_xla migration (XLA601/XLA602): its table, `rules/xla_migrations.toml`, read by the
migration engine (`xlalint.rules._migration`), and the table's entries as the rules' docs list them."""

from __future__ import annotations

from importlib import resources

from .._migration import Migration, MigrationTableError, MigrationVisitor, Table
from .._migration import load_table as _load

TABLE_FILE = "xla_migrations.toml"
TABLE: Table = _load(resources.files("xlalint.rules").joinpath(TABLE_FILE).read_text(encoding="utf-8"), TABLE_FILE)

__all__ = ["TABLE", "MigrationTableError", "XlaMigration", "entries_doc", "load_table"]


def load_table(text: str, source: str = TABLE_FILE) -> Table:
    """A table of torch_xla moves; a text without a `[table]` header takes the shipped table's."""
    return _load(text, source, TABLE.profile)


class XlaMigration(MigrationVisitor):
    """The migration visitor reading this table (a rule sets its `code`: XLA601 or XLA602)."""

    table = TABLE


def _group_of(lines: dict[tuple, list[str]], m: Migration) -> tuple:
    """The line an environment variable joined (one that was already there)."""
    return next(key for key, names in lines.items() if f"`{m.name}`" in names)


def entries_doc(status: str) -> str:
    """The table's entries with `status`, one line each; environment variables that share a
    replacement, release and fix are listed on one line."""
    lines: dict[tuple, list[str]] = {}
    notes: dict[tuple, list[str]] = {}  # each entry's note, shown here: the message leaves it out
    for m in TABLE:
        if m.status != status:
            continue
        before = set(lines)
        when = (
            f"removed in {m.removed_in}"
            if status == "removed"
            else (f"deprecated in {m.deprecated_in}" if m.deprecated_in else f"superseded since {m.replacement_since}")
        )
        if m.kind == "environment":
            call = "()" if m.replacement and "." in m.replacement else ""
            new = f"`{m.replacement}{call}`" if m.replacement else "no direct replacement"
            lines.setdefault(("environment variable", new, when, m.fix), []).append(f"`{m.name}`")
        elif m.kind == "argument":
            allowed = " or ".join(repr(v) for v in m.allowed or ())
            lines[(f"`{m.name}({m.argument}=...)`", f"only {allowed}", when, m.fix)] = []
        else:
            new = f"`{m.replacement}`" if m.replacement else "no direct replacement"
            lines[(f"`{m.name}`", new, when, m.fix)] = []
        key = next(iter(set(lines) - before), None) or _group_of(lines, m)
        if m.note and m.note not in notes.setdefault(key, []):
            notes[key].append(m.note)
    out = []
    for key, names in lines.items():
        what, new, when, fix = key
        if names:
            what = f"{what}{'s' if len(names) > 1 else ''} {', '.join(names)}"
        note = f": {'; '.join(notes[key])}" if notes.get(key) else ""
        out.append(f"- {what} -> {new} ({when}; fix: {fix}){note}")
    return "\n".join(out)
