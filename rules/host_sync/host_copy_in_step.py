"""XLA102 host-copy-in-step: Flags `.cpu()`, `.numpy()` and `.to("cpu")` of a device tensor on a
per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.names import keyword_value, method_name, receiver
from xlalint.analysis.tensors import names_cpu
from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step", "value")
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
        if not self.ctx.on_device(receiver(node)) or not self.ctx.runs_hot(node):
            return
        self.report(node, self.summary.format(what=what), value=receiver(node))


def _to_cpu(node: ast.Call) -> bool:
    device = keyword_value(node, "device")
    if device is None and node.args and not isinstance(node.args[0], ast.Starred):
        device = node.args[0]
    return device is not None and names_cpu(device)
