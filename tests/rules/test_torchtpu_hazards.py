"""TPU2xx: TorchTPU's own hazards. No TPU here, so each rule's claim is checked where it can be: the
torch side on CPU (what `torch.compile` hands a backend, which optimizers take `capturable`, what
`torch.accelerator` offers), the TorchTPU side in the torch-tpu 0.2.0 wheel's files when it is
available (`XLALINT_TORCHTPU_WHEEL` = an unpacked wheel; `pip download torch-tpu==0.2.0 --no-deps`)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xlalint.analysis.torchtpu import compile_sites, uses_torchtpu
from xlalint.engine import analyse
from xlalint.source import decode_source
from xlalint.testing import lint_code

internal = importlib.import_module("xlalint.rules.torchtpu.internal_tpu_device_api")
capturable = importlib.import_module("xlalint.rules.torchtpu.optimizer_not_capturable")
options = importlib.import_module("xlalint.rules.torchtpu.inductor_option_on_tpu")
migration = importlib.import_module("xlalint.rules.torchtpu._migration")
from xlalint.rules.torchtpu import (CompileDynamicOnTpu, InductorBackendOnTpu, InductorOptionOnTpu,  # noqa: E402
                                    OptimizerNotCapturable)


def context(code: str):
    return analyse(decode_source(Path("example.py"), code.encode()))


# -- detection ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [
    'import torch\nd = torch.device("tpu")\n',
    'import torch\nd = torch.device("tpu:0")\n',
    'import torch\nx = torch.zeros(2, device="tpu")\n',
    'model = model.to("tpu")\n',
    'import torch\nn = torch.tpu.device_count()\n',
    'import torch\nf = torch.compile(g, backend="tpu")\n',
    'import torch.distributed as dist\ndist.init_process_group("tpu")\n',
    'from torch import tpu\ntpu.manual_seed(0)\n',
])
def test_torchtpu_evidence(code):
    assert uses_torchtpu(context(code))


@pytest.mark.parametrize("code", [
    "import torch_tpu\nimport torch\nx = torch.zeros(2)\n",  # Sophgo ships a `torch_tpu` too
    'import torch\nx = torch.zeros(2, device="cuda")\n',
    'import torch\nf = torch.compile(g, backend="inductor")\nname = "tpu"\n',
])
def test_no_torchtpu_evidence(code):
    assert not uses_torchtpu(context(code))


def test_import_torch_tpu_alone_does_not_arm_the_hazards():
    code = "import torch\nimport torch_tpu\ncompiled = torch.compile(model, dynamic=True)\n"
    assert lint_code(code, [CompileDynamicOnTpu]) == []
    assert len(lint_code(code.replace("import torch_tpu\n", 'import torch_tpu\nd = torch.device("tpu")\n'),
                         [CompileDynamicOnTpu])) == 1


def test_compile_sites_record_the_options():
    ctx = context('import torch\nfrom torch import compile as c\n@torch.compile\ndef f(x):\n    return x\n'
                  'g = c(f, backend="tpu", dynamic=False)\nh = torch.compile(backend="tpu")(f)\n')
    sites = compile_sites(ctx)
    assert [(s.function.name if s.function else None, s.backend, s.dynamic) for s in sites] == \
        [("f", None, None), ("f", "tpu", False), ("f", "tpu", None)]


# -- the torch side, measured on CPU --------------------------------------------------------------------


# Dynamo runs in a fresh interpreter: other tests rename PrivateUse1 (torchax's "jax"), which breaks it
RECORDING_BACKEND = """
import json, torch
seen = []
def backend(gm, example_inputs, **kwargs):
    seen.append([torch._dynamo.config.assume_static_by_default, {k: v for k, v in kwargs.items()}])
    return gm.forward
"""


def _compile_and_record(call: str) -> list:
    code = RECORDING_BACKEND + f"torch.compile(lambda x: x + 1, backend=backend{call})(torch.ones(3))\nprint(json.dumps(seen))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dynamic, static", [(True, False), (False, True), (None, True)])
def test_dynamic_true_turns_off_what_tpu_backend_checks(dynamic, static):
    """TPU201: TpuBackend raises when `assume_static_by_default` is off at compile time; that is what
    `dynamic=True` does (and `dynamic=False`, which 0.2.0 passes by default, does not)."""
    seen = _compile_and_record(f", dynamic={dynamic}")
    assert seen and seen[0][0] is static


def test_mode_reaches_a_non_inductor_backend_as_a_keyword():
    """TPU205: `torch.compile` passes `mode=` (not "default") and `options=` to a custom backend as
    keywords; TpuBackend.__call__ raises TypeError on any keyword but `options`."""
    assert _compile_and_record(', mode="max-autotune"')[0][1] == {"mode": "max-autotune"}
    assert _compile_and_record(', mode="default"')[0][1] == {}
    assert _compile_and_record(', options={"bucket_size": 64}')[0][1] == {"options": {"bucket_size": 64}}


@pytest.mark.parametrize("name", sorted(capturable.STATEFUL))
def test_every_flagged_optimizer_takes_capturable(name):
    assert "capturable" in inspect.signature(getattr(torch.optim, name)).parameters


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "LBFGS", "SparseAdam"])
def test_optimizers_without_capturable_are_not_flagged(name):
    assert name not in capturable.STATEFUL
    code = (f"import torch\nopt = torch.optim.{name}(model.parameters())\n\n@torch.compile(backend='tpu')\n"
            "def step(x):\n    model(x).sum().backward()\n    opt.step()\n")
    assert lint_code(code, [OptimizerNotCapturable]) == []


@pytest.mark.parametrize("old, new", sorted(internal.ACCELERATOR.items()))
def test_accelerator_replacements_exist(old, new):
    assert callable(getattr(torch.accelerator, new))


def test_tpu_options_are_never_flagged_and_inductor_s_are():
    keys = ", ".join(f'"{k}": 1' for k in sorted(options.TPU_OPTIONS))
    code = f"import torch\nf = torch.compile(g, backend='tpu', options={{{keys}, 'max_autotune': True}})\n"
    found = lint_code(code, [InductorOptionOnTpu])
    assert [d.message.split("`")[1] for d in found] == ["option 'max_autotune'"]


def test_pallas_opt_in_keeps_inductor_allowed():
    base = 'import torch\nd = torch.device("tpu")\nf = torch.compile(g, backend="inductor"{})\n'
    assert len(lint_code(base.format(""), [InductorBackendOnTpu])) == 1
    assert lint_code(base.format(', options={"tpu_backend": "pallas"}'), [InductorBackendOnTpu]) == []
    assert lint_code(base.format(", options=opts"), [InductorBackendOnTpu]) == []  # may opt in


# -- the TorchTPU side, read in the 0.2.0 wheel --------------------------------------------------------

WHEEL = os.environ.get("XLALINT_TORCHTPU_WHEEL")
needs_wheel = pytest.mark.skipif(not WHEEL, reason="set XLALINT_TORCHTPU_WHEEL to an unpacked torch-tpu 0.2.0 wheel")


def _read(relative: str) -> str:
    return (Path(WHEEL) / relative).read_text(encoding="utf-8")


@needs_wheel
def test_wheel_backend_raises_for_dynamic_and_rejects_keywords():
    backend = _read("torch_tpu/_internal/compile/_backend.py")
    assert "TPU backend does not support torch.compile(..., dynamic=True, ...)" in backend
    assert "assume_static_by_default" in backend
    assert 'raise TypeError("Unexpected keyword arguments: {}".format(kwargs))' in backend
    read = set(re.findall(r'options\.get\("(\w+)"', backend))
    assert read == set(options.TPU_OPTIONS)  # TPU205's list is exactly what the backend reads
    assert 'register_backend(compiler_fn=TpuBackend(), name="tpu")' in _read("torch_tpu/_internal/compile/__init__.py")


@needs_wheel
def test_wheel_loader_facts():
    loader = _read("torch_tpu/_loader.py")
    assert "backend='inductor') on TPU is experimental" in loader and "'tpu_backend': 'pallas'" in loader  # TPU202
    assert 'kwargs["dynamic"] = False' in loader  # the default the rules rely on
    assert 'register_backend(\n        "tpu", tpu_distributed.create_process_group' in loader  # TPU104
    assert "torch.utils.rename_privateuse1_backend(device)" in loader  # TPU101
    assert not (Path(WHEEL) / "torch_tpu" / "api").exists() and not (Path(WHEEL) / "torch_tpu" / "api.py").exists()


@needs_wheel
def test_wheel_makes_the_legacy_device_calls_internal():
    module = _read("torch_tpu/_internal/device/_device_module.py")
    found = {}
    for match in re.finditer(r'prefer="torch\.accelerator\.(\w+)"', module):
        decorated = re.compile(r"(?:def|class) _?(\w+)").search(module, match.end())
        found[decorated.group(1)] = match.group(1)  # the function or class the decorator is on
    for old, new in internal.ACCELERATOR.items():
        key = "DeviceContext" if old == "device" else old
        assert found.get(key) == new, (old, found)
    assert "internal_when=get_torch_version() >= (2, 11)" in module


@needs_wheel
def test_every_migration_row_cites_a_file_that_is_in_the_wheel():
    for row in migration.TABLE:
        for path in re.findall(r"torch_tpu/[\w/]+\.py", row.checked):
            assert (Path(WHEEL) / path).exists(), (row.name, path)


@needs_wheel
def test_the_environment_rows_name_variables_the_wheel_never_reads():
    blobs = [p.read_bytes() for p in Path(WHEEL, "torch_tpu").rglob("*") if p.is_file()]
    for row in migration.TABLE:
        if row.kind == "environment":
            assert not any(row.name.encode() in blob for blob in blobs), row.name
