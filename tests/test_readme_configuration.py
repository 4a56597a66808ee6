"""The README's configuration blocks as pasted, and `check`/`fix` sharing their options (issue 40, item 10).

A block that pairs `target = "torchtpu"` with `select = ["XLA"]` turned the migration off as pasted: each
documented `[tool.xlalint]` block is written to a pyproject.toml and run, and the rules its keys promise
must be in force (and act on a file). `fix` takes every option of `check` except the ones the README
names as check-only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from xlalint.cli import CHECK_ONLY, check, fix
from xlalint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = [b for b in re.findall(r"```toml\n(.*?)```", README, re.S) if "[tool.xlalint]" in b]
TORCH_XLA_CODE = (
    "import torch\nimport torch_xla.core.xla_model as xm\n\n"
    "device = xm.xla_device()\nx = torch.ones(2, device=device)\nxm.mark_step()\n"
)
MIGRATION = sorted(r.code for r in ALL_RULES if r.target == "torchtpu")
# rules whose advice keeps code on torch_xla: they step aside under the TorchTPU target
STEP_ASIDE = sorted(r.code for r in ALL_RULES if "torchtpu" in r.not_for_targets)


def xlalint(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def rules_in_force(stdout: str) -> set[str]:
    match = re.search(r"^rules in force \(\d+\) = (\[.*\])$", stdout, re.M)
    assert match, stdout
    return set(json.loads(match.group(1)))


def test_the_readme_documents_a_torchtpu_block_and_a_torch_xla_one():
    tables = [tomllib.loads(b)["tool"]["xlalint"] for b in BLOCKS]
    assert any(t.get("target") == "torchtpu" for t in tables)
    assert any("target-version" in t and "target" not in t for t in tables)
    assert MIGRATION and STEP_ASIDE


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_documented_configuration_block_does_what_its_text_says(block, tmp_path):
    (tmp_path / "pyproject.toml").write_text(block)
    (tmp_path / "train.py").write_text(TORCH_XLA_CODE)
    table = tomllib.loads(block)["tool"]["xlalint"]
    shown = xlalint("check", "--show-settings", "train.py", cwd=tmp_path)
    assert shown.returncode == 0 and "warning" not in shown.stderr, shown.stderr
    in_force = rules_in_force(shown.stdout)
    for code in table.get("ignore", []):
        assert not {c for c in in_force if c.startswith(code)}, f"ignore = [{code!r}] is not honoured"
    found = xlalint("check", "--output-format", "json", "--no-cache", "train.py", cwd=tmp_path)
    assert found.returncode == 1, found.stderr
    codes = {d["code"] for d in json.loads(found.stdout)}
    if table.get("target") == "torchtpu":
        # "the TPU1xx migration runs": every rule of it, and on a torch_xla file it reports
        assert set(MIGRATION) <= in_force, sorted(set(MIGRATION) - in_force)
        assert not set(STEP_ASIDE) & in_force
        assert {"TPU101", "TPU102"} <= codes, codes
    else:
        assert not set(MIGRATION) & in_force
        if "target-version" in table:  # it steers XLA601/XLA602: they run
            assert {"XLA601", "XLA602"} <= in_force
            assert "XLA602" in codes, codes


def test_a_target_whose_migration_rules_are_deselected_warns(tmp_path):
    # the old documented pairing: as pasted it ran no TPU1xx rule, silently
    (tmp_path / "pyproject.toml").write_text('[tool.xlalint]\nselect = ["XLA"]\ntarget = "torchtpu"\n')
    (tmp_path / "train.py").write_text(TORCH_XLA_CODE)
    proc = xlalint("check", "--show-settings", "train.py", cwd=tmp_path)
    assert proc.returncode == 0
    assert "warning: the target torchtpu runs none of its migration rules: the selection leaves out TPU1" in proc.stderr
    assert not set(MIGRATION) & rules_in_force(proc.stdout)
    proc = xlalint("check", "--show-settings", "--extend-select", "TPU1", "train.py", cwd=tmp_path)
    assert "warning" not in proc.stderr and set(MIGRATION) <= rules_in_force(proc.stdout)


# -- check and fix: one set of options ----------------------------------------------------------------------


def option_names(command) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts) if name.startswith("--")}


def test_fix_takes_every_option_of_check_but_the_ones_the_readme_names():
    only_check = option_names(check) - option_names(fix)
    assert only_check == set(CHECK_ONLY)
    row = next(line for line in README.splitlines() if line.startswith("| `xlalint fix [PATHS...]`"))
    but = re.search(r"takes every option of `check` but (.*?):", row)
    assert but, row
    assert set(re.findall(r"`(--[a-z-]+)`", but.group(1))) == set(CHECK_ONLY)
    for name in option_names(check) & option_names(fix):
        (param,) = [p for p in fix.params if name in (*p.opts, *p.secondary_opts)]
        value = param.type.choices[0] if isinstance(param.type, click.Choice) else "1"
        args = [name] if param.is_flag else [name, value]
        fix.make_context("fix", [*args, "x.py"])  # parsed: no "No such option"


SOURCE = (
    "import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\n\n"
    "def train(model, loader, optimizer):\n"
    "    for x, y in loader:\n"
    "        loss = model(x).sum()\n"
    "        print(loss.item())\n"
    "        optimizer.step()\n"
    "        xm.mark_step()\n"
)


def test_fix_write_reports_what_remains_in_the_format_asked(tmp_path):
    (tmp_path / "train.py").write_text(SOURCE)
    proc = xlalint("fix", "--write", "--output-format", "json", "--no-cache", "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    remaining = json.loads(proc.stdout)
    assert remaining and all(d["filename"] == "train.py" for d in remaining)
    assert "XLA602" not in {d["code"] for d in remaining} and "torch_xla.sync()" in (tmp_path / "train.py").read_text()
    again = xlalint("fix", "--write", "--statistics", "--exit-zero", "--no-cache", "train.py", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert re.search(r"^\s+1\s+XLA101\s", again.stdout, re.M), again.stdout
    assert "train.py:" not in again.stdout  # the counts, not the list


def test_fix_lists_files_and_settings_and_refuses_a_report_format_for_a_diff(tmp_path):
    (tmp_path / "train.py").write_text(SOURCE)
    files = xlalint("fix", "--show-files", ".", cwd=tmp_path)
    assert (files.returncode, files.stdout) == (0, "train.py\n"), files.stderr
    settings = xlalint("fix", "--show-settings", "--select", "XLA6", "train.py", cwd=tmp_path)
    assert settings.returncode == 0 and rules_in_force(settings.stdout) == {"XLA601", "XLA602"}
    assert (tmp_path / "train.py").read_text() == SOURCE  # listing fixed nothing
    diff = xlalint("fix", "--output-format", "json", "train.py", cwd=tmp_path)
    assert diff.returncode == 2 and diff.stdout == ""
    assert diff.stderr == ("xlalint: error: --output-format formats the findings that remain after --write; "
                           "without it, fix prints a diff\n")
    assert xlalint("fix", "--exit-zero", "train.py", cwd=tmp_path).returncode == 0  # a diff, exit 0 as asked
