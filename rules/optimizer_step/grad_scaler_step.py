"""XLA402 grad-scaler-step: Flags `scaler.step(optimizer)` of an fp16 `GradScaler` on a per-step path,
in any file (what would run on XLA once this code moves there)."""

from __future__ import annotations

import ast
import re

from xlalint.analysis.guards import words
from xlalint.analysis.index import FUNCTIONS, LOOPS
from xlalint.analysis.names import dotted_name, last_part, method_name, receiver
from xlalint.analysis.steps import is_step_loop
from xlalint.rule import Invalid, Rule, Valid


def _first_argument(call: ast.Call) -> ast.Starred | ast.keyword | ast.expr | None:
    """The call's first argument as written, positional or keyword (`f(a=1, *rest)`)."""
    written: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    return min(written, key=lambda a: (a.lineno, a.col_offset), default=None)


SCALER_NAME = re.compile(r"(^|_)(grad_?)?scaler$", re.I)
SCALER_CLASS = re.compile(r"^(GradScaler|ShardedGradScaler)$")
# torch_xla's sync-free optimizers take the scaler's `found_inf` as a tensor: no host read.
SYNCFREE_MODULE = "torch_xla.amp.syncfree"
SCALING_WORD = re.compile(r"scal|amp|fp16|half|precision", re.I)


class GradScalerStep(Rule):
    """## What it does
    Flags `scaler.step(optimizer)` of an fp16 `GradScaler` on a per-step path, in any file (what
    would run on XLA once this code moves there).

    ## Why is this bad?
    `GradScaler.step` decides whether to skip the step from the `found_inf` flags it gathered while
    unscaling, and reads them on the host (`sum(v.item() for v in found_inf...)` in
    `torch/amp/grad_scaler.py`): a device-to-host sync on every step, right where the step's graph
    should be built in one piece. Nor does it all-reduce gradients or cut the graph on XLA. TPUs
    train in bfloat16, which needs no loss scaling at all.

    ## Example
    ```python
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    Use instead:
    ```python
    for x, y in loader:
        with torch.autocast(device_type="xla", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer_step(optimizer, barrier=True)  # from xlalint.runtime
    ```

    Or keep fp16 with `torch_xla.amp.GradScaler` and a `torch_xla.amp.syncfree` optimizer, whose
    `step(found_inf=...)` takes the flag as a tensor.

    ## Known problems
    Reported only where a training loop of the same file runs the step, and not when the scaler
    path is one branch of a choice (`if scaler:`, `if use_grad_scaling:`): framework hooks such as
    AMP precision plugins are picked per device by their framework. Not reported in files using
    `torch_xla.amp.syncfree` optimizers.
    """

    code, name, category = "XLA402", "grad-scaler-step", "optimizer_step"
    summary = "`GradScaler.step()` reads `found_inf` on the host every step and adds no XLA step barrier"
    hint = "train in bfloat16 without a scaler on TPU, or use torch_xla.amp.GradScaler with a syncfree optimizer"

    VALID = [
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler()
            scaler.step(optimizer)  # once, not in a training loop
            """
        ),
        Valid(
            """
            import torch
            from torch_xla.amp import syncfree
            optimizer = syncfree.AdamW(model.parameters())
            scaler = torch.amp.GradScaler()
            for x, y in loader:
                scaler.scale(loss_fn(model(x), y)).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Valid(
            """
            class WrappedOptimizer:
                def step(self, closure=None):
                    if self.scaler is not None:
                        self.scaler.step(self.optimizer, closure)
                    else:
                        self.optimizer.step(closure)
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss_fn(model(x), y).backward()
                scheduler.step(epoch)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
            X, Y = get_batch("train")
            while True:
                for micro_step in range(gradient_accumulation_steps):
                    logits, loss = model(X, Y)
                    X, Y = get_batch("train")
                    scaler.scale(loss / gradient_accumulation_steps).backward()
                scaler.step(optimizer)  # the loop's step: the scaler steps the optimizer it is given
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            """,
            line=9,
        ),
        Invalid(
            """
            import torch
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.autocast(device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """,
            line=7,
        ),
        Invalid(
            """
            class Trainer:
                def optimizer_step(self):
                    self.scaler.unscale_(self.optimizer)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()

                def train(self):
                    for batch in self.train_loader:
                        self.scaler.scale(self.compute(batch)).backward()
                        self.optimizer_step()
            """,
            line=4,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "step" or isinstance(_first_argument(node), (ast.keyword, type(None))):
            return
        scaler = receiver(node)
        if not self._is_scaler(scaler) or not self.ctx.is_per_step(node, periodic=True):
            return
        if self.ctx.in_non_xla_code(node) or self._uses_syncfree() or not self._in_this_files_loop(node):
            return
        if self._scaling_is_optional(node):
            return
        self.report(node)

    def _in_this_files_loop(self, node: ast.AST) -> bool:
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, LOOPS) and self.ctx.index.field_of(child) == "body" and is_step_loop(self.ctx, anc):
                return True
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return anc in self.ctx.loop_reachable_functions
            child = anc
        return False

    def _scaling_is_optional(self, node: ast.AST) -> bool:
        """Under `if scaler:` / `if use_grad_scaling:`: the other branch serves devices without it."""
        child = node
        for anc in self.ctx.index.ancestors(node):
            if (
                isinstance(anc, ast.If)
                and self.ctx.index.field_of(child) == "body"
                and any(SCALING_WORD.search(w) for w in words(anc.test))
            ):
                return True
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return False
            child = anc
        return False

    def _is_scaler(self, expr: ast.expr | None) -> bool:
        name = dotted_name(expr)
        if not name or expr is None:
            return False
        for value in self.ctx.assigned_values(expr):
            if isinstance(value, ast.Call) and SCALER_CLASS.match(last_part(dotted_name(value.func))):
                return True
        return bool(SCALER_NAME.search(last_part(name)))

    def _uses_syncfree(self) -> bool:
        return any(b.qualified.startswith(SYNCFREE_MODULE) for b in self.ctx.index.imports.values())
