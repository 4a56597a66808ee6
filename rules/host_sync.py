"""Host syncs on a per-step path: reading a device tensor's value from Python."""

from __future__ import annotations

import ast

from xlalint.analysis.names import argument, dotted_name, is_constant, is_string, keyword_value, last_part, method_name
from xlalint.analysis.names import keyword, positional, receiver, string_value
from xlalint.analysis.reads import argument_reads
from xlalint.analysis.steps import is_step_loop
from xlalint.analysis.tensors import Kind, names_cpu
from xlalint.rule import Invalid, Rule, Valid

from ._common import reportable_sync
from .control_flow import evident_device_tensor


class ItemInStep(Rule):
    """## What it does
    Flags `.item()` and `.tolist()` on a device tensor on a per-step path: a training loop body, a
    step function (`forward`, `training_step`, ...) or a function called from one.

    ## Why is this bad?
    XLA tensors are lazy. Reading a value forces the pending graph to compile and run right there,
    then copies the result to the host (`aten::_local_scalar_dense`), and the step is cut in two
    graphs. Done before the step's `torch_xla.sync()`, it doubles executions per step (measured: 200
    instead of 100 executions per 100 steps, +33% wall time on the XLA CPU backend).

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()  # a device tensor; read it once after the loop
    ```

    Or read values in `xm.add_step_closure(log_fn, args=(loss,))`, or every N steps.

    ## Fix safety
    No automatic fix: when values are observed changes program behaviour.
    """

    code, name, category = "XLA101", "item-in-step", "item_sync"
    summary = "`.{method}()` on a per-step path forces a device-to-host sync every step"
    hint = "keep a device tensor (e.g. `total += loss.detach()`) and read it after the loop, every N steps, or in `xm.add_step_closure`"

    VALID = [
        Valid("first_label = dataset[0]['label'].item()  # setup, runs once\n"),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                if step % 100 == 0:
                    print(loss.item())
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.add_step_closure(lambda l: print(l.item()), args=(loss,))
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            final = loss.item()  # once, after training
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                n = torch.tensor([len(y)]).item()  # a CPU tensor
            """
        ),
        Valid(
            """
            def forward(self, x):
                if x.device.type == "cuda":
                    self.calls += self.counter.item()
                return self.layer(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            """,
            line=5,
        ),
        Invalid(
            """
            def training_step(self, batch, batch_idx):
                logits = self.model(batch["x"])
                self.seen.extend(logits.argmax(-1).tolist())
                return logits.sum()
            """,
            line=3,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        method = method_name(node)
        if method not in ("item", "tolist") or node.args or node.keywords:
            return
        kind = self.ctx.tensor_kind(receiver(node))
        if kind in (Kind.NOT_TENSOR, Kind.CPU) or not reportable_sync(self.ctx, node):
            return
        self.report(node, self.summary.format(method=method))


class HostCopyInStep(Rule):
    """## What it does
    Flags `.cpu()`, `.numpy()` and `.to("cpu")` of a device tensor on a per-step path.

    ## Why is this bad?
    Copying a lazy XLA tensor to the host executes the pending graph and transfers the data every
    step (a `TransferFromDeviceTime` sample per step). The step's graph is cut where the copy
    happens, so the rest of the step compiles as a separate graph.

    ## Example
    ```python
    for batch in loader:
        logits = model(batch["x"])
        preds.append(logits.argmax(-1).cpu())
    ```

    Use instead:
    ```python
    for batch in loader:
        logits = model(batch["x"])
        preds.append(logits.argmax(-1))  # stays on the device
    all_preds = torch.cat(preds).cpu()  # one transfer after the loop
    ```

    ## Fix safety
    No automatic fix: where the data is needed on the host is the program's choice.
    """

    code, name, category = "XLA102", "host-copy-in-step", "item_sync"
    summary = "`{what}` on a per-step path copies a device tensor to the host every step"
    hint = "keep results on the device and move them to the host once, after the loop or every N steps"

    VALID = [
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            history = loss.detach().cpu()
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                stats = np.asarray(counts).numpy()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                arr = loss.detach().cpu().numpy()  # one copy, one finding
            """,
            line=4,
        ),
        Invalid(
            """
            for batch in loader:
                logits = model(batch["x"])
                loss = logits.sum()
                loss.backward()
                preds.append(logits.argmax(-1).cpu())
            """,
            line=5,
        ),
        Invalid(
            """
            def forward(self, x):
                h = self.encoder(x)
                self.cache = h.to("cpu")
                return h
            """,
            line=3,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        method = method_name(node)
        if method == "cpu" and not node.args and not node.keywords:
            what = ".cpu()"
        elif method == "numpy" and not node.args and not node.keywords:
            what = ".numpy()"
        elif method == "to" and _to_cpu(node):
            what = '.to("cpu")'
        else:
            return
        if not self.ctx.on_device(receiver(node)) or not reportable_sync(self.ctx, node):
            return
        self.report(node, self.summary.format(what=what))


def _to_cpu(node: ast.Call) -> bool:
    device = keyword_value(node, "device")
    if device is None and node.args and not isinstance(node.args[0], ast.Starred):
        device = node.args[0]
    return device is not None and names_cpu(device)


class ScalarConversionInStep(Rule):
    """## What it does
    Flags `float(t)`, `int(t)` and `bool(t)` of a device tensor on a per-step path.

    ## Why is this bad?
    Turning a lazy XLA tensor into a Python number is a hidden `.item()`: the graph runs, the value
    is copied to the host, and the step is cut in two. `int(t)` used as a size also makes every
    distinct value a new compiled graph.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        total += float(loss)
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        total += loss.detach()
    ```

    ## Fix safety
    No automatic fix.
    """

    code, name, category = "XLA103", "scalar-conversion-in-step", "item_sync"
    summary = "`{func}()` of a device tensor on a per-step path forces a device-to-host sync"
    hint = "keep the value as a tensor; convert it after the loop or in `xm.add_step_closure`"

    VALID = [
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                lr = float(scheduler.get_last_lr()[0])
                n = int(x.shape[0])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                total += float(loss)
            """,
            line=4,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = dotted_name(node.func)
        if func not in ("float", "int", "bool") or len(node.args) != 1 or node.keywords or \
                isinstance(node.args[0], ast.Starred):
            return
        if not self.ctx.on_device(node.args[0]) or not reportable_sync(self.ctx, node):
            return
        self.report(node, self.summary.format(func=func))


class PrintTensorInStep(Rule):
    """## What it does
    Flags printing or string-formatting a device tensor on a per-step path: `print(t)`,
    `xm.master_print(t)`, `f"{t}"`, `"%s" % t`, `"{}".format(t)`, and logging calls with a tensor
    argument (`logger.info(...)`, `pbar.set_postfix(...)`). Numerical functions that share a
    logging method's name (`torch.log(x)`, `np.log(x)`, `math.log(x)`) are not logging.

    ## Why is this bad?
    Formatting a lazy XLA tensor needs its value: the graph executes and the data is copied to the
    host, every step. `xm.master_print` is `print` on the master ordinal
    (`torch_xla/core/xla_model.py` at v2.9.0): the master reads the value every step, and the
    other replicas wait for it at the next collective.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        print(f"step {step}: loss {loss}")
    ```

    Use instead:
    ```python
    for step, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        if step % 100 == 0:
            xm.add_step_closure(lambda l: print(f"step {step}: loss {l}"), args=(loss,))
    ```

    ## Fix safety
    No automatic fix.
    """

    code, name, category = "XLA104", "print-tensor-in-step", "item_sync"
    summary = "formatting a device tensor on a per-step path forces a device-to-host sync"
    hint = "log every N steps, or pass the tensor to `xm.add_step_closure` and format it there"

    VALID = [
        Valid(
            """
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                print(f"step {step} of {len(loader)}")
            """
        ),
        Valid(
            """
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                print(f"loss shape {loss.shape}")
            """
        ),
        Valid(
            """
            import numpy as np
            import torch

            def forward(self, x):
                h = self.encoder(x)
                logp = torch.log(h.softmax(-1))  # a math function, not logging
                scale = np.log(self.temperature)
                return logp * scale
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                if step % 100 == 0:
                    xm.master_print(f"step {step}", loss)  # every N steps
            xm.master_print("done", loss)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                print(f"step {step}: loss {loss}")
            """,
            line=4,
        ),
        Invalid(
            """
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                print("loss", loss)
            """,
            line=4,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.master_print("loss:", loss)
            """,
            line=6,
        ),
    ]

    LOG_METHODS = {"print", "info", "debug", "warning", "warn", "error", "log", "write", "set_postfix", "set_description"}
    # print-like functions of torch_xla: `master_print(*args)` prints its arguments on the master ordinal
    PRINT_FUNCTIONS = {"torch_xla.core.xla_model.master_print"}

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted_name(node.func) or ""
        callee = last_part(name)
        qualified = self.ctx.qualified_name(node.func) or ""
        args = [*node.args, *(k.value for k in node.keywords)]
        if qualified in self.PRINT_FUNCTIONS:
            targets = [a for a in positional(node) if not (is_string(a) or isinstance(a, ast.BinOp))]
        elif name == "print" or (callee in self.LOG_METHODS and name != callee and callee != "write"
                                 and not _math_function(qualified)):
            targets = [a for a in args if not (is_string(a) or isinstance(a, ast.BinOp))]
        elif method_name(node) == "format" and is_string(receiver(node)):
            targets = args
        else:
            return
        if any(self.ctx.on_device(t) for t in targets) and reportable_sync(self.ctx, node):
            self.report(node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if self.ctx.on_device(node.value) and reportable_sync(self.ctx, node):
            self.report(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not isinstance(node.op, ast.Mod) or not _format_string(node.left):
            return
        right = node.right
        values = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        if any(self.ctx.on_device(v) for v in values) and reportable_sync(self.ctx, node):
            self.report(node)




def _format_string(node: ast.expr) -> bool:
    """A %-format string: a literal, or one built from literals (`"%11s" * 2 + "%11.4g" * n`)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _format_string(node.left) or _format_string(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return string_value(node.left) is not None or string_value(node.right) is not None
    return string_value(node) is not None


# Modules of numerical functions: `torch.log(x)`, `np.log(x)`, `math.log(x)` compute, they never log.
_MATH_ROOTS = {"torch", "numpy", "np", "math", "cmath", "jax", "jnp", "scipy"}


def _math_function(qualified: str) -> bool:
    return qualified.split(".")[0] in _MATH_ROOTS


class HostCollectiveInStep(Rule):
    """## What it does
    Flags torch_xla's host collectives on a per-step path: `xm.mesh_reduce(...)`,
    `xm.rendezvous(...)`, `xm.xla_rendezvous(...)` and `xm.do_on_ordinals(...)`.

    ## Why is this bad?
    These exchange Python data between processes through the host, not in the device graph.
    Under PJRT, `rendezvous` is an alias of `xla_rendezvous`, which runs `torch_xla.sync()` (it
    executes whatever the step has traced so far, cutting the step's graph in two when called before
    the step's own sync), all-gathers the payload sizes, reads their maximum on the host with
    `.item()`, and for a non-empty payload all-gathers it and copies it back with `.cpu()`.
    `mesh_reduce` first copies its data to the host and pickles it, then goes through `rendezvous`;
    `do_on_ordinals` copies its data to the host and ends with a `rendezvous`. Every step pays a
    graph execution, device-to-host reads and a barrier that waits for the slowest replica.

    Once at setup, once per epoch or every N steps, this costs nothing worth reporting.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        avg = xm.mesh_reduce("loss", loss, np.mean)
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        avg = xm.all_reduce(xm.REDUCE_SUM, loss) / xr.world_size()  # stays on the device
    ```

    Synchronise processes (`xm.rendezvous("checkpoint")`) around the rare events that need it,
    not every step.

    ## References
    - `rendezvous`, `xla_rendezvous`, `mesh_reduce`, `do_on_ordinals`:
      `torch_xla/core/xla_model.py` at v2.9.0 (https://github.com/pytorch/xla/blob/v2.9.0/torch_xla/core/xla_model.py)
    """

    code, name, category = "XLA105", "host-collective-in-step", "item_sync"
    summary = "`{func}` on a per-step path is a graph sync, a host read and a barrier across replicas every step"
    hint = "use `xm.all_reduce` on device tensors (it stays in the step's graph), or synchronise once per epoch"
    xla_only = True

    CALLS = {f"torch_xla.core.xla_model.{name}": f"xm.{name}"
             for name in ("mesh_reduce", "rendezvous", "xla_rendezvous", "do_on_ordinals")}

    VALID = [
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            avg = xm.mesh_reduce("loss", loss, np.mean)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def train(model, loader, optimizer, epochs):
                xm.rendezvous("init")  # setup, once
                for epoch in range(epochs):
                    for x, y in loader:
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        xm.optimizer_step(optimizer)
                    xm.rendezvous("epoch_end")  # once per epoch
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                if step % 500 == 0:
                    xm.rendezvous("save")
                    xm.save(model.state_dict(), "ckpt.pt")
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                avg = xm.mesh_reduce("loss", loss, np.mean)
            """,
            line=5,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def train_step(model, batch, optimizer):
                loss = model(batch).mean()
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.rendezvous("step_done")
                return loss
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = self.CALLS.get(self.ctx.qualified_name(node.func) or "")
        if func is not None and reportable_sync(self.ctx, node):
            self.report(node, self.summary.format(func=func))


class AnomalyDetectionInStep(Rule):
    """## What it does
    Flags autograd anomaly detection that checks every training step:
    `with torch.autograd.detect_anomaly():` (or `with torch.autograd.set_detect_anomaly(True):`)
    on a per-step path or around a training loop, and a bare `torch.autograd.set_detect_anomaly(True)`
    (or `torch.set_anomaly_enabled(True)`) anywhere: called as a function it is never switched
    back, so every later backward runs in anomaly mode.

    ## Why is this bad?
    With anomaly mode on and `check_nan` left at its default `True`, the autograd engine checks the
    outputs of every backward function it runs (`Engine::evaluate_function` in
    `torch/csrc/autograd/engine.cpp`): `isnan(output)._is_any_true().item()`, a device-to-host read
    per output. On XLA each read executes the pending graph, so one backward becomes dozens of small
    graph executions; on CUDA each is a stream synchronisation. Measured with torch 2.13: a backward
    through a 3-layer MLP ran 9 `aten::_local_scalar_dense` (host reads) in anomaly mode and none
    without it. Anomaly mode also records a Python traceback for every forward op.
    `torch/autograd/anomaly_mode.py` itself warns that the mode "should only be enabled for
    debugging".

    Not reported:
    - `check_nan=False`: no NaN check, hence no host read (tracebacks are still recorded).
    - `set_detect_anomaly(False)` or a mode that is not the literal `True`
      (`set_detect_anomaly(args.detect_anomaly)`).
    - Anomaly mode enabled under a condition (`if args.debug:`), other than the
      `if __name__ == "__main__":` guard: a switch the user must turn on is the debugging use the
      torch docs recommend, and the linter cannot know that the condition holds in production.
    - Test functions (`def test_*`), and scopes that never run every step: a `with` block, or a
      `set_detect_anomaly(True)` ... `set_detect_anomaly(False)` pair in one function, around code
      with no step loop; a `with` on a path that runs every N steps.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    torch.autograd.set_detect_anomaly(args.detect_anomaly)  # off unless debugging
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    To watch for NaNs in production, check a device flag every N steps
    (`torch.isfinite(loss)` kept as a tensor) instead.

    ## Known problems
    A `with` block is seen to wrap training only when the step loop is written inside it, not when
    it calls a function that trains.

    ## References
    - `detect_anomaly`, `set_detect_anomaly`: `torch/autograd/anomaly_mode.py` (torch 2.13)
    - the NaN check: `Engine::evaluate_function`, `torch/csrc/autograd/engine.cpp`
      (https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/engine.cpp)
    - https://pytorch.org/docs/stable/autograd.html#anomaly-detection
    """

    code, name, category = "XLA106", "anomaly-detection-in-step", "item_sync"
    summary = "`{func}` turns on autograd anomaly mode for training: a host read per backward function, every step"
    hint = "enable anomaly mode only while debugging (behind a flag), or pass `check_nan=False`"

    # qualified name -> (spelling, position of the mode argument or None: always on)
    CALLS = {
        "torch.autograd.detect_anomaly": ("torch.autograd.detect_anomaly", None),
        "torch.autograd.anomaly_mode.detect_anomaly": ("torch.autograd.detect_anomaly", None),
        "torch.autograd.set_detect_anomaly": ("torch.autograd.set_detect_anomaly(True)", 0),
        "torch.autograd.anomaly_mode.set_detect_anomaly": ("torch.autograd.set_detect_anomaly(True)", 0),
        "torch.set_anomaly_enabled": ("torch.set_anomaly_enabled(True)", 0),
    }

    VALID = [
        Valid(
            """
            import torch
            if args.detect_anomaly:
                torch.autograd.set_detect_anomaly(True)
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            torch.autograd.set_detect_anomaly(args.debug)
            torch.autograd.set_detect_anomaly(True, check_nan=False)  # tracebacks only, no NaN reads
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            torch.autograd.set_detect_anomaly(False)
            """
        ),
        Valid(
            """
            import torch

            def test_backward_has_no_nan():
                torch.autograd.set_detect_anomaly(True)  # a test, not training
                loss = model(torch.ones(2, 3)).sum()
                loss.backward()
            """
        ),
        Valid(
            """
            import torch
            for step, (x, y) in enumerate(loader):
                loss = loss_fn(model(x), y)
                if step % 1000 == 0:
                    with torch.autograd.detect_anomaly():
                        loss.backward()
                else:
                    loss.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            torch.autograd.set_detect_anomaly(True)
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            line=2,
        ),
        Invalid(
            """
            import torch

            def training_step(self, batch, batch_idx):
                with torch.autograd.detect_anomaly():
                    loss = self.model(batch).mean()
                    self.manual_backward(loss)
                return loss
            """,
            line=4,
        ),
        Invalid(
            """
            from torch import autograd

            def main():
                with autograd.detect_anomaly():
                    for x, y in train_loader:
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        optimizer.step()

            if __name__ == "__main__":
                main()
            """,
            line=4,
        ),
        Invalid(
            """
            import torch

            if __name__ == "__main__":
                torch.autograd.set_detect_anomaly(True)
                main()
            """,
            line=4,
        ),
    ]

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            spelling = self._enabling(call)
            if spelling is None or self._opted_in(call):
                continue
            if reportable_sync(self.ctx, call) or self._wraps_training(node):
                self.report(call, self.summary.format(func=spelling))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(self.ctx.parent(node), ast.withitem):
            return  # scoped: judged by visit_With
        qualified = self.ctx.qualified_name(node.func) or ""
        entry = self.CALLS.get(qualified)
        if entry is None or entry[1] is None:
            return  # `detect_anomaly()` does nothing outside a `with`
        spelling = self._enabling(node)
        if spelling is None or self._opted_in(node) or self.ctx.in_non_xla_code(node):
            return
        end = self._disabled_later(node)
        if end is not None and not reportable_sync(self.ctx, node) and not self._step_loop_within(node, end):
            return  # switched off again before any training: a scoped debugging region
        self.report(node, self.summary.format(func=spelling))

    def _enabling(self, call: ast.expr) -> str | None:
        """The call's spelling when it turns on anomaly mode with the NaN check."""
        if not isinstance(call, ast.Call):
            return None
        entry = self.CALLS.get(self.ctx.qualified_name(call.func) or "")
        if entry is None:
            return None
        spelling, mode_position = entry
        if mode_position is None:
            check_nan = argument(call, 0, "check_nan")
        else:
            mode = argument(call, mode_position, "enabled" if spelling.startswith("torch.set_") else "mode")
            if not is_constant(mode, True):
                return None
            check_nan = argument(call, mode_position + 1, "check_nan")
        if check_nan is not None and not is_constant(check_nan, True):
            return None  # `check_nan=False`, or a flag: no NaN check to count on
        return spelling

    def _opted_in(self, node: ast.AST) -> bool:
        """Under a condition in its function (other than the `__main__` guard), or in a test."""
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and self.ctx.index.field_of(child) in ("body", "orelse") \
                    and not _main_guard(anc.test):
                return True
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return anc.name.startswith("test")
            if isinstance(anc, (ast.Lambda, ast.ClassDef)):
                return False
            child = anc
        return False

    def _wraps_training(self, node: ast.With) -> bool:
        """A step loop written inside the `with` block."""
        func = self.ctx.index.enclosing_function(node)
        return any(node in self.ctx.index.ancestors(loop) and self.ctx.index.enclosing_function(loop) is func
                   and is_step_loop(self.ctx, loop) for loop in self.ctx.index.loops)

    def _disabled_later(self, node: ast.Call) -> ast.Call | None:
        """A later `set_detect_anomaly(False)` in the same function (or module) body."""
        owner = self.ctx.index.enclosing_function(node) or self.ctx.tree
        order = self.ctx.index.order
        for call in self.ctx.calls_within(owner):
            entry = self.CALLS.get(self.ctx.qualified_name(call.func) or "")
            if order[call] > order[node] and entry is not None and entry[1] is not None:
                mode = argument(call, entry[1], "enabled" if entry[0].startswith("torch.set_") else "mode")
                if is_constant(mode, False):
                    return call
        return None

    def _step_loop_within(self, start: ast.AST, end: ast.AST) -> bool:
        """A step loop of `start`'s function lies between `start` and `end` in the source."""
        func = self.ctx.index.enclosing_function(start)
        order = self.ctx.index.order
        return any(order[start] < order[loop] < order[end] and self.ctx.index.enclosing_function(loop) is func
                   and is_step_loop(self.ctx, loop) for loop in self.ctx.index.loops)


def _main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    return {dotted_name(side) or string_value(side) for side in (test.left, test.comparators[0])} == \
        {"__name__", "__main__"}


class PythonBuiltinOverTensor(Rule):
    """## What it does
    Flags Python builtins that walk a device tensor element by element on a per-step path:
    `any(t)`, `all(t)`, `max(t)`, `min(t)` and `sum(t)` with a single argument that is a device tensor
    (or, for `any`/`all`/`max`/`min`, a list or generator of device tensor values, as in
    `any(torch.isinf(p.grad).any() for p in params)`), and indexing a Python list, tuple, string or
    range with a device tensor (`classes[logits.argmax()]`). Also a `for` loop over a device tensor
    whose length depends on its values (`for e in hits.nonzero():`, the eager mixture-of-experts loop).

    ## Why is this bad?
    Iterating a tensor in Python (`Tensor.__iter__`, `torch/_tensor.py`) unbinds it into 0-d tensors.
    `any`/`all` then take each element's truth value (`Tensor.__bool__`) and `max`/`min` compare
    elements with `>`/`<` and take the truth value of each comparison: every one is a
    device-to-host read (`aten::_local_scalar_dense`), and on XLA each executes the pending graph.
    `sum(t)` reads nothing but traces one slice and one add per element, where `t.sum(0)` is one op.
    A Python sequence indexed with a tensor calls `Tensor.__index__`, which reads the value on the
    host. Measured with torch 2.13 (host reads): `any` over 5 elements 2 (until the first true),
    `max` over 5 elements 4, `any(isinf(g).any() for g in 4 grads)` 4, `classes[logits.argmax()]` 1.

    A loop over `t.nonzero()` first needs the number of rows, which only the data knows: one read
    of the count, and the loop body is traced once per element found, so each step compiles a
    graph of a different length.

    Not reported: these builtins over Python numbers, shapes or lengths, `sum` over a list or
    generator of device tensors (adding tensors stays on the device), and `dict` lookups with a
    tensor key (tensors hash by identity: no read).

    ## Example
    ```python
    for x, y in loader:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        if any(torch.isinf(p.grad).any() for p in model.parameters()):
            optimizer.zero_grad()
        label = classes[logits[0].argmax()]
    ```

    Use instead:
    ```python
    for x, y in loader:
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        found_inf = torch.stack([torch.isinf(p.grad).any() for p in model.parameters()]).any()
        # keep `found_inf` on the device (`torch.where`), or read it every N steps
        pred = logits[0].argmax()  # map it to a class name after the loop or in a step closure
    ```

    Use the tensor's own reductions (`t.any()`, `t.all()`, `t.max()`, `t.sum(0)`, `torch.stack(...)`)
    and read the result, if at all, every N steps.

    ## References
    - `Tensor.__iter__`: `torch/_tensor.py` (torch 2.13)
    - `Tensor.__index__`: `THPVariable_index_scalar` calls `item<int64_t>()`,
      `tools/autograd/templates/python_variable_methods.cpp` (pytorch)
    - tensor values read before `torch_xla.sync()`:
      https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/troubleshoot.md
    """

    code, name, category = "XLA107", "python-builtin-over-tensor", "item_sync"
    summary = "a Python builtin or index consumes device tensor values on a per-step path: {detail}"
    hint = ("use the tensor's own reduction (`t.any()`, `t.max()`, `t.sum(0)`, `torch.stack(...)`) and keep the "
            "result on the device")

    BUILTINS = {
        "any": "`any()` tests each element's truth value, one host read per element",
        "all": "`all()` tests each element's truth value, one host read per element",
        "max": "`max()` compares the elements, one host read per comparison",
        "min": "`min()` compares the elements, one host read per comparison",
        "sum": "`sum()` adds the elements one by one, one traced slice and add per element",
    }

    VALID = [
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                longest = max(len(s) for s in texts)
                lr = min(scheduler.get_last_lr())
                ok = all(p.grad is not None for p in model.parameters())
                biggest = max([0.5, 1.5, float(step)])
            """
        ),
        Valid(
            """
            def forward(self, x):
                losses = [self.head_a(x).mean(), self.head_b(x).mean()]
                total = sum(losses)  # adds device tensors: stays on the device
                norm = sum(p.norm() ** 2 for p in self.parameters())
                return total + norm
            """
        ),
        Valid(
            """
            for x, y in loader:
                logits = model(x)
                loss = loss_fn(logits, y)
                loss.backward()
            classes = ["cat", "dog"]
            print(classes[logits[0].argmax()])  # once, after training
            """
        ),
        Valid(
            """
            def forward(self, x, mask):
                h, lengths = self.embed(x, mask)  # a tensor and, here, a list of ints
                longest = max(lengths)
                ready = any([is_text_model(self.cfg), is_vision_model(self.cfg)])
                return h[:, :longest]
            """
        ),
        Valid(
            """
            for x, y in loader:
                batch = torch.tensor([1, 0, 1])  # a CPU tensor
                loss = loss_fn(model(x), y)
                loss.backward()
                seen = any(batch)
            """
        ),
        Valid(
            """
            def forward(self, hidden, router_logits):
                top = router_logits.argmax(-1)
                for e in range(self.num_experts):  # a static count: every expert, masked
                    hidden = hidden + self.experts[e](hidden) * (top == e).unsqueeze(-1)
                rows, cols = (top > 0).nonzero(as_tuple=True)  # a tuple of two tensors
                for ids in (rows, cols):
                    hidden = hidden + ids.sum()
                return hidden
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def forward(self, hidden: torch.Tensor, expert_mask: torch.Tensor):
                hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
                for expert_idx in hit:
                    hidden = hidden + self.experts[expert_idx](hidden)
                return hidden
            """,
            line=5,
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                if any(torch.isinf(p.grad).any() for p in model.parameters()):
                    optimizer.zero_grad()
                optimizer.step()
            """,
            line=5,
        ),
        Invalid(
            """
            def training_step(self, batch, batch_idx):
                logits = self.model(batch["x"])
                worst = max(logits.max(dim=-1).values)
                return logits.sum() + worst
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, x):
                scores = self.classifier(x)
                labels = ["neg", "pos"]
                self.last = labels[scores[0].argmax()]
                return scores
            """,
            line=4,
        ),
        Invalid(
            """
            import torch

            def forward(self, x):
                per_row = torch.abs(self.proj(x)).mean(-1)
                return sum(per_row)
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in self.BUILTINS or not self._builtin(func):
            return
        if len(node.args) != 1 or isinstance(node.args[0], ast.Starred) or \
                any(k.arg != "default" or func.id not in ("max", "min") for k in node.keywords):
            return
        arg = node.args[0]
        if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
            # a sum of device tensors stays on the device; a truth test or comparison of each does not
            if func.id == "sum" or not self._device(arg.elt):
                return
        elif func.id == "sum":
            if not evident_device_tensor(self.ctx, arg) or self._sequence(arg):
                return  # `sum(losses)` over a list or tuple of tensors: a few adds
        elif isinstance(arg, (ast.List, ast.Tuple)):
            if not arg.elts or not all(self._device(e) for e in arg.elts):
                return  # `max([loss_a, loss_b])`: every element a device value
        elif not self._device(arg):
            return
        if reportable_sync(self.ctx, node):
            self.report(node, self.summary.format(detail=self.BUILTINS[func.id]))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        parts = [index.lower, index.upper, index.step] if isinstance(index, ast.Slice) else [index]
        if not any(p is not None and self._device(p) for p in parts):
            return
        container = self._host_sequence(node.value)
        if container is not None and reportable_sync(self.ctx, node):
            self.report(node, self.summary.format(
                detail=f"indexing a Python {container} with a device tensor reads the index on the host (`__index__`)"))

    def visit_For(self, node: ast.For) -> None:
        if self._data_sized(node.iter) and reportable_sync(self.ctx, node.iter):
            self.report(node.iter, self.summary.format(
                detail="a `for` loop over a tensor whose length depends on its values (`nonzero`, `unique`, ...) "
                       "reads that length on the host, then traces one slice per element; loop over a static "
                       "range (every expert, masked) instead"))

    def _data_sized(self, expr: ast.expr, depth: int = 0) -> bool:
        """`expr` is a device tensor whose first dimension is data-dependent: the result of
        `nonzero`/`argwhere`/`unique`/`masked_select` (without a static `size=`), or a reshape,
        cast or row slice of one."""
        if depth > 4:
            return False
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            return bool(values) and all(not _unpacked(self.ctx, v) and self._data_sized(v, depth + 1) for v in values)
        if isinstance(expr, ast.Subscript):  # `hits[:, 0]`
            return self._data_sized(expr.value, depth + 1)
        if not isinstance(expr, ast.Call):
            return False
        qualified = self.ctx.qualified_name(expr.func) or ""
        functional = qualified.startswith("torch.")
        name = last_part(qualified) if functional else method_name(expr)
        subject = (expr.args[0] if expr.args else None) if functional else receiver(expr)
        if subject is None:
            return False
        if name in _LENGTH_KEEPING and not functional:
            return self._data_sized(subject, depth + 1)
        if name not in _DATA_SIZED or keyword(expr, "size") is not None or keyword(expr, "as_tuple") is not None:
            return False
        return self._device(subject)

    def _builtin(self, name: ast.Name) -> bool:
        """`name` is Python's builtin: no import, module-level binding, parameter or local of that name."""
        return name.id not in self.ctx.index.imports and name.id not in self.ctx.index.module_names and \
            not self.ctx.reaching_values(name) and self.ctx.parameter(name) is None

    def _device(self, expr: ast.expr, depth: int = 0) -> bool:
        """`expr` is one device tensor value, by what computes it: a torch op, an operator or a tensor
        method over a device value, a gradient, a name a model output is assigned to, or an element
        of one. Not a value unpacked from a call's results (`h, lengths = self.embed(x)` may return
        Python lists), nor whatever a plain function returns."""
        if depth > 4:
            return False
        if evident_device_tensor(self.ctx, expr):
            return True
        if self.ctx.tensor_kind(expr) != Kind.DEVICE:
            return False
        if isinstance(expr, ast.Compare):
            return any(self._device(o, depth + 1) for o in (expr.left, *expr.comparators))
        if isinstance(expr, ast.BinOp):
            return any(self._device(o, depth + 1) for o in (expr.left, expr.right))
        if isinstance(expr, ast.UnaryOp):
            return self._device(expr.operand, depth + 1)
        if isinstance(expr, ast.Subscript):
            return self._device(expr.value, depth + 1)
        if isinstance(expr, ast.Attribute):
            return expr.attr == "grad" or self._device(expr.value, depth + 1)
        if isinstance(expr, ast.Call):
            recv = receiver(expr)
            return recv is not None and dotted_name(recv) not in ("self", "cls") and self._device(recv, depth + 1)
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            if values:
                return all(not _unpacked(self.ctx, v) and (
                    self._device(v, depth + 1) or isinstance(v, ast.Call) and self.ctx.tensor_kind(v) == Kind.DEVICE)
                    for v in values)
            return any(self._device(it, depth + 1) for it in self.ctx.loop_iterables(expr))
        return False

    def _sequence(self, expr: ast.expr, depth: int = 0) -> bool:
        """A Python sequence of tensors: a display, or a torch op that returns a tuple."""
        if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)):
            return True
        if isinstance(expr, ast.Call):
            name = method_name(expr) or last_part(self.ctx.qualified_name(expr.func))
            return name in _TUPLE_OPS or (name in _TUPLE_WITH_DIM and bool(expr.args or expr.keywords))
        if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 3:
            return any(self._sequence(v, depth + 1) for v in self.ctx.assigned_values(expr))
        return False

    def _host_sequence(self, expr: ast.expr, depth: int = 0) -> str | None:
        """What kind of Python sequence the code built here, if it evidently is one."""
        if isinstance(expr, (ast.List, ast.ListComp)):
            return "list"
        if isinstance(expr, ast.Tuple):
            return "tuple"
        if isinstance(expr, ast.JoinedStr) or string_value(expr) is not None:
            return "string"
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and self._builtin(expr.func):
            return {"list": "list", "sorted": "list", "tuple": "tuple", "range": "range", "str": "string"}.get(
                expr.func.id)
        if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 3:
            found = {None if _unpacked(self.ctx, v) else self._host_sequence(v, depth + 1)
                     for v in self.ctx.assigned_values(expr)}
            return found.pop() if len(found) == 1 else None
        return None


def _unpacked(ctx, value: ast.expr) -> bool:
    """`value` is assigned by unpacking (`a, b = value`): each target gets only a part of it."""
    parent = ctx.parent(value)
    return isinstance(parent, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List, ast.Starred))
                                                  for t in parent.targets)


# torch ops (functions or methods) that return a tuple of tensors, always or when given a dim
_TUPLE_OPS = {"split", "chunk", "unbind", "tensor_split", "hsplit", "vsplit", "dsplit", "split_with_sizes",
              "meshgrid", "broadcast_tensors", "topk", "sort", "aminmax", "frexp", "std_mean", "var_mean",
              "cummax", "cummin", "kthvalue", "slogdet", "svd", "qr", "eig", "eigh", "unique_consecutive"}
_TUPLE_WITH_DIM = {"max", "min", "median", "nanmedian", "mode", "where", "nonzero", "unique"}
# ops whose result has as many rows as the data says, and methods that keep the number of rows
_DATA_SIZED = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select"}
_LENGTH_KEEPING = {"squeeze", "flatten", "view", "reshape", "long", "int", "to", "detach", "contiguous", "clone"}


class WaitDeviceOpsInStep(Rule):
    """## What it does
    Flags `xm.wait_device_ops()` on a per-step path, unless the step then reads a clock (a timing
    benchmark, the one use torch_xla documents for a per-step wait).

    ## Why is this bad?
    `torch_xla.sync()` only dispatches the step's graph: it runs asynchronously, and Python traces
    the next step while the device executes this one. `wait_device_ops()` blocks the process until
    every pending operation on the local devices has finished (`XLAGraphExecutor::WaitDeviceOps`
    locks the devices, then the runtime client waits for them), so called every step it serialises
    tracing and execution: the step takes tracing time plus device time instead of the larger of the
    two. torch_xla's own example says: "Do not call this function every step unless you are
    benchmarking. It will block the main process and torch_xla won't be able to overlap the tracing
    of the next step with the device execution of the current step."

    Waiting once after training, per epoch or before a checkpoint is fine.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.wait_device_ops()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
    xm.wait_device_ops()  # once, after the loop
    ```

    ## References
    - `wait_device_ops`: `torch_xla/core/xla_model.py` at v2.9.0, `WaitDeviceOps` in
      `torch_xla/csrc/init_python_bindings.cpp` and `torch_xla/csrc/xla_graph_executor.cpp`
    - https://github.com/pytorch/xla/blob/v2.9.0/examples/debug/train_resnet_benchmark.py
    - https://github.com/pytorch/xla/blob/v2.9.0/docs/source/learn/trace-vs-execution-time.md
    """

    code, name, category = "XLA108", "wait-device-ops-in-step", "item_sync"
    summary = "`xm.wait_device_ops()` on a per-step path blocks until the device is idle every step"
    hint = "wait once after training (or per epoch); `torch_xla.sync()` alone keeps tracing overlapped with execution"
    xla_only = True

    CLOCKS = {"time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
              "time.monotonic_ns", "time.process_time", "timeit.default_timer"}

    VALID = [
        Valid(
            """
            import torch_xla.core.xla_model as xm
            for epoch in range(epochs):
                for x, y in loader:
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    xm.optimizer_step(optimizer)
                xm.wait_device_ops()  # per epoch
            xm.wait_device_ops()
            """
        ),
        Valid(
            """
            import time
            import torch_xla
            import torch_xla.core.xla_model as xm
            for step, (x, y) in enumerate(loader):
                start = time.perf_counter()
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                torch_xla.sync()
                xm.wait_device_ops()
                step_times.append(time.perf_counter() - start)  # a benchmark
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.wait_device_ops()
            """,
            line=6,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            def train_step(self, batch):
                loss = self.model(batch).mean()
                loss.backward()
                self.optimizer.step()
                xm.wait_device_ops()
                return loss
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch_xla.core.xla_model.wait_device_ops":
            return
        if reportable_sync(self.ctx, node) and not self._timed(node):
            self.report(node)

    def _timed(self, node: ast.Call) -> bool:
        """A clock is read after the wait in the same loop body or function: the step is timed."""
        owner = next((a for a in self.ctx.index.ancestors(node)
                      if isinstance(a, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef))),
                     self.ctx.tree)
        order = self.ctx.index.order
        return any(order[call] > order[node] and self.ctx.qualified_name(call.func) in self.CLOCKS
                   for call in self.ctx.calls_within(owner))


class HelperReadInStep(Rule):
    """## What it does
    Flags a per-step call of a function of another module of the project that reads the device
    tensor it is given to the host (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float(t.sum())`)
    on every call: an input check, a metric or a logging helper. A helper in the same module is
    per step itself, and its read is reported where it is, by XLA101-XLA103; its calls are reported
    too when it returns what it read (`sizes = grid_sizes(coords)` hands host numbers back, like a
    `.tolist()` at the call). A read in the branch of a string option (`if reduction == "mean":`)
    counts only at calls that select it.

    ## Why is this bad?
    The read is a host sync like any other `.item()` in the loop: the pending graph compiles and
    runs there and the step is cut in two. Inside the helper it looks harmless (the helper may also
    be called with CPU tensors, before `.to(device)`); the cost is at the call that hands it a device
    tensor every step, so that call is reported, with the line of the read.

    ## Example
    ```python
    # checks.py
    def check_targets(targets, num_classes):
        if targets.max().item() >= num_classes:
            raise ValueError("label out of range")

    # train.py
    from checks import check_targets

    for x, y in pl.MpDeviceLoader(loader, device):
        check_targets(y, num_classes)
        loss = loss_fn(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
    ```

    Use instead:
    ```python
    for x, y in loader:  # check on the host, before the batch moves to the device
        check_targets(y, num_classes)
        x, y = x.to(device), y.to(device)
        ...
    ```
    or check every N steps, or once on the dataset.

    ## Fix safety
    No automatic fix.
    """

    code, name, category = "XLA109", "helper-read-in-step", "item_sync"
    summary = "`{helper}()` reads the device tensor passed as `{param}` to the host ({what} at {where}): a sync every step"
    hint = "check or log on the host before `.to(device)`, every N steps, or keep the helper's result on the device"

    CHECKS = {"checks.py": """
        def check_targets(targets, num_classes):
            if targets.max().item() >= num_classes:
                raise ValueError("label out of range")
        """}

    VALID = [
        Valid(
            """
            def top_k(logits, labels, k, reduction="mean"):
                hits = (logits.topk(k).indices == labels[:, None]).float().sum(-1)
                if reduction == "mean":
                    return hits.mean().item()
                return hits

            for x, y in pl.MpDeviceLoader(loader, device):
                logits = model(x)
                accuracy = top_k(logits, y, 5, reduction="none")  # the reading branch is not taken
                loss_fn(logits, y).backward()
                xm.optimizer_step(optimizer)
            """
        ),
        Valid(
            """
            from checks import check_targets

            loader = DataLoader(dataset, batch_size=32)
            for x, y in loader:  # host tensors
                check_targets(y, num_classes)
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            modules=CHECKS,
        ),
        Valid(
            """
            from checks import check_targets

            for step, (x, y) in enumerate(pl.MpDeviceLoader(loader, device)):
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                if step % 100 == 0:
                    check_targets(y, num_classes)
            """,
            modules=CHECKS,
        ),
        Valid(
            """
            def check_targets(targets, num_classes):  # the read itself is reported, as XLA101
                if targets.max().item() >= num_classes:
                    raise ValueError("label out of range")

            for x, y in pl.MpDeviceLoader(loader, device):
                check_targets(y, num_classes)
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from checks import check_targets

            for x, y in pl.MpDeviceLoader(loader, device):
                check_targets(y, num_classes)
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            """,
            line=4,
            modules=CHECKS,
        ),
        Invalid(
            """
            def grid_sizes(coords):
                return [int(n.item()) for n in coords.amax(dim=1) + 1]

            class PosEmbed(nn.Module):
                def forward(self, x, coords):
                    sizes = grid_sizes(coords)  # host numbers handed back
                    return x + self.interpolate(sizes)
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        for helper, where, read, value in argument_reads(self.ctx, node, through=""):
            if self.ctx.on_device(value) and reportable_sync(self.ctx, node):
                self.report(node, self.summary.format(helper=helper, param=read.param, what=f"`{read.what}`",
                                                      where=where))
                return
