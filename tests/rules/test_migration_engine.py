"""One migration engine: the torch_xla table (XLA601/XLA602), the TorchTPU table (TPU1xx) and any other
table of the same schema are data read by the one visitor of `xlalint.rules._migration`."""

import textwrap

import pytest

from xlalint.rule import Rule
from xlalint.rules import ALL_RULES, _migration, deprecated_api
from xlalint.rules._migration import Migration, MigrationTableError, MigrationVisitor, Table, load_table
from xlalint.rules.torchtpu import _migration as torchtpu_migration
from xlalint.testing import fix_code, lint_code

MIGRATION_RULES = [r for r in ALL_RULES if r.code in ("XLA601", "XLA602") or r.code.startswith("TPU1")]


def test_both_shipped_tables_are_data_of_one_schema_read_by_one_visitor():
    assert len(MIGRATION_RULES) == 2 + len({m.code for m in torchtpu_migration.TABLE})
    tables = {
        deprecated_api.TABLE.source: deprecated_api.TABLE,
        torchtpu_migration.TABLE.source: torchtpu_migration.TABLE,
    }
    for rule in MIGRATION_RULES:
        assert issubclass(rule, MigrationVisitor), rule.code
        assert rule.table in tables.values(), rule.code
        assert any(row.code == rule.code for row in rule.table), rule.code  # every rule has rows
    for table in tables.values():
        assert isinstance(table, Table) and all(type(row) is Migration for row in table)
    # the families' loaders and errors are the engine's
    assert deprecated_api.MigrationTableError is torchtpu_migration.MigrationTableError is MigrationTableError
    assert (
        deprecated_api.TABLE.profile.findings == "at-import" and torchtpu_migration.TABLE.profile.findings == "at-use"
    )


# A third table: a made-up package `oldpkg` whose `run` moved to `newpkg.runtime` (a keyword renamed on
# the way), whose variable OLDPKG_FAST is read no more ("0" leaves it off), whose `launch` takes one worker.
THIRD = """
[table]
codes = { removed = "XLA699" }
required = ["status", "reference"]
files = "any"
package = "oldpkg"
aliases = { "newpkg.runtime" = "nrt" }

[[migration]]
name = "oldpkg.core.run"
replacement = "newpkg.runtime.run"
status = "removed"
deprecated_in = "2.0"
removed_in = "3.0"
fix = "safe"
params = ["fn", "steps:num_steps"]
reference = "https://example.org/oldpkg/run"
note = "renamed"

[[migration]]
name = "OLDPKG_FAST"
kind = "environment"
status = "removed"
removed_in = "3.0"
fix = "none"
off = ["0"]
reference = "https://example.org/oldpkg/fast"
note = "no longer read"

[[migration]]
name = "oldpkg.core.launch"
kind = "argument"
argument = "workers"
position = 1
allowed = ["None", "1"]
status = "removed"
removed_in = "3.0"
fix = "unsafe"
reference = "https://example.org/oldpkg/launch"
note = "one worker"
"""


def _rule(table: Table) -> type[Rule]:
    class ThirdTable(MigrationVisitor, Rule):
        code, name, category = "XLA699", "third-table", "deprecated_xla_api"
        summary = "a move of the third table"

    ThirdTable.table = table
    return ThirdTable


def _found(code: str, rule: type[Rule]) -> list[tuple[int, int, str, str | None]]:
    return [
        (d.location.row, d.location.column, d.message, d.fix.applicability.value if d.fix else None)
        for d in lint_code(code, [rule])
    ]


USES = textwrap.dedent(
    """\
    import os
    import oldpkg.core as oc

    os.environ["OLDPKG_FAST"] = "1"
    os.environ["OLDPKG_FAST"] = "0"
    oc.run(step, steps=3)
    oc.launch(main, 8)
    oc.launch(main, 1)
    """
)


def test_a_third_table_gives_findings_and_fixes_through_the_same_visitor():
    rule = _rule(load_table(THIRD, "third.toml"))
    removed = "was removed in oldpkg 3.0"
    assert _found(USES, rule) == [
        (4, 12, "setting `OLDPKG_FAST` has no effect since oldpkg 3.0", None),
        (6, 1, f"`oc.run()` {removed} (deprecated in 2.0): use `newpkg.runtime.run()`", "safe"),
        (7, 1, "`oc.launch()` no longer accepts `workers=8` since oldpkg 3.0", "unsafe"),
    ]
    fixed = USES.replace("oc.run(step, steps=3)", "nrt.run(step, num_steps=3)").replace("(main, 8)", "(main)")
    fixed = fixed.replace("import oldpkg.core as oc\n", "import oldpkg.core as oc\nimport newpkg.runtime as nrt\n")
    assert fix_code(USES, [rule], unsafe=True) == fixed
    assert fix_code(USES, [rule], unsafe=False) == fixed.replace("(main)", "(main, 8)")
    assert _found(fixed, rule) == [(5, 12, "setting `OLDPKG_FAST` has no effect since oldpkg 3.0", None)]


IMPORTED = "from oldpkg.core import run\n\nrun(a)\nrun(b, steps=2)\n"


def test_the_header_says_where_findings_go_the_rows_stay_the_same():
    at_import = _rule(load_table(THIRD, "third.toml"))
    # one finding on the import; its fix renames every use and drops the import
    assert [(row, col) for row, col, _, _ in _found(IMPORTED, at_import)] == [(1, 25)]
    assert fix_code(IMPORTED, [at_import], unsafe=False) == (
        "import newpkg.runtime as nrt\n\nnrt.run(a)\nnrt.run(b, num_steps=2)\n"
    )
    at_use = _rule(load_table(THIRD.replace('files = "any"', 'files = "any"\nfindings = "at-use"'), "third.toml"))
    assert [(row, col) for row, col, _, _ in _found(IMPORTED, at_use)] == [(3, 1), (4, 1)]
    assert fix_code(IMPORTED, [at_use], unsafe=False) == (
        "import newpkg.runtime\n\nnewpkg.runtime.run(a)\nnewpkg.runtime.run(b, num_steps=2)\n"
    )
    # a setting: on its variable's name at import, on its statement at use
    assert [(r, c) for r, c, message, _ in _found(USES, at_use) if "OLDPKG_FAST" in message] == [(4, 1)]


def test_version_guards_are_the_table_s_choice():
    guarded = "import oldpkg.core as oc\n\nif OLDPKG_VERSION < (3, 0):\n    oc.run(step)\n"
    assert _found(guarded, _rule(load_table(THIRD, "third.toml"))) == []
    unguarded = _rule(load_table(THIRD.replace('files = "any"', 'files = "any"\nguards = false'), "third.toml"))
    assert [row for row, *_ in _found(guarded, unguarded)] == [4]


@pytest.mark.parametrize(
    "change, where, problem",
    [
        (('files = "any"', 'files = "every"'), "third.toml: [table]:", "`files` must be one of"),
        (('files = "any"', 'findings = "somewhere"'), "third.toml: [table]:", "`findings` must be one of"),
        (('files = "any"', 'colour = "red"'), "third.toml: [table]:", "unknown keys ['colour']"),
        (('codes = { removed = "XLA699" }', "codes = { gone = 'XLA699' }"), "third.toml: [table]:", "`codes`"),
        (('note = "renamed"', ""), "#1 (oldpkg.core.run)", "missing keys ['note']"),
        (('status = "removed"\ndeprecated_in', "deprecated_in"), "#1 (oldpkg.core.run)", "missing keys ['status']"),
        (
            ('allowed = ["None", "1"]', 'allowed = ["None"]\nvalues = ["8"]'),
            "#3 (oldpkg.core.launch)",
            "`allowed` (the literals it may still take) or `values`",
        ),
        (
            ('params = ["fn", "steps:num_steps"]', 'params = ["fn", "steps:num steps"]'),
            "#1 (oldpkg.core.run)",
            "`params` must be a list",
        ),
        (("[[migration]]", "[[move]]"), "third.toml:", "unknown top-level keys ['move']"),
    ],
)
def test_a_malformed_table_gives_one_clear_error(change, where, problem):
    text = THIRD.replace(*change, 1)
    assert text != THIRD
    with pytest.raises(MigrationTableError) as info:
        load_table(text, "third.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("third.toml:"), message
    assert where in message and problem in message, message


def test_a_table_without_a_header_needs_the_family_s():
    rows = THIRD.split("\n[[migration]]", 1)[1]
    with pytest.raises(MigrationTableError, match=r"^third.toml: no \[table\] header"):
        load_table("[[migration]]" + rows, "third.toml")
    # a family's loader lends its shipped header (XLA's codes by status)
    (run, *_) = deprecated_api.load_table("[[migration]]" + rows)
    assert run.code == "XLA601" and run.package == "torch_xla"
    assert _migration.load_table("[[migration]]" + rows, "x.toml", deprecated_api.TABLE.profile).rows[0] == run
