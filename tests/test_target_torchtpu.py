"""`--target torchtpu` / `target = "torchtpu"`: the TPU1xx migration is off by default and on when the
user names the target; torch_xla upgrade advice (XLA601/XLA602) then steps aside, so one node never
gets both "use torch_xla.sync()" and "TorchTPU has no step barrier"."""

import json

import pytest

from xlalint.config import ConfigError, Settings
from xlalint.rules import ALL_RULES, RULES_BY_CODE

XLA_SCRIPT = """\
import torch_xla.core.xla_model as xm

device = xm.xla_device()
for x, y in loader:
    loss = model(x.to(device), y.to(device))
    loss.backward()
    optimizer.step()
    xm.mark_step()
"""


def codes(stdout: str) -> list[str]:
    return sorted({d["code"] for d in json.loads(stdout)})


def test_off_by_default_on_with_the_flag(run_cli, project):
    project.write("train.py", XLA_SCRIPT)
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert "XLA602" in codes(out) and not any(c.startswith("TPU") for c in codes(out))
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", "--preview", project / "train.py")
    assert not any(c.startswith("TPU1") for c in codes(out))  # preview alone does not migrate
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", "--target", "torchtpu", project / "train.py")
    found = codes(out)
    assert {"TPU101", "TPU102"} <= set(found)
    assert "XLA602" not in found and "XLA601" not in found


def test_the_same_node_is_never_reported_by_both_families(run_cli, project):
    project.write("train.py", XLA_SCRIPT)
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", "--target", "torchtpu", project / "train.py")
    rows = [(d["location"]["row"], d["location"]["column"]) for d in json.loads(out)
            if d["code"].startswith(("TPU", "XLA6"))]
    assert len(rows) == len(set(rows))
    # without the target, the same lines carry XLA602 and no TPU code
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert {d["location"]["row"] for d in json.loads(out) if d["code"] == "XLA602"} == {3, 8}


def test_target_from_the_configuration(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\ntarget = "torchtpu"\n')
    project.write("train.py", XLA_SCRIPT)
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert "TPU101" in codes(out) and "XLA602" not in codes(out)
    code, out, _ = run_cli("check", "--show-settings", project / "train.py")
    assert 'target = "torchtpu"' in out


def test_fix_with_the_target_writes_plain_pytorch(run_cli, project):
    project.write("train.py", XLA_SCRIPT)
    code, _, _ = run_cli("fix", "--no-cache", "--write", "--target", "torchtpu", project / "train.py")
    text = (project / "train.py").read_text()
    assert 'device = torch.device("tpu")' in text and "xm.xla_device" not in text
    assert "xm.mark_step()" in text  # a diagnostic only: TPU102 has no fix
    compile(text, "train.py", "exec")


@pytest.mark.parametrize("value", ["cuda", "torch_tpu", ""])
def test_a_bad_target_is_a_one_line_error(run_cli, project, value):
    project.write("train.py", XLA_SCRIPT)
    code, _, err = run_cli("check", "--no-cache", "--target", value, project / "train.py")
    assert code == 2 and "--target must be one of 'torchtpu'" in err and "Traceback" not in err
    project.write("pyproject.toml", f'[tool.xlalint]\ntarget = "{value}"\n')
    code, _, err = run_cli("check", "--no-cache", project / "train.py")
    assert code == 2 and "`target` must be one of" in err and len(err.strip().splitlines()) == 1


def test_selection_rules():
    settings = Settings(root=None)
    chosen = {r.code for r in settings.selected_rules(ALL_RULES)}
    assert not any(c.startswith("TPU") for c in chosen) and {"XLA601", "XLA602"} <= chosen
    settings.preview = True
    chosen = {r.code for r in settings.selected_rules(ALL_RULES)}
    assert {r.code for r in ALL_RULES if r.code.startswith("TPU2")} <= chosen  # the hazards are preview
    assert not any(c.startswith("TPU1") for c in chosen)
    settings.target_platform = "torchtpu"
    chosen = {r.code for r in settings.selected_rules(ALL_RULES)}
    assert {r.code for r in ALL_RULES if r.code.startswith("TPU1")} <= chosen
    assert not ({"XLA601", "XLA602", "XLA701"} & chosen)  # their advice and fixes write torch_xla calls
    explicit = Settings(root=None, select=["TPU105"], explicit_select=["TPU105"])
    assert [r.code for r in explicit.selected_rules(ALL_RULES)] == ["TPU105"]


def test_explain_says_how_to_turn_a_migration_rule_on(run_cli):
    _, out, _ = run_cli("explain", "TPU105")
    assert "--target torchtpu" in out
    assert RULES_BY_CODE["TPU105"].target == "torchtpu"
