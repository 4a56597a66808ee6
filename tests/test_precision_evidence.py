"""Judgement from evidence, not names (issue 30, classes 5-8): what a value was built from decides
its kind, findings are reported once per cause, values on the host stay on the host, and code is
per step by its callers rather than by its name."""

import ast
import json
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.analysis.tensors import integer_index, is_bool_mask
from xlalint.source import SourceText


def context(code):
    code = textwrap.dedent(code)
    return FileContext(Path("t.py"), ast.parse(code), SourceText(code))


def index_named(ctx, name):
    """The last index expression `x[name]` of the file."""
    found = [
        n.slice
        for n in ast.walk(ctx.tree)
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id == name
    ]
    return max(found, key=lambda n: (n.lineno, n.col_offset))


def findings(run_cli, project, files, *args):
    """(file, row, code) of `xlalint check` over a project of `files` (name -> code)."""
    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    for name, code in files.items():
        project.write(name, textwrap.dedent(code))
    # the fixtures' loops move host batches to the device by hand (XLA704, their input pipeline):
    # not what these tests judge
    out = run_cli("check", "--no-cache", "--output-format", "json", "--ignore", "XLA704", *args, cwd=project)[1]
    return sorted((d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out))


# -- class 5: names are not kinds ---------------------------------------------------------------------

INDEXED = """
import torch

def forward(self, x):
    h = self.encoder(x)
    mask = {value}
    return h[mask]
"""


@pytest.mark.parametrize(
    "value, boolean",
    [
        ("torch.argmax(h, dim=-1)", False),
        ("torch.arange(h.shape[0], device=h.device)", False),
        ("torch.randperm(h.shape[0], device=h.device)[:4]", False),
        ("h.topk(3).indices", False),
        ("h.max(dim=1)[1]", False),
        ("torch.where(h > 0)", False),  # the hazard is the `where` (XLA301), reported there
        ("torch.nonzero(h > 0, as_tuple=True)", False),
        ("(h > 0).long()", False),
        ("torch.zeros(3, dtype=torch.long, device=h.device)", False),
        ("h.argsort()[:, :8]", False),
        ("h > 0", True),
        ("(h > 0).bool()", True),
        ("torch.zeros(h.shape[0], dtype=torch.bool, device=h.device)", True),
        ("torch.isnan(h)", True),
        ("self.make(h)", True),  # nothing says integer: the name stays the evidence
    ],
)
def test_a_mask_is_a_mask_by_how_it_was_built(value, boolean):
    ctx = context(INDEXED.format(value=value))
    mask = index_named(ctx, "mask")
    assert is_bool_mask(ctx, mask) is boolean
    assert integer_index(ctx, mask) is not boolean or value == "self.make(h)"


def test_a_parameter_named_like_a_mask_takes_what_its_callers_pass():
    ctx = context(
        """
        import torch

        def pick(h, keep_mask):
            return h[keep_mask]

        def forward(self, x):
            h = self.encoder(x)
            return pick(h, h.topk(4, dim=0).indices)
        """
    )
    assert not is_bool_mask(ctx, index_named(ctx, "keep_mask"))


def test_integer_masks_are_gathers_under_the_rules(run_cli, project):
    code = """
    import torch

    def forward(self, x, y):
        h = self.encoder(x)
        idx_mask = torch.arange(h.shape[0], device=h.device)
        h[idx_mask] = 0
        sel_mask = torch.nonzero(y > 0, as_tuple=True)
        return h[idx_mask] + h[sel_mask].sum()
    """
    # one finding: the `nonzero` (XLA301); no XLA302/303 for the integer indices named like masks
    assert findings(run_cli, project, {"model.py": code}) == [("model.py", 8, "XLA301")]


# -- class 6: one finding per root cause ---------------------------------------------------------------

GRID = """\
import torch.nn as nn


def grid_sizes(coords):
    return [int(n.item()) for n in coords.amax(dim=1) + 1]


class PosEmbed(nn.Module):
    def forward(self, x, coords):
        sizes = grid_sizes(coords){noqa}
        return x + self.interpolate(sizes)


class Rope(nn.Module):
    def forward(self, x, coords):
        return self.build(x, grid_sizes(coords))
"""


def test_a_same_module_helper_read_it_returns_is_reported_at_its_calls_only(run_cli, project):
    # the host value enters the step where `grid_sizes(...)` is called: the read is their related location
    project.write("model.py", GRID.format(noqa=""))
    out = json.loads(run_cli("check", "--no-cache", "--output-format", "json", cwd=project)[1])
    assert [(d["code"], d["location"]["row"]) for d in out] == [("XLA109", 10), ("XLA109", 16)]
    assert all("`.item()` at model.py:5" in d["message"] for d in out)
    # the chain (the forward that runs it), then the read as another place of the same cause
    assert [[r["location"]["row"] for r in d["related"]] for d in out] == [[9, 5], [15, 5]]
    assert [d["related"][-1]["message"] for d in out] == ["another place of the same cause"] * 2
    sarif = json.loads(run_cli("check", "--no-cache", "--output-format", "sarif", cwd=project)[1])
    related = [r["relatedLocations"] for r in sarif["runs"][0]["results"]]
    assert [[loc["physicalLocation"]["region"]["startLine"] for loc in r] for r in related] == [[9, 5], [15, 5]]


def test_a_helper_per_step_by_its_own_name_is_reported_at_the_read_naming_its_calls(run_cli, project):
    code = GRID.format(noqa="").replace("grid_sizes", "size_loss")
    project.write("model.py", code)
    out = json.loads(run_cli("check", "--no-cache", "--output-format", "json", cwd=project)[1])
    assert [(d["code"], d["location"]["row"]) for d in out] == [("XLA101", 5)]
    assert out[0]["message"].endswith("(per step through the calls at lines 10, 16)")


def test_noqa_works_with_the_merged_finding(run_cli, project):
    args = ("check", "--no-cache", "--output-format", "json", "--extend-select", "XLA901")
    # a call's own `noqa` suppresses that call; the other is still reported
    project.write("model.py", GRID.format(noqa="  # noqa: XLA109"))
    out = json.loads(run_cli(*args, cwd=project)[1])
    assert [(d["code"], d["location"]["row"]) for d in out] == [("XLA109", 16)]
    # the read's own `noqa` still counts as used (no XLA901), and the calls are reported as before
    project.write("model.py", GRID.format(noqa="").replace("+ 1]", "+ 1]  # noqa: XLA101"))
    out = json.loads(run_cli(*args, cwd=project)[1])
    assert [(d["code"], d["location"]["row"]) for d in out] == [("XLA109", 10), ("XLA109", 16)]
    assert all(len(d["related"]) == 1 for d in out)  # the chain only: no read merged into them


BASE = """\
import torch


class BaseLoss(torch.nn.Module):
    def forward(self, outputs, targets):
        num = torch.clamp(torch.as_tensor([1.0], device=outputs.device), min=1).item()
        return outputs.sum() / num
"""

CHILD = """\
from base import BaseLoss


class ChildLoss(BaseLoss):
    def forward(self, outputs, targets):
        if self.dense:
            return super().forward(outputs, targets)
        return outputs.mean()
"""

CHECKS = """\
def check_targets(targets, num_classes):
    if targets.max().item() >= num_classes:
        raise ValueError("label out of range")
"""

TRAIN = """\
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from checks import check_targets


def train(model, loader, device, optimizer, loss_fn, num_classes):
    for x, y in pl.MpDeviceLoader(loader, device):
        check_targets(y, num_classes)
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
"""


def test_one_call_one_cause_one_finding(run_cli, project):
    # `super().forward(...)` starts where its `super()` does: the fact about the call is reported once
    child = CHILD.replace("def forward(self", "def dense_loss(self")
    found = findings(run_cli, project, {"base.py": BASE, "child.py": child}, "--assume-xla")
    assert [f for f in found if f[0] == "child.py"] == [("child.py", 7, "XLA109")]


def test_an_override_handing_its_step_to_the_parent_is_not_the_cause(run_cli, project):
    # `forward` returning `super().forward(...)`: the parent's forward runs every step by its own
    # name and its read is reported there, where the code changes; not again in each subclass
    found = findings(run_cli, project, {"base.py": BASE, "child.py": CHILD}, "--assume-xla")
    assert found == [("base.py", 6, "XLA101")]


def test_a_read_inside_a_branch_is_one_finding_at_the_call(run_cli, project):
    # `if targets.max().item() >= n:` is a read and a branch: XLA109 and XLA203 name the same cause
    found = findings(run_cli, project, {"checks.py": CHECKS, "train.py": TRAIN})
    assert [f for f in found if f[0] == "train.py"] == [("train.py", 8, "XLA109")]


# -- class 7: values already on the host ----------------------------------------------------------------

PLOTTING = """\
import torch_xla
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader, RandomSampler


def plot_batch(images):
    for img in images:
        print(img.permute(1, 2, 0).numpy().shape)


def main(model, dataset, optimizer, loss_fn, steps, bs):
    device = torch_xla.device()
    vis_loader = DataLoader(dataset, batch_size=8, shuffle=True)
    images, labels = next(iter(vis_loader))
    plot_batch(images)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, drop_last=True)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss_fn(model(x), y).backward()
        optimizer.step()
        xm.mark_step()
    for x, y in vis_loader:
        plot_batch(x)
    whole = DataLoader(dataset, batch_size=bs, sampler=RandomSampler(dataset, num_samples=steps * bs))
    endless = DataLoader(dataset, batch_size=bs, sampler=InfiniteSampler(dataset))
    ragged = DataLoader(dataset, batch_size=bs, shuffle=True)
    for source in (whole, endless, ragged):
        for x, y in source:
            x, y = x.to(device), y.to(device)
            loss_fn(model(x), y).backward()
            optimizer.step()
            xm.mark_step()
"""


def test_loaders_drawn_once_or_never_partial_have_no_ragged_last_batch(run_cli, project):
    found = findings(run_cli, project, {"train.py": PLOTTING}, "--select", "XLA311,XLA109,XLA103")
    assert found == [("train.py", 26, "XLA311")]  # `vis_loader`, `whole`, `endless` are not


def test_a_loop_target_rebinds_a_name_an_earlier_loop_moved_to_the_device():
    ctx = context(PLOTTING)
    later = [n for n in ast.walk(ctx.tree) if isinstance(n, ast.Name) and n.id == "x" and n.lineno == 23]
    assert ctx.reaching_values(later[0]) == []
    assert "vis_loader" in [ast.unparse(v) for v in ctx.loop_iterables(later[0])]
    assert ctx.tensor_kind(later[0]).name == "CPU"


# -- class 8: per step by evidence, not by name -----------------------------------------------------

METER = """\
class Meter:
    def __init__(self):
        self.total = 0.0

    def update(self, loss):
        self.total += loss.item()

    def on_batch_end(self, outputs):
        if outputs.sum() > 0:
            print(outputs.max().item())
"""

LOOP = """\
import torch_xla
from meters import Meter


def train(model, loader, opt):
    device = torch_xla.device()
    meter, stats = Meter(), {{}}
    for x in loader:
        loss = model(x.to(device)).sum()
        loss.backward()
        opt.step()
        torch_xla.sync()
        stats.update(step=1)
        {call}
"""


@pytest.mark.parametrize(
    "call, reported",
    [
        ("pass", []),  # nothing calls the hooks (a dict's `update` is no call of them)
        ("meter.update(loss)", [("meters.py", 6, "XLA101"), ("train.py", 14, "XLA109")]),
        # a receiver of unknown class: the call is not resolved, the finding only possible
        ("meters[0].update(loss)", [("meters.py", 6, "XLA101")]),
    ],
)
def test_hooks_are_per_step_when_something_calls_them(run_cli, project, call, reported):
    files = {"meters.py": METER, "train.py": LOOP.format(call=call)}
    found = findings(run_cli, project, files, "--confidence", "possible")
    assert found == reported
    if call.startswith("meters[0]"):
        assert findings(run_cli, project, files) == []


@pytest.mark.parametrize(
    "code",
    [
        "from torchmetrics import Metric\n\n" + METER.replace("class Meter:", "class Meter(Metric):"),
        METER + "\ntrainer = Trainer(callbacks=[Meter()])\n",  # handed to a framework that runs it
    ],
)
def test_a_framework_calls_its_hooks(code):
    ctx = context(code)
    assert ctx.is_step_function(ctx.index.functions["update"][0])


CHECK_SCRIPT = """\
import torch
import torch_xla


def main(model, loader, opt, expected):
    device = torch_xla.device()
    for x in loader:
        out = model(x.to(device))
        loss = out.sum()
        loss.backward()
        opt.step()
        torch_xla.sync()
        assert loss.item() < 10
        assert torch.allclose(out, expected), out.abs().max().item()
        if not torch.allclose(out, expected):
            raise AssertionError("mismatch")
        print(loss.item())
"""


@pytest.mark.parametrize(
    "path, reported",
    [
        ("scripts/test_train.py", [17]),  # the checks are no training code; the logging still is
        ("pkg/test_utils/scripts/check.py", [17]),
        ("test/distributed_util.py", [17]),  # a test suite's helper, not named test_*
        ("tests/helpers/compare.py", [17]),
        ("train.py", [13, 14, 15, 17]),
    ],
)
def test_checks_of_verification_scripts_are_not_training_code(run_cli, project, path, reported):
    found = findings(run_cli, project, {path: CHECK_SCRIPT})
    assert sorted({row for _, row, _ in found}) == reported


CASE_SCRIPT = """\
import unittest

import torch
import torch_xla


class TrainTest(unittest.TestCase):
    def test_loss_falls(self, model, loader, opt):
        device = torch_xla.device()
        for x in loader:
            loss = model(x.to(device)).sum()
            loss.backward()
            opt.step()
            torch_xla.sync()
            self.assertLess(loss.item(), 10)
            print(loss.item())
"""


@pytest.mark.parametrize(
    "path, reported, possible",
    [
        # a test case's method runs once per test: its logging is possible, its assertions no finding
        ("test_train.py", [], [16]),
        ("train.py", [15, 16], [15, 16]),
    ],
)
def test_a_test_cases_assertion_methods_are_checks(run_cli, project, path, reported, possible):
    found = findings(run_cli, project, {path: CASE_SCRIPT})
    assert sorted({row for _, row, _ in found}) == reported
    found = findings(run_cli, project, {path: CASE_SCRIPT}, "--confidence", "possible")
    assert sorted({row for _, row, _ in found}) == possible


# A pytest module: a test, a fixture and a helper only they use build a batch padded to its longest
# example and read a loss; a script's `main` beside them trains, and is no test.
PYTEST_MODULE = """\
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence


def collate_batch(seqs):
    return pad_sequence(seqs, batch_first=True)


def fit(model, loader, opt):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
        print(loss.item())


@pytest.fixture
def batch():
    return collate_batch([torch.ones(3), torch.ones(5)])


def test_fit_runs(model, batch, opt):
    fit(model, [batch], opt)


def test_loss(model, batch):
    loss = model(batch).sum()
    assert loss.item() > 0


def main(model, loader, opt):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
        print(loss.item())
"""


def test_code_that_runs_only_as_tests_is_possible(run_cli, project):
    # pytest runs a test, its fixtures and the helpers only they use once per test: no training step
    found = findings(run_cli, project, {"tests/test_fit.py": PYTEST_MODULE})
    assert found == [("tests/test_fit.py", 37, "XLA101")]  # `main` trains wherever it sits
    found = findings(run_cli, project, {"tests/test_fit.py": PYTEST_MODULE}, "--confidence", "possible")
    assert {(row, code) for _, row, code in found} >= {(7, "XLA312"), (15, "XLA101"), (37, "XLA101")}
    # the same code in a training module: the helpers are the project's, run wherever it trains
    found = findings(run_cli, project, {"tests/test_fit.py": "", "train_lib.py": PYTEST_MODULE})
    assert {(row, code) for _, row, code in found} == {(7, "XLA312"), (15, "XLA101"), (37, "XLA101")}


COLLATES = """\
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

MAX_LEN = 64


def collate(batch):
    tokens = pad_sequence([t for t, _ in batch], batch_first=True)
    tokens = F.pad(tokens, (0, MAX_LEN - tokens.shape[1]))
    return tokens


def collate_blocks(batch, block_size=128):
    seqs = [b["ids"][s : s + block_size] for b, s in batch]
    return pad_sequence(seqs, batch_first=True)


def collate_longest(batch):
    tokens = pad_sequence([t for t, _ in batch], batch_first=True)
    return F.pad(tokens, (0, 8))  # a constant margin: still the batch's own length
"""


def test_a_collate_that_cuts_every_example_to_a_block_does_not_vary_the_shape(run_cli, project):
    assert findings(run_cli, project, {"data.py": COLLATES}, "--select", "XLA312") == [("data.py", 19, "XLA312")]


SUMMARIZE = """\
def summarize(preds, targets):
    return (preds.argmax(-1) == targets).float().mean().item()
"""

CALLER = """\
import torch_xla
import torch_xla.core.xla_model as xm
from stats import summarize


def train(model, loader, optimizer, loss_fn):
    device = torch_xla.device()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        loss_fn(out, y).backward()
        xm.optimizer_step(optimizer, barrier=True)
        acc = summarize({preds}, y.cpu())
"""


@pytest.mark.parametrize(
    "preds, reported",
    [
        ("out.detach().cpu()", []),  # every call passes host tensors: the helper reads host values
        ("out", [("stats.py", 2, "XLA101"), ("train.py", 13, "XLA109")]),
    ],
)
def test_a_helper_whose_callers_pass_host_values_reads_no_device_tensor(run_cli, project, preds, reported):
    files = {"stats.py": SUMMARIZE, "train.py": CALLER.format(preds=preds)}
    found = [f for f in findings(run_cli, project, files) if f[2] != "XLA102"]
    assert found == reported
    # the facts come back from the cache as they went in
    run_cli("check", "--output-format", "json", cwd=project)
    out = run_cli("check", "--output-format", "json", cwd=project)[1]
    warm = sorted(
        (d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out) if d["code"] not in ("XLA102", "XLA704")
    )
    assert warm == reported


@pytest.mark.parametrize(
    "path, root, verifies",
    [
        ("/w/proj/test/distributed_util.py", "/w/proj", True),
        ("/w/proj/tests/helpers/compare.py", "/w/proj", True),
        ("/w/proj/src/train.py", "/w/proj", False),
        ("/home/u/tests/proj/train.py", "/home/u/tests/proj", False),  # a project kept under tests/
        ("/home/u/tests/proj/train.py", None, False),
    ],
)
def test_a_test_folder_counts_only_inside_its_project(path, root, verifies):
    from xlalint.analysis.steps import is_verification_module

    assert is_verification_module(path, root) is verifies


LOSS_OBJECT = """\
class ComputeLoss:
    def __init__(self, model):
        self.model = model

    def __call__(self, p, targets):
        n = int(targets.max().item())
        return p.sum() / n
"""

LOSS_CALLER = """\
import torch_xla
import torch_xla.distributed.parallel_loader as pl
from losses import ComputeLoss


def train(model, loader, optimizer):
    compute_loss = ComputeLoss(model)
    for x, y in pl.MpDeviceLoader(loader, torch_xla.device()):
        loss = compute_loss(model(x), y)
        loss.backward()
        optimizer.step()
"""


def test_an_instance_called_runs_its_classes_call_method(run_cli, project):
    # `compute_loss(...)` with `compute_loss = ComputeLoss(model)` runs `ComputeLoss.__call__`
    found = findings(run_cli, project, {"losses.py": LOSS_OBJECT, "train.py": LOSS_CALLER})
    assert ("train.py", 9, "XLA109") in found
    renamed = LOSS_OBJECT.replace("def __call__(self", "def compute(self")
    found = findings(run_cli, project, {"losses.py": renamed, "train.py": LOSS_CALLER})
    assert ("train.py", 9, "XLA109") not in found


# A pooling module whose helper returns the kept indices only when asked: the forward asks not to,
# a generation helper takes the default.
POOL = """\
import torch
from torch import nn


class Pool(nn.Module):
    def masks(self, scores, return_index=True):
        keep = scores > 0
        if return_index:
            return keep, keep.nonzero()
        return keep, None

    def forward(self, scores):
        keep, _ = self.masks(scores, {passed})
        return keep.float().sum()

    def generate(self, scores):
        return self.masks(scores)[1]
"""


@pytest.mark.parametrize(
    "passed, reported",
    [
        ("return_index=False", []),  # every call run per step switches it off
        ("False", []),
        ("return_index=True", [(9, "XLA301")]),
        ("return_index=flag", [(9, "XLA301")]),  # a value the step decides
    ],
)
def test_a_block_every_step_call_switches_off_runs_at_no_step(run_cli, project, passed, reported):
    found = findings(run_cli, project, {"pool.py": POOL.format(passed=passed)}, "--confidence", "possible")
    assert [(row, code) for _, row, code in found] == reported
