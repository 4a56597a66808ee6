"""XLA705 xla-optimizer-step-with-ddp and XLA708 ddp-accumulation-without-no-sync: the facts they rest
on, shown with real `DistributedDataParallel` under the gloo backend on CPU, and the rules on
torch_xla-style training scripts.

A comm hook registered on the DDP model counts the gradient buckets DDP hands to the process group
(it all-reduces each in the backward); the model is small enough to fit one bucket, so the count is
the number of gradient all-reduces. A world of one process is enough: DDP's reducer runs the same
hooks whatever the world size. torch_xla is not installed here; the second all-reduce of
`xm.optimizer_step` is torch_xla's source (`optimizer_step` calls `reduce_gradients`), checked
where torch_xla imports.
"""

from __future__ import annotations

import contextlib
import socket
import textwrap
from collections.abc import Iterator
from datetime import timedelta

import pytest
from xlalint.rules import RULES_BY_CODE

from xlalint.testing import fix_code, lint_code

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

MICRO_BATCHES = 4

needs_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is unavailable"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ddp() -> Iterator[tuple]:
    """A DDP-wrapped two-layer model in a one-process gloo group, the module it wraps, and the list
    its comm hook appends one entry to per bucket all-reduced."""
    store = dist.TCPStore("127.0.0.1", _free_port(), 1, is_master=True, timeout=timedelta(seconds=20))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        model = torch.nn.parallel.DistributedDataParallel(module)
        reduced: list[int] = []

        def count(state, bucket):
            reduced.append(bucket.index())
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

        model.register_comm_hook(None, count)
        yield model, module, reduced
    finally:
        dist.destroy_process_group()


def _batches() -> list:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(3, 4, generator=g) for _ in range(MICRO_BATCHES)]


@needs_gloo
def test_ddp_all_reduces_at_every_micro_batch_without_no_sync(ddp):
    model, _, reduced = ddp
    for x in _batches():
        (model(x).square().mean() / MICRO_BATCHES).backward()
    assert len(reduced) == MICRO_BATCHES  # one gradient all-reduce per micro-batch, not per step


@needs_gloo
def test_no_sync_around_the_forward_leaves_one_all_reduce_and_the_same_gradients(ddp):
    model, _, reduced = ddp
    batches = _batches()
    for x in batches:
        (model(x).square().mean() / MICRO_BATCHES).backward()
    synced_every_time = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    del reduced[:]

    for i, x in enumerate(batches):
        stepping = i == MICRO_BATCHES - 1
        with contextlib.nullcontext() if stepping else model.no_sync():
            (model(x).square().mean() / MICRO_BATCHES).backward()
    assert len(reduced) == 1  # only the micro-batch that steps
    for accumulated, synced in zip((p.grad for p in model.parameters()), synced_every_time):
        torch.testing.assert_close(accumulated, synced)  # what the step sees is unchanged


@needs_gloo
def test_ddp_decides_at_the_forward(ddp):
    """`no_sync` around the backward alone does not stop the all-reduce; around the forward alone
    it does; the forward of the wrapped module itself arms no hook (XLA705 does not report it)."""
    model, module, reduced = ddp
    for x in _batches():
        loss = model(x).sum()
        with model.no_sync():
            loss.backward()
    assert len(reduced) == MICRO_BATCHES

    del reduced[:]
    for x in _batches():
        with model.no_sync():
            loss = model(x).sum()
        loss.backward()
    assert reduced == []

    for x in _batches():
        module(x).sum().backward()
    assert reduced == []

    model.require_backward_grad_sync = False  # the flag no_sync sets
    for x in _batches():
        model(x).sum().backward()
    assert reduced == []


def test_xm_optimizer_step_reduces_the_gradients_itself():
    """torch_xla's `optimizer_step` all-reduces (through `reduce_gradients`) before stepping: after
    DDP's all-reduce in backward, a second one (where torch_xla is installed)."""
    inspect = pytest.importorskip("inspect")
    xm = pytest.importorskip("torch_xla.core.xla_model")
    step = inspect.getsource(xm.optimizer_step)
    assert "reduce_gradients(" in step and ".step(" in step
    assert "all_reduce" in inspect.getsource(xm.reduce_gradients)


SCRIPT = textwrap.dedent(
    """
    import contextlib
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train_accumulating(loader, model, optimizer, accum):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()

    def train_no_sync(loader, model, optimizer, accum):
        for i, (x, y) in enumerate(loader):
            stepping = (i + 1) % accum == 0
            with contextlib.nullcontext() if stepping else model.no_sync():
                loss = loss_fn(model(x), y) / accum
                loss.backward()
            if stepping:
                optimizer.step()

    def train_every_step(loader, model, optimizer):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            xm.optimizer_step(optimizer)

    def train_plain(loader, model, optimizer):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            xm.optimizer_step(optimizer)

    def _mp_fn(index, flags):
        device = torch_xla.device()
        net = Net().to(device)
        loader = pl.MpDeviceLoader(make_loader(), device)
        model = DDP(net, gradient_as_bucket_view=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_accumulating(loader, model, optimizer, flags.accum)
        train_no_sync(loader, model, optimizer, flags.accum)
        train_every_step(loader, model, optimizer)
        train_plain(loader, net, torch.optim.SGD(net.parameters(), lr=0.1))
    """
)


def _findings(text: str) -> list[tuple[str, int]]:
    rules = [RULES_BY_CODE["XLA705"], RULES_BY_CODE["XLA708"]]
    return sorted((d.code, d.location.row) for d in lint_code(text, rules))


def _line(text: str, needle: str, after: str = "") -> int:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


def test_rules_on_a_training_script():
    """The DDP model reaches three loops by the launcher's calls; the plain one gets the bare model."""
    expected = [
        ("XLA705", _line(SCRIPT, "xm.optimizer_step(optimizer)", after="def train_every_step")),
        ("XLA708", _line(SCRIPT, "loss.backward()", after="def train_accumulating")),
    ]
    assert _findings(SCRIPT) == sorted(expected)


def test_findings_show_the_ddp_wrap_and_the_forward():
    rules = [RULES_BY_CODE["XLA705"], RULES_BY_CODE["XLA708"]]
    wrap = _line(SCRIPT, "model = DDP(")
    found = lint_code(SCRIPT, rules)
    assert len(found) == 2
    for d in found:
        rows = [step.location.row for step in d.related]
        assert rows[0] == wrap, (d.code, rows)  # the DDP wrap, then the forward through it
        assert "loss_fn(model(x), y)" in SCRIPT.splitlines()[rows[1] - 1], (d.code, rows)
        assert f"line {wrap}" in d.message
        assert d.confidence == "high"


def test_fix_steps_the_optimizer_directly_and_only_unsafely():
    source = textwrap.dedent(
        """
        import torch_xla.core.xla_model as xm
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        for x, y in loader:
            model(x).sum().backward()
            xm.optimizer_step(optimizer)
        """
    ).lstrip()
    rule = [RULES_BY_CODE["XLA705"]]
    assert fix_code(source, rule, unsafe=False) == source
    fixed = fix_code(source, rule, unsafe=True)
    assert "            optimizer.step()" not in fixed and "    optimizer.step()\n" in fixed
    assert "xm.optimizer_step(" not in fixed

    with_barrier = source.replace("xm.optimizer_step(optimizer)", "xm.optimizer_step(optimizer, barrier=True)")
    assert [d.location.row for d in lint_code(with_barrier, rule)] == [7]
    assert fix_code(with_barrier, rule, unsafe=True) == with_barrier  # the barrier must stay
