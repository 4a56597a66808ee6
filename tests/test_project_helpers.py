"""Facts about a project's helpers that matter where they are called (issue 30): a device taken
from a helper, a loader handed to a trainer or returned by a helper, an optimizer stepped by a
helper, replicas launched elsewhere, a device loader passed in. Each through the CLI, cold and warm
(the facts come back from the cache as they went in)."""

import json

import pytest

UTILS = """\
import torch
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader


def get_device():
    return xm.xla_device()
"""

DATA = """\
import torch
from torch.utils.data import DataLoader


def setup_dataloaders(train_set, val_set, batch_size):
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=4)
    val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False)
    return train_loader, val_loader
"""

TRAINER = """\
import torch


class Trainer:
    def __init__(self, cfg, model, data_iter, optimizer, device):
        self.cfg = cfg
        self.model = model
        self.data_iter = data_iter
        self.optimizer = optimizer
        self.device = device

    def train(self, get_loss):
        for epoch in range(self.cfg.n_epochs):
            for batch in self.data_iter:
                batch = [t.to(self.device) for t in batch]
                self.optimizer.zero_grad()
                get_loss(self.model, batch).backward()
                self.optimizer.step()


class Stepper:
    def __init__(self, model):
        self.model = model

    def optimize(self, opt):
        opt.step()
        return True
"""

PRETRAIN = """\
import torch
from torch.utils.data import DataLoader
from pkg.trainer import Trainer, Stepper
from pkg.utils import get_device
from pkg.data import setup_dataloaders


def main(cfg, dataset, model, optimizer, get_loss):
    data_iter = DataLoader(dataset, batch_size=cfg.batch_size, collate_fn=collate)
    trainer = Trainer(cfg, model, data_iter, optimizer, get_device())
    trainer.train(get_loss)


def finetune(cfg, train_set, val_set, model, opt):
    device = get_device()
    train_loader, val_loader = setup_dataloaders(train_set, val_set, cfg.batch_size)
    stepper = Stepper(model)
    for x, y in train_loader:
        model(x.to(device), y.to(device)).backward()
        stepper.optimize(opt)
"""


@pytest.fixture
def package(project):
    project.write("pyproject.toml", "[project]\nname = 'pkg'\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/utils.py", UTILS)
    project.write("pkg/data.py", DATA)
    project.write("pkg/trainer.py", TRAINER)
    project.write("pkg/pretrain.py", PRETRAIN)
    return project


def found(out, name):
    return sorted((d["location"]["row"], d["code"]) for d in json.loads(out) if d["filename"].endswith(name))


def test_facts_about_helpers_are_reported_where_they_are_called(run_cli, package):
    args = ("check", "--output-format", "json", "--select", "XLA3,XLA4", package / "pkg" / "pretrain.py")
    cold = run_cli(*args)[1]
    # no torch_xla import in pretrain.py: its device comes from get_device(), an XLA device
    assert found(cold, "pretrain.py") == [
        (9, "XLA311"),  # a loader the trainer's training loop iterates
        (16, "XLA311"),  # the training loader setup_dataloaders returns (data.py has no XLA of its own)
        (20, "XLA401"),  # Stepper.optimize steps the optimizer; nothing cuts this loop's graph
    ]
    assert run_cli(*args)[1] == cold  # warm: the cached facts say the same


def test_without_an_xla_device_helper_the_module_is_no_xla_code(run_cli, package):
    package.write("pkg/utils.py", UTILS.replace("return xm.xla_device()", 'return torch.device("cuda")'))
    out = run_cli("check", "--output-format", "json", "--select", "XLA3,XLA4", package / "pkg" / "pretrain.py")[1]
    assert found(out, "pretrain.py") == []


def test_a_loader_only_evaluated_on_is_no_training_loader(run_cli, package):
    package.write("pkg/trainer.py", TRAINER.replace("get_loss(self.model, batch).backward()\n",
                                                    "get_loss(self.model, batch)\n")
                  .replace("                self.optimizer.step()\n", ""))
    out = run_cli("check", "--output-format", "json", "--select", "XLA311", package / "pkg" / "pretrain.py")[1]
    assert found(out, "pretrain.py") == [(16, "XLA311")]


LOOP = """\
import torch_xla.core.xla_model as xm


def train_loop_fn(loader, model, optimizer, device):
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        model(data, target).backward()
        xm.optimizer_step(optimizer)
"""

LAUNCH = """\
import torch_xla
import torch_xla.distributed.parallel_loader as pl
from pkg.loop import train_loop_fn


def _mp_fn(index):
    device = torch_xla.device()
    train_loop_fn(pl.MpDeviceLoader(train_loader, device), model, optimizer, device)
"""


def test_a_loader_passed_in_is_a_device_loader_only_where_a_caller_says_so(run_cli, package):
    package.write("pkg/loop.py", LOOP)
    args = ("check", "--output-format", "json", "--select", "XLA403", package / "pkg" / "loop.py")
    assert found(run_cli(*args)[1], "loop.py") == [(9, "XLA403")]  # batches moved by hand: a host loader
    package.write("pkg/launch.py", LAUNCH)
    cold = run_cli(*args)[1]
    assert found(cold, "loop.py") == []  # the project's caller passes a MpDeviceLoader
    assert run_cli(*args)[1] == cold


ENGINE = """\
import torch
import torch_xla.core.xla_model as xm


def train_one_epoch(model, loader, optimizer, max_norm):
    for x, y in loader:
        model(x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        xm.optimizer_step(optimizer)
"""

MAIN = """\
import torch
from pkg.engine import train_one_epoch


def _mp_fn(index, args):
    model = build(args)
    if args.distributed and not args.tpu:
        model = torch.nn.parallel.DistributedDataParallel(model)  # GPUs only
    train_one_epoch(model, loader, optimizer, args.max_norm)


if __name__ == "__main__":
    import torch_xla
    torch_xla.launch(_mp_fn, args=(parse(),))
"""


def test_replicas_launched_by_another_module_clip_local_gradients(run_cli, package):
    package.write("pkg/engine.py", ENGINE)
    args = ("check", "--output-format", "json", "--select", "XLA503", package / "pkg" / "engine.py")
    assert found(run_cli(*args)[1], "engine.py") == []  # nothing launches replicas
    package.write("pkg/main.py", MAIN)
    cold = run_cli(*args)[1]
    assert found(cold, "engine.py") == [(8, "XLA503")]
    assert run_cli(*args)[1] == cold
    # DDP in the launcher's XLA code reduces the gradients in backward
    package.write("pkg/main.py", MAIN.replace("    if args.distributed and not args.tpu:\n    ", "    "))
    assert found(run_cli(*args)[1], "engine.py") == []


BASE = """\
import torch_xla
import torch_xla.distributed.parallel_loader as pl


class TrainBase:
    def __init__(self, train_loader):
        self.device = torch_xla.device()
        self.train_device_loader = pl.MpDeviceLoader(train_loader, self.device)

    def start_training(self):
        for epoch in range(3):
            self.train_loop_fn(self.train_device_loader, epoch)
"""

SUB = """\
import torch_xla.core.xla_model as xm
from pkg.base import TrainBase


class TrainAmp(TrainBase):
    def train_loop_fn(self, loader, epoch):
        for data, target in loader:
            data, target = data.to(self.device), target.to(self.device)
            self.model(data, target).backward()
            xm.optimizer_step(self.optimizer)
"""


def test_an_override_gets_the_device_loader_its_base_class_passes(run_cli, package):
    package.write("pkg/sub.py", SUB)
    args = ("check", "--output-format", "json", "--select", "XLA403", package / "pkg" / "sub.py")
    assert found(run_cli(*args)[1], "sub.py") == [(10, "XLA403")]  # nothing says what the loader is
    package.write("pkg/base.py", BASE)
    assert found(run_cli(*args)[1], "sub.py") == []  # the base class passes a MpDeviceLoader
