"""XLA706 replicas-train-on-same-data: Flags a training `DataLoader(...)` built in the code that
`xmp.spawn` / `torch_xla.launch` runs in every replica when nothing there shards the data."""

from __future__ import annotations

import ast

from xlalint.analysis.evidence import Evidence, seen
from xlalint.analysis.loaders import shuffled_sign, training_sources
from xlalint.analysis.names import dotted_name, last_part
from xlalint.analysis.sharding import plain_sampling, replicas
from xlalint.diagnostics import POSSIBLE
from xlalint.rule import Invalid, Rule, Valid


class ReplicasTrainOnSameData(Rule):
    """## What it does
    Flags a `DataLoader(...)` that a loop that trains iterates, built in the code every replica runs
    (the function handed to `xmp.spawn` or `torch_xla.launch`, and the functions and classes of the
    module it calls), with the loader's own sampler (none, or a plain `RandomSampler` /
    `SequentialSampler`), when nothing in that code shards the data: no `DistributedSampler` or other
    sampler, no `num_replicas=` / `rank=` / `world_size=`, no `ds.shard(...)` or
    `split_dataset_by_node`, no use of the replica's index (the launched function's first parameter)
    and no read of `xm.get_ordinal()` / `xr.global_ordinal()` / the world size other than a plain
    comparison (`if xm.get_ordinal() == 0:`), nor a call into another module of the project that does
    one of these.

    A loader that shuffles is reported; one that does not is a `possible` finding (an
    `IterableDataset` of a library may split itself by replica). Not reported: `nprocs=1`,
    `debug_single_process=True`, and SPMD programs (`xr.use_spmd()`, `xs.mark_sharding`, a mesh or
    `ShardingSpec`), which run one process.

    ## Why is this bad?
    Each replica is a process with its own copy of the loader. Without a sampler that knows its
    replica, every one of the N replicas reads the whole dataset: N times the input work for the
    same examples, and the gradients they average are of the same data (with shuffling, of the same
    data in N orders), so one "epoch" is N passes over the dataset and a schedule counted in epochs
    runs N times too long.

    ## Example
    ```python
    import torch_xla.distributed.xla_multiprocessing as xmp

    def _mp_fn(index):
        loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            xm.optimizer_step(optimizer)

    xmp.spawn(_mp_fn, nprocs=8)
    ```

    Use instead:
    ```python
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr

    def _mp_fn(index):
        sampler = DistributedSampler(
            train_set, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=True
        )
        loader = DataLoader(train_set, batch_size=32, sampler=sampler, drop_last=True)
        for x, y in loader:
            loss_fn(model(x), y).backward()
            xm.optimizer_step(optimizer)

    xmp.spawn(_mp_fn, nprocs=8)
    ```

    ## Fix safety
    There is no fix: the sampler needs the replica's rank and the world size, and `shuffle=True`
    must move from the loader to the sampler (with `sampler.set_epoch(epoch)` each epoch).

    ## References
    - [torch.utils.data.distributed.DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler):
      "restricts data loading to a subset of the dataset ... each process can pass a
      DistributedSampler instance as a DataLoader sampler, and load a subset of the original
      dataset that is exclusive to it"
    - pytorch/xla `test/test_train_mp_imagenet.py` (the `xmp.spawn` example): when the world size is
      above 1 it builds `DistributedSampler(train_dataset, num_replicas=xm.xrt_world_size(),
      rank=xm.get_ordinal(), shuffle=True)` for the training loader
    """

    code, name, category = "XLA706", "replicas-train-on-same-data", "other"
    summary = "every replica builds this training loader over the whole dataset: the replicas train on the same data"
    hint = (
        "pass `sampler=DistributedSampler(dataset, num_replicas=xr.world_size(), rank=xr.global_ordinal(), "
        "shuffle=True)` instead of `shuffle=True`"
    )
    xla_only = True

    VALID = [
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                sampler = DistributedSampler(train_set, num_replicas=xr.world_size(), rank=xr.global_ordinal())
                loader = DataLoader(train_set, batch_size=32, sampler=sampler, drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            xmp.spawn(_mp_fn, nprocs=8)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                loader = DataLoader(dataset.shard(8, index), batch_size=32, shuffle=True, drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            xmp.spawn(_mp_fn, nprocs=8)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                loader = DataLoader(train_set, batch_size=32, sampler=ShardSampler(train_set), drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            xmp.spawn(_mp_fn, nprocs=8)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            xmp.spawn(_mp_fn, nprocs=1)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.runtime as xr
            import torch_xla.distributed.spmd as xs

            def _mp_fn(index):
                xr.use_spmd()
                loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                    torch_xla.sync()

            torch_xla.launch(_mp_fn)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train():
                loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            train()  # one process, no replicas
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl
            import torch_xla.distributed.xla_multiprocessing as xmp

            def main():
                device = xm.xla_device()
                loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)
                for epoch in range(10):
                    for x, y in pl.ParallelLoader(loader, [device]).per_device_loader(device):
                        loss_fn(model(x), y).backward()
                        xm.optimizer_step(optimizer)
                        if xm.get_ordinal() == 0:
                            print("step")

            xmp.spawn(main, nprocs=8)
            """,
            line=7,
        ),
        Invalid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            def train(model):
                loader = DataLoader(train_set, batch_size=32, sampler=RandomSampler(train_set), drop_last=True)
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)

            def _mp_fn(index):
                train(build_model())

            torch_xla.launch(_mp_fn)
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if last_part(dotted_name(node.func)) != "DataLoader":
            return
        found = replicas(self.ctx)
        launch = found.launch_of(node)
        if launch is None or launch in found.sharded or not plain_sampling(self.ctx, node):
            return
        if node not in training_sources(self.ctx).loaders:
            return
        launched = seen(
            self.ctx,
            launch.call,
            f"`{dotted_name(launch.call.func)}` runs `{getattr(launch.func, 'name', '?')}` in every replica, "
            "and nothing it runs shards the data",
        )
        loop = training_sources(self.ctx).loop_of(node)
        evidence = launched & seen(self.ctx, loop or node, "a loop that trains iterates it")
        shuffled = shuffled_sign(self.ctx, node)
        if shuffled is None:
            evidence = Evidence(POSSIBLE, evidence.chain)  # an IterableDataset may split itself by replica
        else:
            evidence = evidence & seen(self.ctx, *shuffled)
        self.report(node, evidence=evidence)
