"""Gradient clipping that syncs with the host, raises, or branches on a tensor norm."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from xlalint.analysis.index import FUNCTIONS, LOOPS, target_names
from xlalint.analysis.names import dotted_name, is_constant, last_part, method_name, param_default, receiver
from xlalint.analysis.names import string_value
from xlalint.analysis.reads import argument_reads
from xlalint.analysis.steps import DEVICE_LOADER, is_step_loop
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import reportable_sync

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

CLIP_GRAD_NORM = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm",  # deprecated alias, same function
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm",
}
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
    hint = ("use `xlalint.runtime.clip_grad_norm_` (same math, no host sync; on torch_xla it raises "
            "for a non-finite norm at the step barrier)")
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
        self.report(node, self.summary.format(what="; ".join(reasons)),
                    fix=lambda cctx: self._fix(cctx, node, drop, safe=not raises))

    def _may_be_true(self, value: ast.expr) -> bool:
        if _is_true(value):
            return True
        if isinstance(value, ast.Name):
            # passed through from a parameter whose default is True (the caller usually keeps it)
            param = self.ctx.parameter(value)
            if param is not None and not self.ctx.reaching_values(value):
                default = param_default(self.ctx.parent(self.ctx.parent(param)), param)
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
        node = cctx.locate(call)
        spelled, request = cctx.importable("xlalint.runtime", "clip_grad_norm_")
        args = list(node.args)
        if drop is not None:
            dropped = args.pop(drop)
            if drop == len(args) and args:  # it was the last one: the new last takes its comma (or none)
                args[-1] = args[-1].with_changes(comma=dropped.comma)
        replacement = node.with_changes(func=cctx.parse_expression(spelled), args=args)
        return Fix.replace(node, replacement, title=f"Call `{spelled}` (no host sync)", safe=safe,
                           imports=[request])


def _is_true(value: ast.expr) -> bool:
    return is_constant(value, True)


def _is_inf_literal(value: ast.expr, qualify) -> bool:
    text = string_value(value)
    if text is not None:
        return text.strip().lower() in ("inf", "+inf", "infinity")
    if isinstance(value, ast.Call) and dotted_name(value.func) == "float" and len(value.args) == 1 and \
            not value.keywords:
        return _is_inf_literal(value.args[0], qualify)
    name = dotted_name(value)
    if name:
        qualified = qualify(value) or name
        return qualified in INF_NAMES or name in INF_NAMES
    return False


# -- XLA502 ----------------------------------------------------------------------------------------

NORM_NAME = re.compile(r"norm", re.I)
COEF_NAME = re.compile(r"clip_?coef|clip_?coeff|clip_?factor|scale_?coef", re.I)
SCALING_METHODS = {"mul_", "div_"}


class ManualGradClipping(Rule):
    """## What it does
    Flags hand-written gradient clipping by a *global* norm that branches on that norm: an `if` whose
    test compares the gradients' total norm (or a clip coefficient computed from it) with a
    threshold and whose body scales the gradients.

    Clipping each parameter by its own norm (a norm and a coefficient computed per parameter inside a
    loop over the parameters) is not what `clip_grad_norm_` does and is not reported here: its `if`
    on a device tensor is a plain Python branch on a tensor, reported by XLA201
    (`tensor-condition`).

    ## Why is this bad?
    The norm is a lazy device tensor. The Python `if` needs its value: the step's graph executes and
    the norm is copied to the host on every step, and the step is cut into two graphs (one per branch
    taken). `torch.nn.utils.clip_grad_norm_` does the same clipping on the device, with
    `clamp(max_norm / (norm + 1e-6), max=1)` instead of a branch.

    ## Example
    ```python
    for x, y in loader:
        loss_fn(model(x), y).backward()
        params = [p for p in model.parameters() if p.grad is not None]
        total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
        if total_norm > max_norm:
            for p in params:
                p.grad.mul_(max_norm / (total_norm + 1e-6))
        optimizer.step()
    ```

    Use instead:
    ```python
    from xlalint.runtime import clip_grad_norm_

    for x, y in loader:
        loss_fn(model(x), y).backward()
        params = [p for p in model.parameters() if p.grad is not None]
        total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
        clip_grad_norm_(params, max_norm)
        optimizer.step()
    ```

    ## Fix safety
    When the parameters and the max norm can be read off the pattern exactly (an `if` holding one
    loop over the parameters that scales each gradient, by a 2-norm of exactly those parameters'
    gradients), the fix replaces the `if` statement with
    `xlalint.runtime.clip_grad_norm_(params, max_norm)`. It is unsafe: the coefficient is computed as
    torch computes it (`max_norm / (norm + 1e-6)`, clamped at 1, applied always), which may differ
    slightly from the hand-written formula, and the 2-norm is recomputed by the runtime; and the
    added `from xlalint.runtime import clip_grad_norm_` makes the code import the linter at run time,
    which the training environment may not have.
    """

    code, name, category = "XLA502", "manual-grad-clipping", "clip_grad_norm"
    summary = "hand-written gradient clipping branches on a device tensor norm: a host sync every step"
    hint = "use `torch.nn.utils.clip_grad_norm_` or `xlalint.runtime.clip_grad_norm_` (clamps on the device)"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            def clip_grad_norm_(params, max_norm):
                grads = [p.grad for p in params if p.grad is not None]
                total_norm = torch.norm(torch.stack([torch.norm(g) for g in grads]))
                if max_norm > 0:  # a config value, not a tensor
                    clip_coef = (max_norm / (total_norm + 1e-6)).clamp_(max=1)
                    for g in grads:
                        g.mul_(clip_coef)
                return total_norm
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss_fn(model(x), y).backward()
                total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                if step % 100 == 0:
                    logger.info("grad norm %s", total_norm)
                optimizer.step()
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss_fn(model(x), y).backward()
                total_norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
                clip_coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
                for p in params:
                    p.grad.mul_(clip_coef)
                optimizer.step()
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss = loss_fn(model(x), y)
                if loss > threshold:  # branches on a tensor, but does not clip gradients
                    skipped += 1
                    continue
                loss.backward()
            """
        ),
        Valid(
            """
            for x, y in loader:
                loss_fn(model(x), y).backward()
                for p in model.parameters():  # per-parameter clipping: XLA201's `if`, not clip_grad_norm_
                    param_norm = p.grad.norm(2)
                    if param_norm > max_norm:
                        p.grad.mul_(max_norm / (param_norm + 1e-6))
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            for x, y in loader:
                loss_fn(model(x), y).backward()
                params = [p for p in model.parameters() if p.grad is not None]
                total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
                if total_norm > max_norm:
                    for p in params:
                        p.grad.mul_(max_norm / (total_norm + 1e-6))
                optimizer.step()
            """,
            line=7,
            expected_replacement="""
            import torch
            from xlalint.runtime import clip_grad_norm_

            for x, y in loader:
                loss_fn(model(x), y).backward()
                params = [p for p in model.parameters() if p.grad is not None]
                total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
                clip_grad_norm_(params, max_norm)
                optimizer.step()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            def clip_gradients(model, max_grad_norm):
                total_norm = 0.0
                for p in model.parameters():
                    if p.grad is not None:
                        total_norm += p.grad.data.norm(2) ** 2
                total_norm = total_norm ** 0.5
                clip_coef = max_grad_norm / (total_norm + 1e-6)
                if clip_coef < 1:
                    for p in model.parameters():
                        if p.grad is not None:
                            p.grad.data.mul_(clip_coef)
                return total_norm
            """,
            line=8,
            expected_replacement="""
            from xlalint.runtime import clip_grad_norm_

            def clip_gradients(model, max_grad_norm):
                total_norm = 0.0
                for p in model.parameters():
                    if p.grad is not None:
                        total_norm += p.grad.data.norm(2) ** 2
                total_norm = total_norm ** 0.5
                clip_coef = max_grad_norm / (total_norm + 1e-6)
                clip_grad_norm_(model.parameters(), max_grad_norm)
                return total_norm
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            for batch in loader:
                model(**batch).loss.backward()
                grad_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
                if grad_norm >= cfg.clip:
                    scale = cfg.clip / grad_norm
                    for group in optimizer.param_groups:
                        for p in group["params"]:
                            p.grad *= scale
                optimizer.step()
            """,
            line=4,
        ),
    ]

    def visit_If(self, node: ast.If) -> None:
        found = self._norm_test(node.test)
        if found is None or not self._scales_gradients(node.body):
            return
        if self.ctx.in_non_xla_code(node) or self._per_parameter(found[0], node):
            return
        replacement = self._replacement(node, *found)
        if replacement is None or self._is_elif(node):
            # an `elif` cannot become a statement: the call would run whenever the `if` above fails
            self.report(node.test)
        else:
            self.report(node.test, fix=lambda cctx: self._fix(cctx, node, *replacement))

    def _is_elif(self, node: ast.If) -> bool:
        parent = self.ctx.parent(node)
        return isinstance(parent, ast.If) and parent.orelse == [node] and \
            self.ctx.text.lines[node.lineno - 1].lstrip().startswith("elif")

    # -- the test -------------------------------------------------------------------------------
    def _norm_test(self, test: ast.expr):
        """(norm expression, threshold or None, coefficient form?) for `norm > max` / `coef < 1`."""
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return None
        op = test.ops[0]
        left, right = test.left, test.comparators[0]
        if isinstance(op, (ast.Lt, ast.LtE)):
            big, small = right, left
        elif isinstance(op, (ast.Gt, ast.GtE)):
            big, small = left, right
        else:
            return None
        # `norm > max_norm`: the norm is the bigger side, a device tensor named like a norm
        if self._is_device_norm(big) and not _is_number(small, 0.0) and not self.ctx.on_device(small):
            return big, small, False
        # `clip_coef < 1`: a coefficient computed from the norm, compared with 1
        if _is_number(big, 1.0) and self.ctx.on_device(small) and self._is_coefficient(small):
            return small, None, True
        return None

    def _per_parameter(self, norm: ast.expr, node: ast.If) -> bool:
        """The compared norm (or coefficient) is computed per element of a loop around the `if`: it
        reads that loop's variable, directly or through names assigned inside the loop."""
        for loop in self.ctx.index.ancestors(node):
            if isinstance(loop, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
                break
            if isinstance(loop, (ast.For, ast.AsyncFor)) and \
                    self._reads_loop_variable(norm, loop, set(target_names(loop.target)), 0):
                return True
        return False

    def _reads_loop_variable(self, expr: ast.expr, loop: ast.AST, targets: set[str], depth: int) -> bool:
        if depth > 3:
            return False
        for name in (n for n in ast.walk(expr) if isinstance(n, ast.Name)):
            if name.id in targets:
                return True
            values = [v for v in self.ctx.reaching_values(name) if loop in self.ctx.index.ancestors(v)]
            if any(self._reads_loop_variable(v, loop, targets, depth + 1) for v in values):
                return True
        return False

    def _is_device_norm(self, node: ast.expr) -> bool:
        name = dotted_name(node)
        if isinstance(node, ast.Call):
            name = method_name(node) or last_part(dotted_name(node.func))
        return bool(name and NORM_NAME.search(last_part(name))) and self.ctx.on_device(node)

    def _is_coefficient(self, node: ast.expr) -> bool:
        name = dotted_name(node)
        if name and COEF_NAME.search(last_part(name)):
            return True
        return any(isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div) and _mentions_norm(v.right)
                   for v in self.ctx.assigned_values(node))

    # -- the body -------------------------------------------------------------------------------
    def _scales_gradients(self, body: list[ast.stmt]) -> bool:
        for statement in body:
            for n in ast.walk(statement):
                if isinstance(n, ast.Call):
                    if method_name(n) in SCALING_METHODS and self._mentions_grad(receiver(n)):
                        return True
                    if last_part(dotted_name(n.func)) in ("_foreach_mul_", "_foreach_div_"):
                        return True
                elif isinstance(n, ast.AugAssign):
                    if isinstance(n.op, (ast.Mult, ast.Div)) and self._mentions_grad(n.target):
                        return True
                elif isinstance(n, ast.Assign):
                    if any(self._is_grad(t) for t in n.targets) and isinstance(n.value, ast.BinOp) and \
                            isinstance(n.value.op, (ast.Mult, ast.Div)):
                        return True
        return False

    def _mentions_grad(self, node: ast.expr | None) -> bool:
        return node is not None and (".grad" in self.ctx.code(node) or "grad" in last_part(dotted_name(node)))

    def _is_grad(self, node: ast.expr) -> bool:
        return self.ctx.code(node).endswith((".grad", ".grad.data"))

    # -- the fix: decided here, built on libcst by `_fix` ---------------------------------------------
    def _replacement(self, node: ast.If, norm: ast.expr, threshold, coefficient: bool) -> tuple[str, str] | None:
        """(params, max norm) as written, when the `if` is exactly `clip_grad_norm_(params, max norm)`."""
        if node.orelse:
            return None
        if coefficient:
            threshold = self._threshold_of_coefficient(norm)
            if threshold is None:
                return None
        # an `if` holding [coef = max / (norm + eps)]* then one loop over the parameters
        loop = node.body[-1]
        if not isinstance(loop, ast.For):
            return None
        code = self.ctx.code
        coefficients = {code(norm)} if coefficient else set()
        for statement in node.body[:-1]:
            target = _simple_assignment(statement)
            if target is None or not self._is_scale_of(target[1], threshold, norm if not coefficient else None):
                return None
            coefficients.add(target[0])
        if not isinstance(loop.target, ast.Name) or loop.orelse:
            return None
        if not self._loop_scales_each(loop.body, loop.target.id, threshold, norm, coefficients):
            return None
        params = loop.iter
        compared = _norm_denominator(self.ctx.assigned_values(norm)[0].right) if coefficient else norm
        if compared is None or not self._norm_over(compared, params):
            return None
        return code(params), code(threshold)

    @staticmethod
    def _fix(cctx: CstContext, if_node: ast.If, params: str, threshold: str) -> Fix:
        node = cctx.locate(if_node)
        spelled, request = cctx.importable("xlalint.runtime", "clip_grad_norm_")
        statement = cctx.parse_statement(f"{spelled}({params}, {threshold})")
        statement = statement.with_changes(leading_lines=node.leading_lines)
        return Fix.replace(node, statement, title=f"Replace with `{spelled}(...)`", safe=False, imports=[request])

    def _threshold_of_coefficient(self, coef: ast.expr):
        values = self.ctx.assigned_values(coef)
        if len(values) != 1:
            return None
        value = values[0]
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div) and \
                _norm_denominator(value.right) is not None and not self.ctx.on_device(value.left):
            return value.left
        return None

    def _is_scale_of(self, value: ast.expr, threshold, norm) -> bool:
        """`threshold / (norm + eps)` or `threshold / norm`."""
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div)):
            return False
        code = self.ctx.code
        if code(value.left) != code(threshold):
            return False
        denominator = _norm_denominator(value.right)
        return denominator is not None and (norm is None or code(denominator) == code(norm))

    def _loop_scales_each(self, body: list[ast.stmt], var: str, threshold, norm, coefficients: set[str]) -> bool:
        code = self.ctx.code
        statements = body
        if len(statements) == 1 and isinstance(statements[0], ast.If) and not statements[0].orelse and \
                code(statements[0].test) == f"{var}.grad is not None":
            statements = statements[0].body
        if len(statements) != 1:
            return False
        small = statements[0]
        if isinstance(small, ast.Expr) and isinstance(small.value, ast.Call) and method_name(small.value) == "mul_" \
                and len(small.value.args) == 1 and not small.value.keywords:
            target, factor = receiver(small.value), small.value.args[0]
        elif isinstance(small, ast.AugAssign) and isinstance(small.op, ast.Mult):
            target, factor = small.target, small.value
        else:
            return False
        if code(target) not in (f"{var}.grad", f"{var}.grad.data", f"{var}.grad.detach()"):
            return False
        if code(factor) in coefficients:
            return True
        return norm is not None and threshold is not None and code(norm) not in coefficients and \
            self._is_scale_of(factor, threshold, norm)

    def _norm_over(self, norm: ast.expr, params: ast.expr) -> bool:
        """The compared norm is a 2-norm of the gradients of exactly `params`: every assignment to it
        that reads gradients iterates `params` (a comprehension or a `for` loop over it)."""
        name = dotted_name(norm)
        if not name:
            return False
        code = self.ctx.code
        values = self.ctx.index.assignments.get(self.ctx.index.scope_of(norm), {}).get(name, [])
        wanted = code(params)
        reads = 0
        for value in values:
            text = code(value)
            if ".grad" not in text:
                continue
            reads += 1
            if re.search(r"inf|\bp=\s*1\b|norm\(\s*1\b|ord=|abs\(|max\(", text):
                return False
            if not (self._iterates(value, wanted) or self._inside_loop_over(value, wanted)):
                return False
        return reads > 0

    def _iterates(self, node: ast.expr, wanted: str) -> bool:
        return any(isinstance(n, ast.comprehension) and self.ctx.code(n.iter) == wanted for n in ast.walk(node))

    def _inside_loop_over(self, node: ast.AST, wanted: str) -> bool:
        return any(isinstance(anc, ast.For) and self.ctx.code(anc.iter) == wanted
                   for anc in self.ctx.index.ancestors(node))


def _mentions_norm(node: ast.expr) -> bool:
    """A name or attribute name in `node` reads like a norm (`total_norm`, `self.grad_norm`)."""
    return any(isinstance(n, ast.Name) and NORM_NAME.search(n.id) or
               isinstance(n, ast.Attribute) and NORM_NAME.search(n.attr) or
               isinstance(n, ast.keyword) and n.arg and NORM_NAME.search(n.arg) for n in ast.walk(node))


def _norm_denominator(node: ast.expr):
    """`norm + 1e-6` -> norm, `(norm + eps)` -> norm, `norm` -> norm."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and \
            isinstance(node.right, ast.Constant) and type(node.right.value) is float:
        return node.left
    if isinstance(node, (ast.Name, ast.Attribute)):
        return node
    return None


def _simple_assignment(statement: ast.stmt):
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id, statement.value
    return None


def _is_number(node: ast.expr, value: float) -> bool:
    """An int or float literal equal to `value` (never `True`)."""
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and float(node.value) == value


# -- XLA504 ----------------------------------------------------------------------------------------

class GradientReadingHelperInStep(Rule):
    """## What it does
    Flags a per-step call of a function of another module of the project that reads the gradients
    of the model it is given to the host on every call: a hand-written clipping helper that takes
    `p.grad.norm().item()` per parameter (or branches on it), or a gradient-norm logger.

    ## Why is this bad?
    Each read is a host sync: the step's pending graph executes and the value is copied to the
    host, once per parameter for a per-parameter loop, before the optimizer has stepped. The step is
    cut into as many graphs. Inside the helper this is easy to miss (it looks like setup code); the
    cost is paid at the call made every step, so the call is reported, with the line of the read.
    `torch.nn.utils.clip_grad_norm_` (or `xlalint.runtime.clip_grad_norm_`) clips on the device
    without reading anything.

    ## Example
    ```python
    # utils.py
    def clip_gradients(model, clip):
        norms = []
        for p in model.parameters():
            if p.grad is not None:
                param_norm = p.grad.norm(2)
                norms.append(param_norm.item())
                clip_coef = clip / (param_norm + 1e-6)
                if clip_coef < 1:
                    p.grad.mul_(clip_coef)
        return norms

    # train.py
    for x, y in loader:
        loss_fn(model(x), y).backward()
        utils.clip_gradients(model, 3.0)
        optimizer.step()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)  # one norm, on the device
        optimizer.step()
    ```

    ## Fix safety
    No automatic fix: the helper may clip each parameter by its own norm, which `clip_grad_norm_`
    does not.
    """

    code, name, category = "XLA504", "gradient-reading-helper-in-step", "clip_grad_norm"
    summary = ("`{helper}()` reads the gradients of the model passed as `{param}` to the host "
               "({what} at {where}): a sync every step")
    hint = "clip with `torch.nn.utils.clip_grad_norm_` (no host read), or log gradient norms every N steps"

    UTILS = {"utils.py": """
        def clip_gradients(model, clip):
            norms = []
            for name, p in model.named_parameters():
                if p.grad is not None:
                    param_norm = p.grad.data.norm(2)
                    norms.append(param_norm.item())
                    clip_coef = clip / (param_norm + 1e-6)
                    if clip_coef < 1:
                        p.grad.data.mul_(clip_coef)
            return norms
        """}

    VALID = [
        Valid(
            """
            import utils

            for step, (x, y) in enumerate(loader):
                loss_fn(model(x), y).backward()
                if step % 100 == 0:
                    utils.clip_gradients(model, 3.0)
                optimizer.step()
            """,
            modules=UTILS,
        ),
        Valid(
            """
            import utils

            for x, y in loader:
                loss_fn(model(x), y).backward()
                optimizer.step()
            utils.clip_gradients(model, 3.0)
            """,
            modules=UTILS,
        ),
    ]
    INVALID = [
        Invalid(
            """
            import utils

            for x, y in loader:
                loss_fn(model(x), y).backward()
                utils.clip_gradients(model, 3.0)
                optimizer.step()
            """,
            line=5,
            modules=UTILS,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        for helper, where, read, _ in argument_reads(self.ctx, node, through="grads"):
            if reportable_sync(self.ctx, node):
                self.report(node, self.summary.format(helper=helper, param=read.param, what=f"`{read.what}`",
                                                      where=where))
            return


# -- XLA503 ----------------------------------------------------------------------------------------

XM = "torch_xla.core.xla_model"
CLIP_CALLS = CLIP_GRAD_NORM | {"torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_value_"}
# Optimizer steps that all-reduce the gradients (when the world size is above 1) just before stepping.
LATE_REDUCTION = {f"{XM}.optimizer_step", "xlalint.runtime.optimizer_step"}
# Reductions a step may run before it clips.
EARLY_REDUCTION = {f"{XM}.reduce_gradients", f"{XM}.all_reduce", f"{XM}.all_reduce_bucketized_gradients",
                   "torch.distributed.all_reduce", "torch.distributed.all_reduce_coalesced"}
# The file runs several replicas: it launches them, feeds each its own device loader, or asks how many.
REPLICA_LAUNCH = {"torch_xla.distributed.xla_multiprocessing.spawn", "torch_xla.launch"}
WORLD_SIZE = {"torch_xla.runtime.world_size", f"{XM}.xrt_world_size", "torch.distributed.get_world_size"}
# A wrapper that owns the gradient reduction (DDP, XLA FSDP / FSDPv2, ZeRO, SPMD sharding).
REDUCTION_OWNER_NAMES = {"DistributedDataParallel", "XlaFullyShardedDataParallel", "FullyShardedDataParallel",
                         "SpmdFullyShardedDataParallel", "FSDPv2", "ZeroRedundancyOptimizer", "mark_sharding",
                         "use_spmd"}
REDUCTION_OWNER_MODULES = ("torch.nn.parallel", "torch.distributed.fsdp", "torch_xla.distributed.fsdp",
                           "torch_xla.distributed.spmd", "torch_xla.distributed.zero_redundancy_optimizer")
STEP_KEYWORDS = {"barrier", "optimizer_args", "groups", "pin_layout"}


class ClipBeforeGradientReduce(Rule):
    """## What it does
    Flags `torch.nn.utils.clip_grad_norm_` (or `clip_grad_value_`) in multi-replica torch_xla data
    parallel code when the step reduces its gradients only afterwards, in `xm.optimizer_step(optimizer)`,
    and no `xm.reduce_gradients(optimizer)` (or other all-reduce) runs before the clip.

    A file counts as multi-replica data parallel when it launches replicas (`xmp.spawn`,
    `torch_xla.launch`), builds a per-device loader (`MpDeviceLoader`, `ParallelLoader`,
    `per_device_loader`) or asks for the world size (`xr.world_size()`), and no DDP, FSDP, ZeRO or
    SPMD wrapper owns the reduction.

    ## Why is this bad?
    `xm.optimizer_step(optimizer)` is `xm.reduce_gradients(optimizer)` (an all-reduce averaging the
    gradients over the replicas) followed by `optimizer.step()`. Clipping before it clips each
    replica's *local* gradients by its *local* norm, then averages the clipped gradients. That is not
    the clipping of the averaged gradient, which the same code computes on one device or under DDP
    (where backward has already averaged them): the local norms are on average at least the norm of
    their average (averaging cancels noise), so clipping cuts in more often and harder than
    configured; each replica is scaled by its own factor, so the average leans towards the replicas
    with small gradients; and the norm `clip_grad_norm_` returns differs from replica to replica.
    torch_xla's own code reduces first: its ZeRO-1 optimizer runs `_reduce_gradients` before
    `_clip_grad_norm` in `step()`, and its distributed-embedding example calls
    `xm.reduce_gradients(optimizer)`, then `optimizer.clip_grad_norm(...)`, then `optimizer.step()`.

    ## Example
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    def _mp_fn(index):
        device = torch_xla.device()
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            xm.optimizer_step(optimizer)

    torch_xla.launch(_mp_fn)
    ```

    Use instead:
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    def _mp_fn(index):
        device = torch_xla.device()
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            xm.reduce_gradients(optimizer)  # average over the replicas first
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

    torch_xla.launch(_mp_fn)
    ```

    ## Fix safety
    When `xm.optimizer_step(opt)` is a statement of the block that also holds the clip (or the
    statement around it, such as `if max_norm > 0:`), the fix inserts `xm.reduce_gradients(opt)`
    before that statement and turns the step into `opt.step()` (`groups=`/`pin_layout=` move to
    `reduce_gradients`, `optimizer_args=` becomes `**` arguments of `step`). It is offered only when
    `barrier` is absent or `False`, the optimizer is a plain name or attribute, and the clip is the
    first one reduced by that step. The fix is unsafe: with more than one replica it changes the
    results, which is its purpose (the clip now sees the averaged gradients, and the norm
    `clip_grad_norm_` returns is the global one, equal on every replica). Code between the clip and
    the step that reads gradients sees averaged ones, and a `continue` between them now skips a step
    whose gradients were already averaged. With one replica, `reduce_gradients` does nothing and the
    results are unchanged.

    ## Known problems
    Whether the file runs several replicas is judged per file: a training function in a module
    whose launcher lives in another module is not seen. The clip and the step must sit in the same
    function.

    ## References
    - `torch_xla/core/xla_model.py` at v2.9.0: `optimizer_step` (calls `reduce_gradients`, then
      `optimizer.step`) and `reduce_gradients` (all-reduce with `scale=1.0 / world_size`)
    - `torch_xla/distributed/zero_redundancy_optimizer.py` at v2.9.0: `step()` reduces, then clips
    - `torch_xla/distributed/fsdp/xla_fully_sharded_data_parallel.py` at v2.9.0: `clip_grad_norm_`
      ("calling it in the OSS context would lead to different scaling being applied per subset")
    - `contrib/colab/Distributing_Large_Embedding_tables.ipynb` at v2.0.0–v2.2.0: `reduce_gradients`,
      then `clip_grad_norm`, then `step`
    """

    code, name, category = "XLA503", "clip-before-gradient-reduce", "clip_grad_norm"
    summary = ("`{func}` clips this replica's local gradients: `{step}` averages them across replicas only "
               "afterwards")
    hint = "call `xm.reduce_gradients(optimizer)` before clipping, then `optimizer.step()`"
    xla_only = True
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            def _mp_fn(index):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.reduce_gradients(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    torch_xla.sync()

            torch_xla.launch(_mp_fn)
            """
        ),
        Valid(
            """
            # one device: xm.optimizer_step reduces nothing, clipping first is fine
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            for x, y in loader:
                loss_fn(model(x.to(device)), y.to(device)).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                xm.optimizer_step(optimizer, barrier=True)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            from torch.nn.parallel import DistributedDataParallel as DDP

            def _mp_fn(index):
                ddp_model = DDP(model)  # DDP averages the gradients during backward
                for x, y in loader:
                    loss_fn(ddp_model(x), y).backward()
                    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
                    optimizer.step()
                    torch_xla.sync()

            torch_xla.launch(_mp_fn)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr

            def train(loader):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)
                    # the gradients are averaged by now: this measures the global norm
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9)
                    lr = base_lr * xr.world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index, use_xla):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    if use_xla:
                        xm.optimizer_step(optimizer)
                    else:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()

            xmp.spawn(_mp_fn, args=(True,))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                for x, y in pl.MpDeviceLoader(loader, device):
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    xm.optimizer_step(optimizer)

            torch_xla.launch(_mp_fn)
            """,
            line=11,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                for x, y in pl.MpDeviceLoader(loader, device):
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    xm.reduce_gradients(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()

            torch_xla.launch(_mp_fn)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr
            from torch.nn.utils import clip_grad_norm_

            class Trainer:
                def train_step(self, batch):
                    loss = self.model(**batch).loss / xr.world_size()
                    loss.backward()
                    # clip only when configured
                    if self.max_grad_norm > 0:
                        grad_norm = clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                    xm.optimizer_step(self.optimizer, groups=self.groups)
                    self.optimizer.zero_grad()
            """,
            line=11,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr
            from torch.nn.utils import clip_grad_norm_

            class Trainer:
                def train_step(self, batch):
                    loss = self.model(**batch).loss / xr.world_size()
                    loss.backward()
                    xm.reduce_gradients(self.optimizer, groups=self.groups)
                    # clip only when configured
                    if self.max_grad_norm > 0:
                        grad_norm = clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                for step, (x, y) in enumerate(loader):
                    (loss_fn(model(x), y) / accumulation).backward()
                    if (step + 1) % accumulation == 0:
                        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
                        xm.optimizer_step(optimizer, barrier=True)  # barrier: no fix offered
                        optimizer.zero_grad()

            xmp.spawn(_mp_fn)
            """,
            line=8,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._parallel: bool | None = None

    def visit_Call(self, node: ast.Call) -> None:
        func = self.ctx.qualified_name(node.func)
        if func not in CLIP_CALLS or not self._data_parallel() or self.ctx.in_non_xla_code(node):
            return
        step = self._reducing_step(node)
        if step is None:
            return
        plan = self._fix_plan(node, step)
        message = self.summary.format(func=last_part(func), step=self.ctx.code(step.func))
        self.report(node, message, fix=None if plan is None else lambda cctx: _reduce_first(cctx, *plan))

    # -- the file ---------------------------------------------------------------------------------
    def _data_parallel(self) -> bool:
        if self._parallel is None:
            index = self.ctx.index
            owned = bool(REDUCTION_OWNER_NAMES & index.all_names) or any(
                b.qualified == m or b.qualified.startswith(m + ".")
                for b in index.imports.values() for m in REDUCTION_OWNER_MODULES)
            self._parallel = not owned and any(self._replicas(call) for call in index.calls)
        return self._parallel

    def _replicas(self, call: ast.Call) -> bool:
        qualified = self.ctx.qualified_name(call.func)
        return qualified in REPLICA_LAUNCH or qualified in WORLD_SIZE or \
            bool(DEVICE_LOADER.match(last_part(dotted_name(call.func)) or method_name(call) or ""))

    # -- the step ---------------------------------------------------------------------------------
    def _reducing_step(self, clip: ast.Call) -> ast.Call | None:
        """The `xm.optimizer_step(...)` that runs after `clip` in the same step, when no reduction
        runs before it."""
        scope = self.ctx.index.scope_of(clip)
        if isinstance(scope, ast.Lambda):
            return None
        order = self.ctx.index.order
        calls = self.ctx.calls_within(scope)
        if any(order[c] < order[clip] and self.ctx.qualified_name(c.func) in EARLY_REDUCTION for c in calls):
            return None
        for call in calls:
            if order[call] > order[clip] and self.ctx.qualified_name(call.func) in LATE_REDUCTION and \
                    self._same_step(clip, call):
                return call
        return None

    def _same_step(self, first: ast.AST, second: ast.AST) -> bool:
        """`second` runs after `first` in the same step: not in another branch of an `if`/`try`, and
        neither sits in a step loop of its own that the other is outside of."""
        around_second = set(self.ctx.index.ancestors(second))
        below, common = first, None
        for anc in self.ctx.index.ancestors(first):
            if anc in around_second:
                common = anc
                break
            below = anc
        if common is None:
            return False
        other = next(a for a in [second, *self.ctx.index.ancestors(second)] if self.ctx.parent(a) is common)
        fields = self.ctx.index.field_of(below), self.ctx.index.field_of(other)
        if isinstance(common, (ast.If, ast.IfExp)) and fields[0] != fields[1]:
            return False
        if isinstance(below, (ast.ExceptHandler, ast.match_case)) or isinstance(other, (ast.ExceptHandler,
                                                                                       ast.match_case)):
            return False
        for node in (first, second):
            for anc in self.ctx.index.ancestors(node):
                if anc is common:
                    break
                if isinstance(anc, LOOPS) and is_step_loop(self.ctx, anc):
                    return False
        return True

    # -- the fix: decided here, built on libcst by `_reduce_first` ----------------------------------
    def _fix_plan(self, clip: ast.Call, step: ast.Call):
        if self.ctx.qualified_name(step.func) != f"{XM}.optimizer_step":
            return None
        statement = self.ctx.parent(step)
        if not isinstance(statement, ast.Expr):
            return None
        block, field = self.ctx.parent(statement), self.ctx.index.field_of(statement)
        holder = next((a for a in [clip, *self.ctx.index.ancestors(clip)]
                       if self.ctx.parent(a) is block and self.ctx.index.field_of(a) == field), None)
        if not isinstance(holder, ast.stmt) or holder.end_lineno >= statement.lineno:
            return None  # not in the step's block, or sharing its line (`clip(...); xm.optimizer_step(o)`)
        if any(other is not clip and self._reducing_step(other) is step
               for other in self.ctx.calls_within(self.ctx.index.scope_of(clip))
               if self.ctx.index.order[other] < self.ctx.index.order[clip]
               and self.ctx.qualified_name(other.func) in CLIP_CALLS):
            return None  # an earlier clip reduced by the same step gets the fix
        if len(step.args) != 1 or isinstance(step.args[0], ast.Starred):
            return None
        optimizer = step.args[0]
        if not self._stable(optimizer, holder, statement):
            return None
        code = self.ctx.code
        reduce_arguments, step_arguments = [code(optimizer)], ""
        for kw in step.keywords:
            if kw.arg not in STEP_KEYWORDS:
                return None
            if kw.arg == "barrier":
                if not is_constant(kw.value, False):
                    return None
            elif kw.arg == "optimizer_args":
                step_arguments = f"**{code(kw.value)}"
            elif any(isinstance(n, ast.Call) for n in ast.walk(kw.value)):
                return None  # evaluated earlier than before: keep to plain values
            else:
                reduce_arguments.append(f"{kw.arg}={code(kw.value)}")
        module = code(step.func.value) if isinstance(step.func, ast.Attribute) else None
        return step, holder, module, ", ".join(reduce_arguments), f"{code(optimizer)}.step({step_arguments})"

    def _stable(self, optimizer: ast.expr, start: ast.stmt, end: ast.stmt) -> bool:
        """A plain name or attribute not reassigned between the new `reduce_gradients` and the step."""
        name = dotted_name(optimizer)
        if not name:
            return False
        order = self.ctx.index.order
        values = self.ctx.index.assignments.get(self.ctx.index.scope_of(optimizer), {}).get(name, [])
        return not any(order[start] < order[v] < order[end] for v in values)


def _reduce_first(cctx: CstContext, step: ast.Call, holder: ast.stmt, module: str | None, reduce_arguments: str,
                  step_call: str) -> Fix | None:
    call = cctx.locate(step)
    # the libcst statement of an `ast` one: a compound one, or a line of simple ones
    statement = cctx.locate(holder, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    if call is None or statement is None:
        return None
    imports = []
    if module is None:
        spelled, request = cctx.importable(XM, "reduce_gradients")
        imports.append(request)
    else:
        spelled = f"{module}.reduce_gradients"
    # blank lines above the statement go above the new call; its comments stay with it
    lines = list(statement.leading_lines)
    blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    reduce = cctx.parse_statement(f"{spelled}({reduce_arguments})").with_changes(leading_lines=lines[:blank])
    fix = Fix.replace(call, cctx.parse_expression(step_call), title=f"Call `{spelled}` before clipping, then "
                      f"`{step_call}`", safe=False, imports=imports)
    fix.replacements[id(statement)] = (statement, cst.FlattenSentinel([
        reduce, statement.with_changes(leading_lines=lines[blank:])]))
    return fix
