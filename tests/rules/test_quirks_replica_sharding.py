"""XLA706: the harm (replicas with a plain loader each read the whole dataset; a DistributedSampler
partitions it), and what the analysis takes for sharding, across modules too."""

from __future__ import annotations

import socket
import textwrap

import pytest
from xlalint.rules import RULES_BY_CODE

from xlalint.diagnostics import HIGH, POSSIBLE
from xlalint.testing import lint_code

XLA706 = RULES_BY_CODE["XLA706"]
WORLD = 2
EXAMPLES = 16


def _replica(rank: int, port: int, sharded: bool, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        dataset = TensorDataset(torch.arange(EXAMPLES))
        if sharded:
            sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank())
            loader = DataLoader(dataset, batch_size=4, sampler=sampler)
        else:
            loader = DataLoader(dataset, batch_size=4, shuffle=True)
        seen = torch.cat([batch for (batch,) in loader])
        gathered = [torch.empty_like(seen) for _ in range(WORLD)]
        dist.all_gather(gathered, seen)
        if rank == 0:
            torch.save(torch.cat(gathered), out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sharded", [False, True])
def test_replicas_without_a_distributed_sampler_read_every_example(tmp_path, sharded):
    """Two processes (gloo, CPU), each with its own loader: a plain shuffled loader gives every
    replica the whole dataset (each index read twice over the job); a DistributedSampler splits it."""
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    out = str(tmp_path / "indices.pt")
    mp.start_processes(_replica, args=(_free_port(), sharded, out), nprocs=WORLD, start_method="spawn")
    counts = torch.bincount(torch.load(out), minlength=EXAMPLES)
    assert counts.tolist() == [1 if sharded else WORLD] * EXAMPLES


def _found(code: str, modules: dict[str, str] | None = None):
    modules = {name: textwrap.dedent(text) for name, text in (modules or {}).items()}
    return lint_code(textwrap.dedent(code).lstrip(), [XLA706], modules=modules)


SPAWNED = """
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
from torch.utils.data import DataLoader
from datasets import FramesDataset

def _mp_fn(index):
    dataset = FramesDataset("frames/")
    loader = DataLoader(dataset, batch_size=32, {how})
    for x, y in loader:
        loss_fn(model(x), y).backward()
        xm.optimizer_step(optimizer)

xmp.spawn(_mp_fn, nprocs=8)
"""
PLAIN_DATASET = """
class FramesDataset:
    def __init__(self, root):
        self.files = sorted(list_files(root))
"""
RANK_DATASET = """
import torch_xla.runtime as xr

class FramesDataset:
    def __init__(self, root):
        files = sorted(list_files(root))
        self.files = files[xr.global_ordinal() :: xr.world_size()]
"""


def test_a_dataset_of_another_module_that_reads_the_rank_is_sharding():
    code = SPAWNED.format(how="shuffle=True")
    assert [d.location.row for d in _found(code, {"datasets.py": PLAIN_DATASET})] == [8]
    assert _found(code, {"datasets.py": RANK_DATASET}) == []


def test_an_unshuffled_loader_is_possible():
    """Without shuffling, the dataset may be an IterableDataset of a library that splits itself by
    replica: the finding is only `possible`."""
    (shuffled,) = _found(SPAWNED.format(how="shuffle=True"), {"datasets.py": PLAIN_DATASET})
    (unshuffled,) = _found(SPAWNED.format(how="num_workers=4"), {"datasets.py": PLAIN_DATASET})
    assert (shuffled.confidence, unshuffled.confidence) == (HIGH, POSSIBLE)


@pytest.mark.parametrize(
    "how",
    [
        "sampler=sampler",  # a sampler not seen: sharded or not known
        "batch_sampler=BucketSampler(dataset)",
        "sampler=DistributedSampler(dataset)",
        "shuffle=True, generator=g, worker_init_fn=lambda w: seed(index)",  # reads the replica's index
    ],
)
def test_sharded_or_unknown_is_not_reported(how):
    assert _found(SPAWNED.format(how=how), {"datasets.py": PLAIN_DATASET}) == []


def test_rank_read_in_the_spawned_code_is_sharding():
    code = SPAWNED.format(how="shuffle=True").replace(
        '    dataset = FramesDataset("frames/")', '    dataset = FramesDataset("frames/", part=xm.get_ordinal())'
    )
    assert _found(code, {"datasets.py": PLAIN_DATASET}) == []


def test_a_loader_no_training_loop_iterates_is_not_reported():
    code = (
        SPAWNED.format(how="shuffle=True")
        .replace("loss_fn(model(x), y).backward()", "model(x)")
        .replace("xm.optimizer_step(optimizer)", "pass")
    )
    assert _found(code, {"datasets.py": PLAIN_DATASET}) == []


def test_spmd_is_one_process():
    """A mesh or sharding spec is SPMD's: one process over all devices (or, without `use_spmd()`,
    not known which), no finding."""
    code = SPAWNED.format(how="shuffle=True").replace(
        "xmp.spawn(_mp_fn, nprocs=8)", "mesh = xs.Mesh(device_ids, (8, 1))\nxmp.spawn(_mp_fn, nprocs=8)"
    )
    assert _found(code, {"datasets.py": PLAIN_DATASET}) == []
