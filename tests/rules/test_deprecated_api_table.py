"""The migration table (rules/xla_migrations.toml) is data: it is validated when the rule loads."""

import pytest

from xlalint.rules import deprecated_api
from xlalint.rules.deprecated_api import TABLE, MigrationTableError, load_table

GOOD = """
[[migration]]
name = "torch_xla.core.xla_model.mark_step"
replacement = "torch_xla.sync"
status = "deprecated"
deprecated_in = "2.8"
fix = "safe"
params = ["wait", "reset_scope"]
reference = "https://github.com/pytorch/xla/pull/9086"
note = "a note"
"""


def test_shipped_table_loads_with_the_required_entries():
    names = {m.name: m for m in TABLE}
    assert names["torch_xla.core.xla_model.xrt_world_size"].replacement == "torch_xla.runtime.world_size"
    assert names["torch_xla.core.xla_model.xrt_world_size"].removed_in == "2.7"
    assert names["torch_xla.core.xla_model.get_ordinal"].replacement == "torch_xla.runtime.global_ordinal"
    assert names["torch_xla.core.xla_model.xla_device"].status == "deprecated"
    assert names["torch_xla.core.xla_model.mark_step"].replacement == "torch_xla.sync"
    assert names["torch_xla.distributed.xla_multiprocessing.spawn"].fix in ("unsafe", "none")
    assert names["torch_xla.experimental.compile"].replacement == "torch_xla.compile"
    for module in ("torch_xla.experimental.pjrt", "torch_xla.experimental.xla_sharding", "torch_xla_py"):
        assert names[module].kind == "module"
    assert "torch_xla.core.xla_model.parse_xla_device" in names


def test_good_entry_parses():
    (entry,) = load_table(GOOD)
    assert entry.params == (("wait", "wait"), ("reset_scope", "reset_scope"))
    assert "deprecated since torch_xla 2.8" in entry.message("xm.mark_step")
    assert "`torch_xla.sync()`" in entry.message("xm.mark_step")


@pytest.mark.parametrize(
    "change, problem",
    [
        (('fix = "safe"', 'fix = "sometimes"'), "`fix` must be one of"),
        (('status = "deprecated"', 'status = "gone"'), "`status` must be one of"),
        (('note = "a note"', 'note = "a note"\nreplacment = "x"'), "unknown keys ['replacment']"),
        (('reference = "https://github.com/pytorch/xla/pull/9086"\n', ""), "missing keys ['reference']"),
        (('deprecated_in = "2.8"', 'deprecated_in = "soon"'), "`deprecated_in` must be a version"),
        (('status = "deprecated"', 'status = "removed"'), "needs `removed_in`"),
        (('replacement = "torch_xla.sync"\n', ""), "a fix needs a `replacement`"),
        (('params = ["wait", "reset_scope"]', 'params = "wait"'), "`params` must be a list"),
        (('note = "a note"', 'note = "a note"\nrewrite = "nope"'), "`rewrite` names no rewrite"),
        (('name = "torch_xla.core.xla_model.mark_step"', 'name = "xm mark_step"'), "dotted Python name"),
    ],
)
def test_bad_entries_raise_a_clear_error(change, problem):
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(MigrationTableError) as info:
        load_table(text)
    assert problem in str(info.value)
    assert "torch_xla.core.xla_model.mark_step" in str(info.value) or "xm mark_step" in str(info.value)


def test_duplicates_and_bad_toml_raise():
    with pytest.raises(MigrationTableError, match="duplicate name"):
        load_table(GOOD + GOOD)
    with pytest.raises(MigrationTableError, match="not valid TOML"):
        load_table("[[migration]\nname=")
    with pytest.raises(MigrationTableError, match="unknown top-level keys"):
        load_table(GOOD + "\n[other]\nx = 1\n")


def test_every_rewrite_named_in_the_table_exists():
    for entry in TABLE:
        if entry.rewrite:
            assert entry.rewrite in deprecated_api.REWRITES
