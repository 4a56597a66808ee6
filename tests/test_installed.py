"""The package as users get it: a built wheel in a fresh venv, and the real pre-commit.

Every other test imports the source tree; these are the only ones that would notice a module left
out of the wheel (as `xlalint.analysis` once was). They build, create venvs and install from the
package registry, so they take a minute: `pytest -m "not installed"` skips them while iterating.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from xlalint import __version__

from samples import TRAIN_LOOP

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = {"xlalint": "xlalint", "rules": "xlalint/rules", "runtime": "xlalint/runtime"}

pytestmark = pytest.mark.installed


def run(argv, **kwargs):
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([str(a) for a in argv], **kwargs)


def clean_env(**extra) -> dict:
    """The environment without this test run's venv and source tree on any path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix))
    env.update(extra)
    return env


def tree_snapshot(dest: Path) -> Path:
    """The working tree as git sees it (tracked and untracked-not-ignored files), committed in a new
    repository: what a clone of this change would hold."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "snapshot")
    return dest


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
                    GIT_COMMITTER_EMAIL="t@example.com")
    return run(["git", *args], cwd=cwd, env=env, check=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The sdist, and the wheel built from it (`python -m build` does sdist -> wheel)."""
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    source = tree_snapshot(tmp_path_factory.mktemp("src"))
    proc = run([sys.executable, "-m", "build", "--outdir", out, source])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_wheel_holds_every_module_and_data_file(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    expected = set()
    for folder, package in SOURCE_FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".toml", ".typed") and "__pycache__" not in path.parts:
                expected.add(f"{package}/{path.relative_to(ROOT / folder).as_posix()}")
    assert expected - names == set(), "left out of the wheel"
    assert "xlalint/py.typed" in names and "xlalint/rules/xla_migrations.toml" in names
    assert "xlalint/rules/torchtpu/torchtpu_migrations.toml" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/"))]


@pytest.fixture(scope="module")
def user_venv(built, tmp_path_factory) -> Path:
    """A fresh venv with the wheel and its runtime extra (torch, pinned) installed from the registry."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    proc = run([python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", f"{built['wheel']}[runtime]"],
               env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return home


def test_installed_console_script_checks_from_outside_the_tree(user_venv, tmp_path):
    xlalint = user_venv / "bin" / "xlalint"
    version = run([xlalint, "--version"], cwd=tmp_path, env=clean_env())
    assert version.returncode == 0 and __version__ in version.stdout, version.stderr
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    proc = run([xlalint, "check", "train.py"], cwd=tmp_path, env=clean_env())
    assert proc.returncode == 1, proc.stderr
    assert "train.py:10:18: XLA101" in proc.stdout
    explain = run([xlalint, "explain", "XLA601"], cwd=tmp_path, env=clean_env())
    assert explain.returncode == 0 and "## Why is this bad?" in explain.stdout  # the table shipped
    sarif = run([xlalint, "check", "--output-format", "sarif", "train.py"], cwd=tmp_path, env=clean_env())
    assert sarif.returncode == 1, sarif.stderr
    results = json.loads(sarif.stdout)["runs"][0]["results"]
    assert any(r["ruleId"] == "XLA101" and r["locations"][0]["physicalLocation"]["region"]["startLine"] == 10
               for r in results)
    piped = run([xlalint, "check", "-", "--stdin-filename", "loop.py"], cwd=tmp_path, env=clean_env(),
                input=TRAIN_LOOP)
    assert piped.returncode == 1 and "loop.py:10:18: XLA101" in piped.stdout, piped.stderr
    cells = [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# notes"},
             {"cell_type": "code", "id": "b", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "%matplotlib inline\n" + TRAIN_LOOP}]
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                   "nbformat_minor": 5}, indent=1) + "\n")
    notebook = run([xlalint, "check", "nb.ipynb"], cwd=tmp_path, env=clean_env())
    assert notebook.returncode == 1 and "nb.ipynb:cell 2:11:18: XLA101" in notebook.stdout, notebook.stderr


def test_installed_fix_imports_the_installed_runtime(user_venv, tmp_path):
    """`fix` output runs in the user's venv: it imports xlalint.runtime from the wheel."""
    script = tmp_path / "step.py"
    script.write_text(
        "import torch\n"
        "try:\n    import torch_xla.core.xla_model as xm\nexcept ImportError:  # runs on CPU too\n    xm = None\n\n"
        "def train(model, opt, x):\n"
        "    for _ in range(2):\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
    )
    proc = run([user_venv / "bin" / "xlalint", "fix", "--write", "--unsafe-fixes", "step.py"],
               cwd=tmp_path, env=clean_env())
    assert "from xlalint.runtime import optimizer_step" in script.read_text(), proc.stderr
    probe = ("import sys, torch, step\n"
             "model = torch.nn.Linear(3, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "before = model.weight.detach().clone()\n"
             "step.train(model, opt, torch.ones(4, 3))\n"
             "assert not torch.equal(before, model.weight), 'the optimizer did not step'\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('libcst', 'click')))\n")
    ran = run([user_venv / "bin" / "python", "-c", probe], cwd=tmp_path, env=clean_env())
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip().splitlines()[-1] == "[]", "the runtime loaded the linter's dependencies"


def test_installed_runtime_is_typed_for_a_users_strict_mypy(user_venv, tmp_path):
    """The wheel's py.typed covers xlalint.runtime (installed inside xlalint/): a user's `mypy --strict`
    over code calling it passes and sees its real types (without the marker mypy reports the import
    as untyped and fails)."""
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(
        "import torch\n"
        "from xlalint.runtime import DeviceAccumulator, clip_grad_norm_, masked_sum\n\n\n"
        "def step(model: torch.nn.Module, mask: torch.Tensor) -> torch.Tensor:\n"
        "    norm = clip_grad_norm_(model.parameters(), 1.0)\n"
        "    reveal_type(norm)\n"
        "    acc = DeviceAccumulator()\n"
        "    acc.add(norm)\n"
        "    return masked_sum(norm, mask)\n"
    )
    proc = run([sys.executable, "-m", "mypy", "--strict", "--python-executable", user_venv / "bin" / "python",
                "--cache-dir", tmp_path / "cache", "--no-incremental", "user.py"], cwd=tmp_path, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Revealed type is "torch._tensor.Tensor"' in proc.stdout, proc.stdout


# -- pre-commit --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hooks_repo(tmp_path_factory) -> Path:
    return tree_snapshot(tmp_path_factory.mktemp("hooks-repo"))


@pytest.fixture
def user_project(hooks_repo, tmp_path_factory, tmp_path):
    """A user's git project whose .pre-commit-config.yaml points at this repository, hooks installed."""
    if shutil.which("pre-commit") is None and not (Path(sys.prefix) / "bin" / "pre-commit").exists():
        pytest.skip("pre-commit is not installed")
    rev = git(hooks_repo, "rev-parse", "HEAD").stdout.strip()
    config = {"repos": [{"repo": str(hooks_repo), "rev": rev,
                         "hooks": [{"id": "xlalint-fix"}, {"id": "xlalint-check"}]}]}
    (tmp_path / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".pre-commit-config.yaml")
    # one hook environment for the whole module: the first test builds it (pip install of the repo)
    env = clean_env(PRE_COMMIT_HOME=str(tmp_path_factory.getbasetemp() / "pre-commit-home"))
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env['PATH']}"  # pre-commit itself, not xlalint
    proc = run(["pre-commit", "install"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return tmp_path, env


def commit(project: Path, env: dict) -> subprocess.CompletedProcess:
    return run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-m", "change"],
               cwd=project, env=env)


def test_pre_commit_blocks_a_commit_with_a_finding(user_project):
    project, env = user_project
    (project / "train.py").write_text(TRAIN_LOOP)
    git(project, "add", "train.py")
    proc = commit(project, env)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "xlalint check" in output and "Failed" in output
    assert "train.py:10:18: XLA101" in output
    assert "ModuleNotFoundError" not in output
    assert git(project, "rev-list", "--all").stdout == "", "the commit went through"


def test_pre_commit_fix_hook_rewrites_and_fails_then_clean_commit_passes(user_project):
    project, env = user_project
    script = project / "sync.py"
    script.write_text("import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n")
    git(project, "add", "sync.py")
    proc = commit(project, env)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "files were modified by this hook" in output  # pre-commit's verdict on a fixing hook
    assert "torch_xla.sync()" in script.read_text()
    git(project, "add", "sync.py")
    again = commit(project, env)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    assert re.search(r"xlalint check\.+Passed", output) and re.search(r"xlalint fix\.+Passed", output)


def test_pre_commit_checks_a_staged_notebook(user_project):
    # the hooks take `jupyter` files: a notebook's per-step .item() blocks the commit, at its cell
    project, env = user_project
    cells = [{"cell_type": "code", "id": "loop", "metadata": {}, "outputs": [], "execution_count": None,
              "source": TRAIN_LOOP}]
    (project / "train.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                     "nbformat_minor": 5}, indent=1) + "\n")
    git(project, "add", "train.ipynb")
    proc = commit(project, env)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "train.ipynb:cell 1:10:18: XLA101" in output


def test_installed_baseline_and_listing_commands(user_venv, tmp_path):
    xlalint = user_venv / "bin" / "xlalint"
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    listed = run([xlalint, "check", "--show-files", "."], cwd=tmp_path, env=clean_env())
    assert listed.returncode == 0 and listed.stdout.split() == ["train.py"]
    added = run([xlalint, "check", "--add-noqa", "train.py"], cwd=tmp_path, env=clean_env())
    assert added.returncode == 0 and "Added" in added.stderr
    assert run([xlalint, "check", "train.py"], cwd=tmp_path, env=clean_env()).returncode == 0


# -- the README's snippets, as pasted (issue 31) ------------------------------------------------------

MUTABLE = "appears to be a mutable reference"  # pre-commit's warning about a branch or tag as `rev`


def readme_block(start: str) -> str:
    """The fenced block of README.md that begins with the line `start`."""
    text = (ROOT / "README.md").read_text()
    at = text.index(f"\n{start}\n") + 1
    return text[at:text.index("```", at)]


@pytest.fixture(scope="module")
def main_branch(hooks_repo) -> Path:
    """The hooks repository with a branch `main` at its commit, as the README's `rev: main` names."""
    assert git(hooks_repo, "branch", "-f", "main", "HEAD").returncode == 0
    return hooks_repo


def test_readme_pre_commit_snippet_validates_and_runs_with_try_repo(main_branch, tmp_path_factory, tmp_path):
    if shutil.which("pre-commit") is None and not (Path(sys.prefix) / "bin" / "pre-commit").exists():
        pytest.skip("pre-commit is not installed")
    env = clean_env(PRE_COMMIT_HOME=str(tmp_path_factory.getbasetemp() / "pre-commit-home"))
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env['PATH']}"
    snippet = readme_block("repos:")
    (tmp_path / ".pre-commit-config.yaml").write_text(snippet)
    proc = run(["pre-commit", "validate-config", ".pre-commit-config.yaml"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # as pasted: a config map pre-commit accepts
    assert MUTABLE not in proc.stdout + proc.stderr  # a pinned commit, not a branch (issue 40)
    config = yaml.safe_load(snippet)
    (repo,) = config["repos"]
    hooks = [hook["id"] for hook in repo["hooks"]]
    manifest = {hook["id"] for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) <= manifest
    # the same hooks, from this tree's snapshot instead of the address (the pinned commit's hooks run
    # in the test below, from a clone that holds it)
    git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    git(tmp_path, "add", "-A")
    proc = run(["pre-commit", "try-repo", main_branch, "xlalint-check", "--ref", "main", "--all-files"],
               cwd=tmp_path, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "train.py:10:18: XLA101" in output, output


def test_readme_pre_commit_snippet_runs_from_a_clone_at_its_pinned_commit(tmp_path_factory, tmp_path):
    """The snippet as pasted, its address replaced by a local clone of this repository: pre-commit
    installs the pinned commit's hooks, runs them, and prints no "mutable reference" warning."""
    if shutil.which("pre-commit") is None and not (Path(sys.prefix) / "bin" / "pre-commit").exists():
        pytest.skip("pre-commit is not installed")
    snippet = readme_block("repos:")
    rev = yaml.safe_load(snippet)["repos"][0]["rev"]
    clone = tmp_path / "clone"
    if git(tmp_path, "clone", "-q", "--no-checkout", str(ROOT), str(clone)).returncode != 0:
        pytest.skip("this tree is not a git clone")
    if git(clone, "cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
        pytest.skip("the pinned commit is not in this clone (shallow?)")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pre-commit-config.yaml").write_text(snippet.replace("https://github.com/xlalint/xlalint", str(clone)))
    (project / "train.py").write_text(TRAIN_LOOP)
    git(project, "init", "-q")
    git(project, "add", "-A")
    env = clean_env(PRE_COMMIT_HOME=str(tmp_path_factory.getbasetemp() / "pre-commit-home"))
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env['PATH']}"
    proc = run(["pre-commit", "run", "xlalint-check", "--all-files"], cwd=project, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "train.py:10:18: XLA101" in output, output
    assert MUTABLE not in output


def test_readme_install_from_a_git_url_and_the_actions_steps(main_branch, tmp_path):
    """The Install section's git URL form (pointed at this repository) in a fresh venv, without
    extras: the linter runs without torch; then the GitHub Actions snippet's `xlalint` steps."""
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    workflow = yaml.safe_load(readme_block("jobs:"))
    steps = workflow["jobs"]["xlalint"]["steps"]
    install = next(s["run"] for s in steps if "run" in s and "pip install" in s["run"])
    spec = re.search(r'"(xlalint @ git\+\S+?)"', install).group(1)
    assert spec.endswith("@main")
    local = spec.replace("https://github.com/xlalint/xlalint", f"file://{main_branch}")
    # the pip a venv starts with may predate `name @ git+file:///...` (a URL without a host)
    run([home / "bin" / "python", "-m", "pip", "install", "-q", "-U", "pip"], env=clean_env())
    proc = run([home / "bin" / "python", "-m", "pip", "install", "-q", local], env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = run([home / "bin" / "python", "-m", "pip", "list", "--format=json"], env=clean_env())
    assert "torch" not in {p["name"].lower() for p in json.loads(listed.stdout)}  # the core needs no torch
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_LOOP)
    env = clean_env(PATH=f"{home / 'bin'}{os.pathsep}{clean_env()['PATH']}")
    for step in steps:
        command = step.get("run", "")
        if not command.startswith("xlalint "):
            continue
        proc = run(["bash", "-c", command], cwd=project, env=env)
        assert proc.returncode == (0 if "--exit-zero" in command else 1), (command, proc.stderr)
    annotations = run(["bash", "-c", "xlalint check --output-format github ."], cwd=project, env=env).stdout
    assert annotations.startswith("::error title=xlalint (XLA101),file=")
    sarif = json.loads((project / "xlalint.sarif").read_text())
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"]
    explained = run([home / "bin" / "xlalint", "explain", "XLA101"], env=env).stdout
    page = Path(explained.strip().splitlines()[-1].removeprefix("This page: "))
    assert page.is_file() and str(home) in str(page)  # the rule page ships in the package


# -- the runtime on the lowest torch it supports --------------------------------------------------------

LOWEST_TORCH = "2.9.0"
CPU_RUNTIME_TESTS = ["test_runtime_imports.py", "test_runtime_masked.py", "test_runtime_clip.py",
                     "test_runtime_optim.py", "test_runtime_shapes.py", "test_runtime_accumulate.py"]


def test_the_runtime_extra_pins_the_tested_torch():
    text = (ROOT / "pyproject.toml").read_text()
    runtime = re.search(r"^runtime = \[(.*)\]$", text, re.M).group(1)
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert runtime == f'"torch=={pinned}"', runtime  # unpinned, pip pulls gigabytes of CUDA
    assert "torch" not in re.search(r"^dependencies = \[(.*?)\]", text, re.M | re.S).group(1)


@pytest.mark.skipif(not os.environ.get("XLALINT_TEST_LOWEST_TORCH"),
                    reason="opt-in (XLALINT_TEST_LOWEST_TORCH=1): PyPI's torch 2.9 for Linux is a CUDA build, "
                           "about 4.5 GB with the nvidia-* wheels it needs to import")
def test_the_runtime_on_the_lowest_torch(built, tmp_path):
    """The wheel's runtime, imported and its CPU semantics tested (the same tests as on the newest
    torch), on the lowest torch it supports: the wheel without its extra (which pins the newest), as
    on a TPU VM whose torch_xla pins its torch."""
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    proc = run([python, "-m", "pip", "install", "-q", f"torch=={LOWEST_TORCH}", "numpy", "pytest", "hypothesis",
                built["wheel"]], env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = run([python, "-c", "import torch, xlalint.runtime; print(torch.__version__, xlalint.runtime.__file__)"],
                cwd=tmp_path, env=clean_env())
    assert where.stdout.startswith(LOWEST_TORCH) and str(home) in where.stdout, where.stdout + where.stderr
    # the tests from this tree, the package from the venv (pytest's own script: the cwd is not on sys.path)
    tests = tmp_path / "runtime_tests"
    shutil.copytree(ROOT / "tests" / "runtime", tests, ignore=shutil.ignore_patterns("__pycache__"))
    proc = run([home / "bin" / "pytest", "-q", "-p", "no:cacheprovider", *CPU_RUNTIME_TESTS], cwd=tests,
               env=clean_env())
    assert proc.returncode == 0, proc.stdout[-4000:]
