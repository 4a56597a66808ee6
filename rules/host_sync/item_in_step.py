"""XLA101 item-in-step: Flags `.item()` and `.tolist()` on a device tensor on a per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.names import method_name, receiver
from xlalint.analysis.tensors import Kind
from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step", "value")
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
        if kind in (Kind.NOT_TENSOR, Kind.CPU) or not self.ctx.runs_hot(node):
            return
        self.report(node, self.summary.format(method=method), value=receiver(node))
