"""The context analysis on its own: per-step paths, device guards, tensor kinds."""

import ast
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.analysis.steps import is_step_loop
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
        # a tensor on the CPU is no XLA tensor; a flag named for CPU offloading says nothing
        ("if x.device == torch.device('cpu'):\n        t.item()", True),
        ("if x.device.type != 'cpu':\n        pass\n    else:\n        t.item()", True),
        ("if x.device.type != 'cpu':\n        t.item()", False),
        ("if cpu_offload:\n        t.item()", False),
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
        ("v = Variable(model(batch))", Kind.DEVICE),
        ("v = xm.all_reduce('sum', model(batch))", Kind.DEVICE),
        ("v = torch.are_deterministic_algorithms_enabled()", Kind.NOT_TENSOR),
        ("v = torch.get_default_dtype()", Kind.NOT_TENSOR),
        # the values of a dict of tensors are tensors; its keys are not
        ("v = {'box': model(batch), 'cls': model(batch)}.values()", Kind.DEVICE),
        ("v = {k: t * 2 for k, t in zip(names, model(batch))}.values()", Kind.DEVICE),
        ("v = {'box': model(batch)}.keys()", Kind.NOT_TENSOR),
        ("v = {'n': len(batch)}.values()", Kind.NOT_TENSOR),
        # tuple assignment binds element by element
        ("w, v = model(batch), model(batch).tolist()", Kind.NOT_TENSOR),
        ("v, w = model(batch), model(batch).tolist()", Kind.DEVICE),
        # a tensor compared with None is a Python bool
        ("v = model(batch) == None", Kind.NOT_TENSOR),
        ("v = model(batch) != 0", Kind.DEVICE),
    ],
)
def test_tensor_kinds(statement, kind):
    ctx = context("import torch\nimport torch_xla.core.xla_model as xm\nfrom torch.autograd import Variable\n"
                  f"def run(model, batch, device, values, p):\n    {statement}\n    use(v)\n")
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
        from lightning.pytorch.callbacks import Callback

        class Checkpoint(Callback):  # the framework runs its hooks
            def on_train_batch_end(self, trainer, outputs):
                if not self._should_save_on_train_batch_end(trainer):
                    return
                print(outputs.loss.item())
        """
    )
    assert not ctx.is_per_step(call_named(ctx, "item"))
    assert ctx.is_per_step(call_named(ctx, "item"), periodic=True)


@pytest.mark.parametrize(
    "gate, per_step",
    [
        ("if step % 100 == 0:\n            use(loss.item())", False),
        ("if not step % 100:\n            use(loss.item())", False),
        # true on 99 of every 100 steps: the block runs almost every step
        ("if step % 100:\n            use(loss.item())", True),
        ("if (step + 1) % 4 != 0:\n            continue\n        use(loss.item())", False),
        ("if step % 4 == 0:\n            continue\n        use(loss.item())", True),
        ("if self.control.should_log:\n            use(loss.item())", False),
        # a schedule helper asked whether it is time (`itstime(step, every_n)`)
        ("if u.itstime(step, every, total):\n            use(loss.item())", False),
        ("if is_time_to_log(step):\n            use(loss.item())", False),
        # whether a logger exists is not how often it logs
        ("if log_writer is not None:\n            log_writer.add_scalar('loss', loss.item())", True),
        ("if writer:\n            writer.add_scalar('loss', loss.item())", True),
        # the first step or the listed log steps; the last one; a flag computed from the step
        ("if step == 0 or step in log_iters:\n            use(loss.item())", False),
        ("if step == 0 or loss_is_bad:\n            use(loss.item())", True),  # an `or` with any other test
        ("if step == total_steps - 1:\n            use(loss.item())", False),
        ("if (step % 100 == 0) or last_step:\n            use(loss.item())", False),
        ("if is_metric_step:\n            use(loss.item())", False),
        ("if eval_due:\n            use(loss.item())", False),
        ("if is_digit_step:\n            use(loss.item())", True),  # which kind of step, not how often
        ("if is_master:\n            use(loss.item())", True),  # the master reads every step
        # a running sample count crossing a multiple of a million
        ("if seen // 1_000_000 > last_million:\n            use(loss.item())", False),
        ("if step != 0:\n            use(loss.item())", True),
    ],
)
def test_every_n_steps_gates_by_their_polarity(gate, per_step):
    ctx = context(
        "def train(model, loader, optimizer, log_writer, writer, log_iters, total_steps, seen, last_million, is_master):\n"
        "    for step, (x, y) in enumerate(loader):\n"
        "        loss = model(x, y)\n"
        "        loss.backward()\n"
        f"        {gate}\n"
    )
    assert ctx.is_per_step(call_named(ctx, "item")) is per_step


def test_opt_in_options_gate_their_block():
    ctx = context(
        """
        def _format(preds, target, ignore_index=None, writer=None, normalize=False):
            if ignore_index is not None:
                keep = target != ignore_index
                preds = preds[keep].nonzero()
            if normalize:
                preds = preds.unique()
            if writer is not None:
                writer.add_scalar("n", preds.sum().item())
            return preds

        def training_step(self, batch):
            return _format(batch.x, batch.y)
        """
    )
    assert not ctx.is_per_step(call_named(ctx, "nonzero"))  # only when the caller passes ignore_index
    assert not ctx.is_per_step(call_named(ctx, "unique"))
    assert ctx.is_per_step(call_named(ctx, "item"))  # an object the caller provides is used every step


def test_step_loops_by_what_their_body_does():
    ctx = context(
        """
        def evaluate(model, stream):
            for batch in stream():
                images = batch[0].to(device)
                out = model(images)
                use(out.argmax().item())

        def run_once(model, data, optimizer):
            loss = model(data).sum()
            loss.backward()
            optimizer.step()

        def fit(model, epochs, optimizer):
            for epoch in range(epochs):
                run_once(model, data, optimizer)
                record(loss.cpu())

        def build(self, layers):
            for layer in layers:
                x = layer(x)
                use(x.tolist())
        """
    )
    assert ctx.is_per_step(call_named(ctx, "item"))  # the model runs on what the loop yields
    assert ctx.is_per_step(call_named(ctx, "cpu"))  # the body calls a function that trains
    assert not ctx.is_per_step(call_named(ctx, "tolist"))  # applying the loop's own items is no step


def test_mini_batches_cut_from_a_tensor_by_a_strided_counter():
    ctx = context(
        """
        def knn(bank, queries, chunk):
            queries = queries.to(device)
            for i in range(0, queries.shape[0], chunk):
                sims = queries[i : i + chunk] @ bank
                use(sims.max().item())

        def windows(texts, chunk):
            for i in range(0, len(texts), chunk):
                batch = [t.strip() for t in texts[i : i + chunk]]
                use(len(batch))

        def layers(x, n):
            for i in range(0, n, 2):
                x = x[:, i:]
                use(x.tolist())

        def fit(model, loader, optimizer):  # the module trains: its loops are not an offline script's
            for x, y in loader:
                model(x, y).backward()
                optimizer.step()
        """
    )
    assert ctx.is_per_step(call_named(ctx, "item"))  # one read per mini-batch of the device tensor
    assert not ctx.is_per_step(call_named(ctx, "len"))  # chunks of a Python list of strings
    assert not ctx.is_per_step(call_named(ctx, "tolist"))  # `x[:, i:]`: the counter is no chunk start here


def test_loader_iterables_through_variables_and_wrappers():
    ctx = context(
        """
        def evaluate(model, data_loader, metric_logger, tpu):
            if tpu:
                iterator = enumerate(data_loader)
            else:
                iterator = enumerate(metric_logger.log_every(data_loader, 10))
            for i, batch in iterator:
                use(batch.item())

        def fit(model, loader, optimizer):  # the module trains: its evaluation runs per batch
            for x, y in loader:
                model(x, y).backward()
                optimizer.step()
        """
    )
    assert ctx.is_per_step(call_named(ctx, "item"))


def test_a_function_iterating_a_loader_is_per_step_only_in_its_loop():
    ctx = context(
        """
        def train_fn(model, train_loader, optimizer):
            for x, y in train_loader:
                loss = model(x, y)
                loss.backward()
                use(loss.item())
            return loss.cpu()
        """
    )
    assert ctx.is_per_step(call_named(ctx, "item"))
    assert not ctx.is_per_step(call_named(ctx, "cpu"))  # once, after the epoch


def test_per_call_names_yield_to_visible_callers():
    ctx = context(
        """
        def meter_update(meter, value):
            meter.append(value.cpu())

        def train(model, loader):
            for x in loader:
                loss = model(x)
                loss.backward()
            meter_update(history, loss)
        """
    )
    assert not ctx.runs_hot(call_named(ctx, "cpu"))  # named like a metric update, called once


@pytest.mark.parametrize(
    "block, per_step",
    [
        # leaves the loop: at most once
        ("if not math.isfinite(v):\n            print(loss.item())\n            sys.exit(1)", False),
        ("if total_steps < step:\n            print(loss.item())\n            return", False),
        ("if v > 3:\n            print(loss.item())\n            break", False),
        ("if v > 3:\n            print(loss.item())", True),
        # the first batches only
        ("if i == 0:\n            print(loss.item())", False),
        ("if debug and i <= 4:\n            print(loss.item())", False),
        ("if step == 3:\n            print(loss.item())", False),
        ("if v == 0:\n            print(loss.item())", True),  # not a counter
        # an assert's message is built only when the check fails
        ("assert v < 3, f'{loss.item()}'", False),
        ("assert loss.item() < 3", True),
    ],
)
def test_blocks_that_run_a_bounded_number_of_times(block, per_step):
    ctx = context(
        "def train(model, loader, v, debug, total_steps):\n"
        "    step = 0\n"
        "    for i, x in enumerate(loader):\n"
        "        loss = model(x)\n"
        "        loss.backward()\n"
        "        step += 1\n"
        f"        {block}\n"
    )
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


def test_parameters_take_the_kind_their_callers_pass():
    ctx = context(
        """
        class Net(torch.nn.Module):
            def __init__(self):
                self.quantizer = VectorQuantizer(64)

            def forward(self, x):
                return self.quantizer(x)

        def bucket(ts, values):
            use(ts, values)

        def run(model, batch, sizes):
            out = model(batch)
            bucket(out.argmax(-1), values=out.sum(-1))
            bucket(torch.zeros(3, device="cpu"), values=out)
        """
    )
    use = call_named(ctx, "use")
    assert ctx.tensor_kind(use.args[0]) is Kind.DEVICE  # one caller passes a device tensor
    assert ctx.tensor_kind(use.args[1]) is Kind.DEVICE  # by keyword
    forward = next(f for f in ctx.index.functions["forward"])
    assert ctx.tensor_kind(forward.body[0].value) is Kind.DEVICE  # a submodule's output


def test_a_loop_whose_scaler_steps_the_optimizer_is_a_step_loop():
    ctx = context(
        """
        while True:
            for micro_step in range(accumulation):
                scaler.scale(model(x, y)).backward()
            scaler.step(optimizer)
            scaler.update()

        while running:
            lr_scheduler.step(epoch)  # no optimizer given: no training step
            ema.step(model)
        """
    )
    outer, other = [loop for loop in ctx.index.loops if isinstance(loop, ast.While)]
    assert is_step_loop(ctx, outer)
    assert not is_step_loop(ctx, other)


def test_a_loader_parameter_yields_what_its_callers_pass():
    ctx = context(
        """
        import torch_xla.distributed.parallel_loader as pl

        def evaluate(model, device_loader):
            for data, targets in device_loader:
                use(targets)

        def count(loader):
            for data, targets in loader:
                use(targets)

        def report(loader, other):
            for data, targets in loader:
                use(targets)

        def main(device):
            evaluate(model, pl.MpDeviceLoader(val_loader, device))
            count(DataLoader(dataset, batch_size=8))
            report(pl.MpDeviceLoader(val_loader, device))
            report(other=3)
        """
    )
    assert ctx.tensor_kind(call_named(ctx, "use", 0).args[0]) is Kind.DEVICE  # batches of a device loader
    assert ctx.tensor_kind(call_named(ctx, "use", 1).args[0]) is Kind.CPU  # of a plain DataLoader
    # one call passes nothing for `loader`: the callers do not tell
    assert ctx.tensor_kind(call_named(ctx, "use", 2).args[0]) is not Kind.DEVICE


def test_isinstance_narrows_to_host_values():
    ctx = context(
        """
        import numpy as np

        def finish(losses, logits):
            if isinstance(losses, np.ndarray) and losses.size:
                use(losses.mean())
            use(logits)
            out = logits if isinstance(logits, (int, float)) else logits.sum()
        """
    )
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is Kind.NOT_TENSOR
    assert ctx.tensor_kind(call_named(ctx, "use", 1).args[0]) is Kind.TENSOR  # no isinstance here


def test_classes_written_for_another_backend_are_not_xla_code():
    ctx = context(
        """
        class GemmaFlashAttention2(GemmaAttention):
            def forward(self, hidden_states, attention_mask):
                return attention_mask.sum().item()

        class XLAFlashAttention(GemmaAttention):
            def forward(self, hidden_states, attention_mask):
                return attention_mask.sum().tolist()
        """
    )
    assert ctx.in_non_xla_code(call_named(ctx, "item"))
    assert not ctx.in_non_xla_code(call_named(ctx, "tolist"))


def test_predicates_and_tests_are_no_model_outputs_or_per_call_functions():
    ctx = context(
        """
        def test_metric_update(metric):
            metric.update(torch.ones(3, device="xla"))
            use(metric.total.item())

        def run(ckpt):
            use(is_clip_model(ckpt))
        """
    )
    assert not ctx.runs_hot(call_named(ctx, "item"))  # a test runs once, whatever its name says
    assert ctx.tensor_kind(call_named(ctx, "use", 1).args[0]) is not Kind.DEVICE


def test_a_loop_over_the_optimizers_it_steps_is_no_step_loop():
    ctx = context(
        """
        def train(model, loader, optimizers):
            for x in stream():
                model(x).sum().backward()
                for opt in optimizers:
                    opt.step()
                    use(opt)
                record(x.sum().item())
        """
    )
    inner = next(loop for loop in ctx.index.loops if isinstance(loop.target, ast.Name) and loop.target.id == "opt")
    assert not is_step_loop(ctx, inner)
    assert ctx.is_per_step(call_named(ctx, "item"))


def test_a_parameter_shadows_the_enclosing_functions_variable():
    ctx = context(
        """
        def run(dataset):
            loader = DataLoader(dataset)

            def train_fn(loader):
                use(loader)

            def show():
                use(loader)
        """
    )
    assert ctx.reaching_values(call_named(ctx, "use").args[0]) == []
    assert len(ctx.reaching_values(call_named(ctx, "use", 1).args[0])) == 1  # a closure reads it


@pytest.mark.parametrize(
    "block, per_step",
    [
        ("try:\n            x = next(it)\n        except StopIteration:\n            print(loss.item())", False),
        ("try:\n            return run(x)\n        except RuntimeError:\n            pass\n        print(loss.item())",
         False),
        ("try:\n            y = run(x)\n        except RuntimeError:\n            pass\n        print(loss.item())", True),
        ("print(model.__class__.__name__, loss.item())", True),
    ],
)
def test_error_paths_are_not_per_step(block, per_step):
    ctx = context(
        "def training_step(self, model, x, it):\n"
        "    for _ in range(2):\n"
        "        loss = model(x)\n"
        f"        {block}\n"
    )
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


def test_dunder_attributes_are_no_tensors():
    ctx = context("def forward(self, x):\n    use(self.model.__class__.__name__)\n")
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is Kind.NOT_TENSOR


@pytest.mark.parametrize("test, latch, per_step", [
    ("not self._checked", "self._checked = True", False),
    ("not getattr(self, '_checked', False)", "self._checked = True", False),
    ("not checked", "checked = True", False),
    ("not self._checked", "self._other = True", True),   # sets another flag: no latch
    ("not self._checked", "self._checked = False", True),
    ("self._checked", "self._checked = True", True),
])
def test_latched_blocks_run_once(test, latch, per_step):
    ctx = context(
        "def training_step(self, model, batch):\n"
        "    loss = model(batch)\n"
        f"    if {test}:\n"
        "        log(loss.item())\n"
        f"        {latch}\n"
        "    return loss\n"
    )
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


def test_storing_loop_data_into_an_object_does_not_make_it_loop_data():
    ctx = context(
        """
        def run(cfg, table, folds):
            for fold in folds:
                table["is_valid"] = table.fold == fold
                cfg.n_valid = table.is_valid.sum()
                model = get_model(cfg)
                show(model.head.tolist())
        """
    )
    assert not is_step_loop(ctx, next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.For)))


def test_tensor_only_methods_make_tensors():
    ctx = context("def log(values, table):\n    use(values.detach(), table.copy())\n")
    detached, copied = call_named(ctx, "use").args
    assert ctx.tensor_kind(detached) is Kind.TENSOR
    assert ctx.tensor_kind(copied) is not Kind.TENSOR


@pytest.mark.parametrize("block, per_step", [
    ("if not self.training:\n        use(x.item())", False),
    ("if x.dim() == 3 and not self.layer.training:\n        use(x.item())", False),
    ("if self.training:\n        pass\n    else:\n        use(x.item())", False),
    ("if self.training:\n        use(x.item())", True),
    ("if self.training and x.dim() == 3:\n        pass\n    else:\n        use(x.item())", True),
])
def test_inference_only_branches_are_not_per_step(block, per_step):
    ctx = context(f"def forward(self, x):\n    {block}\n    return x\n")
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


@pytest.mark.parametrize("latch, per_step", [
    ("if self.enabled:\n            self._checked = True", False),  # set deeper in the block
    ("self._ready = True", True),
])
def test_the_else_of_a_latched_flag_runs_once(latch, per_step):
    ctx = context(
        "def update(self, model, batch):\n"
        "    loss = model(batch)\n"
        "    if self._checked:\n"
        "        fast(loss)\n"
        "    else:\n"
        "        log(loss.item())\n"
        f"        {latch}\n"
    )
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


@pytest.mark.parametrize("base, params, per_step", [
    ("LlavaForConditionalGeneration", "self, image_features, input_ids, attention_mask", True),
    ("LlavaForConditionalGeneration", "self, config", False),            # no batch tensors
    ("nn.Module", "self, image_features, input_ids, attention_mask", False),  # nothing calls it
    ("LocalBase", "self, image_features, input_ids, attention_mask", False),  # the project's own base
])
def test_overrides_of_library_model_hooks_run_every_forward(base, params, per_step):
    ctx = context(
        "from transformers import LlavaForConditionalGeneration\n"
        "import torch.nn as nn\n"
        f"class Patched({base}):\n"
        f"    def _merge(self{params[4:]}):\n"
        "        return input_ids.sum().item()\n"
    )
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


def test_a_negated_tensor_stored_in_a_name_is_a_python_bool():
    ctx = context("def forward(self, x):\n    flag = not x.sum()\n    use(flag)\n")
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is Kind.NOT_TENSOR


@pytest.mark.parametrize("tail, per_step", [("raise ValueError('bad')", False), ("pass", True)])
def test_blocks_that_raise_are_error_paths(tail, per_step):
    ctx = context(f"def forward(self, x):\n    if x.dim() != 2:\n        print(x.sum().item())\n        {tail}\n")
    assert ctx.runs_hot(call_named(ctx, "item")) is per_step


@pytest.mark.parametrize("block, per_step", [
    ("if self.sampler is None:\n        self.sampler = make_sampler(x.min().item())\n", False),
    ("if self.index is None:\n        self._init_index(x)\n", False),  # the helper assigns self._index
    ("if self.index is None:\n        self._other(x)\n", True),  # fills in something else
    ("if self.sampler is not None:\n        self.sampler = make_sampler(x.min().item())\n", True),
    ("if self.sampler is None:\n        self.sampler = None\n        use(x.min().item())\n", True),
])
def test_lazy_initialisation_runs_once(block, per_step):
    """A block that fills in the attribute it finds missing runs on the first call only."""
    code = (
        "class Solver:\n"
        "    def _init_index(self, t):\n"
        "        self._index = int(t.argmax().item())\n"
        "    def _other(self, t):\n"
        "        self._seen = int(t.argmax().item())\n"
        "    def step(self, x):\n"
        "    " + block.replace("\n    ", "\n        ").replace("if ", "    if ", 1) +
        "        return x * 2\n"
    )
    ctx = context(code)
    items = [c for c in ctx.index.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "item"]
    # the first `.item()` is in the helpers; the one in `step` (if any) is last
    hot = any(ctx.runs_hot(c) for c in items)
    assert hot is per_step


def test_self_attribute_call_is_no_module_function():
    """`self.main(x)` runs a method or a submodule stored on the instance, not the script's
    `def main()`; a bare `helper(x)` runs no method of a class."""
    ctx = context(
        "class Head(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.main(x) + helper(x)\n"
        "    def helper(self, x):\n"
        "        return x.sum().item()\n"
        "def main():\n"
        "    print(loss_value.item())\n"
        "def helper(x):\n"
        "    return x.max().item()\n"
    )
    functions = {f.name + str(f.lineno) for f in ctx.step_functions}
    assert "forward2" in functions and "helper8" in functions
    assert "main6" not in functions and "helper4" not in functions


@pytest.mark.parametrize("callee, step_loop", [
    ("load_sub_model", False),
    ("_unwrap_model", False),
    ("build_model", False),
    ("ema_model", True),
    ("model", True),
])
def test_model_handlers_are_no_forward(callee, step_loop):
    """A loop that loads, builds or unwraps one model per item is set-up, not a step loop; a loop
    that runs a model on each item it yields is one."""
    ctx = context(
        "def setup(parts):\n"
        "    for name, spec in parts:\n"
        f"        out = {callee}(spec)\n"
    )
    loop = next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.For))
    assert is_step_loop(ctx, loop) is step_loop


@pytest.mark.parametrize("code, kind", [
    ("if isinstance(t, torch.Tensor):\n        n = 0\n    else:\n        n = use(t)\n", Kind.NOT_TENSOR),
    ("if not torch.is_tensor(t):\n        n = use(t)\n", Kind.NOT_TENSOR),
    ("n = 0 if torch.is_tensor(t) else use(t)\n", Kind.NOT_TENSOR),
    ("if isinstance(t, torch.Tensor):\n        n = use(t)\n", Kind.TENSOR),
    ("if isinstance(t, (torch.Tensor, np.ndarray)):\n        n = 0\n    else:\n        n = use(t)\n", Kind.NOT_TENSOR),
    ("if isinstance(t, np.ndarray):\n        n = 0\n    else:\n        n = use(t)\n", Kind.TENSOR),
])
def test_not_a_tensor_where_a_tensor_check_failed(code, kind):
    """Where `isinstance(t, torch.Tensor)` (or `torch.is_tensor(t)`) is false, `t` is no tensor."""
    ctx = context("import torch\nimport numpy as np\ndef step(self, t: torch.Tensor):\n    " + code)
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is kind


def test_methods_of_dunder_attributes_are_no_torch_ops():
    ctx = context("import torch\ndef forward(self, x):\n    use(torch.__version__.split('.')[0])\n")
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is Kind.NOT_TENSOR


@pytest.mark.parametrize("last, kind", [
    ("self.sigmas = self.sigmas.to('cpu')", Kind.CPU),
    ("self.sigmas = torch.linspace(0, 1, n)", Kind.CPU),
    ("self.sigmas = self.sigmas * 2", Kind.DEVICE),  # reads the device value: it stays
    ("pass", Kind.DEVICE),
])
def test_attribute_overwritten_later_in_the_same_block(last, kind):
    """Other methods see an attribute's last value in a method, not one it replaced."""
    ctx = context(
        "import torch\n"
        "class Sampler:\n"
        "    def set_steps(self, n, device):\n"
        "        self.sigmas = torch.linspace(0, 1, n).to(device)\n"
        f"        {last}\n"
        "    def step(self, x):\n"
        "        return use(self.sigmas)\n"
    )
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is kind


@pytest.mark.parametrize("annotation, kind", [
    ("list[tuple[int, int, int]]", Kind.NOT_TENSOR),
    ("Optional[Sequence[int]]", Kind.NOT_TENSOR),
    ("int | None", Kind.NOT_TENSOR),
    ("list[torch.Tensor]", Kind.TENSOR),
    ("Any", Kind.TENSOR),
])
def test_builtin_type_annotations_are_host_values(annotation, kind):
    ctx = context(f"import torch\ndef forward(self, sizes: {annotation}):\n    use(sizes)\n")
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is kind


@pytest.mark.parametrize("loop, on_device", [
    ("for shape, idx in zip(shapes, indexes):", False),
    ("for i, (shape, idx) in enumerate(zip(shapes, indexes)):", False),
    ("for idx, shape in zip(indexes, shapes):", False),
    ("for idx, shape in zip(indexes, hidden):", True),
])
def test_zip_loop_targets_take_their_own_iterable(loop, on_device):
    """In `for a, b in zip(xs, ys)`, `a` is an element of `xs`, whatever `ys` holds."""
    ctx = context(
        "import torch\n"
        "def forward(self, hidden: torch.Tensor, shapes: list[tuple[int, int]], indexes: list[torch.Tensor]):\n"
        f"    {loop}\n"
        "        use(shape)\n"
    )
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]).on_device is on_device


@pytest.mark.parametrize("name, step", [("test_weighted_loss", False), ("test_step", True), ("weighted_loss", True)])
def test_unit_tests_named_like_losses_are_no_step_functions(name, step):
    ctx = context(f"def {name}(self, batch):\n    return batch.sum()\n")
    func = next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.FunctionDef))
    assert ctx.is_step_function(func) is step


def test_a_loop_target_is_the_value_before_its_rebinding_in_the_body():
    """`for x, y in loader: f(y); y = y.to(device)`: at `f(y)`, y is the loader's element, not
    the device copy made later in the same iteration."""
    ctx = context("""
        loader = DataLoader(dataset, batch_size=8)
        for x, y in loader:
            check(y)
            y = y.to(device)
            use(y)
    """)
    before, after = (call_named(ctx, "check").args[0], call_named(ctx, "use").args[0])
    assert ctx.tensor_kind(before) == Kind.CPU
    assert ctx.tensor_kind(after) == Kind.DEVICE


@pytest.mark.parametrize("statement, kind", [
    ("v = masked_mean(model(batch), mask)", Kind.DEVICE),
    ("v = rt.masked_sum(model(batch), mask, dim=1)", Kind.DEVICE),
    ("v = rt.clip_grad_norm_(model.parameters(), 1.0)", Kind.TENSOR),
    ("v = masked_mean(torch.ones(3), torch.ones(3) > 0)", Kind.CPU),
    ("v = rt.optimizer_step(opt)", Kind.NOT_TENSOR),
])
def test_what_the_runtime_returns_is_a_tensor_on_its_argument_device(statement, kind):
    ctx = context("import torch\nimport xlalint.runtime as rt\nfrom xlalint.runtime import masked_mean\n"
                  f"def run(model, batch, mask, opt):\n    {statement}\n    use(v)\n")
    assert ctx.tensor_kind(call_named(ctx, "use").args[0]) is kind



def test_a_branch_on_a_loss_the_runtime_computed_is_a_host_read():
    from xlalint.rules import ALL_RULES
    from xlalint.testing import lint_code

    code = textwrap.dedent("""\
        import torch_xla.core.xla_model as xm
        from xlalint.runtime import masked_mean
        def train(model, loader, opt):
            for x, y, mask in loader:
                loss = masked_mean((model(x) - y) ** 2, mask)
                if loss > 10.0:
                    continue
                loss.backward()
                xm.optimizer_step(opt)
                xm.mark_step()
        """)
    codes = {(d.code, d.location.row) for d in lint_code(code, ALL_RULES)}
    assert ("XLA201", 6) in codes
