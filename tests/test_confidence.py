"""Findings report on evidence (issue 37): each carries its chain (the loop or role that runs it,
the calls on the way, where the value comes from) and a confidence; `possible` findings, with a
guessed link, are hidden unless asked for (`--confidence possible`, `confidence = "possible"`)."""

import json

from xlalint.diagnostics import Diagnostic, Location, Step

# Every link seen: a loop that trains calls `log_metrics`, whose argument is the model's output.
SEEN = """\
import torch_xla


def log_metrics(loss):
    print(loss.item())


def run(model, loader, opt):
    for x, y in loader:
        out = model(x)
        loss = out.sum()
        loss.backward()
        opt.step()
        torch_xla.sync()
        log_metrics(loss)
"""

# The loop is seen (it runs a step function), but what `step_fn` returns is not: `loss` is a
# tensor by its name only.
GUESSED_VALUE = """\
import torch_xla
from helpers import forward_backward


def report(loss):
    print(loss.item())


def run(loader):
    for batch in loader:
        loss = forward_backward(batch)
        torch_xla.sync()
        report(loss)
"""

# Per step by its name only: no loop, role or training call reaches `train_step`.
GUESSED_STEP = """\
import torch_xla


def train_step(model, x):
    out = model(x)
    return out.sum().item()
"""


def check_json(run_cli, project, *args):
    code, out, err = run_cli("check", "--no-cache", "--output-format", "json", *args, ".", cwd=project)
    assert code in (0, 1), err
    return json.loads(out)


def test_a_seen_chain_is_high_and_shown_in_json(run_cli, project):
    project.write("train.py", SEEN)
    (d,) = [d for d in check_json(run_cli, project) if d["code"] == "XLA101"]
    assert d["confidence"] == "high"
    messages = [r["message"] for r in d["related"]]
    assert messages[0] == "training loop at line 9 (backward at 12)"
    assert messages[1] == "calls `log_metrics` (line 15)"
    assert messages[2] == "value from `model(x)` (line 10)"
    assert [r["location"]["row"] for r in d["related"]] == [9, 15, 10]
    assert all(r["filename"].endswith("train.py") for r in d["related"])


def test_the_chain_is_a_via_line_in_text_output(run_cli, project):
    project.write("train.py", SEEN)
    _, out, _ = run_cli("check", "--no-cache", "train.py", cwd=project)
    assert (
        "  via: training loop at line 9 (backward at 12) -> calls `log_metrics` (line 15) -> value from "
        "`model(x)` (line 10)"
    ) in out
    assert "[possible]" not in out and "hidden" not in out
    _, concise, _ = run_cli("check", "--no-cache", "--output-format", "concise", "train.py", cwd=project)
    assert "via:" not in concise  # one line a finding


def test_a_value_whose_origin_is_not_seen_is_possible_and_hidden_by_default(run_cli, project):
    project.write("train.py", GUESSED_VALUE)
    assert [d["code"] for d in check_json(run_cli, project)] == []
    code, out, _ = run_cli("check", "--no-cache", "train.py", cwd=project)
    assert code == 0
    assert "1 possible finding hidden (--confidence possible shows them)." in out
    shown = check_json(run_cli, project, "--confidence", "possible")
    assert [(d["code"], d["confidence"]) for d in shown] == [("XLA101", "possible")]
    code, out, _ = run_cli("check", "--no-cache", "--confidence", "possible", "train.py", cwd=project)
    assert code == 1 and "XLA101 [possible]" in out and "hidden" not in out
    assert "-> `loss` is taken for a device tensor; its origin is not seen (line 6)" in out


def test_a_step_function_by_its_name_only_is_possible(run_cli, project):
    project.write("lib/steps.py", GUESSED_STEP)
    project.write("lib/__init__.py", "")
    project.write("pyproject.toml", '[project]\nname = "lib"\n')
    assert check_json(run_cli, project) == []
    shown = check_json(run_cli, project, "--confidence", "possible")
    assert [(d["code"], d["confidence"]) for d in shown] == [("XLA101", "possible")]
    assert shown[0]["related"][0]["message"] == "`train_step` is a step by its name"


def test_a_framework_role_is_high_evidence(run_cli, project):
    project.write(
        "model.py",
        "import torch.nn as nn\nimport torch_xla\n\n\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        h = self.layer(x)\n        print(h.sum().item())\n        return h\n",
    )
    (d,) = check_json(run_cli, project)
    assert d["confidence"] == "high"
    assert d["related"][0]["message"] == "`Net.forward`, called by the framework every step"


def test_confidence_from_the_configuration(run_cli, project):
    project.write("train.py", GUESSED_VALUE)
    project.write("pyproject.toml", '[tool.xlalint]\nconfidence = "possible"\n')
    assert [d["confidence"] for d in check_json(run_cli, project)] == ["possible"]
    # the command line wins
    assert check_json(run_cli, project, "--confidence", "high") == []
    project.write("pyproject.toml", '[tool.xlalint]\nconfidence = "sure"\n')
    code, out, err = run_cli("check", "--no-cache", ".", cwd=project)
    assert code == 2 and "`confidence` must be one of 'high', 'possible'" in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_confidence_on_the_command_line_is_an_error(run_cli, project):
    project.write("train.py", SEEN)
    code, _, err = run_cli("check", "--confidence", "maybe", ".", cwd=project)
    assert code == 2 and "--confidence" in err


def test_the_cache_round_trips_confidence_and_chain(run_cli, project):
    project.write("train.py", SEEN)
    project.write("other.py", GUESSED_VALUE)
    args = ("check", "--output-format", "json", "--confidence", "possible", ".")
    first = json.loads(run_cli(*args, cwd=project)[1])
    second = json.loads(run_cli(*args, cwd=project)[1])  # from the cache
    assert (project / ".xlalint_cache").is_dir()
    assert first == second
    assert {d["confidence"] for d in second} == {"high", "possible"}


def test_sarif_carries_the_chain_with_messages_and_the_confidence(run_cli, project):
    project.write("train.py", SEEN)
    _, out, _ = run_cli("check", "--no-cache", "--output-format", "sarif", ".", cwd=project)
    (result,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "XLA101"]
    assert result["properties"]["confidence"] == "high"
    related = result["relatedLocations"]
    assert [r["message"]["text"] for r in related][:2] == [
        "training loop at line 9 (backward at 12)",
        "calls `log_metrics` (line 15)",
    ]
    assert [r["physicalLocation"]["region"]["startLine"] for r in related] == [9, 15, 10]


def test_explain_says_what_each_level_means(run_cli):
    _, out, _ = run_cli("explain", "XLA101")
    assert "Confidence: `high` when the evidence" in out and "`possible` when a link is guessed" in out
    _, out, _ = run_cli("explain", "XLA601")  # a migration rule: the pattern is the finding
    assert "Confidence:" not in out


def test_a_diagnostic_round_trips_through_json():
    d = Diagnostic(
        "XLA101",
        "item-in-step",
        "m",
        "item_sync",
        __import__("pathlib").Path("a.py"),
        Location(3, 1),
        Location(3, 5),
        related=(Step(Location(1, 1), "training loop at line 1"), Step(Location(7, 2), "in b", "b.py")),
        confidence="possible",
    )
    back = Diagnostic.from_json(json.loads(json.dumps(d.to_json())))
    assert back.related == d.related and back.confidence == "possible"
    assert d.to_json()["related"][1]["filename"] == "b.py"


# A loop over batches that runs no training step: an evaluation, an inference or an analysis
# script, which may run once, offline.
NO_TRAINING = """\
import torch_xla


def evaluate(model, loader, device):
    for x, y in loader:
        out = model(x.to(device))
        print(out.argmax(-1).cpu())
"""


def test_a_loop_that_runs_no_training_step_is_possible_evidence(run_cli, project):
    project.write("evaluate.py", NO_TRAINING)
    assert check_json(run_cli, project) == []
    (d,) = check_json(run_cli, project, "--confidence", "possible")
    assert (d["code"], d["confidence"]) == ("XLA102", "possible")
    assert d["related"][0]["message"] == "loop over the batches of `loader` (line 5), with no training step seen"
    # the same loop with a backward is a training loop: high
    project.write("evaluate.py", NO_TRAINING.replace("        print(", "        out.sum().backward()\n        print("))
    (d,) = check_json(run_cli, project)
    assert d["confidence"] == "high" and d["related"][0]["message"].startswith("training loop at line 5")


def test_a_formatted_value_is_judged_by_its_origin(run_cli, project):
    # XLA104: `loss` from the model is seen on the device; `acc` is a tensor by its name only
    code = (
        "import torch_xla\n\n\ndef train(model, loader, opt, acc):\n    for x in loader:\n"
        "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
        "        torch_xla.sync()\n        print(f'{{{}}}')\n"
    )
    project.write("train.py", code.format("loss"))
    assert [(d["code"], d["confidence"]) for d in check_json(run_cli, project)] == [("XLA104", "high")]
    project.write("train.py", code.format("acc"))
    assert check_json(run_cli, project) == []
    assert [d["code"] for d in check_json(run_cli, project, "--confidence", "possible")] == ["XLA104"]


def test_losses_and_per_batch_callbacks_are_roles(run_cli, project):
    # a loss function is computed every training step; a callback's `batch_end` runs every batch
    project.write("pyproject.toml", '[project]\nname = "lib"\n')  # a library: its users call them
    project.write(
        "losses.py",
        "import torch\n\n\ndef dice_loss(pred, target):\n    inter = (pred * target).sum()\n"
        "    print(inter.item())\n    return inter\n",
    )
    project.write(
        "callbacks.py",
        "import torch\n\n\nclass Speed(Callback):\n    def batch_end(self, state, logger):\n"
        "        t = torch.tensor([1.0], device=state.device)\n        logger.log(t.item())\n",
    )
    found = {d["filename"].rsplit("/", 1)[-1]: d for d in check_json(run_cli, project, "--assume-xla")}
    assert found["losses.py"]["related"][0]["message"] == "`dice_loss`, a loss: computed every training step"
    assert found["callbacks.py"]["related"][0]["message"] == "`Speed.batch_end`, called by the framework every step"
    assert {d["confidence"] for d in found.values()} == {"high"}


def test_fix_applies_a_possible_findings_fix_only_when_asked(run_cli, project):
    # `eval_step` is a step by its name only: its boolean-mask assignment (XLA303) is possible
    code = (
        "import torch\nimport torch_xla\n\n\ndef eval_step(scores, threshold):\n"
        "    scores = scores.softmax(-1)\n    scores[scores < threshold] = 0.0\n    return scores\n"
    )
    project.write("pyproject.toml", '[project]\nname = "lib"\n')
    path = project.write("steps.py", code)
    run_cli("fix", "--no-cache", "--write", "--unsafe-fixes", ".", cwd=project)
    assert path.read_text() == code
    run_cli("fix", "--no-cache", "--write", "--unsafe-fixes", "--confidence", "possible", ".", cwd=project)
    assert "masked_fill_(scores < threshold, 0.0)" in path.read_text()


def test_a_loss_without_callers_in_the_project_is_high(run_cli, project):
    # a library's loss function, called by its users' training steps (no caller in the project);
    # a `_check_*` input validation run on every call is by its name only: possible
    project.write("pyproject.toml", '[project]\nname = "lib"\n')
    project.write(
        "losses.py",
        "import torch\nimport torch_xla\n\n\ndef ForCTCLoss(logits, labels):\n"
        "    keep = labels.nonzero()\n    return logits[keep].sum()\n\n\n"
        "def _check_shapes(preds):\n    keep = preds.nonzero()\n    return keep\n",
    )
    found = check_json(run_cli, project, "--confidence", "possible")
    assert [(d["location"]["row"], d["code"], d["confidence"]) for d in found] == [
        (6, "XLA301", "high"),
        (11, "XLA301", "possible"),
    ]


def test_a_validation_loop_of_a_training_script_is_high(run_cli, project):
    # the evaluation loop runs while training: its reads cost the training run
    train = (
        "\n\ndef train(model, loader, opt, device):\n    for x, y in loader:\n"
        "        model(x.to(device)).sum().backward()\n        opt.step()\n        torch_xla.sync()\n"
    )
    project.write("evaluate.py", NO_TRAINING + train)
    (d,) = check_json(run_cli, project)
    assert d["confidence"] == "high" and d["related"][0]["message"] == "loop over the batches of `loader` (line 5)"


def test_an_override_of_a_library_models_hook_is_a_framework_role(run_cli, project):
    # the library model's forward calls the hook every step; nothing in the project calls it
    project.write(
        "model.py",
        """\
import torch
import torch_xla
from transformers import LlavaForConditionalGeneration


class TpuLlava(LlavaForConditionalGeneration):
    def _merge_input_ids_with_image_features(self, image_features, inputs_embeds, input_ids, attention_mask, labels):
        if torch.sum(input_ids == self.pad_token_id) > 0:
            inputs_embeds = inputs_embeds * 1
        return inputs_embeds
""",
    )
    (d,) = [d for d in check_json(run_cli, project) if d["code"] == "XLA201"]
    assert d["confidence"] == "high"
    assert "overrides a hook the library model's forward calls every step" in d["related"][0]["message"]


# A script that never trains hands each batch's output to a helper of another module; and one whose
# loop over checkpoint paths runs a model-loading function of its own that hands on its output.
OFFLINE_CALLER = """\
import torch_xla
from helpers import summarize


def analyse(model, loader, device):
    for x in loader:
        out = model(x.to(device))
        summarize(out)
"""
OFFLINE_HELPER = "import torch\n\n\ndef summarize(out):\n    print(out.argmax(-1).cpu())\n"
OFFLINE_OWN = """\
import torch
import torch_xla


def show(out):
    print(out.cpu())


def run_model(path, device):
    out = torch.load(path)(torch.ones(2, device=device))
    show(out)


for path in ["a.pt", "b.pt"]:
    run_model(path, torch_xla.device())
"""


def test_a_step_on_guessed_evidence_makes_its_callees_no_surer_steps(run_cli, project):
    # the project's per-step facts keep the confidence of their root: a call from a loop not seen to
    # train is no "called every step" fact of high confidence, in another module or in its own
    project.write("pyproject.toml", '[project]\nname = "p"\n')
    project.write("helpers.py", OFFLINE_HELPER)
    project.write("analyse.py", OFFLINE_CALLER)
    project.write("checkpoints.py", OFFLINE_OWN)
    assert check_json(run_cli, project) == []
    found = {d["filename"].rsplit("/", 1)[-1]: d for d in check_json(run_cli, project, "--confidence", "possible")}
    assert {"checkpoints.py", "helpers.py"} <= set(found)
    assert {d["confidence"] for d in found.values()} == {"possible"}
    # the same loop with a backward trains: its helper runs every training step
    trains = OFFLINE_CALLER.replace("        summarize(", "        out.sum().backward()\n        summarize(")
    project.write("analyse.py", trains)
    found = {d["filename"].rsplit("/", 1)[-1]: d for d in check_json(run_cli, project)}
    assert found["helpers.py"]["related"][0]["message"] == "`summarize` is called every step from another module"
    assert "checkpoints.py" not in found


# A smoke test: `check` runs one training step by itself, and `main` runs it on two models written
# out; nothing imports the script.
SMOKE = """\
import torch
import torch_xla


def check(model, device):
    x = torch.randn(4, 8, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).sum()
    print(f"loss {loss.item():.4f}")
    loss.backward()
    opt.step()
    torch_xla.sync()


def main():
    device = torch_xla.device()
    for name in ["small", "large"]:
        check(torch.load(name), device)


if __name__ == "__main__":
    main()
"""


def test_a_function_that_trains_run_a_fixed_number_of_times_is_possible(run_cli, project):
    # every run of `check` is seen: two, from a loop over values written out; a few steps, no training run
    project.write("smoke.py", SMOKE)
    assert check_json(run_cli, project) == []
    (d,) = check_json(run_cli, project, "--confidence", "possible")
    assert (d["code"], d["location"]["row"], d["confidence"]) == ("XLA101", 9, "possible")
    assert d["related"][0]["message"].endswith("over 2 fixed values")
    # run once per step of a loop: a training run's step
    project.write("smoke.py", SMOKE.replace('for name in ["small", "large"]:', "for name in range(1000):"))
    (d,) = check_json(run_cli, project)
    assert d["confidence"] == "high"


# An evaluation script: `heldout_loss` is named like a loss, but its two calls are seen, in `main`,
# once per checkpoint, never in a training step.
EVAL_SCRIPT = """\
import torch
import torch_xla


def heldout_loss(model, ids, device):
    logits = model(ids.to(device))
    loss = logits.logsumexp(-1).mean()
    return loss.item()


def main(device):
    print(heldout_loss(torch.load("a.pt"), torch.ones(4), device))
    print(heldout_loss(torch.load("b.pt"), torch.ones(4), device))


if __name__ == "__main__":
    main(torch_xla.device())
"""


def test_a_loss_by_name_whose_calls_are_seen_off_the_steps_is_possible(run_cli, project):
    project.write("pyproject.toml", '[project]\nname = "lib"\n')
    project.write("evaluate.py", EVAL_SCRIPT)
    assert check_json(run_cli, project) == []
    (d,) = check_json(run_cli, project, "--confidence", "possible")
    assert (d["code"], d["location"]["row"]) == ("XLA101", 8)
    assert d["related"][0]["message"] == "`heldout_loss` is a step by its name"
    # a training loop calls it: a loss computed every training step
    loop = (
        "\n\ndef train(model, loader, opt, device):\n    for ids in loader:\n        heldout_loss(model, ids, device)\n"
    )
    project.write("evaluate.py", EVAL_SCRIPT + loop + "        opt.step()\n        torch_xla.sync()\n")
    (d,) = check_json(run_cli, project)
    assert d["confidence"] == "high" and d["location"]["row"] == 8
    # called in a closure handed out (`loss_fn = make_loss()`): where it runs is not seen, the name holds
    closure = "\n\ndef make_loss(device):\n    def f(model, ids):\n        return heldout_loss(model, ids, device)\n\n    return f\n"
    project.write("evaluate.py", EVAL_SCRIPT + closure)
    (d,) = check_json(run_cli, project)
    assert (
        d["confidence"] == "high"
        and d["related"][0]["message"] == "`heldout_loss`, a loss: computed every training step"
    )


# An application's model file (no packaging: only its own scripts import it) with two heads; the
# training script imports one, nothing mentions the other.
HEADS = """\
import torch
from torch import nn


class {name}(nn.Module):
    def forward(self, hidden, labels):
        active = hidden[labels > 0]
        return active.sum()
"""
USES_HEAD = """\
import torch_xla
from heads import Head


def train(loader, opt):
    head = Head()
    for hidden, labels in loader:
        head(hidden, labels).backward()
        opt.step()
        torch_xla.sync()
"""


def test_a_role_of_a_class_its_application_never_mentions_is_possible(run_cli, project):
    project.write("heads.py", HEADS.format(name="Head"))
    project.write("vendored.py", HEADS.format(name="UnusedHead"))
    project.write("train.py", USES_HEAD)
    found = check_json(run_cli, project)
    assert [(d["filename"].rsplit("/", 1)[-1], d["code"]) for d in found] == [("heads.py", "XLA302")]
    found = check_json(run_cli, project, "--confidence", "possible")
    ((d,),) = [[d for d in found if d["filename"].endswith("vendored.py")]]
    assert d["confidence"] == "possible" and d["related"][0]["message"] == "`forward` is a step by its name"
    # named in a configuration string: it may be built from there
    project.write("config.py", 'import torch\n\nHEAD = "vendored.UnusedHead"\n')
    assert {d["filename"].rsplit("/", 1)[-1] for d in check_json(run_cli, project)} == {"heads.py", "vendored.py"}
    # registered by a decorator: built from its name somewhere
    project.write("config.py", "")
    project.write("vendored.py", HEADS.format(name="UnusedHead").replace("class", "@register\nclass"))
    assert {d["filename"].rsplit("/", 1)[-1] for d in check_json(run_cli, project)} == {"heads.py", "vendored.py"}


# `loss` comes from a helper in another module, whose return the value analysis does not follow;
# but the step backpropagates it: it is the loss of the graph the model trains.
BACKPROPAGATED = """\
import torch_xla
import torch_xla.core.xla_model as xm
from helpers import compute_losses


def run(model, loader, opt):
    total = 0.0
    for x, y in loader:
        losses = compute_losses(model, x, y)
        loss = losses["loss"].mean()
        early = loss.item()
        loss.backward()
        xm.optimizer_step(opt)
        total += loss.item()
        loss = torch_xla.sync()
        print(early, total)
"""


def test_a_value_the_step_backpropagates_is_a_device_value_before_and_after(run_cli, project):
    project.write("train.py", BACKPROPAGATED)
    found = [d for d in check_json(run_cli, project) if d["code"] == "XLA101"]
    assert [(d["location"]["row"], d["confidence"]) for d in found] == [(11, "high"), (14, "high")]
    assert found[1]["related"][-1]["message"] == "`loss.backward()` (line 12): a tensor of the training graph"


def test_a_name_rebound_after_backward_is_not_the_backpropagated_value(run_cli, project):
    read_then_backward = GUESSED_VALUE.replace(
        "        report(loss)\n", "        report(loss)\n        loss.backward()\n"
    )
    project.write("train.py", read_then_backward)
    # `report(loss)` reads the binding that `loss.backward()` differentiates: high
    assert [d["confidence"] for d in check_json(run_cli, project) if d["code"] == "XLA101"] == ["high"]
    rebound = GUESSED_VALUE.replace(
        "        report(loss)\n",
        "        report(loss)\n        loss = forward_backward(batch)\n        loss.backward()\n",
    )
    project.write("train.py", rebound)
    assert [d["code"] for d in check_json(run_cli, project)] == []  # another binding: still unseen


# A metric of a metrics library (`update` per batch) that slices each example by its length, and a
# training script that updates it only every 500 steps, to log it.
SPAN_METRIC = """\
import torch
from torchmetrics import Metric


class SpanMetric(Metric):
    def __init__(self):
        super().__init__()
        self.add_state("scores", default=[])

    def update(self, logits, lengths):
        for i in range(logits.shape[0]):
            span = logits[i][: lengths[i]]
            self.scores.append(span.logsumexp(-1).mean())

    def compute(self):
        return torch.stack(self.scores).mean()
"""
METRIC_TRAIN = """\
import torch
import torch_xla
from metrics import SpanMetric


def train(model, loader, opt, device):
    metric = SpanMetric()
    for step, batch in enumerate(loader):
        logits = model(batch["ids"].to(device))
        logits.mean().backward()
        opt.step()
        torch_xla.sync()
        if step % 500 == 0:
            metric.update(logits.detach(), batch["lengths"].to(device))
            print(metric.compute())
"""


def test_a_metric_update_the_project_calls_only_off_the_steps_is_no_step(run_cli, project):
    # `update` runs where the project calls it: every 500 steps, in no training step
    project.write("metrics.py", SPAN_METRIC)
    project.write("train.py", METRIC_TRAIN)
    assert [d for d in check_json(run_cli, project) if d["filename"].endswith("metrics.py")] == []
    # updated every step: the framework role holds, a finding on evidence
    project.write("train.py", METRIC_TRAIN.replace("        if step % 500 == 0:\n", "        if True:\n"))
    (d,) = [d for d in check_json(run_cli, project) if d["filename"].endswith("metrics.py")]
    assert (d["code"], d["location"]["row"], d["confidence"]) == ("XLA313", 12, "high")
    assert d["related"][0]["message"] == "`SpanMetric.update`, called by the framework every step"
    # handed to code the project does not show (a trainer's callback): no caller seen, the role holds
    handed = METRIC_TRAIN.replace("            metric.update(", "            register(metric.update)\n            (")
    project.write("train.py", handed)
    (d,) = [d for d in check_json(run_cli, project) if d["filename"].endswith("metrics.py")]
    assert d["confidence"] == "high"


# A sampler module of a package in an application checkout: a loss-aware sampler whose
# `record_losses` reads each loss to the host. The training script builds the uniform sampler and
# never names the method.
SAMPLERS = """\
from abc import ABC, abstractmethod

import torch


def make_sampler(name):
    return LossAwareSampler() if name == "aware" else UniformSampler()


class Sampler(ABC):
    @abstractmethod
    def weights(self): ...


class UniformSampler(Sampler):
    def weights(self):
        return torch.ones(10)


class LossAwareSampler(Sampler):
    def weights(self):
        return torch.ones(10)

    def record_losses(self, steps, losses):
        sizes = [torch.zeros((), device=steps.device) for _ in range(4)]
        self.history.extend(s.item() for s in sizes)
"""
SAMPLER_TRAIN = """\
import torch
import torch_xla
from diffusion.samplers import make_sampler


def train(model, loader, opt, device):
    sampler = make_sampler("uniform")
    for batch in loader:
        loss = (model(batch.to(device)) * sampler.weights().to(device)).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
"""


def test_a_loss_named_method_nothing_names_is_no_step(run_cli, project):
    def found():
        return [d for d in check_json(run_cli, project) if d["filename"].endswith("samplers.py")]

    # nothing in the project calls or names `record_losses`: dead code, no loss of a training step
    project.write("diffusion/__init__.py", "")
    project.write("diffusion/samplers.py", SAMPLERS)
    project.write("train.py", SAMPLER_TRAIN)
    assert found() == []
    # the training loop records its losses: the name is the evidence again
    project.write("train.py", SAMPLER_TRAIN + "        sampler.record_losses(batch, loss)\n")
    (d,) = found()
    assert (d["code"], d["location"]["row"], d["confidence"]) == ("XLA101", 26, "high")
    assert d["related"][0]["message"] == "`record_losses`, a loss: computed every training step"
    # a name built from a string part (`getattr(sampler, "record" + "_losses")`): maybe it
    project.write("train.py", SAMPLER_TRAIN + '        getattr(sampler, "record" + "_losses")(batch, loss)\n')
    assert [d["confidence"] for d in found()] == ["high"]
    # an installable package: its users may call the method
    project.write("train.py", SAMPLER_TRAIN)
    project.write("pyproject.toml", '[project]\nname = "diffusion"\nversion = "0"\n')
    assert [d["confidence"] for d in found()] == ["high"]


# A model wrapper whose `fit` trains and whose `predict` is a generator: each batch's prediction,
# computed with autograd off, is handed to the caller as a NumPy array.
PREDICTOR = """\
import torch
import torch_xla


class Wrapper:
    def __init__(self, model, device):
        self.model, self.device = model, device

    def fit(self, loader, opt):
        for batch in loader:
            loss = self.model(batch.to(self.device)).mean()
            loss.backward()
            opt.step()
            torch_xla.sync()

    def to_numpy(self, output):
        return output.cpu().numpy()

    def predict(self, loader):
        self.model.eval()
        for batch in loader:
            with torch.no_grad():
                out = self.model(batch.to(self.device))
                yield self.to_numpy(out)
"""


def test_a_prediction_generator_is_possible(run_cli, project):
    def found():
        return [
            (d["code"], d["location"]["row"], d["confidence"])
            for d in check_json(run_cli, project, "--confidence", "possible")
        ]

    # its consumer takes each result on the host as it comes: the copy is the output
    project.write("wrapper.py", PREDICTOR)
    assert found() == [("XLA109", 24, "possible")]
    (d,) = check_json(run_cli, project, "--confidence", "possible")
    assert d["related"][0]["message"].endswith("a prediction generator: each batch's result is handed to its caller")
    # gradients on: no prediction, the loop may be a step of whatever consumes it
    project.write("wrapper.py", PREDICTOR.replace("with torch.no_grad():", "if True:"))
    assert found() == [("XLA109", 24, "high")]
    # collected in a list: one copy after the loop would do
    project.write(
        "wrapper.py", PREDICTOR.replace("yield self.to_numpy(out)", "self.outputs.append(self.to_numpy(out))")
    )
    assert found() == [("XLA109", 24, "high")]


def test_a_pattern_that_harms_on_xla_alone_shows_why_the_code_is_xla(run_cli, project):
    project.write(
        "train.py",
        "import torch\nimport torch_xla.core.xla_model as xm\n\n"
        "collator = DataCollatorWithPadding(tokenizer)\n"
        "train_loader = DataLoader(train_set, batch_size=32, collate_fn=collator, drop_last=True)\n",
    )
    (d,) = [d for d in check_json(run_cli, project) if d["code"] == "XLA312"]
    assert [(r["message"], r["location"]["row"]) for r in d["related"]] == [
        ("XLA code: imports `torch_xla.core.xla_model`", 2)
    ]
