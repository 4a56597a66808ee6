"""XLA501 clip-grad-norm-sync: Flags `torch.nn.utils.clip_grad_norm_` (any import spelling) called with
`error_if_nonfinite=True` (in any file), and, in files that import torch_xla, with `foreach=True` or
an infinite `norm_type` (`float("inf")`, `math.inf`, `torch.inf`, `"inf"`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.names import dotted_name, is_constant, param_default, string_value
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import CLIP_GRAD_NORM

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


# clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None)
SIGNATURE = ("parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach")
INF_NAMES = {"math.inf", "torch.inf", "numpy.inf", "np.inf", "numpy.Inf", "np.Inf", "float.inf"}


def _arguments(call: ast.Call) -> list[ast.expr | ast.keyword]:
    """The call's arguments in source order, as libcst lists them (`f(a=1, *b)` is valid Python)."""
    return sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))


def _argument(call: ast.Call, name: str) -> int | None:
    """The source-order position of the argument bound to `name`; None when a `*`/`**` argument
    before it makes that unknowable."""
    position = SIGNATURE.index(name)
    index = 0
    for i, arg in enumerate(_arguments(call)):
        if isinstance(arg, ast.Starred) or (isinstance(arg, ast.keyword) and arg.arg is None):
            return None
        if isinstance(arg, ast.keyword):
            if arg.arg == name:
                return i
            continue
        if index == position:
            return i
        index += 1
    return None


def _value(call: ast.Call, position: int) -> ast.expr:
    arg = _arguments(call)[position]
    return arg.value if isinstance(arg, ast.keyword) else arg


class ClipGradNormSync(Rule):
    """## What it does
    Flags `torch.nn.utils.clip_grad_norm_` (any import spelling) called with
    `error_if_nonfinite=True` (in any file), and, in files that import torch_xla, with
    `foreach=True` or an infinite `norm_type` (`float("inf")`, `math.inf`, `torch.inf`, `"inf"`).

    ## Why is this bad?
    Plain `clip_grad_norm_(params, max_norm)` has been sync-free since torch 1.10: the clip
    coefficient is clamped on the device. These arguments bring the sync (or worse) back:

    - `error_if_nonfinite=True` tests the total norm in a Python `if`: the step's graph runs and the
      norm is copied to the host on every call (measured on XLA: 2 syncs and 3 compiled graphs
      per step instead of 1).
    - torch_xla replaces `nn.utils.clip_grad_norm_` at import. Its replacement raises
      `RuntimeError` for `foreach=True`, and for `norm_type=inf` takes a Python `max()` over the
      per-parameter norms: one host sync per parameter (measured: 11 syncs for 12 parameters).

    ## Example
    ```python
    import torch_xla

    for x, y in loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, norm_type=float("inf"))
        optimizer.step()
        torch_xla.sync()
    ```

    Use instead:
    ```python
    import torch_xla
    from xlalint.runtime import clip_grad_norm_

    for x, y in loader:
        loss_fn(model(x), y).backward()
        clip_grad_norm_(model.parameters(), 1.0, norm_type=float("inf"))  # stays on the device
        optimizer.step()
        torch_xla.sync()
    ```

    ## Fix safety
    The fix calls `xlalint.runtime.clip_grad_norm_` with the same arguments, dropping
    `foreach=True`. It is unsafe: the added `from xlalint.runtime import clip_grad_norm_` makes the
    code import the linter at run time, and the training environment may not have it (the pre-commit
    fix hook runs in an environment of its own); in a file that already imports xlalint it is safe
    for `foreach=True` and `norm_type=inf`. There the runtime computes exactly torch's result
    (bit-identical on CPU/CUDA, where `foreach=None` picks the same kernels as `foreach=True` for
    plain tensors) without any host sync. It changes behaviour when `error_if_nonfinite` may be
    true: on torch_xla the runtime raises torch's error at the step barrier (a step closure reads the
    norm once the step ran: no graph cut), so the update of that step is already applied; on torchax
    it cannot check without a sync and warns instead; elsewhere it raises as torch does.
    """

    code, name, category = "XLA501", "clip-grad-norm-sync", "clip_grad_norm"
    summary = "`clip_grad_norm_` with {what}"
    hint = (
        "use `xlalint.runtime.clip_grad_norm_` (same math, no host sync; on torch_xla it raises "
        "for a non-finite norm at the step barrier)"
    )
    fix_availability = "always"

    VALID = [
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # sync-free since torch 1.10
                optimizer.step()
            """
        ),
        Valid(
            """
            # no torch_xla here: torch's foreach kernels and inf-norm are fine on CPU/CUDA
            for x, y in loader:
                loss_fn(model(x), y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, norm_type=float("inf"), foreach=True)
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), float("inf"))  # not torch's
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch_xla
            for x, y in loader:
                loss_fn(model(x), y).backward()
                if device.type == "cuda":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            """
        ),
        Valid(
            """
            import torch_xla
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False, foreach=False)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla

            for x, y in loader:
                loss_fn(model(x), y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, norm_type=float("inf"))
                optimizer.step()
                torch_xla.sync()
            """,
            line=6,
            expected_replacement="""
            import torch
            import torch_xla
            from xlalint.runtime import clip_grad_norm_

            for x, y in loader:
                loss_fn(model(x), y).backward()
                clip_grad_norm_(model.parameters(), 1.0, norm_type=float("inf"))
                optimizer.step()
                torch_xla.sync()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla
            from torch.nn.utils import clip_grad_norm_

            for x, y in loader:
                loss_fn(model(x), y).backward()
                clip_grad_norm_(model.parameters(), max_norm=0.5, foreach=True)
                optimizer.step()
                torch_xla.sync()
            """,
            line=6,
            expected_replacement="""
            import torch_xla
            from torch.nn.utils import clip_grad_norm_
            import xlalint.runtime

            for x, y in loader:
                loss_fn(model(x), y).backward()
                xlalint.runtime.clip_grad_norm_(model.parameters(), max_norm=0.5)
                optimizer.step()
                torch_xla.sync()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            from torch import nn

            def clip(model, max_norm):
                return nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)
            """,
            line=4,
            expected_replacement="""
            from torch import nn
            from xlalint.runtime import clip_grad_norm_

            def clip(model, max_norm):
                return clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch

            class Strategy:
                def clip_gradients(self, params, max_norm, error_if_nonfinite=True):
                    return torch.nn.utils.clip_grad.clip_grad_norm_(
                        params, max_norm=max_norm, error_if_nonfinite=error_if_nonfinite
                    )
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) not in CLIP_GRAD_NORM:
            return
        reasons = []
        nonfinite = _argument(node, "error_if_nonfinite")
        raises = nonfinite is not None and self._may_be_true(_value(node, nonfinite))
        if raises:
            reasons.append("`error_if_nonfinite=True` reads the norm on the host every call")
        foreach = _argument(node, "foreach")
        drop_foreach = foreach is not None and _is_true(_value(node, foreach))
        if self.ctx.uses_xla:
            if drop_foreach:
                reasons.append("`foreach=True` raises under torch_xla's patched `clip_grad_norm_`")
            norm_type = _argument(node, "norm_type")
            if norm_type is not None and self._is_inf(_value(node, norm_type)):
                reasons.append("`norm_type=inf` syncs once per parameter under torch_xla's patched `clip_grad_norm_`")
        if not reasons or self.ctx.in_non_xla_code(node):
            return
        drop = foreach if drop_foreach else None
        self.report(
            node,
            self.summary.format(what="; ".join(reasons)),
            fix=lambda cctx: self._fix(cctx, node, drop, safe=not raises),
        )

    def _may_be_true(self, value: ast.expr) -> bool:
        if _is_true(value):
            return True
        if isinstance(value, ast.Name):
            # passed through from a parameter whose default is True (the caller usually keeps it)
            param = self.ctx.parameter(value)
            if param is not None and not self.ctx.reaching_values(value):
                arguments = self.ctx.parent(param)
                func = self.ctx.parent(arguments) if arguments is not None else None
                if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    return False  # (never: a parameter's grandparent is its function)
                default = param_default(func, param)
                return default is not None and _is_true(default)
            values = self.ctx.reaching_values(value)
            return bool(values) and all(_is_true(v) for v in values)
        return False

    def _is_inf(self, value: ast.expr) -> bool:
        if _is_inf_literal(value, self.ctx.qualified_name):
            return True
        if isinstance(value, ast.Name):
            values = self.ctx.reaching_values(value)
            return bool(values) and all(_is_inf_literal(v, self.ctx.qualified_name) for v in values)
        return False

    @staticmethod
    def _fix(cctx: CstContext, call: ast.Call, drop: int | None, safe: bool) -> Fix:
        """Call the runtime's `clip_grad_norm_` instead, without the argument at source position `drop`."""
        node = cctx.find(call, cst.Call)
        spelled, request = cctx.importable("xlalint.runtime", "clip_grad_norm_")
        args = list(node.args)
        if drop is not None:
            dropped = args.pop(drop)
            if drop == len(args) and args:  # it was the last one: the new last takes its comma (or none)
                args[-1] = args[-1].with_changes(comma=dropped.comma)
        replacement = node.with_changes(func=cctx.parse_expression(spelled), args=args)
        return Fix.replace(node, replacement, title=f"Call `{spelled}` (no host sync)", safe=safe, imports=[request])


def _is_true(value: ast.expr) -> bool:
    return is_constant(value, True)


def _is_inf_literal(value: ast.expr, qualify) -> bool:
    text = string_value(value)
    if text is not None:
        return text.strip().lower() in ("inf", "+inf", "infinity")
    if (
        isinstance(value, ast.Call)
        and dotted_name(value.func) == "float"
        and len(value.args) == 1
        and not value.keywords
    ):
        return _is_inf_literal(value.args[0], qualify)
    name = dotted_name(value)
    if name:
        qualified = qualify(value) or name
        return qualified in INF_NAMES or name in INF_NAMES
    return False
