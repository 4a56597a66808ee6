"""The tool checks itself (README "Development"): .ci/run, .pre-commit-config.yaml and pyproject.toml
name the same checks, the same pinned tools and the same folders; the examples' fixed twins pass
xlalint's own check hook, run as pre-commit runs it."""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from samples import TRAIN_LOOP

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CI = (ROOT / ".ci" / "run").read_text()
CONFIG = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
HOOKS = {hook["id"]: hook for repo in CONFIG["repos"] for hook in repo["hooks"]}
PUBLISHED = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
FOLDERS = ["xlalint", "rules", "runtime"]  # setup.py's source folders


def pins() -> dict[str, str]:
    found = {}
    for requirement in PYPROJECT["project"]["optional-dependencies"]["test"]:
        name, _, version = requirement.partition("==")
        if name in ("ruff", "mypy"):
            found[name] = version
    return found


def ci_commands() -> list[str]:
    return [line for line in CI.splitlines() if line.strip() and not line.startswith("#")]


def test_the_checkers_are_pinned_alike_everywhere():
    versions = pins()
    assert set(versions) == {"ruff", "mypy"} and all(versions.values())
    constraints = (ROOT / "constraints.txt").read_text().splitlines()
    for name, version in versions.items():
        assert f"{name}=={version}" in constraints
    for hook_id in ("ruff-check", "ruff-format"):
        assert HOOKS[hook_id]["additional_dependencies"] == [f"ruff=={versions['ruff']}"]


def test_ci_runs_the_checks_on_the_source_folders_then_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"Run the tests[^\n]*\n\n```sh\n(.+)\n```", readme).group(1)
    commands = ci_commands()
    assert commands[-1] == test_command  # exactly the README's, last
    checks = {".venv/bin/ruff check", ".venv/bin/ruff format --check", ".venv/bin/python scripts/typecheck.py"}
    for check in checks:
        (line,) = [c for c in commands if c.startswith(check)]
        assert commands.index(line) < len(commands) - 1
        if "ruff" in check:
            assert shlex.split(line)[len(shlex.split(check)):] == FOLDERS


def test_ruff_and_the_hooks_cover_the_source_folders():
    assert sorted(PYPROJECT["tool"]["ruff"]["include"]) == sorted(f"{f}/**/*.py" for f in FOLDERS)
    setup = (ROOT / "setup.py").read_text()
    assert all(f'"{folder}"' in setup for folder in FOLDERS)
    for hook_id in ("ruff-check", "ruff-format", "mypy"):
        pattern = re.compile(HOOKS[hook_id]["files"])
        assert all(pattern.search(f"{folder}/x.py") for folder in FOLDERS), hook_id
        assert not pattern.search("tests/test_x.py") and not pattern.search("examples/a/x.py"), hook_id
    assert HOOKS["mypy"]["entry"] == "python scripts/typecheck.py" and HOOKS["mypy"]["pass_filenames"] is False


def test_the_package_ships_its_types():
    assert (ROOT / "xlalint" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["xlalint"]
    # rules/ and runtime/ install inside xlalint/ (setup.py), so its py.typed covers them (PEP 561)
    strict = [o for o in PYPROJECT["tool"]["mypy"]["overrides"] if "xlalint.runtime" in o["module"]]
    assert strict and strict[0]["disallow_untyped_defs"] is True


def test_no_module_has_mypy_error_codes_switched_off():
    """One strictness for every module of the linter (README "Development"): a module's errors are
    fixed by narrowing, never silenced for it alone (issue 28's debt, paid in issue 37)."""
    overrides = PYPROJECT["tool"]["mypy"]["overrides"]
    silenced = [o["module"] for o in overrides if o.get("disable_error_code") or o.get("ignore_errors")]
    assert overrides and not silenced


def test_fixed_examples_hook_is_the_published_check_hook():
    hook, published = HOOKS["xlalint-check-fixed-examples"], PUBLISHED["xlalint-check"]
    expected = [a for a in shlex.split(published["entry"]) if a != "--force-exclude"] + ["--preview"]
    assert shlex.split(hook["entry"]) == expected
    assert hook["types_or"] == published["types_or"]


def fixed_twins() -> list[str]:
    pattern = re.compile(HOOKS["xlalint-check-fixed-examples"]["files"])
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").rglob("*")
                  if p.is_file() and pattern.search(p.relative_to(ROOT).as_posix()) and p.suffix in (".py", ".ipynb"))


def test_the_examples_fixed_twins_are_clean():
    """The hook's entry on the files its `files` pattern picks, as pre-commit passes them."""
    files = fixed_twins()
    assert files, "the hook's pattern picks no file"
    argv = shlex.split(HOOKS["xlalint-check-fixed-examples"]["entry"])
    proc = subprocess.run([sys.executable, "-m", "xlalint", *argv[1:], *files], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_hook_entry_fails_on_a_hazard_in_a_fixed_folder(tmp_path):
    """The same entry fails on a training loop with a host sync put into a fixed folder (of a copy):
    the check above can fail."""
    folder = tmp_path / Path(fixed_twins()[0]).parent
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(TRAIN_LOOP)
    argv = shlex.split(HOOKS["xlalint-check-fixed-examples"]["entry"])
    proc = subprocess.run([sys.executable, "-m", "xlalint", *argv[1:], str(folder / "train.py")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "XLA101" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pre_commit_accepts_the_config():
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
