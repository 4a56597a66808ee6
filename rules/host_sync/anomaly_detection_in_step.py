"""XLA106 anomaly-detection-in-step: Flags autograd anomaly detection that checks every training step."""

from __future__ import annotations

import ast

from xlalint.analysis.names import argument, dotted_name, is_constant, string_value
from xlalint.analysis.steps import is_step_loop
from xlalint.rule import Invalid, Rule, Valid


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
    evidence = ("step",)
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
            if self.ctx.runs_hot(call) or self._wraps_training(node):
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
        if end is not None and not self.ctx.runs_hot(node) and not self._step_loop_within(node, end):
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
            if (
                isinstance(anc, (ast.If, ast.IfExp))
                and self.ctx.index.field_of(child) in ("body", "orelse")
                and not _main_guard(anc.test)
            ):
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
        return any(
            node in self.ctx.index.ancestors(loop)
            and self.ctx.index.enclosing_function(loop) is func
            and is_step_loop(self.ctx, loop)
            for loop in self.ctx.index.loops
        )

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
        return any(
            order[start] < order[loop] < order[end]
            and self.ctx.index.enclosing_function(loop) is func
            and is_step_loop(self.ctx, loop)
            for loop in self.ctx.index.loops
        )


def _main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    return {dotted_name(side) or string_value(side) for side in (test.left, test.comparators[0])} == {
        "__name__",
        "__main__",
    }
