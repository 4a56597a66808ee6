"""Python control flow on device tensors: the truth value of a lazy tensor is a host sync."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, method_name, receiver
from xlalint.analysis.steps import after_periodic_operand
from xlalint.analysis.tensors import MAX_DEPTH, Kind
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.rule import Invalid, Rule, Valid

from ._common import reportable_sync

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

# Tensor methods whose result is a tensor when the receiver is one: evident tensor values.
_TENSOR_REDUCTIONS = {"any", "all", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_not",
                      "logical_and", "logical_or", "eq", "ne", "gt", "ge", "lt", "le", "greater", "less",
                      "greater_equal", "less_equal", "max", "min", "amax", "amin", "sum", "mean", "norm",
                      "abs", "count_nonzero", "prod", "std", "var"}


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
            if evident_device_tensor(self.ctx, operand) and reportable_sync(self.ctx, operand) and \
                    not after_periodic_guard(self.ctx, operand, test if bounded else None):
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


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


def evident_device_tensor(ctx: FileContext, expr: ast.expr, depth: int = 0) -> bool:
    """`expr` is a device tensor by what it computes, not only by its name.

    A bare parameter or loop variable (`if cache:`, `if dur > 0:`) is not enough: in a truth test
    such names are usually Optional/None checks, lists or Python numbers. A torch function, a
    tensor method or an elementwise comparison involving an evident tensor is.
    """
    if depth > MAX_DEPTH or not ctx.on_device(expr):
        return False
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Attribute):
        values = ctx.assigned_values(expr)
        return any(evident_device_tensor(ctx, v, depth + 1) for v in values)
    if isinstance(expr, ast.Subscript):
        return evident_device_tensor(ctx, expr.value, depth + 1)
    if isinstance(expr, ast.Compare):
        operands = [expr.left, *expr.comparators]
        if any(_is_text(o) for o in operands):
            return False
        return any(evident_device_tensor(ctx, o, depth + 1) for o in operands)
    if isinstance(expr, ast.BinOp):
        return any(evident_device_tensor(ctx, o, depth + 1) for o in (expr.left, expr.right))
    if isinstance(expr, ast.UnaryOp):
        return evident_device_tensor(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.Call):
        qualified = ctx.qualified_name(expr.func) or ""
        if qualified.startswith("torch.") and not qualified.startswith("torch.Tensor"):
            return True  # a torch function that returns a tensor (kind already says which)
        method = method_name(expr)
        recv = receiver(expr)
        if method in _TENSOR_REDUCTIONS and recv is not None and ctx.on_device(recv):
            return True
        return method is not None and recv is not None and evident_device_tensor(ctx, recv, depth + 1)
    return False


class PythonValueFromTensors(Rule):
    """## What it does
    Flags calls that turn device tensors into a Python `bool` or pick between them in Python, on a
    per-step path: `torch.equal(a, b)`, `torch.allclose(a, b)`, `a.equal(b)`, `a.allclose(b)`,
    `torch.is_nonzero(t)`, and the builtins `max(a, b)` / `min(a, b)` over device tensors.
    Comparisons of CPU tensors (`torch.tensor(...)` without a device, `.cpu()` results) are not
    reported, nor are those whose arguments are tensors of unknown device.

    ## Why is this bad?
    These return Python values: the lazy graph executes and the result is copied to the host, every
    step. `torch.equal` also has no XLA lowering (a CPU fallback). Builtin `max(a, b)` evaluates
    `b > a` with `Tensor.__bool__`, a hidden sync, and only works for single-element tensors.

    ## Example
    ```python
    def forward(self, x):
        h = self.encoder(x)
        scale = max(h.norm(), self.eps)  # Python compares two tensors
        return h / scale
    ```

    Use instead:
    ```python
    def forward(self, x):
        h = self.encoder(x)
        scale = torch.maximum(h.norm(), self.eps)  # elementwise, on the device
        return h / scale
    ```

    For equality checks keep a tensor: `(a == b).all()`, and read it every N steps.

    ## Fix safety
    `max(a, b)` / `min(a, b)` of two device tensors becomes `torch.maximum(a, b)` /
    `torch.minimum(a, b)`. The fix is unsafe: builtin `max` returns one of its arguments unchanged
    (its dtype, its shape, the same object), ignores a NaN in the second argument and sends the whole
    gradient to one side, while `torch.maximum` promotes dtypes, broadcasts, propagates NaN and splits
    the gradient at ties. For multi-element tensors builtin `max` raises, so the rewrite changes an
    error into a result.
    """

    code, name, category = "XLA202", "python-value-from-tensors", "control_flow_on_tensor"
    summary = "`{func}` of device tensors returns a Python value: a host sync on a per-step path"
    hint = "compare on the device (`(a == b).all()`, `torch.isclose`, `torch.maximum`) and read results every N steps"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                longest = max(len(s) for s in batch_texts)
                width = max(x.shape[-1], 8)
            """
        ),
        Valid(
            """
            def test_roundtrip():
                out = model(torch.ones(2, 3))
                assert torch.allclose(out, expected)  # a test, not a training step
            """
        ),
        Valid(
            """
            def forward(self, x):
                h = self.encoder(x)
                return torch.maximum(h, torch.zeros_like(h))
            """
        ),
        Valid(
            """
            for batch in loader:
                cpu_a = torch.tensor([1, 2])
                same = torch.equal(cpu_a, torch.tensor([1, 2]))  # CPU tensors
                lr = max(scheduler.get_last_lr()[0], 1e-6)
            """
        ),
        Valid(
            """
            for x, y in loader:
                out = model(x)
                loss = loss_fn(out, y)
                loss.backward()
                expected = torch.tensor([0.5, 0.5])  # no device: a CPU tensor
                host_out = out.detach().cpu()
                same = torch.allclose(host_out, expected) and torch.equal(host_out, target)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def update(self, preds, target):
                if not torch.equal(target, target.round()):  # a metric's inputs: on the device
                    raise ValueError("target must be integral")
                self.correct += (preds == target).sum()
            """,
            line=2,
        ),
        Invalid(
            """
            for x, y in loader:
                out = model(x)
                drift = out.allclose(y, atol=1e-3)
                loss = loss_fn(out, y)
                loss.backward()
            """,
            line=3,
        ),
        Invalid(
            """
            import torch

            def forward(self, x):
                h = self.encoder(x)
                g = self.decoder(h)
                scale = max(h.norm(), g.norm())
                return h / scale
            """,
            line=6,
            expected_replacement="""
            import torch

            def forward(self, x):
                h = self.encoder(x)
                g = self.decoder(h)
                scale = torch.maximum(h.norm(), g.norm())
                return h / scale
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch as th

            def training_step(self, batch, batch_idx):
                loss_a = self.model(batch["a"])
                loss_b = self.model(batch["b"])
                return min(loss_a, loss_b)
            """,
            line=6,
            expected_replacement="""
            import torch as th

            def training_step(self, batch, batch_idx):
                loss_a = self.model(batch["a"])
                loss_b = self.model(batch["b"])
                return th.minimum(loss_a, loss_b)
            """,
            applicability=Applicability.UNSAFE,
        ),
    ]

    TORCH_FUNCS = {"torch.equal": "torch.equal", "torch.allclose": "torch.allclose",
                   "torch.is_nonzero": "torch.is_nonzero"}

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified_name(node.func)
        args = [a for a in node.args if not isinstance(a, ast.Starred)]
        if qualified in self.TORCH_FUNCS and args:
            if self._on_device_only(args) and reportable_sync(self.ctx, node):
                self.report(node, self.summary.format(func=self.TORCH_FUNCS[qualified]))
            return
        method = method_name(node)
        if method in ("equal", "allclose") and args and not (qualified or "").startswith("torch.") and \
                self._is_tensor_method(node, args):
            if reportable_sync(self.ctx, node):
                self.report(node, self.summary.format(func=f".{method}()"))
            return
        name = dotted_name(node.func)
        if name in ("max", "min") and "max" not in self.ctx.index.imports and "min" not in self.ctx.index.imports \
                and name not in self.ctx.index.module_names:
            self._builtin_extreme(node, name, args)

    def _device(self, expr: ast.expr) -> bool:
        return evident_device_tensor(self.ctx, expr) or self.ctx.tensor_kind(expr) == Kind.DEVICE

    def _is_tensor_method(self, node: ast.Call, args: list[ast.expr]) -> bool:
        return self._device(receiver(node)) and self.ctx.tensor_kind(args[0]) not in (Kind.NOT_TENSOR, Kind.CPU)

    def _on_device_only(self, args: list[ast.expr]) -> bool:
        """A tensor that may be on the device among the arguments (a model output, or the inputs of a
        metric's update: on the device when training runs there), and no CPU tensor (the comparison
        would then run on the CPU: tensors on two devices are an error, not a sync)."""
        kinds = [self.ctx.tensor_kind(a) for a in args]
        return Kind.CPU not in kinds and any(
            k == Kind.DEVICE or (k == Kind.TENSOR and not self._guessed(a)) for a, k in zip(args, kinds))

    def _guessed(self, expr: ast.expr) -> bool:
        """A free name taken for a tensor by its spelling alone (`labels`, bound nowhere)."""
        return isinstance(expr, ast.Name) and not self.ctx.reaching_values(expr) and \
            self.ctx.parameter(expr) is None and not self.ctx.loop_iterables(expr)

    def _builtin_extreme(self, node: ast.Call, name: str, args: list[ast.expr]) -> None:
        if len(node.args) + len(node.keywords) != 2 or len(args) != 2:
            return  # max(iterable), key=/default=: not two tensors compared directly
        if not all(self._device(a) for a in args) or not reportable_sync(self.ctx, node):
            return
        spelling = _torch_spelling(self.ctx)
        func = f"{spelling}.{'maximum' if name == 'max' else 'minimum'}"
        imports = [] if spelling != "torch" or "torch" in self.ctx.index.imports else [ImportRequest("torch")]
        self.report(node, self.summary.format(func=f"{name}()"),
                    fix=lambda cctx: _use_elementwise(cctx, node, func, imports))


def _use_elementwise(cctx: CstContext, node: ast.Call, func: str, imports: list[ImportRequest]) -> Fix:
    call = cctx.locate(node)
    return Fix.replace(call, call.with_changes(func=cctx.parse_expression(func)),
                       title=f"Use `{func}` (elementwise, on the device)", safe=False, imports=imports)


def _torch_spelling(ctx: FileContext) -> str:
    """The name this file binds to the `torch` module (`torch`, or an alias such as `th`)."""
    for local, binding in ctx.index.imports.items():
        if binding.qualified == "torch":
            return local
    return "torch"
