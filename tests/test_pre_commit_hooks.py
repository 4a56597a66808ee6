"""The pre-commit hooks: well-formed, and their entries work on file names as pre-commit passes them."""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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


# -- the README's snippet: a pinned commit, no "mutable reference" warning (issue 40, item 9) -----------------

README = (ROOT / "README.md").read_text(encoding="utf-8")
SNIPPET = README[README.index("```yaml\nrepos:") + len("```yaml\n"):].split("```")[0]
MUTABLE = "appears to be a mutable reference"


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          capture_output=True, text=True)


def pre_commit(cwd, *args):
    if importlib.util.find_spec("pre_commit") is None or shutil.which("git") is None:
        pytest.skip("pre-commit or git is not installed")
    env = {**os.environ, "PRE_COMMIT_HOME": str(cwd / ".pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)


def test_readme_snippet_pins_a_commit_of_main_that_has_its_hooks():
    (repo,) = yaml.safe_load(SNIPPET)["repos"]
    assert re.fullmatch(r"[0-9a-f]{40}", repo["rev"]), repo["rev"]  # a SHA, not a branch or tag
    if shutil.which("git") is None or git(ROOT, "rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if git(ROOT, "cat-file", "-e", f"{repo['rev']}^{{commit}}").returncode != 0:
        pytest.skip("the pinned commit is not in this clone (shallow?)")
    for branch in ("HEAD", "main"):
        if git(ROOT, "rev-parse", "--verify", "--quiet", branch).returncode == 0:
            assert git(ROOT, "merge-base", "--is-ancestor", repo["rev"], branch).returncode == 0, branch
    manifest = yaml.safe_load(git(ROOT, "show", f"{repo['rev']}:.pre-commit-hooks.yaml").stdout)
    assert {hook["id"] for hook in repo["hooks"]} <= {hook["id"] for hook in manifest}


def test_pre_commit_accepts_the_snippet_without_a_warning_and_autoupdate_keeps_a_sha(tmp_path):
    (tmp_path / ".pre-commit-config.yaml").write_text(SNIPPET)
    proc = pre_commit(tmp_path, "validate-config", ".pre-commit-config.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert MUTABLE not in proc.stdout + proc.stderr
    # what the README warns about is what pre-commit does with a branch name (this check can fail)
    branch = re.sub(r"(?m)^(\s+rev:) \S+", r"\1 main", SNIPPET)
    (tmp_path / "branch.yaml").write_text(branch)
    warned = pre_commit(tmp_path, "validate-config", "branch.yaml")
    assert MUTABLE in warned.stdout + warned.stderr
    # the README's update command, against a local repository whose only tag is on an older commit of
    # main: `autoupdate` alone would pin that tag's commit; the documented one takes main's head, as a SHA
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / ".pre-commit-hooks.yaml").write_text((ROOT / ".pre-commit-hooks.yaml").read_text())
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "one"), ("tag", "v0.1"),
                 ("commit", "-q", "--allow-empty", "-m", "two")):
        assert git(hooks, *args).returncode == 0, args
    head = git(hooks, "rev-parse", "HEAD").stdout.strip()
    command = re.search(r"^pre-commit (autoupdate .*)$", README, re.M).group(1).split()
    command[command.index("--repo") + 1] = str(hooks)
    (tmp_path / ".pre-commit-config.yaml").write_text(SNIPPET.replace("https://github.com/xlalint/xlalint", str(hooks)))
    git(tmp_path, "init", "-q")
    proc = pre_commit(tmp_path, *command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    updated = (tmp_path / ".pre-commit-config.yaml").read_text()
    assert yaml.safe_load(updated)["repos"][0]["rev"] == head, updated
    (tmp_path / "plain.yaml").write_text(SNIPPET.replace("https://github.com/xlalint/xlalint", str(hooks)))
    assert pre_commit(tmp_path, "autoupdate", "--config", "plain.yaml").returncode == 0
    assert yaml.safe_load((tmp_path / "plain.yaml").read_text())["repos"][0]["rev"] == "v0.1"  # the tag, not main
    proc = pre_commit(tmp_path, "validate-config", ".pre-commit-config.yaml")
    assert proc.returncode == 0 and MUTABLE not in proc.stdout + proc.stderr
