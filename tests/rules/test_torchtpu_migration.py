"""The torch_xla -> TorchTPU migration (TPU1xx): the table is validated data; every row is found
through every import spelling, once, with its code; every fix parses, is a fixed point and names the
plain PyTorch replacement, which is checked against torch's real API (with the `tpu` device and
backends registered the way torch-tpu 0.2.0 registers them, in a fresh interpreter)."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import subprocess
import sys
import textwrap

import pytest
import torch

from xlalint.rules import ALL_RULES
from xlalint.testing import fix_code, lint_code

migration = importlib.import_module("xlalint.rules.torchtpu._migration")
TABLE, load_table, MigrationTableError = migration.TABLE, migration.load_table, migration.MigrationTableError
TPU1 = [r for r in ALL_RULES if r.code.startswith("TPU1")]
BY_CODE = {r.code: r for r in TPU1}
# arguments a call of each transform is written with in the spellings below
CALL_ARGS = {None: "()", "rename": "()", "device": "()", "unwrap": "(loader, device)", "compile": "(step)",
             "autocast": "(device)", "save": "(state, path)"}


def function_spellings(name: str, args: str) -> list[str]:
    module, func = name.rsplit(".", 1)
    head = "import torch_xla\n" if not module.startswith("torch_xla") else ""
    spellings = [
        f"{head}import {module} as alias\n\nx = alias.{func}{args}\n",
        f"{head}from {module} import {func}\n\nx = {func}{args}\n",
        f"{head}from {module} import {func} as renamed\n\nx = renamed{args}\n",
        f"{head}import {module}\n\nx = {module}.{func}{args}\n",
        f"{head}try:\n    import {module} as guarded\nexcept ImportError:\n    guarded = None\n\nx = guarded.{func}{args}\n",
        f"{head}def main():\n    import {module} as local\n    return local.{func}{args}\n",
    ]
    if "." in module:
        parent, last = module.rsplit(".", 1)
        spellings += [f"{head}from {parent} import {last}\n\nx = {last}.{func}{args}\n",
                      f"{head}from {parent} import {last} as alias\n\ndef main():\n    return alias.{func}{args}\n"]
    return spellings


CALL_CASES = [pytest.param(row, code, id=f"{row.code}-{row.name}-{i}")
              for row in TABLE if row.kind == "function"
              for i, code in enumerate(function_spellings(row.name, CALL_ARGS[row.transform]))]


@pytest.mark.parametrize("row, code", CALL_CASES)
def test_every_call_row_through_every_spelling(row, code):
    rule = BY_CODE[row.code]
    found = lint_code(code, [rule])
    # `torch_tpu.api` itself is a row of TPU109 too (the import fails on 0.2.0): its import is a finding
    imports_too = row.code == "TPU109" and ("torch_tpu.api" in code or "from torch_tpu import api" in code)
    assert [d.code for d in found] == [row.code] * (1 + imports_too), code
    found = [d for d in found if "()`" in d.message.split(":")[0]]
    clause = row.note.split("; ")[0]
    assert clause in found[0].message or len(found[0].message) + len(clause) > 158, found[0].message
    if row.fix == "none":
        assert found[0].fix is None
        return
    assert found[0].fix is not None, code
    fixed = fix_code(code, [rule], unsafe=True)
    ast.parse(fixed)
    assert fix_code(fixed, [rule], unsafe=True) == fixed, "fixing twice changed the code"
    assert all("torch_tpu.api` has no" in d.message for d in lint_code(fixed, [rule])), fixed
    expected = {"device": 'device("tpu")', "rename": f"{(row.replacement or '').rpartition('.')[2]}()", "unwrap": "loader\n",
                "compile": 'compile(step, backend="tpu")', "autocast": 'autocast("tpu", dtype=torch.bfloat16)',
                "save": "torch.save(torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, state), path)"}
    assert expected[row.transform] in fixed, fixed
    assert row.name.rpartition(".")[2] + "(" not in fixed.replace(expected[row.transform], "")


def argument_spellings(row) -> list[str]:
    module, func = row.name.rsplit(".", 1)
    value = row.values[0]
    position = row.position
    positional = f'"{value}"' if position == 0 else f'model, backend="{value}"'
    keyword = f'{row.argument}="{value}"' if position == 0 else f'model, {row.argument}="{value}"'
    head = "import torch_xla\n"
    return [
        f"{head}import {module} as alias\nalias.{func}({positional})\n",
        f"{head}from {module} import {func}\n{func}({keyword})\n",
        f"{head}import {module}\n{module}.{func}({positional})\n",
    ]


ARGUMENT_CASES = [pytest.param(row, code, id=f"{row.code}-{row.name}-{i}")
                  for row in TABLE if row.kind == "argument" for i, code in enumerate(argument_spellings(row))]


@pytest.mark.parametrize("row, code", ARGUMENT_CASES)
def test_every_argument_row_through_every_spelling(row, code):
    rule = BY_CODE[row.code]
    found = lint_code(code, [rule])
    assert [d.code for d in found] == [row.code], code
    fixed = fix_code(code, [rule], unsafe=False)
    ast.parse(fixed)
    assert f'"{row.values[0]}"' not in fixed and ast.literal_eval(row.to) in fixed
    assert fix_code(fixed, [rule], unsafe=False) == fixed


@pytest.mark.parametrize("row", [r for r in TABLE if r.kind == "module"], ids=lambda r: r.name)
def test_every_module_row_through_every_import(row):
    parent, last = row.name.rsplit(".", 1)
    for code in (f"import {row.name}\n", f"import {row.name} as alias\n", f"from {row.name} import anything\n",
                 f"from {parent} import {last}\n", f"from {parent} import {last} as alias\n"):
        code = "import torch_xla\n" + code if not row.name.startswith("torch_xla") else code
        found = lint_code(code, [BY_CODE[row.code]])
        assert [d.code for d in found] == [row.code], code


@pytest.mark.parametrize("row", [r for r in TABLE if r.kind == "environment"], ids=lambda r: r.name)
def test_every_environment_row_is_found_when_set_not_when_read(row):
    rule = BY_CODE[row.code]
    for code in (f'import os\nimport torch_xla\nos.environ["{row.name}"] = "1"\n',
                 f'import os\nimport torch_xla\nos.environ.setdefault("{row.name}", "1")\n'):
        assert [d.code for d in lint_code(code, [rule])] == [row.code], code
    assert lint_code(f'import os\nimport torch_xla\nflag = os.environ.get("{row.name}")\n', [rule]) == []


def test_rank_fixes_are_safe_only_with_a_process_group():
    rule = BY_CODE["TPU105"]
    bare = "import torch_xla.core.xla_model as xm\nrank = xm.get_ordinal()\n"
    assert lint_code(bare, [rule])[0].fix.applicability.value == "unsafe"
    assert fix_code(bare, [rule], unsafe=False) == bare
    grouped = "import torch.distributed as dist\n" + bare + 'dist.init_process_group("tpu")\n'
    assert lint_code(grouped, [rule])[0].fix.applicability.value == "safe"
    assert "rank = dist.get_rank()" in fix_code(grouped, [rule], unsafe=False)


def test_a_torch_name_bound_to_something_else_gets_no_fix():
    code = "import torch_xla.core.xla_model as xm\ntorch = None\ndevice = xm.xla_device()\n"
    (found,) = lint_code(code, [BY_CODE["TPU101"]])
    assert found.fix is None


# -- the table is data -------------------------------------------------------------------------------

GOOD = """
[[migration]]
code = "TPU105"
name = "torch_xla.core.xla_model.get_ordinal"
fix = "safe"
transform = "rename"
replacement = "torch.distributed.get_rank"
params = []
checked = "plain PyTorch"
note = "a note"
"""


def test_the_shipped_table_holds_the_issue_s_moves():
    names = {(m.code, m.name) for m in TABLE}
    for code, name in [("TPU101", "torch_xla.core.xla_model.xla_device"), ("TPU101", "torch_xla.device"),
                       ("TPU103", "torch_xla.distributed.parallel_loader.MpDeviceLoader"),
                       ("TPU104", "torch.distributed.init_process_group"),
                       ("TPU105", "torch_xla.core.xla_model.get_ordinal"), ("TPU105", "torch_xla.runtime.world_size"),
                       ("TPU106", "torch.compile"), ("TPU106", "torch_xla.compile"), ("TPU107", "torch.autocast"),
                       ("TPU108", "torch_xla.core.xla_model.save"), ("TPU111", "torch_xla.core.xla_model.optimizer_step"),
                       ("TPU112", "torch_xla.distributed.xla_multiprocessing.spawn"),
                       ("TPU113", "torch_xla.core.xla_model.all_reduce"), ("TPU114", "torch_xla.distributed.spmd"),
                       ("TPU102", "torch_xla.core.xla_model.mark_step")]:
        assert (code, name) in names
    assert all(m.checked for m in TABLE)
    assert {m.code for m in TABLE} == {r.code for r in TPU1}  # every rule has rows, every row a rule
    # meaning-changing moves are diagnostics only
    for name in ("torch_xla.core.xla_model.optimizer_step", "torch_xla.distributed.xla_multiprocessing.spawn",
                 "torch_xla.core.xla_model.all_reduce", "torch_xla.core.xla_model.mark_step"):
        assert next(m for m in TABLE if m.name == name).fix == "none"


@pytest.mark.parametrize("change, problem", [
    ('code = "TPU105"', 'code = "XLA105"', ),
    ('fix = "safe"', 'fix = "maybe"'),
    ('transform = "rename"', 'transform = "magic"'),
    ('replacement = "torch.distributed.get_rank"', 'replacement = "torch_xla.runtime.global_ordinal"'),
    ('params = []\n', ''),
    ('note = "a note"', 'note = "a note"\ncolour = "red"'),
    ('checked = "plain PyTorch"\n', ''),
])
def test_bad_rows_raise_a_clear_error(change, problem):
    with pytest.raises(MigrationTableError, match=r"\[\[migration\]\] #1 \(torch_xla.core.xla_model.get_ordinal\)|#1"):
        load_table(GOOD.replace(change, problem))


def test_the_good_row_parses_and_duplicates_do_not():
    (row,) = load_table(GOOD)
    assert (row.transform, row.replacement, row.params) == ("rename", "torch.distributed.get_rank", ())
    with pytest.raises(MigrationTableError, match="duplicate"):
        load_table(GOOD + GOOD)
    with pytest.raises(MigrationTableError, match="not valid TOML"):
        load_table("[[migration]\n")


# -- the replacements, against torch's real API ----------------------------------------------------------


def _resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("row", [r for r in TABLE if r.transform == "rename"], ids=lambda r: r.name)
def test_rename_targets_exist_in_torch_and_take_the_carried_arguments(row):
    target = _resolve(row.replacement)
    inspect.signature(target).bind(*([None] * len(row.params)))


def test_the_save_fix_writes_cpu_values_that_load_back_equal():
    state = {"model": {"w": torch.randn(3, 2), "b": torch.zeros(2)}, "step": 7, "opt": [torch.ones(1), "x"]}
    buffer = io.BytesIO()
    torch.save(torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, state), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["step"] == 7 and loaded["opt"][1] == "x"
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["model"]["w"].device.type == "cpu"


def _run(source: str) -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_fixed_code_runs_against_torch_with_tpu_registered_as_torch_tpu_does():
    """PrivateUse1 renamed "tpu" with a device module (`_loader._init_device_impl`) and the
    process-group backend "tpu" registered (here over gloo): the device, process-group, rank and
    autocast code the fixes write runs against torch's own API."""
    _run(
        """
        import sys, types
        import torch
        import torch.distributed as dist

        torch.utils.rename_privateuse1_backend("tpu")
        tpu = types.ModuleType("torch.tpu")
        tpu.get_amp_supported_dtype = lambda: [torch.bfloat16, torch.float16]
        tpu.is_available = lambda: True
        sys.modules["torch.tpu"] = tpu
        torch._register_device_module("tpu", tpu)
        dist.Backend.register_backend(
            "tpu", lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout), devices=["cpu"])

        assert torch.device("tpu").type == "tpu"  # TPU101 / TPU109
        dist.init_process_group("tpu", store=dist.HashStore(), rank=0, world_size=1)  # TPU104
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)  # TPU105
        with torch.autocast("tpu", dtype=torch.bfloat16, enabled=True, cache_enabled=None):  # TPU107
            pass
        print("ok")
        """
    )


def test_compile_fixes_run_with_a_backend_named_tpu():
    """`torch.compile(f, backend="tpu")` and `@torch.compile(backend="tpu")` (TPU106) with a backend
    registered under that name, as `torch_tpu._internal.compile` registers TpuBackend (here: eager)."""
    _run(
        """
        import torch
        from torch._dynamo.backends.registry import register_backend

        register_backend(compiler_fn=lambda gm, inputs, **kw: gm.forward, name="tpu")
        compiled = torch.compile(lambda x: x * 2, backend="tpu")
        assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]

        @torch.compile(backend="tpu")
        def step(x):
            return x + 1
        assert step(torch.zeros(1)).item() == 1.0
        print("ok")
        """
    )
