"""Host-sync rules beyond their examples: which call a message names, what counts as opted in,
element-wise builtins against their look-alikes, and where evidence of a device is required."""

from xlalint.testing import lint_code
from xlalint.rules.control_flow.python_value_from_tensors import PythonValueFromTensors
from xlalint.rules.host_sync.anomaly_detection_in_step import AnomalyDetectionInStep
from xlalint.rules.host_sync.host_collective_in_step import HostCollectiveInStep
from xlalint.rules.host_sync.item_in_step import ItemInStep
from xlalint.rules.host_sync.print_tensor_in_step import PrintTensorInStep
from xlalint.rules.host_sync.python_builtin_over_tensor import PythonBuiltinOverTensor
from xlalint.rules.host_sync.wait_device_ops_in_step import WaitDeviceOpsInStep


def findings(src, rules, path="example.py"):
    return [(d.code, d.location.row, d.message) for d in lint_code(src, rules, path=path)]


def rows(src, rules, path="example.py"):
    return [(code, row) for code, row, _ in findings(src, rules, path)]


# -- XLA105 host-collective-in-step ------------------------------------------------------------------

def test_host_collective_message_names_the_call():
    src = """
import torch_xla.core.xla_model as xm
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.rendezvous("a")
    xm.xla_rendezvous(b"")
    xm.do_on_ordinals(save, (loss,))
    xm.mesh_reduce("l", loss, sum)
"""
    found = findings(src, [HostCollectiveInStep])
    assert [(c, r) for c, r, _ in found] == [("XLA105", 6), ("XLA105", 7), ("XLA105", 8), ("XLA105", 9)]
    assert [m.split("`")[1] for _, _, m in found] == ["xm.rendezvous", "xm.xla_rendezvous", "xm.do_on_ordinals",
                                                     "xm.mesh_reduce"]


def test_host_collective_through_xm_passed_as_a_parameter_in_a_step_loop():
    src = """
import torch_xla

def _mp_fn(index, xm):
    for epoch in range(3):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            xm.rendezvous("step")
        xm.rendezvous("epoch")
"""
    assert rows(src, [HostCollectiveInStep]) == [("XLA105", 9)]


def test_a_local_function_named_rendezvous_and_files_without_xla_are_not_host_collectives():
    local = """
import torch_xla

def rendezvous(tag):
    pass

for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    rendezvous("step")
"""
    no_xla = """
import torch
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.rendezvous("step")
"""
    assert rows(local, [HostCollectiveInStep]) == []
    assert rows(no_xla, [HostCollectiveInStep]) == []


# -- XLA106 anomaly-detection-in-step ----------------------------------------------------------------

def test_anomaly_mode_spellings_are_reported_in_any_code():
    src = """
import torch
from torch.autograd import set_detect_anomaly
torch.set_anomaly_enabled(True)
set_detect_anomaly(mode=True, check_nan=True)
torch.autograd.anomaly_mode.set_detect_anomaly(True)
"""
    found = findings(src, [AnomalyDetectionInStep])
    assert [(c, r) for c, r, _ in found] == [("XLA106", 4), ("XLA106", 5), ("XLA106", 6)]
    assert "torch.set_anomaly_enabled(True)" in found[0][2]


def test_anomaly_mode_that_checks_nothing_or_is_switched_is_not_reported():
    src = """
import contextlib
import torch
torch.autograd.set_detect_anomaly(False)
torch.set_anomaly_enabled(True, False)
torch.autograd.set_detect_anomaly(True, check_nan=args.check_nan)
torch.autograd.detect_anomaly()  # not entered: does nothing
with torch.autograd.detect_anomaly() if args.debug else contextlib.nullcontext():
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
with torch.autograd.detect_anomaly(check_nan=False):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
"""
    assert rows(src, [AnomalyDetectionInStep]) == []


def test_anomaly_mode_behind_a_flag_is_opted_in_but_the_main_guard_is_no_flag():
    gated = """
import torch

def main(args):
    if args.debug:
        torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
"""
    main_guard = """
import torch
if __name__ == "__main__":
    torch.autograd.set_detect_anomaly(True)
    main()
"""
    assert rows(gated, [AnomalyDetectionInStep]) == []
    assert rows(main_guard, [AnomalyDetectionInStep]) == [("XLA106", 4)]


def test_anomaly_mode_switched_off_again_is_judged_by_what_runs_in_between():
    around_setup = """
import torch

def smoke_test_backward(model):
    torch.autograd.set_detect_anomaly(True)
    model(torch.ones(1, 3)).sum().backward()
    torch.autograd.set_detect_anomaly(False)
"""
    around_training = """
import torch

def train(model, loader):
    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
    torch.autograd.set_detect_anomaly(False)
"""
    assert rows(around_setup, [AnomalyDetectionInStep]) == []
    assert rows(around_training, [AnomalyDetectionInStep]) == [("XLA106", 5)]


def test_anomaly_with_block_around_setup_is_not_reported_but_per_step_is():
    src = """
import torch
with torch.autograd.detect_anomaly():
    model.load_state_dict(state)
for x, y in loader:
    loss = loss_fn(model(x), y)
    with torch.autograd.set_detect_anomaly(True):
        loss.backward()
"""
    assert rows(src, [AnomalyDetectionInStep]) == [("XLA106", 7)]


# -- XLA107 python-builtin-over-tensor ---------------------------------------------------------------

def test_builtins_over_device_values_and_sequences_indexed_by_them():
    src = """
import torch

def forward(self, x):
    h = self.encoder(x)
    a = any(h > 0)
    b = all(v > 0 for v in h)
    c = min([h.mean(), h.max()])
    d = ("neg", "pos")[h.argmax()]
    e = list(range(10))[: h.argmax()]
    f = "abc"[h.argmax()]
    return h
"""
    assert rows(src, [PythonBuiltinOverTensor]) == [("XLA107", 6), ("XLA107", 7), ("XLA107", 8), ("XLA107", 9),
                                                    ("XLA107", 10), ("XLA107", 11)]


def test_look_alikes_of_element_wise_builtins_are_not_reported():
    src = """
import torch

def forward(self, x):
    h = self.encoder(x)
    d = sum(torch.split(h, 2))  # a tuple of a few tensors: adds stay on the device
    e = sum(h.chunk(4))
    k = {0: "a", 1: "b"}.get(h.argmax())
    table = {0: "a"}
    m = table[h.argmax()]  # a dict hashes tensors by identity: no read
    n = max(h.shape)
    o = torch.max(h)
    p = h[h.argmax()]  # indexing a tensor stays on the device
    return h
"""
    assert rows(src, [PythonBuiltinOverTensor]) == []


def test_shadowed_builtins_are_not_python_builtins():
    src = """
from torch import max

def forward(self, x, sum=None):
    out = self.layer(x)
    any = lambda t: t.any()
    a = any(out > 0)
    b = max(out)
    c = sum(out)
    return out
"""
    assert rows(src, [PythonBuiltinOverTensor]) == []


def test_generator_of_item_values_is_left_to_item_in_step():
    src = """
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    total = sum(g.norm().item() for g in grads)
    worst = max(g.abs().max().item() for g in grads)
"""
    assert rows(src, [PythonBuiltinOverTensor, ItemInStep]) == [("XLA101", 6), ("XLA101", 7)]


def test_builtin_over_tensor_every_n_steps_or_after_training_is_not_reported():
    src = """
import torch
for step, (x, y) in enumerate(loader):
    logits = model(x)
    loss = loss_fn(logits, y)
    loss.backward()
    if step % 100 == 0:
        print(any(torch.isnan(p.grad).any() for p in model.parameters()))
print(max(logits.max(dim=-1).values))
"""
    assert rows(src, [PythonBuiltinOverTensor]) == []


# -- XLA108 wait-device-ops-in-step ------------------------------------------------------------------

def test_wait_device_ops_imported_by_name_and_in_a_step_function():
    src = """
from torch_xla.core.xla_model import wait_device_ops

def train_step(model, batch, optimizer):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    wait_device_ops()
    return loss
"""
    assert rows(src, [WaitDeviceOpsInStep]) == [("XLA108", 8)]


def test_wait_device_ops_in_a_closure_periodically_or_timed_is_not_reported():
    src = """
import timeit
import torch_xla.core.xla_model as xm
for step, (x, y) in enumerate(loader):
    start = timeit.default_timer()
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.add_step_closure(lambda: xm.wait_device_ops())
    if step % 100 == 0:
        xm.wait_device_ops()
        xm.save(model.state_dict(), "ckpt.pt")
    xm.wait_device_ops()
    elapsed = timeit.default_timer() - start
"""
    assert rows(src, [WaitDeviceOpsInStep]) == []


def test_a_clock_read_before_the_wait_does_not_make_it_a_benchmark():
    src = """
import time
import torch_xla.core.xla_model as xm
for x, y in loader:
    start = time.time()
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.wait_device_ops()
"""
    assert rows(src, [WaitDeviceOpsInStep]) == [("XLA108", 9)]


# -- XLA104 print-tensor-in-step ---------------------------------------------------------------------

def test_math_functions_named_like_logging_methods_are_not_logging():
    src = """
import math
import jax.numpy as jnp
import torch

def forward(self, x):
    h = self.encoder(x)
    a = math.log(h)
    b = jnp.log(h)
    c = torch.log(h)
    d = np.log(h)  # the conventional numpy alias, unimported in this fragment
    self.logger.log(logging.INFO, h)
    return h
"""
    assert rows(src, [PrintTensorInStep]) == [("XLA104", 12)]


def test_master_print_formats_its_positional_arguments():
    src = """
import sys
import torch_xla.core.xla_model as xm
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.master_print("loss", loss, fd=sys.stderr)
    xm.master_print(f"shape {loss.shape}", flush=True)
"""
    assert rows(src, [PrintTensorInStep]) == [("XLA104", 7)]


# -- XLA202 python-value-from-tensors: device tensors, not merely tensors --------------------------------

def test_equality_checks_need_a_device_tensor_and_no_cpu_one():
    src = """
import torch
for x, y in loader:
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    ref = torch.tensor([1.0, 2.0])
    a = torch.allclose(out.cpu(), ref)
    b = torch.equal(out.detach().cpu(), target)
    c = torch.allclose(target, labels)
    d = out.allclose(ref)
    e = torch.equal(out, target)
    f = out.allclose(y)
"""
    assert rows(src, [PythonValueFromTensors]) == [("XLA202", 12), ("XLA202", 13)]


def test_format_strings_built_from_literals_and_dicts_of_losses_are_formatted_tensors():
    src = """
import torch_xla

class Trainer:
    def train(self):
        for i, batch in enumerate(self.train_loader):
            box_loss, cls_loss = self.criterion(self.model(batch), batch)
            loss = box_loss + cls_loss
            self.parts = {"box": box_loss.detach(), "cls": cls_loss.detach()}
            loss.backward()
            self.optimizer.step()
            torch_xla.sync()
            pbar.set_description(("%11s" * 2 + "%11.4g" * 3) % ("a", "b", *self.parts.values()))
            names = "%s" * 2 % tuple(self.names.keys())
            pbar.set_description(("%11s" * 2) % (len(self.names), i))
"""
    assert rows(src, [PrintTensorInStep]) == [("XLA104", 13)]


def test_a_step_loop_inside_a_helper_is_per_step_and_a_pass_every_n_steps_is_not():
    source = (
        "import torch_xla.core.xla_model as xm\n\n"
        "def run_epoch(model, loader, optimizer, splits):\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        print(loss.item())\n"
        "        if step % 100 == 0:\n"
        "            for name, batch in splits.items():\n"
        "                print(name, model(batch).sum().item())\n"
    )
    assert [d.location.row for d in lint_code(source, [ItemInStep])] == [8]
