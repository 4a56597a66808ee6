"""XLA103 scalar-conversion-in-step: Flags `float(t)`, `int(t)` and `bool(t)` of a device tensor on a
per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.names import dotted_name
from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step", "value")
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
        if (
            func not in ("float", "int", "bool")
            or len(node.args) != 1
            or node.keywords
            or isinstance(node.args[0], ast.Starred)
        ):
            return
        if not self.ctx.on_device(node.args[0]) or not self.ctx.runs_hot(node):
            return
        self.report(node, self.summary.format(func=func), value=node.args[0])
