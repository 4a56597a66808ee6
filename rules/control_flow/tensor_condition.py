"""XLA201 tensor-condition: Flags Python branching on the truth value of a device tensor on a per-step
path."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext
from xlalint.analysis.steps import after_periodic_operand
from xlalint.analysis.tensors import evident_device_tensor
from xlalint.rule import Invalid, Rule, Valid


def _truth_operands(expr: ast.expr):
    """The narrowest sub-expressions whose truth value Python takes when it tests `expr`."""
    if isinstance(expr, ast.BoolOp):
        for value in expr.values:
            yield from _truth_operands(value)
    elif isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        yield from _truth_operands(expr.operand)
    else:
        yield expr


class TensorCondition(Rule):
    """## What it does
    Flags Python branching on the truth value of a device tensor on a per-step path: the test of an
    `if`, `elif` or `while`, an `assert`, a conditional expression, an operand of `and`/`or`/`not`,
    or the `if` of a comprehension, when that value is a tensor (`if loss > 10:`,
    `if torch.isnan(loss).any():`, `while err > tol:`, `assert (x >= 0).all()`).

    ## Why is this bad?
    Python needs a real `bool`, so `Tensor.__bool__` runs: the pending lazy graph is compiled and
    executed right there and the scalar is copied to the host (`aten::_local_scalar_dense`). The
    step's graph is cut in two at that point, and each combination of taken branches traces a
    different graph, so the program can also compile once per branch pattern.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if torch.isnan(loss).any():
            continue
        loss.backward()
        optimizer.step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        finite = torch.isfinite(loss)
        loss = torch.where(finite, loss, torch.zeros_like(loss))  # no branch, no sync
        loss.backward()
        optimizer.step()
    ```

    Keep data-dependent decisions on the device (`torch.where`, `torch.clamp`, masks), check
    them every N steps, or move validation that only needs to run once out of the step.

    ## Known problems
    Whether a name holds a tensor is inferred from how it is assigned; a tensor that only reaches
    the test through another module's function is not seen.
    """

    code, name, category = "XLA201", "tensor-condition", "control_flow_on_tensor"
    evidence = ("step",)
    summary = "Python branches on the value of a device tensor on a per-step path: a host sync and a graph cut"
    hint = "keep the decision on the device (`torch.where`, `torch.clamp`, a mask), or check it every N steps"

    VALID = [
        Valid(
            """
            def forward(self, x, mask=None):
                if mask is not None:
                    x = x.masked_fill(~mask, 0.0)
                if self.training and x.shape[0] > 1:
                    x = self.dropout(x)
                return self.proj(x)
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                if step % 100 == 0 and torch.isnan(loss).any():
                    print("nan at", step)
            """
        ),
        Valid(
            """
            def forward(self, x, cache=None):
                if cache:
                    x = torch.cat([cache, x], dim=1)
                if len(x) > 1 and torch.is_tensor(x):
                    x = x[1:]
                return self.layer(x)
            """
        ),
        Valid(
            """
            counts = torch.bincount(torch.tensor(labels))  # setup on CPU data
            if (counts == 0).any():
                raise ValueError("empty class")
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                ok = torch.isfinite(loss)
                scale = torch.where(ok, 1.0, 0.0)  # stays on the device
            """
        ),
        Valid(
            """
            def forward(self, x):
                if x.device.type == "cuda" and (x < 0).any():
                    x = x.clamp_min(0)
                return self.layer(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                if torch.isnan(loss).any():
                    continue
                loss.backward()
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, x, mask=None):
                if mask is not None and mask.all():
                    mask = None
                return self.attn(x, mask)
            """,
            line=2,
        ),
        Invalid(
            """
            def training_step(self, batch, batch_idx):
                loss = self.model(batch)
                assert (loss >= 0).all(), "negative loss"
                return loss
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, x):
                err = (self.layer(x) - x).abs().max()
                while err > self.tol:
                    x = self.layer(x)
                    err = (self.layer(x) - x).abs().max()
                return x
            """,
            line=3,
        ),
        Invalid(
            """
            def update(self, preds, target):
                bad = torch.any((target != 0) & (target != 1))
                if bad:
                    raise ValueError("targets must be binary")
                self.total += target.sum()
            """,
            line=3,
        ),
    ]

    def visit_If(self, node: ast.If) -> None:
        self._check(node.test)

    def visit_While(self, node: ast.While) -> None:
        self._check(node.test)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._check(node.test)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._check(node.test)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self._check(test)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        # a value context (`y = a or b`): the truth of every operand but the last is taken
        if self._in_truth_context(node):
            return
        for value in node.values[:-1]:
            self._check(value, bounded=False)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not) and not self._in_truth_context(node):
            self._check(node.operand)

    def _in_truth_context(self, node: ast.expr) -> bool:
        parent = self.ctx.parent(node)
        if isinstance(parent, ast.BoolOp):
            return True
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return True
        field = self.ctx.index.field_of(node)
        if isinstance(parent, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            return field == "test"
        return isinstance(parent, ast.comprehension) and field == "ifs"

    def _check(self, test: ast.expr, *, bounded: bool = True) -> None:
        for operand in _truth_operands(test):
            if (
                evident_device_tensor(self.ctx, operand)
                and self.ctx.runs_hot(operand)
                and not after_periodic_guard(self.ctx, operand, test if bounded else None)
            ):
                self.report(operand)


def after_periodic_guard(ctx: FileContext, node: ast.AST, stop: ast.AST | None) -> bool:
    """`step % N == 0 and <node>`: `node` is evaluated only every N steps (looking no further up
    than `stop`, when given)."""
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.BoolOp) and isinstance(anc.op, ast.And) and after_periodic_operand(anc, child):
            return True
        if anc is stop:
            break
        child = anc
    return False
