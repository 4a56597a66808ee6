"""XLA702 collective-under-rank-gate: the harm, shown with real torch.distributed (gloo on CPU), and
the rule on a torch_xla-style training script.

torch_xla is not installed here; its collectives behave like torch.distributed's: a call returns only
when every replica of the group has made it. Two processes are started; in the gated program only
rank 0 makes the collective, and it fails with the process group's timeout, while the same program
with the collective outside the gate completes.
"""

from __future__ import annotations

import socket
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from xlalint.rules import RULES_BY_CODE

from xlalint.engine import lint_source
from xlalint.source import decode_source

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

TIMEOUT_S = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replica(rank: int, port: int, gated: bool, results, done) -> None:
    """One replica: joins a 2-process gloo group, then all-reduces a tensor either on every rank or
    only under `if rank == 0:`; reports what happened to it."""
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=timedelta(seconds=20))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        t = torch.ones(1)
        start = time.monotonic()
        try:
            if rank == 0 or not gated:
                dist.all_reduce(t)
            outcome = f"sum={int(t.item())}"
        except RuntimeError as e:  # gloo: "Timed out waiting ... for recv operation to complete"
            outcome = f"error after {time.monotonic() - start:.1f}s: {e}"
        results.put((rank, outcome))
        # the replica that skipped the collective stays alive (as a training job would, busy with its
        # next step) until rank 0 has its answer: its exit must not be what ends rank 0's wait
        if rank == 0:
            done.set()
        else:
            done.wait(TIMEOUT_S * 4)
    finally:
        dist.destroy_process_group()


def _run(gated: bool) -> dict[int, str]:
    ctx = mp.get_context("spawn")
    results, done = ctx.Queue(), ctx.Event()
    port = _free_port()
    procs = [ctx.Process(target=_replica, args=(r, port, gated, results, done)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        found = dict(results.get(timeout=TIMEOUT_S * 5) for _ in procs)
    finally:
        for p in procs:
            p.join(TIMEOUT_S * 3)
            if p.is_alive():
                p.kill()
    return found


needs_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is unavailable"
)


@needs_gloo
def test_collective_under_a_rank_gate_times_out_and_outside_it_completes():
    ungated = _run(gated=False)
    assert ungated == {0: "sum=2", 1: "sum=2"}

    gated = _run(gated=True)
    assert gated[1] == "sum=1"  # rank 1 never made the call: its tensor is untouched
    assert gated[0].startswith("error after"), gated[0]
    assert "timed out" in gated[0].lower() or "timeout" in gated[0].lower(), gated[0]
    waited = float(gated[0].split("error after ", 1)[1].split("s:", 1)[0])
    assert waited >= TIMEOUT_S - 0.5  # it waited for the peer until the group's timeout


SCRIPT = textwrap.dedent(
    """
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_multiprocessing as xmp

    def _mp_fn(index, flags):
        device = xm.xla_device()
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = pl.MpDeviceLoader(make_loader(), device)
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)
            if step % 100 == 0 and index == 0:
                mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach()) / xm.xrt_world_size()
                xm.master_print(mean)
        if xm.is_master_ordinal():
            torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "model.pt")
            xm.rendezvous("saved")
        xm.save(model.state_dict(), "model-all.pt")
        world_size = xm.xrt_world_size()
        if world_size > 1:
            xm.rendezvous("done")

    if __name__ == "__main__":
        xmp.spawn(_mp_fn, args=({},))
    """
)


def _findings(text: str) -> list[tuple[int, str]]:
    source = decode_source(Path("train.py"), text.encode())
    return [(d.location.row, d.message) for d in lint_source(source, [RULES_BY_CODE["XLA702"]])]


def test_rule_reports_each_gated_collective_of_a_training_script():
    found = _findings(SCRIPT)
    assert [row for row, _ in found] == [17, 21]
    assert "`all_reduce`" in found[0][1] and "`step % 100 == 0 and index == 0` holds" in found[0][1]
    assert "`rendezvous`" in found[1][1] and "`xm.is_master_ordinal()`" in found[1][1]


def test_rank_must_come_from_the_launched_function_or_a_rank_call():
    # the same script, its function no longer launched by xmp.spawn: `index` is any number
    not_launched = SCRIPT.replace("xmp.spawn(_mp_fn, args=({},))", "run(_mp_fn)")
    assert [row for row, _ in _findings(not_launched)] == [21]
    # a rank bound from dist.get_rank() is one; an early exit for the other ranks gates what follows
    early_exit = textwrap.dedent(
        """
        import torch.distributed as dist
        import torch_xla

        def finish(model):
            rank = dist.get_rank()
            if rank != 0:
                return
            dist.barrier()
        """
    )
    found = _findings(early_exit)
    assert [row for row, _ in found] == [9]
    assert "`rank != 0` does not hold" in found[0][1]
