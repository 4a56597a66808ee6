"""XLA104 print-tensor-in-step: Flags printing or string-formatting a device tensor on a per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.names import dotted_name, is_string, last_part, method_name, positional, receiver, string_value
from xlalint.diagnostics import HIGH
from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step", "value")
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

    LOG_METHODS = {
        "print",
        "info",
        "debug",
        "warning",
        "warn",
        "error",
        "log",
        "write",
        "set_postfix",
        "set_description",
    }
    # print-like functions of torch_xla: `master_print(*args)` prints its arguments on the master ordinal
    PRINT_FUNCTIONS = {"torch_xla.core.xla_model.master_print"}

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted_name(node.func) or ""
        callee = last_part(name)
        qualified = self.ctx.qualified_name(node.func) or ""
        args = [*node.args, *(k.value for k in node.keywords)]
        if qualified in self.PRINT_FUNCTIONS:
            targets = [a for a in positional(node) if not (is_string(a) or isinstance(a, ast.BinOp))]
        elif name == "print" or (
            callee in self.LOG_METHODS and name != callee and callee != "write" and not _math_function(qualified)
        ):
            targets = [a for a in args if not (is_string(a) or isinstance(a, ast.BinOp))]
        elif method_name(node) == "format" and is_string(receiver(node)):
            targets = args
        else:
            return
        if any(self.ctx.on_device(t) for t in targets) and self.ctx.runs_hot(node):
            self.report(node, value=self._formatted(targets))

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if self.ctx.on_device(node.value) and self.ctx.runs_hot(node):
            self.report(node, value=node.value)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not isinstance(node.op, ast.Mod) or not _format_string(node.left):
            return
        right = node.right
        values = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        if any(self.ctx.on_device(v) for v in values) and self.ctx.runs_hot(node):
            self.report(node, value=self._formatted(values))

    def _formatted(self, values: list[ast.expr]) -> ast.expr:
        """The device value formatted whose origin is best seen (its evidence is the finding's)."""
        on_device = [v for v in values if self.ctx.on_device(v)]
        return next((v for v in on_device if self.ctx.value_evidence(v).confidence == HIGH), on_device[0])


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
