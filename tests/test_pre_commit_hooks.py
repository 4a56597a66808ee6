"""The pre-commit hooks: well-formed, and their entries work on file names as pre-commit passes them."""

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from samples import TRAIN_LOOP

ROOT = Path(__file__).resolve().parent.parent
HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_hooks_are_well_formed():
    ids = {hook["id"] for hook in HOOKS}
    assert ids == {"xlalint-check", "xlalint-fix"}
    for hook in HOOKS:
        assert hook["language"] == "python"
        assert set(hook["types_or"]) >= {"python"}
        assert hook["entry"].startswith("xlalint ")
        assert "--force-exclude" in hook["entry"]


def run_entry(hook_id, files, cwd):
    (hook,) = [h for h in HOOKS if h["id"] == hook_id]
    argv = shlex.split(hook["entry"]) + hook.get("args", []) + [str(f) for f in files]
    return subprocess.run([sys.executable, "-m", "xlalint", *argv[1:]], capture_output=True, text=True, cwd=cwd)


def test_check_hook_fails_on_findings_and_honours_excludes(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.xlalint]\nextend-exclude = ["vendored"]\n')
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "train.py").write_text(TRAIN_LOOP)
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    proc = run_entry("xlalint-check", ["train.py", "vendored/train.py"], tmp_path)
    assert proc.returncode == 1
    assert "train.py:10:18: XLA101" in proc.stdout and "vendored" not in proc.stdout
    assert run_entry("xlalint-check", ["vendored/train.py"], tmp_path).returncode == 0


def test_fix_hook_rewrites_files(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n")
    proc = run_entry("xlalint-fix", ["train.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "torch_xla.sync()" in script.read_text()
