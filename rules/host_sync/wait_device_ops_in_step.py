"""XLA108 wait-device-ops-in-step: Flags `xm.wait_device_ops()` on a per-step path, unless the step
then reads a clock (a timing benchmark, the one use torch_xla documents for a per-step wait)."""

from __future__ import annotations

import ast

from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step",)
    summary = "`xm.wait_device_ops()` on a per-step path blocks until the device is idle every step"
    hint = "wait once after training (or per epoch); `torch_xla.sync()` alone keeps tracing overlapped with execution"
    xla_only = True

    CLOCKS = {
        "time.time",
        "time.time_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.process_time",
        "timeit.default_timer",
    }

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
        if self.ctx.runs_hot(node) and not self._timed(node):
            self.report(node)

    def _timed(self, node: ast.Call) -> bool:
        """A clock is read after the wait in the same loop body or function: the step is timed."""
        owner = next(
            (
                a
                for a in self.ctx.index.ancestors(node)
                if isinstance(a, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef))
            ),
            self.ctx.tree,
        )
        order = self.ctx.index.order
        return any(
            order[call] > order[node] and self.ctx.qualified_name(call.func) in self.CLOCKS
            for call in self.ctx.calls_within(owner)
        )
