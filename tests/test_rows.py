"""Row tables of a batch's objects (`analysis/rows.py`, XLA316), followed through a project: a
collate that concatenates the samples' rows, a helper that returns the loader, a progress bar around
it, a loss object whose `__call__` hands the targets to the method that sizes by their count."""

import json
import textwrap

DATA = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Boxes(Dataset):
    @staticmethod
    def collate_fn(batch):
        im, label, path = zip(*batch)
        for i, lb in enumerate(label):
            lb[:, 0] = i  # the image's index in the batch
        return torch.stack(im, 0), torch.cat(label, 0), path

    @staticmethod
    def collate_fixed(batch):
        im, label, path = zip(*batch)
        return torch.stack(im, 0), torch.cat(label, 0), path


def make_loader(path, batch_size, fixed=False):
    dataset = Boxes(path)
    collate = Boxes.collate_fixed if fixed else Boxes.collate_fn
    return DataLoader(dataset, batch_size=batch_size, drop_last=True, collate_fn=collate), dataset
"""

LOSS = """\
import torch


class DetectionLoss:
    def __init__(self, model):
        self.na = 3

    def __call__(self, p, targets):
        tcls, anchors = self.build_targets(p, targets)
        return sum(t.sum() for t in tcls) + anchors.sum()

    def build_targets(self, p, targets):
        na, nt = self.na, targets.shape[0]
        ai = torch.arange(na, device=targets.device).float().view(na, 1).repeat(1, nt)
        return [targets[:, 1]], ai
"""

TRAIN = """\
{xla}from tqdm import tqdm
from data import make_loader
from loss import DetectionLoss


def train(model, optimizer, device, epochs):
    train_loader, dataset = make_loader("train.txt", 16)
    compute_loss = DetectionLoss(model)
    for epoch in range(epochs):
        pbar = enumerate(train_loader)
        if epoch == 0:
            pbar = tqdm(pbar, total=len(train_loader))
        for i, (imgs, targets, paths) in pbar:
            loss = compute_loss(model(imgs.to(device)), targets.to(device))
            loss.backward()
            optimizer.step()
"""


def check(run_cli, project, files):
    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    for name, code in files.items():
        project.write(name, textwrap.dedent(code))
    out = run_cli("check", "--no-cache", "--output-format", "json", "--select", "XLA316", cwd=project)[1]
    return [(d["filename"], d["location"]["row"], d["message"]) for d in json.loads(out)]


def test_the_count_is_reported_in_the_loss_that_an_xla_loop_feeds(run_cli, project):
    xla = "import torch_xla\n"
    found = check(run_cli, project, {"data.py": DATA, "loss.py": LOSS, "train.py": TRAIN.format(xla=xla)})
    # the count in the loss, and the call that hands it the batch's targets in XLA code
    assert [(f, row) for f, row, _ in found] == [("loss.py", 13), ("train.py", 15)]
    assert "rows concatenated at data.py:11" in found[0][2] and "`.repeat(1, nt)`" in found[0][2]
    assert "`compute_loss()` sizes a tensor by the row count of `targets` (loss.py:13)" in found[1][2]


def test_no_xla_code_feeds_the_loss_no_finding(run_cli, project):
    # on CUDA or CPU, eagerly, a new number of rows costs nothing
    assert check(run_cli, project, {"data.py": DATA, "loss.py": LOSS, "train.py": TRAIN.format(xla="")}) == []


def test_a_collate_that_marks_no_sample_index_is_no_row_table(run_cli, project):
    # one label per sample, concatenated: as many rows as samples, the batch size
    data = DATA.replace("Boxes.collate_fixed if fixed else Boxes.collate_fn", "Boxes.collate_fixed")
    train = TRAIN.format(xla="import torch_xla\n")
    assert check(run_cli, project, {"data.py": data, "loss.py": LOSS, "train.py": train}) == []


def test_a_count_that_sizes_nothing_is_no_finding(run_cli, project):
    loss = LOSS.replace(".repeat(1, nt)", "").replace("na, nt = self.na, targets.shape[0]", "na = self.na")
    loss = loss.replace("return [targets[:, 1]], ai", "print(targets.shape[0])\n        return [targets[:, 1]], ai")
    train = TRAIN.format(xla="import torch_xla\n")
    assert check(run_cli, project, {"data.py": DATA, "loss.py": loss, "train.py": train}) == []
