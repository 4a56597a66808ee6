"""The project pass: every module summarised, then each file checked once with what the rest of its
project says about it; the run after it is warm, and one file checked alone gets the findings of
the whole-project check."""

import json
from collections import Counter
from pathlib import Path

import pytest

from xlalint import workspace
from xlalint.analysis.project import ProjectFacts

# A small training project whose modules depend on each other in every way the project index knows:
# helpers called every step from another module (metrics), a function that trains called in a loop
# elsewhere (engine, loop), a helper reading its argument on the host (helper_reads), hooks, a
# package re-export, a script outside the package, a filter_jit method called from another module.
MODULES = {
    "pyproject.toml": "[project]\nname = 'trainer'\n",
    "trainer/__init__.py": "from trainer.engine import train_step\n",
    "trainer/metrics.py": """\
import torch


class Meter:
    def __init__(self):
        self.total = 0.0

    def update(self, value):
        self.total += value.item()


def log_loss(loss):
    print(f"loss {loss}")


def summary(values):
    return torch.stack(values).mean().item()
""",
    "trainer/engine.py": """\
import torch
import torch_xla.core.xla_model as xm


def train_step(model, batch, optimizer):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def evaluate(model, batches):
    return [model(b).sum().item() for b in batches]
""",
    "trainer/loop.py": """\
import torch
import torch_xla.core.xla_model as xm
from trainer import train_step
from trainer.metrics import Meter, log_loss, summary


def fit(model, loader, optimizer, epochs):
    meter = Meter()
    device = xm.xla_device()
    for epoch in range(epochs):
        for step, batch in enumerate(loader):
            batch = batch.to(device)
            loss = train_step(model, batch, optimizer)
            meter.update(loss)
            log_loss(loss)
            if loss.sum() > 10:
                print("diverging")
        xm.mark_step()
    return summary([torch.zeros(1)])
""",
    "trainer/hooks.py": """\
import torch


def watch(module):
    module.register_forward_hook(report)


def report(module, inputs, output):
    print(output.max().item())
""",
    "trainer/model.py": """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.layer(x)
        if y.sum() > 0:
            y = y * 2
        return y[y > 0]
""",
    "scripts/run.py": """\
import torch
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader
from trainer.loop import fit
from trainer.model import Net

model = Net().to(xm.xla_device())
loader = DataLoader(range(10), batch_size=3)
fit(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), epochs=2)
""",
    "pages.py": """\
import equinox as eqx
import jax.numpy as jnp


class PageTable(eqx.Module):
    pages: jnp.ndarray

    @eqx.filter_jit
    def free_pages(self, slot: int):
        return self.pages.at[slot].set(0)
""",
    "serve.py": """\
import jax
from pages import PageTable


def serve(table: PageTable, requests):
    for slot in range(len(requests)):
        table = table.free_pages(slot)
    return table
""",
}


@pytest.fixture
def trainer(project):
    for name, text in MODULES.items():
        project.write(name, text)
    return project


def test_a_cold_check_runs_the_rules_once_per_file(run_cli, trainer, monkeypatch):
    """The project pass summarises each file (analysis only); the rules then run once per file,
    with the project's facts, and find what only other modules establish."""
    summarised: Counter = Counter()
    linted: Counter = Counter()
    monkeypatch.setattr(workspace, "summarize", _counting(workspace.summarize, summarised))
    monkeypatch.setattr(workspace, "lint_source", _counting(workspace.lint_source, linted))
    code, out, err = run_cli(
        "check",
        "--preview",
        "--confidence",
        "possible",
        "--no-cache",
        "--jobs",
        "1",
        "--output-format",
        "json",
        trainer,
    )
    assert code == 1 and err == "", err
    found = {(Path(d["filename"]).name, d["code"]) for d in json.loads(out)}
    # per-step helpers, a helper's host read, a hook, a filter_jit method of another module
    assert {("metrics.py", "XLA101"), ("loop.py", "XLA109"), ("hooks.py", "XLA101"), ("serve.py", "JAX109")} <= found
    checked = {name for name in MODULES if name.endswith(".py")}
    assert set(linted) == {Path(n).name for n in checked} and set(linted.values()) == {1}
    # each summarised once (no loop here calls a trainer elsewhere, which would summarise its module
    # again); `__init__.py` names no torch, XLA or JAX: never summarised
    assert set(summarised.values()) == {1} and set(summarised) == set(linted) - {"__init__.py"}


def _counting(real, seen):
    def counted(first, *args, **kwargs):
        path = getattr(first, "path", None) or getattr(first, "filename", "")
        seen[Path(str(path)).name] += 1
        return real(first, *args, **kwargs)

    return counted


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_run_after_a_cold_run_is_warm(run_cli, trainer, monkeypatch, jobs):
    """The cold run caches what the next run asks for: the project's facts (every field of them)
    and each file's result, keyed as the next run keys them. Nothing is analysed again."""
    args = ("check", "--preview", "--jobs", jobs, "--output-format", "json", trainer)
    code, cold, _ = run_cli(*args)
    assert code == 1
    analysed: Counter = Counter()
    monkeypatch.setattr(workspace, "analyse", _counting(workspace.analyse, analysed))
    monkeypatch.setattr(workspace, "lint_source", _counting(workspace.lint_source, analysed))
    code, warm, _ = run_cli(*args)
    assert code == 1 and json.loads(warm) == json.loads(cold)
    assert not analysed, analysed


def test_the_cached_facts_keep_every_field():
    """Facts read back from the cache key the results as the facts computed do (a field left out of
    the cache made the run after a cold run check every file again)."""
    from dataclasses import fields

    from xlalint.analysis.reads import ParamRead

    examples = {
        frozenset: lambda name: frozenset({(1, 2)}) if "calls" in name else frozenset({name}),
        bool: lambda name: True,
    }
    values = {}
    for field in fields(ProjectFacts):
        if field.name == "helper_reads":
            values[field.name] = (((3, 4), "f", "m.py", (ParamRead("x", 0, 7, ".item()", ""),)),)
        elif isinstance(field.default, tuple):
            values[field.name] = (("a", ("b",), ("c",)),)
        else:
            values[field.name] = examples[type(field.default)](field.name)
    facts = ProjectFacts(**values)
    back = workspace._facts_from_json(json.loads(json.dumps(workspace._facts_to_json({"m.py": facts}))))["m.py"]
    assert back == facts and back.key() == facts.key()
    for field in fields(ProjectFacts):  # each field on its own, the others at their defaults
        alone = ProjectFacts(**{field.name: values[field.name]})
        assert workspace._facts_from_json(json.loads(json.dumps(workspace._facts_to_json({"m": alone}))))["m"] == alone


def _findings(run_cli, *args):
    code, out, err = run_cli(
        "check", "--preview", "--confidence", "possible", "--jobs", "1", "--output-format", "json", *args
    )
    assert code in (0, 1) and err == "", err
    return sorted(json.dumps(d, sort_keys=True) for d in json.loads(out))


def test_each_file_checked_alone_has_the_findings_of_the_whole_project_check(run_cli, trainer, tmp_path):
    """One file checked alone (cold, then warm from a cache that whole-project run wrote, then after
    an edit elsewhere) gets exactly the findings it gets in a cold check of the whole project,
    those that only other modules establish included (a helper another module calls every step, a
    helper elsewhere that reads its argument on the host, a hook, a filter_jit method)."""
    whole = _findings(run_cli, "--no-cache", trainer)
    by_file: dict[str, list[str]] = {}
    for entry in whole:
        by_file.setdefault(Path(json.loads(entry)["filename"]).resolve().as_posix(), []).append(entry)
    cross = {(Path(name).name, json.loads(e)["code"]) for name, entries in by_file.items() for e in entries}
    assert {("metrics.py", "XLA101"), ("loop.py", "XLA109"), ("hooks.py", "XLA101"), ("serve.py", "JAX109")} <= cross
    cache = ["--cache-dir", tmp_path / "cache"]
    _findings(run_cli, *cache, trainer)  # a warm cache, as a whole-project run leaves it
    for name in MODULES:
        if not name.endswith(".py"):
            continue
        path = (trainer / name).resolve()
        expected = sorted(by_file.get(path.as_posix(), []))
        assert _findings(run_cli, "--no-cache", path) == expected, f"{name}, cold"
        assert _findings(run_cli, *cache, path) == expected, f"{name}, warm"
    # an edit elsewhere that changes nothing the project says: the same findings, from a fresh summary
    (trainer / "trainer" / "model.py").write_text(MODULES["trainer/model.py"] + "\n# edited\n", encoding="utf-8")
    for name in ("trainer/metrics.py", "trainer/loop.py", "serve.py"):
        path = (trainer / name).resolve()
        assert _findings(run_cli, *cache, path) == sorted(by_file.get(path.as_posix(), [])), f"{name}, after an edit"
