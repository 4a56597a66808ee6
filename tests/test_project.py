"""The project-wide index: per-step paths across modules, and the cache that keeps it cheap."""

import json

import pytest

METRICS = """\
import torch


class Meter:
    def __init__(self):
        self.total = 0.0

    def update(self, value):
        self.total += value.item()


def check_targets(targets, num_classes):
    low = targets.min().item()
    high = targets.max().item()
    return low, high


def log_loss(loss):
    print(loss.item())
"""

TRAIN = """\
import torch
from pkg.metrics import Meter, check_targets, log_loss


def train(model, loader, optimizer, device):
    meter = Meter()
    for step, (x, y) in enumerate(loader):
        y = y.to(device)
        check_targets(y, 10)
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        meter.update(loss)
        if step % 100 == 0:
            log_loss(loss)
"""


@pytest.fixture
def package(project):
    project.write("pyproject.toml", "[project]\nname = 'pkg'\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/metrics.py", METRICS)
    project.write("pkg/train.py", TRAIN)
    return project


def rows(out, name):
    return sorted(d["location"]["row"] for d in json.loads(out) if d["filename"].endswith(name))


def test_helpers_called_every_step_from_another_module_are_per_step(run_cli, package):
    code, out, _ = run_cli("check", "--output-format", "json", package)
    assert code == 1
    # Meter.update and check_targets run every step; log_loss only every 100 steps
    assert rows(out, "metrics.py") == [9, 13, 14]


def test_one_file_still_sees_its_callers(run_cli, package):
    """What pre-commit does: only the staged file is named, the index covers the project."""
    code, out, _ = run_cli("check", "--output-format", "json", package / "pkg" / "metrics.py")
    assert rows(out, "metrics.py") == [9, 13, 14]


def test_a_loop_calling_a_trainer_elsewhere_is_a_step_loop(run_cli, package):
    package.write(
        "pkg/steps.py", "def run_step(model, batch, opt):\n    model(batch).sum().backward()\n    opt.step()\n"
    )
    package.write(
        "pkg/fit.py",
        "import torch\nfrom pkg.steps import run_step as once\n\n\n"
        "def fit(model, stream, opt):\n    for batch in stream():\n"
        "        once(model, batch, opt)\n        seen.append(batch.sum().item())\n",
    )
    # (what `stream()` yields is not seen on the device: the read is a possible finding)
    args = ("check", "--output-format", "json", "--confidence", "possible", package / "pkg" / "fit.py")
    code, out, _ = run_cli(*args)
    assert rows(out, "fit.py") == [8]
    assert json.loads(out)[0]["related"][0]["message"] == "training loop at line 6 (once at 7)"


def test_the_cache_follows_the_callers(run_cli, package):
    args = ("check", "--output-format", "json", package / "pkg" / "metrics.py")
    first = run_cli(*args)[1]
    assert (package / ".xlalint_cache" / ".gitignore").read_text().strip().endswith("*")
    assert run_cli(*args)[1] == first  # warm: the same answer
    # only the caller changes (it checks targets every 100 steps): the helper file is the same,
    # its findings are not
    package.write(
        "pkg/train.py",
        TRAIN.replace("        check_targets(y, 10)\n", "").replace(
            "            log_loss(loss)\n", "            log_loss(loss)\n            check_targets(y, 10)\n"
        ),
    )
    assert rows(run_cli(*args)[1], "metrics.py") == [9]


def test_a_damaged_cache_is_ignored(run_cli, package):
    args = ("check", "--output-format", "json", package)
    run_cli(*args)
    for entry in (package / ".xlalint_cache").glob("*.json"):
        data = json.loads(entry.read_text())
        data["summaries"] = {k: ["stale", {"not": "a summary"}] for k in data["summaries"]}
        data["results"] = {k: [v[0], {"bad": 1}] for k, v in data["results"].items()}
        entry.write_text(json.dumps(data))
    code, out, err = run_cli(*args)
    assert code == 1 and not err
    assert rows(out, "metrics.py") == [9, 13, 14]
    (package / ".xlalint_cache").joinpath(
        next(iter(p.name for p in (package / ".xlalint_cache").glob("*.json")))
    ).write_text("{not json")
    assert rows(run_cli(*args)[1], "metrics.py") == [9, 13, 14]


def test_no_cache_writes_nothing(run_cli, package):
    run_cli("check", "--no-cache", package)
    assert not (package / ".xlalint_cache").exists()


def test_an_unchanged_project_reuses_its_facts(run_cli, package):
    """A warm pre-commit run neither re-reads the summaries nor re-resolves the call graph."""
    args = ("check", "--output-format", "json", package / "pkg" / "metrics.py")
    first = run_cli(*args)[1]
    (entry,) = (package / ".xlalint_cache").glob("*.json")
    data = json.loads(entry.read_text())
    assert "#facts" in data["results"]
    # without the summaries, only the stored facts can still say who calls the helpers
    data["summaries"] = {}
    data["results"] = {"#facts": data["results"]["#facts"]}
    entry.write_text(json.dumps(data))
    assert run_cli(*args)[1] == first


def test_editing_a_rule_invalidates_the_cache():
    """Rules live outside xlalint/ in a source checkout: their edits must still change the key; a
    fresh install of the same code (new modification times, as in every CI job) must not."""
    import os

    import xlalint.rules.host_sync.item_in_step as family

    from xlalint.cache import code_fingerprint

    path = family.__file__
    before = os.stat(path)
    with open(path, "rb") as handle:
        content = handle.read()
    code_fingerprint.cache_clear()
    old = code_fingerprint()
    try:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        code_fingerprint.cache_clear()
        assert code_fingerprint() == old
        with open(path, "ab") as handle:
            handle.write(b"\n# edited\n")
        code_fingerprint.cache_clear()
        assert code_fingerprint() != old
    finally:
        with open(path, "wb") as handle:
            handle.write(content)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        code_fingerprint.cache_clear()
    assert code_fingerprint() == old


def _findings(run_cli, project, *extra):
    code, out, err = run_cli("check", "--output-format", "json", *extra, project)
    assert code in (0, 1), err
    return sorted((d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out))


@pytest.mark.parametrize("layout", ["package", "src"])
def test_a_warm_run_after_adding_or_removing_an_init_is_a_cold_run(run_cli, package, layout):
    init = package / "pkg" / "__init__.py"
    if layout == "src":  # `from utils.metrics import ...` in scripts/: resolved only while utils/ is a package
        init = package / "src" / "utils" / "__init__.py"
        package.write("src/utils/metrics.py", METRICS)
        package.write("scripts/train.py", TRAIN.replace("pkg.metrics", "utils.metrics"))
    for step in ("remove", "add", "remove", "add"):
        if step == "add":
            init.write_text("")
        elif init.exists():
            init.unlink()
        warm = _findings(run_cli, package)
        cold = _findings(run_cli, package, "--no-cache")
        assert warm == cold, step


def test_a_namespace_package_import_is_resolved(run_cli, package):
    (package / "pkg" / "__init__.py").unlink()
    assert rows(run_cli("check", "--output-format", "json", "--no-cache", package)[1], "metrics.py") == [9, 13, 14]
