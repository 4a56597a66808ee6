"""Wrong findings seen on held-out PyTorch/XLA training repositories (issue 30, a precision sample),
each written here as a general minimal example: JAX files have no torch tensors, a module that a
helper imports lazily is still that module, and a function nothing uses in an application is dead."""

import ast
import json
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.source import SourceText


def findings(run_cli, project, files, *args, package=False):
    """(file, row, code) of `xlalint check` over a checkout of `files` (name -> code): an application
    (a `.git` folder only), or an installable package (`package=True`: a pyproject.toml)."""
    (project / ".git").mkdir(exist_ok=True)
    if package:
        project.write("pyproject.toml", "[project]\nname = 'p'\n")
    for name, code in files.items():
        project.write(name, textwrap.dedent(code))
    out = run_cli("check", "--no-cache", "--output-format", "json", *args, cwd=project)[1]
    return sorted((d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out))


# -- a file of JAX arrays has no torch tensors ------------------------------------------------------

EVALUATE = """\
import {framework}


def evaluate(model, loader):
    correct = 0.0
    for x, y in loader:
        logits = model(x)
        correct += float((logits.argmax(-1) == y).sum())
        print(logits.max().item())
    return correct


def fit(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            model(x, y).backward()
            optimizer.step()
        evaluate(model, loader)
"""


def test_torch_rules_leave_a_jax_file_to_the_jax_rules(run_cli, project):
    assert findings(run_cli, project, {"eval_jax.py": EVALUATE.format(framework="jax.numpy as jnp")}) == []
    # the same loop over torch tensors, the evaluation of a training script: two host reads per batch
    assert findings(run_cli, project, {"eval_torch.py": EVALUATE.format(framework="torch")}) == [
        ("eval_torch.py", 8, "XLA103"),
        ("eval_torch.py", 9, "XLA101"),
    ]


def context(code):
    return FileContext(Path("t.py"), ast.parse(code), SourceText(code))


def test_a_file_importing_both_keeps_its_torch_tensors():
    assert context(EVALUATE.format(framework="jax")).jax_only
    assert not context(EVALUATE.format(framework="jax\nimport torch")).jax_only


# -- a module imported lazily by a helper --------------------------------------------------------------

LAZY = """\
import torch


def _import_backend():
    import torch_xla
    import torch_xla.core.xla_model as xla_model
    return torch_xla, xla_model


def train(model, loader, use_xla):
    backend, xla_model = None, None
    if use_xla:
        backend, xla_model = _import_backend()
    device = xla_model.xla_device() if use_xla else torch.device("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def flush():
        if backend is None:
            return
        backend.sync()

    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        {barrier}
"""


def test_a_module_a_helper_imports_and_returns_is_that_module():
    ctx = context(LAZY.format(barrier="flush()"))
    calls = {ast.unparse(c.func): c for c in ast.walk(ctx.tree) if isinstance(c, ast.Call)}
    assert ctx.qualified_name(calls["backend.sync"].func) == "torch_xla.sync"
    assert ctx.qualified_name(calls["xla_model.xla_device"].func) == "torch_xla.core.xla_model.xla_device"
    assert ctx.qualified_name(calls["_import_backend"].func) == "_import_backend"


ALIASED = """\
import torch

try:
    import torch_xla
    import torch_xla.core.xla_model as xm

    step_barrier = {alias}
except ImportError:
    step_barrier = lambda: None


def train(model, loader, optimizer):
    device = torch_xla.device()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        step_barrier()
"""


@pytest.mark.parametrize(
    "alias, reported",
    [
        ("xm.mark_step", False),
        ("torch_xla.sync", False),
        ('getattr(torch_xla, "sync", None) or xm.mark_step', False),
        ("xm.get_ordinal", True),  # bound to something else: no barrier
        ('getattr(torch_xla, "device", None) or xm.mark_step', True),  # one of them is no barrier
    ],
)
def test_a_name_bound_to_a_barrier_function_is_the_step_barrier(run_cli, project, alias, reported):
    found = findings(run_cli, project, {"train.py": ALIASED.format(alias=alias)}, "--select", "XLA401")
    assert (("train.py", 17, "XLA401") in found) is reported


@pytest.mark.parametrize("barrier, reported", [("flush()", []), ("pass", [("train.py", 25, "XLA401")])])
def test_a_sync_through_a_lazily_imported_module_is_the_step_barrier(run_cli, project, barrier, reported):
    found = findings(run_cli, project, {"train.py": LAZY.format(barrier=barrier)}, "--select", "XLA401")
    assert found == reported


OPTIONAL = """\
def _xla():
    import torch_xla.core.xla_model as xla_model
    return xla_model


def place(model):
    xla_model = _xla()
    return model.to(xla_model.xla_device())
"""


def test_no_fix_makes_a_lazily_imported_torch_xla_a_required_import(run_cli, project):
    project.write("place.py", OPTIONAL)
    (project / ".git").mkdir()
    out = run_cli("check", "--no-cache", "--output-format", "json", "--select", "XLA602", cwd=project)[1]
    (finding,) = json.loads(out)
    assert (finding["location"]["row"], finding["fix"]) == (8, None)  # reported, not rewritten


# -- a function nothing uses, in an application ---------------------------------------------------------

LOSSES = """\
import torch


def core_loss(pred, target):
    return ((pred - target) ** 2).mean()


def compute_loss(model, batch, is_training):
    loss = core_loss(model(batch["x"]), batch["y"])
    if is_training:
        model.running = loss.item()
    return loss


def check_gradients(grads):
    for name, grad in grads.items():
        if torch.isnan(grad).any():
            return name
    return None
"""

TRAIN = """\
import torch
import torch_xla
from losses import core_loss


def train(model, loader, optimizer):
    for batch in loader:
        loss = core_loss(model(batch["x"]), batch["y"])
        loss.backward()
        optimizer.step()
        torch_xla.sync()
"""


def test_functions_no_one_uses_in_an_application_run_at_no_step(run_cli, project):
    assert findings(run_cli, project, {"losses.py": LOSSES, "train.py": TRAIN}) == []


@pytest.mark.parametrize(
    "files, package",
    [
        ({"losses.py": LOSSES, "train.py": TRAIN}, True),  # a library's users may call them
        ({"losses.py": LOSSES + "\nCHECKS = [check_gradients]\n", "train.py": TRAIN}, False),
        ({"losses.py": LOSSES, "train.py": TRAIN.replace("core_loss\n", "core_loss, check_gradients\n")}, False),
    ],
)
def test_named_by_evidence_they_stay_per_call(run_cli, project, files, package):
    # per call, not per step: a guessed link (a loss by its name), shown at `--confidence possible`
    found = findings(run_cli, project, files, "--confidence", "possible", package=package)
    assert ("losses.py", 17, "XLA201") in found


# -- a step after a function's own batch loop runs once per epoch --------------------------------

EPOCH = """\
import torch
import torch_xla.core.xla_model as xm


def run_epoch(model, loader, optimizer, accumulate=4):
    for i, (x, y) in enumerate(loader):
        x, y = x.to(xm.xla_device()), y.to(xm.xla_device())
        model(x, y).backward()
        if (i + 1) % accumulate == 0:
            xm.optimizer_step(optimizer)
    {flush}


def main(model, optimizer, dataset):
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
    for epoch in range(3):
        run_epoch(model, loader, optimizer)
"""


@pytest.mark.parametrize("flush", ["xm.optimizer_step(optimizer)", "optimizer.step()"])
def test_a_flush_step_after_the_batch_loop_is_no_step_of_the_epoch_loop(run_cli, project, flush):
    # the in-loop step (moved by hand, no barrier) is the real finding; the flush of the last
    # accumulated micro-batches after the loop runs once per epoch, and calling `run_epoch` from
    # `for epoch in range(3)` makes that loop no loop of training steps
    found = findings(run_cli, project, {"train.py": EPOCH.format(flush=flush)}, "--select", "XLA401,XLA403,XLA404")
    assert found == [("train.py", 10, "XLA403")]


def test_a_function_stepping_once_per_call_still_makes_its_callers_loop_a_step_loop(run_cli, project):
    code = EPOCH.replace("for i, (x, y) in enumerate(loader):", "for i, (x, y) in enumerate([next(iter(loader))]):")
    found = findings(run_cli, project, {"train.py": code.format(flush="pass")}, "--select", "XLA403")
    assert found  # no loader loop of its own: still a step per call


# -- a `**kwargs` meter that every caller gives Python numbers reads nothing from the device ---------

METER = """\
import torch


class Meter:
    def __init__(self):
        self.total = {}

    def update(self, **kwargs):
        for name, value in kwargs.items():
            if isinstance(value, torch.Tensor):
                value = value.item()
            self.total[name] = self.total.get(name, 0.0) + value
"""

STEPS = """\
import torch_xla
from meter import Meter


def train(model, loader, optimizer, lr):
    meter = Meter()
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        meter.update({passed})
"""


@pytest.mark.parametrize(
    "passed, reported",
    [
        # numbers only: the `.item()` branch never runs; the sync the user wrote is in train.py
        ("loss=float(loss), lr=lr", [("train.py", 12, "XLA103")]),
        ("lr=lr", []),
        # a device tensor among the keywords, or a mapping unpacked: the meter's read is real
        ("loss=loss, lr=lr", [("meter.py", 11, "XLA101"), ("train.py", 12, "XLA109")]),
        ("**{'loss': loss}", [("meter.py", 11, "XLA101"), ("train.py", 12, "XLA109")]),
    ],
)
def test_a_kwargs_meter_reads_the_device_only_when_a_caller_passes_a_tensor(run_cli, project, passed, reported):
    files = {"meter.py": METER, "train.py": STEPS.format(passed=passed)}
    # the meter's value comes from another module's call: possible evidence (issue 37)
    found = findings(run_cli, project, files, "--select", "XLA101,XLA103,XLA109", "--confidence", "possible")
    assert found == reported


def test_an_optimizers_param_groups_hold_python_hyper_parameters(run_cli, project):
    passed = "lr=max(group['lr'] for group in optimizer.param_groups)"
    files = {"meter.py": METER, "train.py": STEPS.format(passed=passed)}
    assert findings(run_cli, project, files, "--select", "XLA101,XLA109") == []
    # the groups' parameters keep their gradients on the device
    files["train.py"] = STEPS.format(passed="norm=[p.grad.norm() for g in optimizer.param_groups for p in g['params']][0]")
    assert ("meter.py", 11, "XLA101") in findings(run_cli, project, files, "--select", "XLA101", "--confidence", "possible")


# -- a comprehension's variable is its own, not the function's --------------------------------------

TIMED = """\
import time
import torch
import torch_xla


def denoise(model, x, steps, device):
    timesteps = torch.linspace(1.0, 0.0, steps + 1, device=device)
    durations = {"step": []}
    for i in range(steps):
        start = time.time()
        t = timesteps[i]
        x = model(x, t)
        torch_xla.sync()
        durations["step"].append(time.time() - start)
    print(f"step times: {[f'{t:.3f}' for t in durations['step']]}")
    print(f"last: {[f'{v:.3f}' for v in [t]]}")
    return x


def main(model, loader, device):
    for batch in loader:
        denoise(model, batch.to(device), 8, device)


def train(model, loader, optimizer):  # a module that trains: its sampling loop is judged per step
    for x, y in loader:
        model(x, y).backward()
        optimizer.step()
"""


def test_a_comprehension_variable_does_not_take_the_functions_value(run_cli, project):
    # line 15 formats the host floats the comprehension binds to its own `t`; line 16 formats
    # the function's device `t` (through `v`): a real read, kept
    found = findings(run_cli, project, {"gen.py": TIMED}, "--select", "XLA104")
    assert found == [("gen.py", 16, "XLA104")]


# -- a module of an XLA project that places its tensors on CUDA never runs on XLA --------------------

TRAIN_XLA = """\
import torch_xla
import torch_xla.core.xla_model as xm


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x.to(torch_xla.device()), y)
        loss.backward()
        xm.optimizer_step(optimizer)
"""

EVAL_GPU = """\
import torch


def finetune(model, loader):
    device = {device}
    model.to(device)
    total = 0.0
    for x, y in loader:
        total += model(x.to(device), y.to(device)).item()
        model(x.to(device), y.to(device)).backward()
    return total
"""


@pytest.mark.parametrize(
    "device, reported",
    [
        ('torch.device("cuda:0")', False),
        ('"cuda" if torch.cuda.is_available() else "cpu"', False),
        ('torch.device("xla")', True),  # XLA's own device
        ("torch.device(args.device)", True),  # whatever the user passes: maybe XLA
        ('"cpu"', True),  # the host only: a CPU check, nothing of another backend's path
    ],
)
def test_a_module_placing_its_tensors_on_cuda_in_an_xla_project_is_no_xla_code(run_cli, project, device, reported):
    files = {"train_xla.py": TRAIN_XLA, "eval_gpu.py": EVAL_GPU.format(device=device)}
    found = [f for f in findings(run_cli, project, files) if f[0] == "eval_gpu.py"]
    assert (("eval_gpu.py", 9, "XLA101") in found) is reported


@pytest.mark.parametrize(
    "device, reported",
    [
        ('torch.device("cuda:0")', False),
        ('f"cuda:{args.gpu}" if args.gpu >= 0 else "cpu"', False),
        ("torch.device(args.device)", True),  # nothing seen of where it runs: device-agnostic code
        ('"cpu"', True),  # the host only: nothing of another backend's path
        ('"xla" if args.tpu else "cuda"', True),  # names XLA: it may run there
    ],
)
def test_a_cuda_module_of_a_project_with_no_xla_code_is_no_xla_code(run_cli, project, device, reported):
    # a CUDA project: a host read in its CUDA training script is no graph cut, and costs ~nothing
    # (shared/gpu/HAZARD_COSTS.md: 1.0-1.2x); the migration view is `--assume-xla`'s
    files = {"eval_gpu.py": EVAL_GPU.format(device=device)}
    assert (("eval_gpu.py", 9, "XLA101") in findings(run_cli, project, files)) is reported
    assert ("eval_gpu.py", 9, "XLA101") in findings(run_cli, project, {}, "--assume-xla")  # the user says: all XLA


EVAL_DEFAULT = """\
import argparse

import torch


def finetune(model, loader, device={param}):
    model.to(device)
    total = 0.0
    for x, y in loader:
        total += model(x.to(device), y.to(device)).item()
        model(x.to(device), y.to(device)).backward()
    return total


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default={option})
    args = parser.parse_args()
    finetune(torch.load("model.pt"), torch.load("data.pt"), torch.device(args.device))
"""


@pytest.mark.parametrize(
    "param, option, reported",
    [
        ('"cuda"', "None", False),  # a parameter's default names CUDA
        ("None", '"cuda:0"', False),  # so does the command-line option's
        ("None", "None", True),  # nothing seen of where it runs: device-agnostic code
        ('"cpu"', '"cpu"', True),  # the host only: nothing of another backend's path
        ('"xla"', "None", True),  # XLA's own device by default
    ],
)
def test_a_device_a_default_names_places_a_module_of_a_cuda_project(run_cli, project, param, option, reported):
    files = {"eval_gpu.py": EVAL_DEFAULT.format(param=param, option=option)}
    assert (("eval_gpu.py", 10, "XLA101") in findings(run_cli, project, files)) is reported


def test_a_device_a_default_names_is_chosen_where_the_project_runs_on_xla(run_cli, project):
    # the caller may pass XLA's device where the project has an XLA path: still judged
    files = {"train_xla.py": TRAIN_XLA, "eval_gpu.py": EVAL_DEFAULT.format(param='"cuda"', option='"cuda"')}
    assert ("eval_gpu.py", 10, "XLA101") in findings(run_cli, project, files)


def test_a_cuda_module_under_a_library_that_picks_the_device_is_judged(run_cli, project):
    # Accelerate hands the code an XLA device on a TPU host without the project importing torch_xla
    source = "import accelerate\n" + EVAL_GPU.format(device='torch.device("cuda:0")')
    assert ("eval_gpu.py", 10, "XLA101") in findings(run_cli, project, {"eval_gpu.py": source})


def test_a_device_agnostic_module_of_a_cuda_project_is_judged(run_cli, project):
    # a library's model or loss code that names no device runs wherever its caller puts it: a TPU user's too
    loss = "import torch\n\n\ndef loss_fn(pred, target):\n    err = torch.abs(pred - target)\n    if err.max().item() > 10:\n        err = err.clamp(max=10)\n    return err.mean()\n"
    gpu = EVAL_GPU.format(device='torch.device("cuda:0")')
    found = findings(run_cli, project, {"pkg/__init__.py": "", "pkg/losses.py": loss, "eval_gpu.py": gpu})
    assert [f for f in found if f[0] == "pkg/losses.py"]
    assert not [f for f in found if f[0] == "eval_gpu.py"]


def test_a_cuda_module_that_xla_code_calls_is_judged(run_cli, project):
    # a meter whose distributed sync uses CUDA, updated every step by the XLA script
    meters = EVAL_GPU.format(device='torch.device("cuda:0")').replace("def finetune", "def update_meter")
    train = TRAIN_XLA.replace("import torch_xla\n", "import torch_xla\nfrom meters import update_meter\n", 1)
    train = train.replace("        loss.backward()", "        update_meter(model, [(x, y)])\n        loss.backward()")
    found = findings(run_cli, project, {"train_xla.py": train, "meters.py": meters})
    assert ("meters.py", 9, "XLA101") in found


# A trainer handed its device (a parameter, a dataclass field) shows its backend by what its code
# computes under: an autocast region it switches on, a process bound to a CUDA device.
HANDED = """\
import torch


def finetune(model, loader, device):
    total = 0.0
    for x, y in loader:
        {region}
            loss = model(x.to(device), y.to(device))
        loss.backward()
        total += loss.item()
    return total
"""


@pytest.mark.parametrize(
    "region, reported",
    [
        ('with torch.autocast("cuda", dtype=torch.bfloat16):', False),
        ('with torch.autocast(device_type="mps" if args.mps else "cuda"):', False),
        ("with torch.cuda.amp.autocast():", False),
        ("with torch.autocast(device.type):", True),  # wherever `device` is: nothing seen
        ('with torch.autocast("cuda", enabled=False):', True),  # a full-precision region, any device
        ('with torch.autocast("xla"):', True),  # XLA's own
        ('with torch.autocast("cpu"):', True),  # the host only
    ],
)
def test_a_handed_device_under_a_cuda_autocast_is_no_xla_code(run_cli, project, region, reported):
    files = {"trainer.py": HANDED.format(region=region)}
    assert (("trainer.py", 10, "XLA101") in findings(run_cli, project, files)) is reported


def test_a_process_bound_to_a_cuda_device_is_no_xla_code(run_cli, project):
    source = HANDED.format(region="if True:").replace(
        "    total = 0.0\n", "    torch.cuda.set_device(device)\n    total = 0.0\n", 1
    )
    assert ("trainer.py", 11, "XLA101") not in findings(run_cli, project, {"trainer.py": source})
    source = HANDED.format(region="if True:").replace("x.to(device)", "x.to(torch.cuda.current_device())")
    assert ("trainer.py", 10, "XLA101") not in findings(run_cli, project, {"trainer.py": source})


COMMON = """\
import os

import torch


def setup(kind):
    rank = int(os.environ.get("LOCAL_RANK", 0))
    if kind == "cuda":
        torch.cuda.manual_seed(0)
        device = torch.device("cuda", rank)
    else:
        device = torch.device(kind)
    return rank, device
"""

SCRIPT = """\
import torch
from common import setup

rank, device = setup(args.kind)
for x, y in loader:
    loss = model(x.to(device), y.to(device))
    loss.backward()
    print(loss.item())
"""


def test_a_device_from_a_cuda_helper_module_is_no_xla_code(run_cli, project):
    # `common.setup` picks CUDA (or what it is told): in a project with no XLA code the script
    # that takes its device from there is a CUDA script too
    files = {"common.py": COMMON, "train.py": SCRIPT}
    assert ("train.py", 8, "XLA101") not in findings(run_cli, project, files)
    # where the project runs on XLA elsewhere, a device it is told could be XLA's: judged
    files["train_xla.py"] = TRAIN_XLA
    assert ("train.py", 8, "XLA101") in findings(run_cli, project, files)


def test_a_device_from_a_helper_that_names_no_backend_is_judged(run_cli, project):
    # a helper module that shows no backend of its own (`torch.device(kind)` only) says nothing
    common = COMMON.replace('torch.cuda.manual_seed(0)\n        device = torch.device("cuda", rank)', "device = None")
    files = {"common.py": common, "train.py": SCRIPT}
    assert ("train.py", 8, "XLA101") in findings(run_cli, project, files)


# -- a value handed back by a function that returns Python numbers ------------------------------------

REDUCED = """\
import torch
import torch_xla
import torch_xla.core.xla_model as xm


def reduced(loss, aux):
    pair = torch.stack([loss.detach(), aux.detach()])
    pair = xm.all_reduce(xm.REDUCE_SUM, pair)
    return {returned}


def train(model, loader, optimizer, bar):
    device = torch_xla.device()
    for x, y in loader:
        loss, aux = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        loss_val, aux_val = reduced(loss, aux)
        bar.set_postfix({{"loss": f"{{loss_val:.4f}}", "aux": f"{{aux_val:.2e}}"}})
"""


@pytest.mark.parametrize(
    "returned, reported",
    [
        ("pair.cpu().tolist()", False),  # Python floats: read once, inside the function
        ("pair[0].item(), pair[1].item()", False),
        ("pair", True),  # the device tensor itself: formatting it reads it
        ("pair.unbind()", True),
    ],
)
def test_a_function_returning_python_numbers_hands_back_no_tensor(run_cli, project, returned, reported):
    found = findings(run_cli, project, {"train.py": REDUCED.format(returned=returned)}, "--select", "XLA104")
    assert (("train.py", 20, "XLA104") in found) is reported


def test_a_list_filled_after_its_display_is_no_python_value(run_cli, project):
    # `parts = []` is a list display, but the function appends device tensors to it
    filled = REDUCED.replace("    return {returned}", "    parts = []\n    parts.append(pair[0])\n    parts.append(pair[1])\n    return parts")
    found = findings(run_cli, project, {"train.py": filled.format()}, "--select", "XLA104")
    assert ("train.py", 23, "XLA104") in found


# -- a parameter the code uses as a size is a Python int ---------------------------------------------

WINDOWS = """\
import torch
from torch import nn


def merge(windows, size, H, W):
    B = int(windows.shape[0] / (H * W / size / size))
    return windows.view(B, H // size, W // size, size, size, -1)


class Block(nn.Module):
    def forward(self, x, {param}):
        {unpack}
        B, L, C = x.shape
        x = x.view(B, H, W, C)
        return merge(x, 7, H, W)
"""


@pytest.mark.parametrize(
    "param, unpack, reported",
    [
        ("x_size", "H, W = x_size", False),  # unpacked into the view's sizes: a tuple of ints
        ("H, W", "pass", False),  # the view's sizes themselves
        ("lengths", "H, W = lengths.amax(0)[:2]", True),  # a tensor's reduction: data, not a size
    ],
)
def test_a_parameter_used_as_a_size_is_a_python_int(run_cli, project, param, unpack, reported):
    source = WINDOWS.format(param=param, unpack=unpack)
    found = findings(run_cli, project, {"model.py": source}, "--select", "XLA103", "--assume-xla")
    assert (("model.py", 6, "XLA103") in found) is reported


# -- a block for another mode than the one the per-step call passes ---------------------------------

SCOPED = """\
import torch
import torch_xla


class Averager(Callback):
    def _aggregate(self, scope, metrics):
        value = torch.tensor(list(metrics.values()), device=torch_xla.device()).mean()
        if scope {test}:
            value = float(value)
        metrics["mean"] = value

    def on_batch_end(self, runner):
        self._aggregate({batch}, runner.batch_metrics)

    def on_loader_end(self, runner):
        self._aggregate("loader", runner.loader_metrics)
"""


@pytest.mark.parametrize(
    "test, batch, reported",
    [
        ('== "loader"', '"batch"', False),  # only the once-per-loader call passes "loader"
        ('!= "batch"', '"batch"', False),
        ('== "loader"', "runner.scope", True),  # what the per-step call passes is not seen
        ('!= "loader"', '"batch"', True),  # the per-step call runs the block
    ],
)
def test_a_block_for_a_mode_the_per_step_call_does_not_pass_is_no_step(run_cli, project, test, batch, reported):
    found = findings(run_cli, project, {"cb.py": SCOPED.format(test=test, batch=batch)}, "--select", "XLA103")
    assert (("cb.py", 9, "XLA103") in found) is reported


@pytest.mark.parametrize("text, names", [("xla:0", True), ("--use_tpu", True), ("Train on TPUs", True),
                                         ("output size", False), ("pytpuzzle", False)])
def test_a_string_names_xla_as_a_word(text, names):
    from xlalint.analysis.placement import NAMES_XLA

    assert bool(NAMES_XLA.search(text)) is names


# -- a script that never trains runs no training step --------------------------------------------

PREDICT = """\
import torch

model = torch.load("model.pt").to("xla")
predictions = []
for x in loader:
    predictions.append(torch.softmax(model(x.to("xla")), -1).cpu().numpy())
"""


def test_a_prediction_script_that_never_trains_runs_no_step(run_cli, project):
    # its loop over data is inference: the predictions are wanted on the host
    assert findings(run_cli, project, {"predict.py": PREDICT}) == []
    # the same loop in a module that also trains is an evaluation of the training run
    trains = PREDICT + "for x, y in loader:\n    model(x, y).backward()\n"
    assert ("predict.py", 6, "XLA102") in findings(run_cli, project, {"predict.py": trains})


def test_an_evaluation_that_a_training_script_calls_is_judged_per_batch(run_cli, project):
    evaluate = "import torch\n\n\ndef evaluate(model, loader):\n    for x in loader:\n        print(model(x).max().item())\n"
    train = (
        "import torch\nfrom evaluation import evaluate\n\n\ndef fit(model, loader, opt):\n"
        "    for epoch in range(3):\n        for x, y in loader:\n            model(x, y).backward()\n"
        "            opt.step()\n        evaluate(model, loader)\n"
    )
    found = findings(run_cli, project, {"evaluation.py": evaluate, "train.py": train}, "--assume-xla")
    assert ("evaluation.py", 6, "XLA101") in found


# -- a function that iterates its own loader runs an epoch per call ------------------------------

EPOCHS = """\
import torch_xla.core.xla_model as xm


def train_one_epoch(model, optimizer, loader, device):
    for x, y in loader:
        loss = model(x.to(device), y.to(device))
        loss.backward()
        xm.optimizer_step(optimizer, barrier=True)
    reduced = xm.mesh_reduce("loss", loss, lambda v: sum(v) / len(v))
    xm.master_print(f"epoch loss {reduced}")


def train_fn(rank, model, optimizer, loader, device):
    for epoch in range(10):
        train_one_epoch(model, optimizer, loader, device)
"""


def test_the_statements_after_an_epoch_functions_loop_run_once_per_epoch(run_cli, project):
    # `train_fn` is a step function by its name; the epoch function it calls is not made one
    assert findings(run_cli, project, {"train.py": EPOCHS}) == []
    per_step = EPOCHS.replace("        loss.backward()\n", "        loss.backward()\n        xm.mesh_reduce('l', loss, sum)\n")
    assert ("train.py", 8, "XLA105") in findings(run_cli, project, {"train.py": per_step})


# -- a name is a framework's role only where the framework is ------------------------------------

CODEGEN = """\
import numpy as np


def block(n, packed):
    code = ""
    for j in range(0, n, 8):
        code += f"load(w{j}, {packed});\\n"
    return code


def forward_module(n, bits, logits):
    packed = 32 // bits
    print(f"{logits}")
    return block(n, packed)
"""


@pytest.mark.parametrize("imports, named", [("import numpy as np\n", False), ("import torch\n", True),
                                             ("import jax\n", True)])
def test_a_function_named_like_a_forward_is_a_step_only_where_a_framework_is(imports, named):
    # a C-code generator's `forward_module` (numpy and pandas, no torch): no nn.Module role by its name
    from xlalint.analysis.steps import is_named_step

    ctx = context(imports + CODEGEN.split("\n", 1)[1])
    func = next(f for f in ast.walk(ctx.tree) if isinstance(f, ast.FunctionDef) and f.name == "forward_module")
    assert is_named_step(ctx, func) is named
