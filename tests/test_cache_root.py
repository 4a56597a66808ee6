"""The cache through the command line: one root per run (Ruff's), one `.xlalint_cache` there with its
`CACHEDIR.TAG` and `.gitignore`, and `xlalint clean`."""

import json
import os

TRAIN = """\
import torch
import torch_xla.core.xla_model as xm
from utils.helpers import log


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        log(loss)
"""
HELPERS = "import torch\n\n\ndef log(loss):\n    print(loss.item())\n"
PREPARE = "import torch\n\nx = torch.zeros(3)\n"


def notebook_folder(project):
    """A tree with no project marker, as a folder of notebooks and scripts or an unpacked archive."""
    project.write("train.py", TRAIN)
    project.write("utils/helpers.py", HELPERS)
    project.write("data/shakespeare/prepare.py", PREPARE)
    return project


def caches(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(".xlalint_cache"))


def test_a_tree_without_a_project_marker_has_one_cache_and_is_one_project(run_cli, project):
    root = notebook_folder(project)
    code, out, _ = run_cli("check", "--output-format", "json", cwd=root)
    assert caches(root) == [".xlalint_cache"]
    folder = root / ".xlalint_cache"
    assert (folder / "CACHEDIR.TAG").read_bytes().startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    # one project: the helper in utils/ knows that train.py calls it every step
    assert ("utils/helpers.py", "XLA101") in {(d["filename"], d["code"]) for d in json.loads(out)}
    warm = run_cli("check", "--output-format", "json", cwd=root)
    assert warm[1] == out and caches(root) == [".xlalint_cache"]


def test_the_root_is_the_common_folder_of_the_arguments(run_cli, project):
    root = notebook_folder(project)
    run_cli("check", root / "utils", root / "data")
    assert caches(root) == [".xlalint_cache"]
    run_cli("clean", root)
    run_cli("check", root / "data" / "shakespeare" / "prepare.py")
    assert caches(root) == ["data/shakespeare/.xlalint_cache"]


def test_inside_a_project_the_cache_is_at_its_root(run_cli, project):
    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    notebook_folder(project)
    run_cli("check", project / "utils" / "helpers.py")
    assert caches(project) == [".xlalint_cache"]


def test_clean_removes_the_cache_of_the_run_and_older_ones_below(run_cli, project):
    root = notebook_folder(project)
    run_cli("check", cwd=root)
    stale = root / "data" / "shakespeare" / ".xlalint_cache"  # one per folder, as earlier versions wrote
    stale.mkdir()
    (stale / "0123456789abcdef0123456789abcdef.json").write_text("{}")
    (stale / ".gitignore").write_text("*\n")
    code, out, err = run_cli("clean", cwd=root)
    assert (code, out) == (0, "") and caches(root) == []
    assert err.splitlines() == [f"removed {root / '.xlalint_cache'}", f"removed {stale}"]
    assert sorted(p.name for p in root.rglob("*.py")) == ["helpers.py", "prepare.py", "train.py"]
    assert run_cli("clean", cwd=root) == (0, "", "")  # nothing left: nothing said


def test_clean_of_a_cache_dir_removes_only_what_xlalint_wrote(run_cli, project, tmp_path_factory):
    root = notebook_folder(project)
    shared = tmp_path_factory.mktemp("shared")
    (shared / "notes.txt").write_text("mine")
    run_cli("check", "--cache-dir", shared, root)
    assert len(list(shared.glob("*.json"))) == 1 and (shared / "CACHEDIR.TAG").is_file()
    code, _, _ = run_cli("clean", "--cache-dir", shared, "-q")
    assert code == 0 and sorted(os.listdir(shared)) == ["notes.txt"]
    os.environ["XLALINT_CACHE_DIR"] = str(shared)  # the variable `check` reads names it too
    try:
        run_cli("check", root)
        assert len(list(shared.glob("*.json"))) == 1
        run_cli("clean", "-q")
    finally:
        del os.environ["XLALINT_CACHE_DIR"]
    assert sorted(os.listdir(shared)) == ["notes.txt"]


def test_clean_unlinks_a_cache_folder_that_is_a_link_and_keeps_its_target(run_cli, project, tmp_path_factory):
    root = notebook_folder(project)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "0123456789abcdef0123456789abcdef.json").write_text("{}")
    (root / ".xlalint_cache").symlink_to(elsewhere, target_is_directory=True)
    code, _, _ = run_cli("clean", "-q", cwd=root)
    assert code == 0 and not os.path.lexists(root / ".xlalint_cache")
    assert os.listdir(elsewhere) == ["0123456789abcdef0123456789abcdef.json"]


def test_clean_of_a_missing_path_is_one_line_and_exit_2(run_cli, project):
    code, out, err = run_cli("clean", project / "nope")
    assert (code, out) == (2, "") and err.splitlines() == [f"{project / 'nope'}: error: no such file or directory"]


def test_the_readmes_actions_snippet_caches_the_cache_by_version_and_config(run_cli):
    from pathlib import Path

    import yaml

    from xlalint import __version__
    from xlalint.config import CONFIG_FILES

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index("```yaml\n", text.index("## GitHub Actions")) + len("```yaml\n")
    steps = yaml.safe_load(text[start:text.index("```", start)])["jobs"]["xlalint"]["steps"]
    (cache,) = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["path"] == ".xlalint_cache"
    key = cache["with"]["key"]
    assert "steps.xlalint.outputs.version" in key and all(f"'{name}'" in key for name in CONFIG_FILES)
    assert key.startswith(cache["with"]["restore-keys"])
    (version,) = [s for s in steps if s.get("id") == "xlalint"]
    assert "cut -d' ' -f3" in version["run"]  # what `xlalint --version` prints, third word
    assert run_cli("--version")[1].split()[2] == __version__
    assert steps.index(version) < steps.index(cache) < min(i for i, s in enumerate(steps) if "xlalint check" in s.get("run", ""))
