"""XLA401: `optimizer.step()` judged per optimizer and per loop.

Who owns the barrier (accelerate / Fabric for what they prepared, Lightning for its modules), what
the loop iterates, which barriers run as often as the step, compiled steps, and what already reduces
the gradients (DDP, FSDP, FSDPv2, SPMD, ZeRO, `xm.reduce_gradients`): then the fix adds only a barrier.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from xlalint.diagnostics import Applicability
from xlalint.rules import ALL_RULES, RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

# every rule of the family: a loop one rule leaves alone must not be another's finding by accident
FAMILY = [rule for rule in ALL_RULES if rule.category == "optimizer_step"]
XLA401 = RULES_BY_CODE["XLA401"]


def _lint(code: str, rules=FAMILY):
    return lint_code(textwrap.dedent(code).lstrip(), rules, with_edits=True)


def _found(code: str, rules=FAMILY) -> list[tuple[str, int]]:
    return [(d.code, d.location.row) for d in _lint(code, rules)]


# -- XLA401: per optimizer, per loop --------------------------------------------------------------------

ACCELERATE_AND_PLAIN = """
import torch
import torch_xla
from accelerate import Accelerator

def finetune(model, dataset):
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()

def probe(head, dataset):
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        torch.nn.functional.cross_entropy(head(x), y).backward()
        optimizer.step()
"""


def test_accelerate_owns_only_the_optimizers_it_prepared():
    assert _found(ACCELERATE_AND_PLAIN) == [("XLA401", 19)]


def test_accelerate_prepared_loader_is_a_device_loader():
    code = """
    import torch
    import torch_xla
    from accelerate import Accelerator

    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, train_loader = accelerator.prepare(model, torch.utils.data.DataLoader(dataset, batch_size=8))
    for batch in train_loader:  # prepared: a MpDeviceLoader wrapper on XLA
        model(**batch).loss.backward()
        optimizer.step()
    """
    assert _found(code) == []


def test_an_accelerator_passed_in_is_accelerates():
    code = """
    import torch
    import torch_xla
    from accelerate.utils import set_seed

    def train(accelerator, model, optimizer, loader):
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
    """
    assert _found(code) == []
    # without accelerate in the file, `accelerator` is just a name
    assert _found(code.replace("from accelerate.utils import set_seed", "")) == [("XLA401", 9)]


def test_torch_accelerator_is_not_hf_accelerate():
    code = """
    import torch
    import torch_xla

    accelerator = torch.accelerator.current_accelerator()
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        loss_fn(model(x), y).backward()
        optimizer.step()
    """
    assert _found(code) == [("XLA401", 7)]


def test_fabric_setup_owns_the_barrier():
    code = """
    import torch
    import torch_xla
    import lightning as L

    fabric = L.Fabric(accelerator="tpu")
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(dataset, batch_size=8))
    for x, y in loader:
        fabric.backward(loss_fn(model(x), y))
        optimizer.step()
    """
    assert _found(code) == []


def test_lightning_module_steps_are_lightnings():
    code = """
    import torch_xla
    import pytorch_lightning as pl

    class Base(pl.LightningModule):
        pass

    class GAN(Base):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)

        def training_step(self, batch, batch_idx):
            g_opt, d_opt = self.optimizers()
            self.manual_backward(self.generator_loss(batch))
            g_opt.step()
    """
    assert _found(code) == []


REDUCED = """
import torch
import torch_xla
{imports}

{setup}
train_loader = torch.utils.data.DataLoader(dataset, batch_size=8, drop_last=True)
for x, y in train_loader:
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
"""


@pytest.mark.parametrize("imports, setup, reducer", [
    ("from torch.nn.parallel import DistributedDataParallel as DDP", "model = DDP(model)", "DDP"),
    ("from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP", "model = FSDP(model)",
     "XLA FSDP"),
    ("from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2",
     "model = FSDPv2(model)", "FSDPv2"),
    ("import torch_xla.runtime as xr\nimport torch_xla.distributed.spmd as xs",
     "xr.use_spmd()\nxs.mark_sharding(model.fc.weight, mesh, (0, None))", "SPMD"),
    ("from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer",
     "optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-4)", "ZeRO"),
])
def test_reduced_gradients_still_need_the_barrier(imports, setup, reducer):
    code = textwrap.dedent(REDUCED.format(imports=imports, setup=setup)).lstrip()
    found = lint_code(code, FAMILY, with_edits=True)
    assert [d.code for d in found] == ["XLA401"]
    assert f"{reducer} already reduces the gradients" in found[0].message
    assert found[0].fix.applicability is Applicability.UNSAFE  # it imports xlalint.runtime
    fixed = fix_code(code, FAMILY, unsafe=True)
    # the barrier is added; the gradients are not reduced a second time
    assert "optimizer_step" not in fixed and "reduce_gradients" not in fixed
    assert fixed.endswith("    optimizer.step()\n    sync()\n")
    assert "from xlalint.runtime import sync" in fixed
    assert _found(fixed) == []


def test_reduce_gradients_in_the_loop_counts_as_reduced():
    code = """
    import torch
    import torch_xla.core.xla_model as xm
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        loss_fn(model(x), y).backward()
        xm.reduce_gradients(optimizer)  # no barrier
        optimizer.step()
    """
    found = _lint(code)
    assert [(d.code, d.location.row) for d in found] == [("XLA401", 6)]
    assert "`xm.reduce_gradients` already reduces" in found[0].message


def test_ddp_only_off_xla_is_no_reduction_on_xla():
    code = """
    import torch
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        xm = None
    from torch.nn.parallel import DistributedDataParallel as DDP

    if xm is None:
        model = DDP(model)
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        loss_fn(model(x), y).backward()
        optimizer.step()
    """
    found = _lint(code)
    assert [d.code for d in found] == ["XLA401"]
    assert "already reduces" not in found[0].message
    assert found[0].fix.applicability is Applicability.UNSAFE


def test_ddp_loop_with_a_barrier_is_silent():
    code = REDUCED.format(imports="from torch.nn.parallel import DistributedDataParallel as DDP",
                          setup="model = DDP(model)") + "    torch_xla.sync()\n"
    assert _found(code) == []


def test_a_barrier_only_every_n_steps_does_not_cover_every_step():
    code = """
    import torch_xla
    for step, (x, y) in enumerate(loader):
        loss_fn(model(x), y).backward()
        optimizer.step()
        if step % log_every == 0:
            torch_xla.sync()
            print(step)
    """
    assert _found(code) == [("XLA401", 4)]


@pytest.mark.parametrize("wrap", [
    "compiled = torch.compile(train_step, backend='openxla')",
    "compiled = torch_xla.compile(train_step)",
])
def test_compiled_steps_are_not_reported(wrap):
    code = f"""
    import torch
    import torch_xla

    def train_step(x, y):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    {wrap}
    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        compiled(x, y)
    """
    assert _found(code) == []


def test_inductor_compile_is_no_barrier():
    code = """
    import torch
    import torch_xla

    @torch.compile
    def train_step(x, y):
        loss_fn(model(x), y).backward()
        optimizer.step()

    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        train_step(x, y)
    """
    assert _found(code) == [("XLA401", 7)]


def test_profiler_step_trace_ends_in_a_sync():
    code = """
    import torch_xla
    import torch_xla.debug.profiler as xp
    for step, (x, y) in enumerate(loader):
        with xp.StepTrace("train_step", step_num=step):
            loss_fn(model(x), y).backward()
            optimizer.step()
    """
    assert _found(code) == []


def test_step_function_called_from_two_loops():
    """The same step function runs in a loop over a device loader and in a loop over a plain one:
    the second has no barrier."""
    code = """
    import torch
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    def train_step(batch):
        model(**batch).loss.backward()
        optimizer.step()

    for batch in pl.MpDeviceLoader(train_loader, device):
        train_step(batch)
    for batch in torch.utils.data.DataLoader(extra, batch_size=4):
        train_step(batch)
    """
    assert _found(code) == [("XLA401", 7)]
    assert _found(code.replace("for batch in torch.utils.data.DataLoader(extra, batch_size=4):",
                               "for batch in pl.MpDeviceLoader(extra_loader, device):")) == []


def test_an_untraceable_loader_in_a_file_that_builds_a_device_loader():
    """The loop's loader comes from a caller this file can't see; the file builds a device loader,
    which may well be the one passed."""
    code = """
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    class Trainer:
        def fit(self, loader):
            for batch in loader:
                self.model(**batch).loss.backward()
                self.optimizer.step()

    def main(trainer):
        trainer.fit(pl.MpDeviceLoader(train_loader, torch_xla.device()))
    """
    assert _found(code) == []
    assert _found(code.replace("pl.MpDeviceLoader(train_loader, torch_xla.device())", "train_loader")) == \
        [("XLA401", 8)]


def test_next_on_a_device_loader_iterates_it():
    code = """
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl
    batches = iter(pl.MpDeviceLoader(train_loader, device))
    for step in range(num_steps):
        x, y = next(batches)
        loss_fn(model(x), y).backward()
        optimizer.step()
    """
    assert _found(code) == []


def test_fix_on_a_shared_line_and_in_a_suite():
    code = textwrap.dedent(REDUCED.format(imports="from torch.nn.parallel import DistributedDataParallel as DDP",
                                          setup="model = DDP(model)")).lstrip()
    shared = code.replace("    optimizer.step()\n", "    optimizer.step(); optimizer.zero_grad()\n")
    fixed = fix_code(shared, [XLA401], unsafe=True)
    assert "    optimizer.step(); sync(); optimizer.zero_grad()\n" in fixed
    suite = code.replace("    optimizer.step()\n", "    if stepping: optimizer.step()\n")
    fixed = fix_code(suite, [XLA401], unsafe=True)
    assert "    if stepping: optimizer.step(); sync()\n" in fixed
    ast.parse(fixed)


def test_no_fix_where_the_step_is_returned():
    code = """
    import torch_xla
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(model)

    def train_step(closure):
        return optimizer.step(closure)

    for x, y in torch.utils.data.DataLoader(dataset, batch_size=8):
        train_step(lambda: loss_fn(model(x), y))
    """
    found = _lint(code)
    assert [(d.code, d.location.row) for d in found] == [("XLA401", 6)]
    assert found[0].fix is None


def test_steps_within_one_batch_leave_the_barrier_to_the_caller():
    """A nested train function run once per batch (its caller iterates a device loader elsewhere)
    takes a few discriminator steps over `range`: that loop is no data loop of its own."""
    code = """
    import torch_xla.core.xla_model as xm

    def gan_training_function(G, D, config):
        def train(x, y):
            for step_index in range(config["num_D_steps"]):
                D.optim.zero_grad()
                D(x, y).mean().backward()
                xm.optimizer_step(D.optim)
            return {}
        return train
    """
    assert _found(code) == []
    flat = """
    import torch_xla.core.xla_model as xm

    def train(model, opt, x, num_steps):
        for step in range(num_steps):
            model(x).mean().backward()
            xm.optimizer_step(opt)
    """
    assert ("XLA403", 6) in _found(flat)


def test_a_barrier_fix_is_safe_only_in_a_file_that_already_imports_xlalint():
    code = textwrap.dedent(REDUCED.format(imports="from torch.nn.parallel import DistributedDataParallel as DDP",
                                          setup="model = DDP(model)")).lstrip()
    [finding] = lint_code(code, FAMILY, with_edits=True)
    assert finding.fix.applicability is Applicability.UNSAFE
    assert fix_code(code, FAMILY, unsafe=False) == code
    importing = code.replace("import torch_xla\n", "import torch_xla\nfrom xlalint.runtime import pad_sequences\n")
    [finding] = lint_code(importing, FAMILY, with_edits=True)
    assert finding.fix.applicability is Applicability.SAFE
    assert fix_code(importing, FAMILY, unsafe=False).endswith("    optimizer.step()\n    sync()\n")
