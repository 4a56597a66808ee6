"""--target-version / `target-version` / the project's torch_xla pin: no replacement newer than the target."""

import json

import pytest

from xlalint.config import parse_target, pinned_torch_xla
from xlalint.rules.deprecated_api import TABLE

CODE = """\
import os
import torch_xla.core.xla_model as xm

os.environ["XLA_USE_BF16"] = "1"
device = xm.xla_device()
xm.mark_step()
"""


def codes(run_cli, project, *args):
    project.write("train.py", CODE)
    code, out, err = run_cli("check", "--output-format", "json", *args, "train.py", cwd=project)
    assert code in (0, 1), err
    return sorted((d["location"]["row"], d["code"]) for d in json.loads(out))


def entry(name):
    return next(m for m in TABLE if m.name.endswith(name))


def test_a_replacement_the_target_lacks_is_never_suggested(run_cli, project):
    everything = codes(run_cli, project)
    assert everything == [(4, "XLA602"), (5, "XLA602"), (6, "XLA602")]
    sync = entry("xla_model.mark_step").replacement_since
    device = entry("xla_model.xla_device").replacement_since
    assert device < sync  # torch_xla.device() came first
    at_device = codes(run_cli, project, "--target-version", device)
    assert (5, "XLA602") in at_device and (6, "XLA602") not in at_device
    assert (6, "XLA602") in codes(run_cli, project, "--target-version", f"torch_xla>={sync}")
    before = f"{device.split('.')[0]}.{int(device.split('.')[1]) - 1}"
    assert codes(run_cli, project, "--target-version", before) == []  # nothing to move to yet


def test_the_project_pin_is_the_default_and_the_config_or_flag_wins(run_cli, project):
    sync = entry("xla_model.mark_step").replacement_since
    older = f"{sync.split('.')[0]}.{int(sync.split('.')[1]) - 1}"
    project.write("requirements.txt", f"torch==2.3.0\ntorch_xla[tpu]~={older}.0  # the TPU build\n")
    assert (6, "XLA602") not in codes(run_cli, project)
    assert (6, "XLA602") in codes(run_cli, project, "--target-version", sync)
    project.write("pyproject.toml", f'[tool.xlalint]\ntarget-version = "{sync}"\n')
    assert (6, "XLA602") in codes(run_cli, project)
    code, out, _ = run_cli("check", "--show-settings", "train.py", cwd=project)
    assert f'target-version = "{sync}"' in out and "pyproject.toml" in out


def test_pins_and_targets_are_read_in_their_usual_spellings(tmp_path):
    assert parse_target("2.5") == "2.5" and parse_target("torch_xla>=2.6.1") == "2.6.1"
    assert parse_target("torch-xla[tpu]~=2.4") == "2.4" and parse_target("latest") is None
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["torch~=2.6", "torch-xla[tpu]>=2.6,<2.8"]\n')
    (tmp_path / "requirements-tpu.txt").write_text("# torch_xla==1.0 is a comment\ntorch_xla==2.7.0\n")
    version, path = pinned_torch_xla(tmp_path)
    assert version == "2.6" and path.name == "pyproject.toml"  # the lowest pin: the oldest the code must run on


@pytest.mark.parametrize("value", ['"latest"', "2.5", "true"])
def test_a_bad_target_version_is_a_one_line_error(run_cli, project, value):
    project.write("pyproject.toml", f"[tool.xlalint]\ntarget-version = {value}\n")
    project.write("train.py", CODE)
    code, _, err = run_cli("check", "train.py", cwd=project)
    assert code == 2 and "target-version" in err and err.count("\n") == 1


SYNC_CALLS = """\
import torch_xla.core.xla_model as xm

xm.mark_step()
xm.mark_step(wait=True)
xm.mark_step(reset_scope=False)
xm.mark_step(True)
"""


def fixes_by_row(run_cli, project, *args):
    project.write("train.py", SYNC_CALLS)
    code, out, err = run_cli("check", "--output-format", "json", *args, "train.py", cwd=project)
    assert code == 1, err
    return {d["location"]["row"]: d["fix"] and d["fix"]["applicability"] for d in json.loads(out)}


@pytest.mark.parametrize("target", ["2.4", "2.5", "2.6", "2.7"])
def test_arguments_the_target_replacement_does_not_take_get_no_fix(run_cli, project, target):
    # torch_xla.sync exists there, but is not known to take `wait`/`reset_scope` before 2.8
    assert fixes_by_row(run_cli, project, "--target-version", target) == {3: "safe", 4: None, 5: None, 6: None}
    code, out, _ = run_cli("fix", "--target-version", target, "train.py", cwd=project)
    assert "+torch_xla.sync()" in out and "sync(wait" not in out and "sync(reset_scope" not in out
    assert "sync(True)" not in out


@pytest.mark.parametrize("target", ["2.8", "2.9", None])
def test_from_the_release_that_takes_them_the_arguments_carry_over(run_cli, project, target):
    args = ("--target-version", target) if target else ()
    assert fixes_by_row(run_cli, project, *args) == {3: "safe", 4: "safe", 5: "safe", 6: "safe"}


def test_the_table_records_when_the_replacement_takes_each_argument():
    mark_step = entry("xla_model.mark_step")
    assert dict(mark_step.params_since) == {"wait": "2.8", "reset_scope": "2.8"}
    assert mark_step.replacement_since == "2.4"
