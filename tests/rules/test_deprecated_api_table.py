"""The migration table (rules/xla_migrations.toml) is data: it is validated when the rule loads."""

import pytest

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
    # xmp.spawn is not deprecated (no @deprecated at v2.9.0): only its `nprocs` count is checked
    spawn = names["torch_xla.distributed.xla_multiprocessing.spawn"]
    assert (spawn.kind, spawn.argument, spawn.position, spawn.allowed) == ("argument", "nprocs", 2, (None, 1))
    assert spawn.fix in ("unsafe", "none") and spawn.removed_in == "2.6"
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
        (('note = "a note"', 'note = "a note"\nrewrite = "spawn_to_launch"'), "unknown keys ['rewrite']"),
        (('note = "a note"', 'note = "a note"\noff = ["0"]'), "`off` is only for kind 'environment'"),
        (('note = "a note"', 'note = "a note"\nposition = 1'), "`position` is only for kind 'argument'"),
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


def test_shipped_environment_entries():
    env = {m.name: m for m in TABLE if m.kind == "environment"}
    xrt = [m for name, m in env.items() if name.startswith("XRT_")]
    assert {"XRT_TPU_CONFIG", "XRT_DEVICE_MAP", "XRT_WORKERS"} <= set(env)
    assert all(m.status == "removed" and m.removed_in == "2.1" and m.fix == "none" for m in xrt)
    assert env["XRT_TPU_CONFIG"].replacement == "PJRT_DEVICE"
    assert (env["XLA_USE_BF16"].status, env["XLA_USE_BF16"].deprecated_in) == ("deprecated", "2.4")
    assert (env["XLA_USE_FP16"].status, env["XLA_USE_FP16"].removed_in) == ("removed", "2.5")
    assert env["XLA_USE_SPMD"].replacement == "torch_xla.runtime.use_spmd"
    # still read at v2.9.0 and never deprecated: PT_XLA_DEBUG_LEVEL only joined it
    assert "PT_XLA_DEBUG" not in env
    assert all(m.fix == "none" for m in env.values())


def test_shipped_messages_name_the_release_and_the_replacement():
    by_name = {m.name: m for m in TABLE}
    assert by_name["XRT_TPU_CONFIG"].message("XRT_TPU_CONFIG").startswith(
        "setting `XRT_TPU_CONFIG` has no effect since torch_xla 2.1: set `PJRT_DEVICE` instead")
    assert "call `torch_xla.runtime.use_spmd()` instead" in by_name["XLA_USE_SPMD"].message("XLA_USE_SPMD")
    assert by_name["XLA_USE_FP16"].message("XLA_USE_FP16").startswith(
        "setting `XLA_USE_FP16` has no effect since torch_xla 2.5 (deprecated in 2.4)")
    spawn = by_name["torch_xla.distributed.xla_multiprocessing.spawn"]
    message = spawn.message("xmp.spawn", "cores", "8")
    assert message.startswith("`xmp.spawn()` no longer accepts `nprocs=cores` (which can be `8`) since torch_xla 2.6")
    assert "ValueError" not in message and "ValueError" in spawn.note  # the note: in explain, not the message


GOOD_ENV = """
[[migration]]
name = "XLA_USE_SPMD"
kind = "environment"
replacement = "torch_xla.runtime.use_spmd"
status = "deprecated"
deprecated_in = "2.1"
off = ["0", "false"]
fix = "none"
reference = "https://github.com/pytorch/xla/pull/5474"
note = "a note"
"""


def test_good_environment_entry_parses():
    (entry,) = load_table(GOOD_ENV)
    assert (entry.kind, entry.off, entry.params) == ("environment", ("0", "false"), None)
    (renamed,) = load_table(GOOD_ENV.replace('"torch_xla.runtime.use_spmd"', '"XLA_SPMD"'))
    assert "set `XLA_SPMD` instead" in renamed.message("XLA_USE_SPMD")


@pytest.mark.parametrize(
    "change, problem",
    [
        (('name = "XLA_USE_SPMD"', 'name = "xla.use_spmd"'), "a variable name like XLA_USE_BF16"),
        (('replacement = "torch_xla.runtime.use_spmd"', 'replacement = "use_spmd"'),
         "a variable name (XLA_FLAGS) or a dotted function name"),
        (('fix = "none"', 'fix = "safe"'), 'takes `fix = "none"`'),
        (('off = ["0", "false"]', 'off = "0"'), "`off` must be a list of strings"),
        (('off = ["0", "false"]', 'off = [0]'), "`off` must be a list of strings"),
        (('off = ["0", "false"]', 'params = []'), "`params` is only for kind 'function'"),
        (('off = ["0", "false"]', 'allowed = ["1"]'), "`allowed` is only for kind 'argument'"),
        (('kind = "environment"', 'kind = "envvar"'), "`kind` must be one of"),
    ],
)
def test_bad_environment_entries_raise_a_clear_error(change, problem):
    text = GOOD_ENV.replace(*change)
    assert text != GOOD_ENV
    with pytest.raises(MigrationTableError) as info:
        load_table(text)
    assert problem in str(info.value)


GOOD_ARG = """
[[migration]]
name = "torch_xla.distributed.xla_multiprocessing.spawn"
kind = "argument"
argument = "nprocs"
position = 2
allowed = ["None", "1"]
status = "removed"
removed_in = "2.6"
fix = "unsafe"
reference = "https://github.com/pytorch/xla/pull/7971"
note = "a note"
"""


def test_good_argument_entry_parses_and_sits_beside_a_function_entry():
    (entry,) = load_table(GOOD_ARG)
    assert (entry.argument, entry.position, entry.allowed) == ("nprocs", 2, (None, 1))
    function = GOOD_ARG.replace('kind = "argument"\nargument = "nprocs"\nposition = 2\nallowed = ["None", "1"]\n', "")
    function = function.replace('fix = "unsafe"', 'fix = "none"')
    assert [m.kind for m in load_table(GOOD_ARG + function)] == ["argument", "function"]
    with pytest.raises(MigrationTableError, match="duplicate name"):
        load_table(GOOD_ARG + GOOD_ARG)


@pytest.mark.parametrize(
    "change, problem",
    [
        (("position = 2\n", ""), "an argument entry needs `position`"),
        (("position = 2", 'position = "2"'), "`position` must be a non-negative integer"),
        (("position = 2", "position = -2"), "`position` must be a non-negative integer"),
        (("position = 2", "position = true"), "`position` must be a non-negative integer"),
        (('argument = "nprocs"', 'argument = "n procs"'), "`argument` must be a parameter name"),
        (('allowed = ["None", "1"]', 'allowed = ["None", "one"]'), "`allowed` must hold Python literals"),
        (('allowed = ["None", "1"]', "allowed = []"), "`allowed` must be a non-empty list"),
        (('allowed = ["None", "1"]', "allowed = [1]"), "`allowed` must be a non-empty list"),
        (('note = "a note"', 'note = "a note"\nreplacement = "torch_xla.launch"'), "has no `replacement`"),
        (('note = "a note"', 'note = "a note"\noff = ["0"]'), "`off` is only for kind 'environment'"),
    ],
)
def test_bad_argument_entries_raise_a_clear_error(change, problem):
    text = GOOD_ARG.replace(*change)
    assert text != GOOD_ARG
    with pytest.raises(MigrationTableError) as info:
        load_table(text)
    assert problem in str(info.value)
    assert "xla_multiprocessing.spawn" in str(info.value)
