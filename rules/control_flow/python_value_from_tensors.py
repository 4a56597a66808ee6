"""XLA202 python-value-from-tensors: Flags calls that turn device tensors into a Python `bool` or pick
between them in Python, on a per-step path."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, method_name, receiver
from xlalint.analysis.tensors import Kind, evident_device_tensor
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


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
    evidence = ("step",)
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

    TORCH_FUNCS = {
        "torch.equal": "torch.equal",
        "torch.allclose": "torch.allclose",
        "torch.is_nonzero": "torch.is_nonzero",
    }

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified_name(node.func)
        args = [a for a in node.args if not isinstance(a, ast.Starred)]
        if qualified in self.TORCH_FUNCS and args:
            if self._on_device_only(args) and self.ctx.runs_hot(node):
                self.report(node, self.summary.format(func=self.TORCH_FUNCS[qualified]))
            return
        method = method_name(node)
        if (
            method in ("equal", "allclose")
            and args
            and not (qualified or "").startswith("torch.")
            and self._is_tensor_method(node, args)
        ):
            if self.ctx.runs_hot(node):
                self.report(node, self.summary.format(func=f".{method}()"))
            return
        name = dotted_name(node.func)
        if (
            name in ("max", "min")
            and "max" not in self.ctx.index.imports
            and "min" not in self.ctx.index.imports
            and name not in self.ctx.index.module_names
        ):
            self._builtin_extreme(node, name, args)

    def _device(self, expr: ast.expr) -> bool:
        return evident_device_tensor(self.ctx, expr) or self.ctx.tensor_kind(expr) == Kind.DEVICE

    def _is_tensor_method(self, node: ast.Call, args: list[ast.expr]) -> bool:
        recv = receiver(node)
        return (
            recv is not None and self._device(recv) and self.ctx.tensor_kind(args[0]) not in (Kind.NOT_TENSOR, Kind.CPU)
        )

    def _on_device_only(self, args: list[ast.expr]) -> bool:
        """A tensor that may be on the device among the arguments (a model output, or the inputs of a
        metric's update: on the device when training runs there), and no CPU tensor (the comparison
        would then run on the CPU: tensors on two devices are an error, not a sync)."""
        kinds = [self.ctx.tensor_kind(a) for a in args]
        return Kind.CPU not in kinds and any(
            k == Kind.DEVICE or (k == Kind.TENSOR and not self._guessed(a)) for a, k in zip(args, kinds)
        )

    def _guessed(self, expr: ast.expr) -> bool:
        """A free name taken for a tensor by its spelling alone (`labels`, bound nowhere)."""
        return (
            isinstance(expr, ast.Name)
            and not self.ctx.reaching_values(expr)
            and self.ctx.parameter(expr) is None
            and not self.ctx.loop_iterables(expr)
        )

    def _builtin_extreme(self, node: ast.Call, name: str, args: list[ast.expr]) -> None:
        if len(node.args) + len(node.keywords) != 2 or len(args) != 2:
            return  # max(iterable), key=/default=: not two tensors compared directly
        if not all(self._device(a) for a in args) or not self.ctx.runs_hot(node):
            return
        spelling = _torch_alias(self.ctx)
        func = f"{spelling}.{'maximum' if name == 'max' else 'minimum'}"
        imports = [] if spelling != "torch" or "torch" in self.ctx.index.imports else [ImportRequest("torch")]
        self.report(
            node, self.summary.format(func=f"{name}()"), fix=lambda cctx: _use_elementwise(cctx, node, func, imports)
        )


def _use_elementwise(cctx: CstContext, node: ast.Call, func: str, imports: list[ImportRequest]) -> Fix:
    call = cctx.find(node, cst.Call)
    return Fix.replace(
        call,
        call.with_changes(func=cctx.parse_expression(func)),
        title=f"Use `{func}` (elementwise, on the device)",
        safe=False,
        imports=imports,
    )


def _torch_alias(ctx: FileContext) -> str:
    """The name this file binds to the `torch` module (`torch`, or an alias such as `th`)."""
    for local, binding in ctx.index.imports.items():
        if binding.qualified == "torch":
            return local
    return "torch"
