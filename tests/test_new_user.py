"""What a new user trips over (issue 18), each through the command line: false alarms on code that
never syncs, per-step hazards that must be found, and the conventions users bring from Ruff."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")

HEADER = """\
import os
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
"""


def codes_by_row(out):
    return sorted((d["location"]["row"], d["code"]) for d in json.loads(out))


def check_json(run_cli, project, name, code, *extra):
    project.write(name, HEADER + code)
    status, out, err = run_cli("check", "--no-cache", "--output-format", "json", *extra, project / name)
    assert status in (0, 1), err
    return [(row - HEADER.count("\n"), rule) for row, rule in codes_by_row(out)]


# -- false alarms ---------------------------------------------------------------------------------------

def test_assert_messages_run_only_when_the_assertion_fails(run_cli, project):
    found = check_json(run_cli, project, "train.py", """\
def train(model, loader, optimizer, device, name):
    for x, y in pl.MpDeviceLoader(loader, device):
        loss = model(x, y)
        assert name, f"bad loss {loss} ({loss.item():.3f}) in {name}"
        assert name, "loss %s" % loss
        loss.backward()
        xm.optimizer_step(optimizer)
""")
    assert found == []


def test_allclose_and_equal_of_cpu_tensors_are_not_device_syncs(run_cli, project):
    found = check_json(run_cli, project, "train.py", """\
def train(model, loader, optimizer, device):
    for x, y in pl.MpDeviceLoader(loader, device):
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        expected = torch.tensor([1.0, 2.0])
        if torch.allclose(expected, torch.ones(2)) or torch.equal(expected, expected.clone()):
            print("reference unchanged")
""")
    assert found == []


def test_functions_compiled_for_xla_own_their_graph(run_cli, project):
    found = check_json(run_cli, project, "train.py", """\
model = torch.compile(model, backend="openxla")

@torch.compile(backend="openxla")
def train_step(x, y):
    loss = model(x, y)
    loss.backward()
    optimizer.step()
    return loss

def run(loader):
    for x, y in loader:
        train_step(x, y)
""")
    assert [rule for _, rule in found if rule == "XLA401"] == []


def test_a_tokenizer_call_run_once_at_module_level_is_not_a_varying_shape(run_cli, project):
    found = check_json(run_cli, project, "prompts.py", """\
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained("gpt2")
prompts = tokenizer(["a prompt", "a longer prompt"], padding=True, return_tensors="pt")

def collate(texts):
    return tokenizer(texts, padding=True, return_tensors="pt")
""")
    assert found == [(6, "XLA312")]  # the per-batch collate still is


def test_a_function_named_update_is_not_per_step_by_its_name_alone(run_cli, project):
    found = check_json(run_cli, project, "train.py", """\
def weights_update(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        xm.mark_step()
    return model.weight.cpu()
""", "--ignore", "XLA602")
    assert found == []


# -- per-step hazards that must be found ------------------------------------------------------------------

def test_waiting_for_the_device_and_printing_tensors_every_step_are_found(run_cli, project):
    found = check_json(run_cli, project, "train.py", """\
def train(model, loader, optimizer, device):
    for step, (x, y) in enumerate(pl.MpDeviceLoader(loader, device)):
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.wait_device_ops()
        xm.master_print(loss)
        xm.master_print(f"step {step}")
""")
    assert found == [(6, "XLA108"), (7, "XLA104")]


def test_bf16_environment_variables_set_by_the_code_are_found(run_cli, project):
    found = check_json(run_cli, project, "setup.py", """\
os.environ["XLA_USE_BF16"] = "1"
os.environ.setdefault("XLA_DOWNCAST_BF16", "1")
""")
    assert found == [(1, "XLA602"), (2, "XLA602")]


# -- suppression comments ---------------------------------------------------------------------------------

LOOP = """\
def train(model, loader, optimizer, device):
    for x, y in pl.MpDeviceLoader(loader, device):
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        print(loss.item())
"""


@pytest.mark.parametrize("comment", ["# ruff: noqa", "# flake8: noqa", "# pylint: noqa"])
def test_other_tools_file_level_exemptions_do_not_silence_xlalint(run_cli, project, comment):
    project.write("train.py", f"{comment}\n" + HEADER + LOOP)
    code, out, _ = run_cli("check", "--output-format", "json", project / "train.py")
    assert code == 1 and [d["code"] for d in json.loads(out)] == ["XLA101"]


@pytest.mark.parametrize("comment", ["# xlalint: noqa", "# xlalint: noqa: XLA101"])
def test_xlalints_own_file_level_exemption_silences_the_file(run_cli, project, comment):
    project.write("train.py", f"{comment}\n" + HEADER + LOOP)
    code, out, _ = run_cli("check", project / "train.py")
    assert code == 0 and "All checks passed!" in out


# -- conventions from Ruff --------------------------------------------------------------------------------

def run_module(*args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.mark.parametrize("args, env, coloured", [
    ((), {}, False),  # piped: no colour
    (("--color", "always"), {}, True),
    (("--color", "never"), {"FORCE_COLOR": "1"}, False),
    ((), {"FORCE_COLOR": "1"}, True),
    ((), {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
    (("--color", "always"), {"NO_COLOR": "1"}, True),
])
def test_colour_follows_the_option_then_no_color_then_force_color(project, args, env, coloured):
    project.write("train.py", HEADER + LOOP)
    proc = run_module("check", "--no-cache", *args, project / "train.py", env_extra=env)
    assert proc.returncode == 1, proc.stderr
    assert bool(ANSI.search(proc.stdout)) is coloured


def test_check_fix_applies_the_fixes_and_check_diff_only_shows_them(run_cli, project):
    source = HEADER + "xm.mark_step()\n"
    path = project.write("train.py", source)
    code, out, _ = run_cli("check", "--diff", path)
    assert code == 1 and "+torch_xla.sync()" in out and path.read_text() == source
    code, out, err = run_cli("check", "--fix", path)
    assert code == 0 and "Fixed 1 error" in err
    assert "torch_xla.sync()" in path.read_text()


def test_statistics_count_fixable_findings_and_speak_json(run_cli, project):
    project.write("train.py", HEADER + LOOP + "xm.mark_step()\nxm.mark_step()\n")
    code, out, _ = run_cli("check", "--statistics", project / "train.py")
    assert code == 1
    assert out.splitlines() == ["    2  XLA602  [*] deprecated-xla-api", "    1  XLA101      item-in-step"]
    code, out, _ = run_cli("check", "--statistics", "--output-format", "json", project / "train.py")
    assert json.loads(out) == [
        {"code": "XLA602", "name": "deprecated-xla-api", "count": 2, "fixable": 2, "category": "deprecated_xla_api"},
        {"code": "XLA101", "name": "item-in-step", "count": 1, "fixable": 0, "category": "item_sync"},
    ]


# -- the repository itself --------------------------------------------------------------------------------

def test_the_pre_commit_and_actions_snippets_name_the_branch_that_lands():
    # tags are not carried with main: a snippet naming one fails as pasted from a clone of main. pip
    # installs the branch; pre-commit pins a commit of it (a branch name warns on every run, issue 40)
    text = (ROOT / "README.md").read_text() + (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert set(re.findall(r"xlalint@([^\s\"']+)", text)) == {"main"}
    config = yaml.safe_load(text[text.index("```yaml\nrepos:") + len("```yaml\n"):].split("```")[0])
    rev = config["repos"][0]["rev"]  # a config map, as pre-commit expects
    assert re.fullmatch(r"[0-9a-f]{40}", rev)
    # every `rev:` line: the snippet's, and the manifest comment's placeholder
    assert set(re.findall(r"(?m)^[\s#]*rev: (\S+)", text)) == {rev, "<a"}
    branch = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "main"], cwd=ROOT, capture_output=True)
    if branch.returncode != 0:
        pytest.skip("no branch main here (not a checkout of it)")
    if subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("the pinned commit is not in this clone (shallow?)")
    on_main = subprocess.run(["git", "merge-base", "--is-ancestor", rev, "main"], cwd=ROOT, capture_output=True)
    assert on_main.returncode == 0, f"{rev} is not a commit of main"


def test_xlalint_passes_its_own_linter():
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "xlalint").is_dir():
        pytest.skip("not a source checkout")
    proc = run_module("check", "--no-cache", ".", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
