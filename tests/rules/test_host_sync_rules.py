"""Host-sync rules beyond their examples: which call a message names, what counts as opted in,
element-wise builtins against their look-alikes, and where evidence of a device is required."""

from xlalint.testing import lint_code
from rules.control_flow import PythonValueFromTensors
from rules.host_sync import PrintTensorInStep


def findings(src, rules, path="example.py"):
    return [(d.code, d.location.row, d.message) for d in lint_code(src, rules, path=path)]


def rows(src, rules, path="example.py"):
    return [(code, row) for code, row, _ in findings(src, rules, path)]


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
