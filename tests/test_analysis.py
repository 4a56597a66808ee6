"""The context analysis on its own: per-step paths, device guards, tensor kinds."""

import ast
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.analysis.tensors import Kind
from xlalint.source import SourceText


def context(code):
    code = textwrap.dedent(code)
    return FileContext(Path("t.py"), ast.parse(code), SourceText(code))


def call_named(ctx, name, nth=0):
    """The nth call whose method or function is `name`."""
    found = [c for c in ctx.index.calls
             if (isinstance(c.func, ast.Attribute) and c.func.attr == name)
             or (isinstance(c.func, ast.Name) and c.func.id == name)]
    return found[nth]


TRAINING = """
import torch

def log(value):
    print(value.item())

def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            log(loss)
            if step % 100 == 0:
                print(loss.mean())
        print(loss.max())
    return loss.min()
"""


def test_per_step_paths():
    ctx = context(TRAINING)
    assert ctx.is_per_step(call_named(ctx, "backward"))
    assert ctx.is_per_step(call_named(ctx, "item"))  # in a function the step loop calls
    assert not ctx.is_per_step(call_named(ctx, "mean"))  # every 100 steps
    assert ctx.is_per_step(call_named(ctx, "mean"), periodic=True)
    assert not ctx.is_per_step(call_named(ctx, "max"))  # once per epoch
    assert not ctx.is_per_step(call_named(ctx, "min"))  # after training


def test_step_closure_and_step_functions():
    ctx = context(
        """
        import torch_xla.core.xla_model as xm

        def report(loss):
            print(loss.item())

        class Net(torch.nn.Module):
            def forward(self, x):
                return self.proj(x).tolist()

        def train(loader):
            for x in loader:
                loss = step_fn(x)
                xm.add_step_closure(report, args=(loss,))
        """
    )
    assert not ctx.is_per_step(call_named(ctx, "item"))
    assert ctx.is_per_step(call_named(ctx, "tolist"))
    assert ctx.uses_xla


@pytest.mark.parametrize(
    "guard, runs_off_xla_only",
    [
        ("if torch.cuda.is_available():\n        t.item()", True),
        ("if xm is None:\n        t.item()", True),
        ("if x.device.type == 'xla':\n        pass\n    else:\n        t.item()", True),
        ("if x.device.type != 'xla':\n        t.item()", True),
        ("if not is_tpu:\n        t.item()", True),
        ("flag = x.device.type == 'xla' or t.item()", True),
        ("if is_tpu:\n        return\n    t.item()", True),
        ("try:\n        pass\n    except torch.cuda.OutOfMemoryError:\n        t.item()", True),
        ("if is_tpu:\n        t.item()", False),
        ("if step > 3:\n        t.item()", False),
        ("t.item()", False),
    ],
)
def test_non_xla_guards(guard, runs_off_xla_only):
    ctx = context(f"def forward(x, t, step, is_tpu):\n    {guard}\n")
    assert ctx.in_non_xla_code(call_named(ctx, "item")) is runs_off_xla_only


@pytest.mark.parametrize(
    "statement, kind",
    [
        ("v = torch.tensor([1, 2])", Kind.CPU),
        ("v = torch.zeros(3, device=device)", Kind.DEVICE),
        ("v = torch.zeros(3, device='cpu')", Kind.CPU),
        ("v = torch.ones(3).to(device)", Kind.DEVICE),
        ("v = model(batch).cpu()", Kind.CPU),
        ("v = model(batch)", Kind.DEVICE),
        ("v = model(batch).loss", Kind.DEVICE),
        ("v = p.grad", Kind.DEVICE),
        ("v = model(batch).sum().item()", Kind.NOT_TENSOR),
        ("v = model(batch).shape[0]", Kind.NOT_TENSOR),
        ("v = np.mean(values)", Kind.NOT_TENSOR),
        ("v = len(batch)", Kind.NOT_TENSOR),
        ("v = torch.distributions.Normal(0.0, 1.0)", Kind.NOT_TENSOR),
        ("v = send_to_device(batch, device)", Kind.DEVICE),
    ],
)
def test_tensor_kinds(statement, kind):
    ctx = context(f"def run(model, batch, device, values, p):\n    {statement}\n    use(v)\n")
    use = call_named(ctx, "use")
    assert ctx.tensor_kind(use.args[0]) is kind


def test_flow_and_loop_variables():
    ctx = context(
        """
        def run(model, loader, device):
            for i, (x, y) in enumerate(loader):
                x = x.to(device)
                use(i, x)
            h = model(x)
            h = h.cpu()
            use(h)
            dl = torch.utils.data.DataLoader(ds)
            for batch in dl:
                use(batch)
        """
    )
    first, second, third = (call_named(ctx, "use", n) for n in range(3))
    assert ctx.tensor_kind(first.args[0]) is Kind.NOT_TENSOR  # enumerate's index
    assert ctx.tensor_kind(first.args[1]) is Kind.DEVICE  # rebound by .to(device)
    assert ctx.tensor_kind(second.args[0]) is Kind.CPU  # the latest assignment wins
    assert ctx.tensor_kind(third.args[0]) is Kind.CPU  # a plain DataLoader yields host tensors


def test_early_return_on_a_periodic_test_gates_the_rest():
    ctx = context(
        """
        class Checkpoint:
            def on_train_batch_end(self, trainer, outputs):
                if not self._should_save_on_train_batch_end(trainer):
                    return
                print(outputs.loss.item())
        """
    )
    assert not ctx.is_per_step(call_named(ctx, "item"))
    assert ctx.is_per_step(call_named(ctx, "item"), periodic=True)
