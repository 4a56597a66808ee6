"""Which arguments a function reads to the host (`analysis.reads`), and the calls reported for it."""

import ast
import json
import textwrap
from pathlib import Path

from xlalint.analysis.context import FileContext
from xlalint.analysis.reads import parameter_reads
from xlalint.source import SourceText


def reads_of(code, name):
    code = textwrap.dedent(code)
    ctx = FileContext(Path("t.py"), ast.parse(code), SourceText(code))
    (func,) = ctx.index.functions[name]
    return [(r.param, r.position, r.line, r.what, r.through, r.unless) for r in parameter_reads(ctx, func)]


def test_reads_followed_through_assignments_and_zipped_loops():
    code = """
    def grid_sizes(coord, scale=1):
        max_y = coord[:, :, 0].amax(dim=1) + 1
        max_x = coord[:, :, 1].amax(dim=1) + 1
        return [(int(h.item()), int(w.item())) for h, w in zip(max_y, max_x)]
    """
    assert reads_of(code, "grid_sizes") == [("coord", 0, 5, ".item()", "", ""), ("coord", 0, 5, ".item()", "", "")]


def test_methods_count_positions_after_self():
    code = """
    class Meter:
        def update(self, preds, target):
            self.seen.append(target.cpu())
    """
    assert reads_of(code, "update") == [("target", 1, 4, ".cpu()", "", "")]


def test_metadata_and_values_already_on_the_host_are_not_reads():
    code = """
    def normalise(outputs, targets):
        n = sum(len(t["boxes"]) for t in targets)
        n = torch.as_tensor([n], device=outputs.device)
        width = outputs.shape[-1]
        low = int(targets.min().item())
        print(float(low))
        return torch.clamp(n, min=1).item()
    """
    # only the explicit `.item()` of targets; `n` holds a count and the device, never an argument's values
    assert reads_of(code, "normalise") == [("targets", 1, 6, ".item()", "", "")]


def test_the_assignment_reaching_the_read_decides():
    code = """
    def f(x, y):
        z = y.sum()
        z = x.new_ones(3)
        out = z.tolist()
        z = y.mean()
        return out
    """
    assert reads_of(code, "f") == [("x", 0, 5, ".tolist()", "", "")]


def test_reads_behind_gates_or_in_errors_are_left_out_and_defaults_are_noted():
    code = """
    def to_mask(length, max_len=None, verbose=False):
        if max_len is None:
            max_len = length.max().long().item()
        if step % 100 == 0:
            print(length.tolist())
        if length.numel() == 0:
            raise ValueError(f"empty: {length.cpu()}")
        return torch.arange(max_len) < length.unsqueeze(1)
    """
    assert reads_of(code, "to_mask") == [("length", 0, 4, ".item()", "", "max_len")]


def test_reads_of_a_models_gradients_are_marked():
    code = """
    def clip_gradients(model, clip):
        norms = []
        for name, p in model.named_parameters():
            if p.grad is not None:
                param_norm = p.grad.data.norm(2)
                norms.append(param_norm.item())
        return norms
    """
    assert reads_of(code, "clip_gradients") == [("model", 0, 7, ".item()", "grads", "")]


CHECKS = """\
def check_targets(targets, num_classes):
    if targets.max().item() >= num_classes:
        raise ValueError("label out of range")


def to_mask(length, max_len=None):
    if max_len is None:
        max_len = length.max().item()
    return length
"""

TRAIN = """\
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from {module} import check_targets, to_mask


def train(model, loader, optimizer, device):
    for x, y in pl.MpDeviceLoader(loader, device):
        check_targets(y, 10)
        to_mask(y, 16)
        to_mask(y)
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)


def train_on_host_batches(model, loader, optimizer, device):
    for x, y in loader:
        check_targets(y, 10)
        x, y = x.to(device), y.to(device)
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.mark_step()
"""


def findings(out, name, code):
    return [(d["location"]["row"], d["message"]) for d in json.loads(out)
            if d["filename"].endswith(name) and d["code"] == code]


def test_per_step_calls_of_a_reading_helper_elsewhere_are_reported(run_cli, project):
    project.write("pyproject.toml", "[project]\nname = 'pkg'\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/checks.py", CHECKS)
    project.write("pkg/train.py", TRAIN.format(module="pkg.checks"))
    code, out, _ = run_cli("check", "--output-format", "json", project / "pkg" / "train.py")
    found = findings(out, "train.py", "XLA109")
    # not when the helper gets host tensors, nor when the read only computes a default it is given
    assert [row for row, _ in found] == [8, 10]
    assert "`check_targets()` reads the device tensor passed as `targets`" in found[0][1]
    assert "checks.py:2" in found[0][1]


def test_an_import_the_project_lacks_falls_back_to_the_one_module_defining_it(run_cli, project):
    """A module copied or renamed (`from utils.checks import ...` served by `kaggle_utils_checks.py`)."""
    project.write("kaggle_utils_checks.py", CHECKS)
    project.write("train.py", TRAIN.format(module="utils.checks"))
    code, out, _ = run_cli("check", "--output-format", "json", project / "train.py")
    assert [row for row, _ in findings(out, "train.py", "XLA109")] == [8, 10]
    # two candidates: no guess
    project.write("other_utils_checks.py", CHECKS)
    code, out, _ = run_cli("check", "--output-format", "json", project / "train.py")
    assert findings(out, "train.py", "XLA109") == []


def test_facts_follow_their_lines_through_a_fix(run_cli, project):
    """`fix --write` adds an import above the loop (lines move) and still counts the helper's read
    among the findings it leaves."""
    project.write("pyproject.toml", "[project]\nname = 'pkg'\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/checks.py", CHECKS)
    train = TRAIN.format(module="pkg.checks").replace("        xm.mark_step()\n", "")
    path = project.write("pkg/train.py", train.replace("    for x, y in pl.MpDeviceLoader(loader, device):",
                                                      "    device = xm.xla_device()\n"
                                                      "    for x, y in pl.MpDeviceLoader(loader, device):", 1))
    code, out, err = run_cli("fix", "--write", "--no-cache", path)
    assert "import torch_xla\n" in path.read_text()  # the fix added a line at the top
    assert out.count("XLA109") == 2 and code == 1, out + err
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", path)
    assert [row for row, _ in findings(out, "train.py", "XLA109")] == [10, 12]


def test_moved_facts_keep_unchanged_lines_only():
    from xlalint.analysis.project import ProjectFacts

    facts = ProjectFacts(training_calls=frozenset({(3, 4), (5, 0)}), helper_reads=(((5, 8), "f", "m.py", ()),))
    moved = facts.moved("a\nb\nc\nd\ne\n", "new\na\nb\nc\nd\nE\n")
    assert moved.training_calls == {(4, 4)}  # line 5 was edited: its facts are dropped
    assert moved.helper_reads == ()


def test_returned_reads_and_option_branches_are_marked():
    code = """
    def top_k(logits, labels, k, reduction="mean"):
        hits = (logits.topk(k).indices == labels[:, None]).float().sum(-1)
        print(hits.sum().item())
        if reduction == "mean":
            return hits.mean().item()
        return hits
    """
    ctx_code = textwrap.dedent(code)
    ctx = FileContext(Path("t.py"), ast.parse(ctx_code), SourceText(ctx_code))
    (func,) = ctx.index.functions["top_k"]
    marks = {(r.line, r.returned, r.option, r.option_value, r.option_default) for r in parameter_reads(ctx, func)}
    assert marks == {(4, False, "", "", False), (6, True, "reduction", "'mean'", True)}
