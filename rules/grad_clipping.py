"""Gradient clipping that syncs with the host, raises, or branches on a tensor norm."""

from __future__ import annotations

import re

import libcst as cst

from xlalint.analysis.names import dotted_name, last_part, method_name, receiver, string_value
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixes import importable
from xlalint.rule import Invalid, Rule, Valid

CLIP_GRAD_NORM = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm",  # deprecated alias, same function
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm",
}
# clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None)
SIGNATURE = ("parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach")
INF_NAMES = {"math.inf", "torch.inf", "numpy.inf", "np.inf", "numpy.Inf", "np.Inf", "float.inf"}


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _argument(call: cst.Call, name: str) -> cst.Arg | None:
    position = SIGNATURE.index(name)
    index = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg
            continue
        if index == position:
            return arg
        index += 1
    return None


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
    `foreach=True`. It is safe for `foreach=True` and `norm_type=inf`: the runtime computes exactly
    torch's result (bit-identical on CPU/CUDA, where `foreach=None` picks the same kernels as
    `foreach=True` for plain tensors) without any host sync. It is unsafe when
    `error_if_nonfinite` may be true: on XLA the runtime cannot raise without a sync, so a
    non-finite norm is returned (with a warning) instead of raising; elsewhere it raises as torch
    does.
    """

    code, name, category = "XLA501", "clip-grad-norm-sync", "clip_grad_norm"
    summary = "`clip_grad_norm_` with {what}"
    hint = ("use `xlalint.runtime.clip_grad_norm_` (same math, no host sync); check `torch.isfinite(norm)` "
            "where the value is on the host anyway")
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

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) not in CLIP_GRAD_NORM:
            return
        reasons = []
        nonfinite = _argument(node, "error_if_nonfinite")
        raises = nonfinite is not None and self._may_be_true(nonfinite.value)
        if raises:
            reasons.append("`error_if_nonfinite=True` reads the norm on the host every call")
        foreach = _argument(node, "foreach")
        drop_foreach = foreach is not None and _is_true(foreach.value)
        if self.ctx.uses_xla:
            if drop_foreach:
                reasons.append("`foreach=True` raises under torch_xla's patched `clip_grad_norm_`")
            norm_type = _argument(node, "norm_type")
            if norm_type is not None and self._is_inf(norm_type.value):
                reasons.append("`norm_type=inf` syncs once per parameter under torch_xla's patched `clip_grad_norm_`")
        if not reasons or self.ctx.in_non_xla_code(node):
            return
        self.report(node, self.summary.format(what="; ".join(reasons)),
                    fix=self._fix(node, foreach if drop_foreach else None, safe=not raises))

    def _may_be_true(self, value: cst.BaseExpression) -> bool:
        if _is_true(value):
            return True
        if isinstance(value, cst.Name):
            # passed through from a parameter whose default is True (the caller usually keeps it)
            param = self.ctx.parameter(value)
            if param is not None and not self.ctx.reaching_values(value):
                return param.default is not None and _is_true(param.default)
            values = self.ctx.reaching_values(value)
            return bool(values) and all(_is_true(v) for v in values)
        return False

    def _is_inf(self, value: cst.BaseExpression) -> bool:
        if _is_inf_literal(value, self.ctx.qualified_name):
            return True
        if isinstance(value, cst.Name):
            values = self.ctx.reaching_values(value)
            return bool(values) and all(_is_inf_literal(v, self.ctx.qualified_name) for v in values)
        return False

    def _fix(self, node: cst.Call, drop: cst.Arg | None, safe: bool) -> Fix:
        spelled, request = importable(self.ctx, "xlalint.runtime", "clip_grad_norm_")
        args = list(node.args)
        if drop is not None:
            index = next(i for i, a in enumerate(args) if a is drop)
            del args[index]
            if index == len(args) and args:  # it was the last one: the new last takes its comma (or none)
                args[-1] = args[-1].with_changes(comma=drop.comma)
        func = cst.parse_expression(spelled, config=self.ctx.module.config_for_parsing)
        replacement = node.with_changes(func=func, args=args)
        return Fix.replace(node, replacement, title=f"Call `{spelled}` (no host sync)", safe=safe,
                           imports=[request])


def _is_true(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def _is_inf_literal(value: cst.BaseExpression, qualify) -> bool:
    text = string_value(value)
    if text is not None:
        return text.strip().lower() in ("inf", "+inf", "infinity")
    if isinstance(value, cst.Call) and dotted_name(value.func) == "float" and len(value.args) == 1:
        return _is_inf_literal(value.args[0].value, qualify)
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
    Flags hand-written gradient clipping that branches on a tensor norm: an `if` whose test compares
    the gradient norm (or a clip coefficient computed from it) with a threshold and whose body scales
    the gradients.

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
    loop over the parameters that scales each gradient), the fix replaces the `if` statement with
    `xlalint.runtime.clip_grad_norm_(params, max_norm)`. It is unsafe: the coefficient is computed as
    torch computes it (`max_norm / (norm + 1e-6)`, clamped at 1, applied always), which may differ
    slightly from the hand-written formula, and the 2-norm is recomputed by the runtime.
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

    def visit_If(self, node: cst.If) -> None:
        found = self._norm_test(node.test)
        if found is None or not self._scales_gradients(node.body):
            return
        if self.ctx.in_non_xla_code(node):
            return
        self.report(node.test, fix=self._fix(node, *found))

    # -- the test -------------------------------------------------------------------------------
    def _norm_test(self, test: cst.BaseExpression):
        """(norm expression, threshold or None, coefficient form?) for `norm > max` / `coef < 1`."""
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        op = target.operator
        left, right = test.left, target.comparator
        if isinstance(op, (cst.LessThan, cst.LessThanEqual)):
            big, small = right, left
        elif isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
            big, small = left, right
        else:
            return None
        # `norm > max_norm`: the norm is the bigger side, a device tensor named like a norm
        if self._is_device_norm(big) and not _is_zero(small) and not self.ctx.on_device(small):
            return big, small, False
        # `clip_coef < 1`: a coefficient computed from the norm, compared with 1
        if _is_one(big) and self.ctx.on_device(small) and self._is_coefficient(small):
            return small, None, True
        return None

    def _is_device_norm(self, node: cst.BaseExpression) -> bool:
        name = dotted_name(node)
        if isinstance(node, cst.Call):
            name = method_name(node) or last_part(dotted_name(node.func))
        return bool(name and NORM_NAME.search(last_part(name))) and self.ctx.on_device(node)

    def _is_coefficient(self, node: cst.BaseExpression) -> bool:
        name = dotted_name(node)
        if name and COEF_NAME.search(last_part(name)):
            return True
        return any(isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Divide)
                   and self._mentions_norm(v.right) for v in self.ctx.assigned_values(node))

    def _mentions_norm(self, node: cst.CSTNode) -> bool:
        found = False

        class Find(cst.CSTVisitor):
            def visit_Name(self, n: cst.Name) -> None:
                nonlocal found
                found = found or bool(NORM_NAME.search(n.value))

        node.visit(Find())
        return found

    # -- the body -------------------------------------------------------------------------------
    def _scales_gradients(self, body: cst.BaseSuite) -> bool:
        found = False

        class Find(cst.CSTVisitor):
            def visit_Call(self, n: cst.Call) -> None:
                nonlocal found
                if method_name(n) in SCALING_METHODS and _mentions_grad(receiver(n)):
                    found = True
                if last_part(dotted_name(n.func)) in ("_foreach_mul_", "_foreach_div_"):
                    found = True

            def visit_AugAssign(self, n: cst.AugAssign) -> None:
                nonlocal found
                if isinstance(n.operator, (cst.MultiplyAssign, cst.DivideAssign)) and _mentions_grad(n.target):
                    found = True

            def visit_Assign(self, n: cst.Assign) -> None:
                nonlocal found
                if any(_is_grad(t.target) for t in n.targets) and isinstance(n.value, cst.BinaryOperation) and \
                        isinstance(n.value.operator, (cst.Multiply, cst.Divide)):
                    found = True

        body.visit(Find())
        return found

    # -- the fix --------------------------------------------------------------------------------
    def _fix(self, node: cst.If, norm: cst.BaseExpression, threshold, coefficient: bool) -> Fix | None:
        if node.orelse is not None:
            return None
        if coefficient:
            threshold = self._threshold_of_coefficient(norm)
            if threshold is None:
                return None
        statements = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
        # an `if` holding [coef = max / (norm + eps)]* then one loop over the parameters
        if not statements or not isinstance(statements[-1], cst.For):
            return None
        loop = statements[-1]
        coefficients = {_code(norm)} if coefficient else set()
        for statement in statements[:-1]:
            target = _simple_assignment(statement)
            if target is None or not self._is_scale_of(target[1], threshold, norm if not coefficient else None):
                return None
            coefficients.add(target[0])
        if not isinstance(loop.target, cst.Name) or loop.orelse is not None:
            return None
        var = loop.target.value
        if not self._loop_scales_each(loop.body, var, threshold, norm, coefficients):
            return None
        params = loop.iter
        compared = _norm_denominator(self.ctx.assigned_values(norm)[0].right) if coefficient else norm
        if compared is None or not self._norm_over(compared, params):
            return None
        spelled, request = importable(self.ctx, "xlalint.runtime", "clip_grad_norm_")
        text = f"{spelled}({_code(params)}, {_code(threshold)})"
        statement = cst.parse_statement(text, config=self.ctx.module.config_for_parsing)
        statement = statement.with_changes(leading_lines=node.leading_lines)
        return Fix.replace(node, statement, title=f"Replace with `{spelled}(...)`", safe=False, imports=[request])

    def _threshold_of_coefficient(self, coef: cst.BaseExpression):
        values = self.ctx.assigned_values(coef)
        if len(values) != 1:
            return None
        value = values[0]
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide) and \
                _norm_denominator(value.right) is not None and not self.ctx.on_device(value.left):
            return value.left
        return None

    def _is_scale_of(self, value: cst.BaseExpression, threshold, norm) -> bool:
        """`threshold / (norm + eps)` or `threshold / norm`."""
        if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)):
            return False
        if _code(value.left) != _code(threshold):
            return False
        denominator = _norm_denominator(value.right)
        return denominator is not None and (norm is None or _code(denominator) == _code(norm))

    def _loop_scales_each(self, body: cst.BaseSuite, var: str, threshold, norm, coefficients: set[str]) -> bool:
        statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
        if len(statements) == 1 and isinstance(statements[0], cst.If) and statements[0].orelse is None and \
                _code(statements[0].test) == f"{var}.grad is not None":
            statements = list(statements[0].body.body) if isinstance(statements[0].body, cst.IndentedBlock) else []
        if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine) or \
                len(statements[0].body) != 1:
            return False
        small = statements[0].body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and method_name(small.value) == "mul_" \
                and len(small.value.args) == 1:
            target, factor = receiver(small.value), small.value.args[0].value
        elif isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.MultiplyAssign):
            target, factor = small.target, small.value
        else:
            return False
        if _code(target) not in (f"{var}.grad", f"{var}.grad.data", f"{var}.grad.detach()"):
            return False
        if _code(factor) in coefficients:
            return True
        return norm is not None and threshold is not None and _code(norm) not in coefficients and \
            self._is_scale_of(factor, threshold, norm)

    def _norm_over(self, norm: cst.BaseExpression, params: cst.BaseExpression) -> bool:
        """The compared norm is a 2-norm of the gradients of exactly `params`: every assignment to it
        that reads gradients iterates `params` (a comprehension or a `for` loop over it)."""
        name = dotted_name(norm)
        if not name:
            return False
        scope = self.ctx.index.scope_of(norm)
        values = self.ctx.index.assignments.get(id(scope), {}).get(name, [])
        wanted = _code(params)
        reads = 0
        for value in values:
            text = _code(value)
            if ".grad" not in text:
                continue
            reads += 1
            if re.search(r"inf|\bp=\s*1\b|norm\(\s*1\b|ord=|abs\(|max\(", text):
                return False
            if not (_iterates(value, wanted) or self._inside_loop_over(value, wanted)):
                return False
        return reads > 0

    def _inside_loop_over(self, node: cst.CSTNode, wanted: str) -> bool:
        return any(isinstance(anc, cst.For) and _code(anc.iter) == wanted for anc in self.ctx.index.ancestors(node))


def _iterates(node: cst.CSTNode, wanted: str) -> bool:
    found = False

    class Find(cst.CSTVisitor):
        def visit_CompFor(self, n: cst.CompFor) -> None:
            nonlocal found
            found = found or _code(n.iter) == wanted

    node.visit(Find())
    return found


def _norm_denominator(node: cst.BaseExpression):
    """`norm + 1e-6` -> norm, `(norm + eps)` -> norm, `norm` -> norm."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) and \
            isinstance(node.right, cst.Float):
        return node.left
    if isinstance(node, (cst.Name, cst.Attribute)):
        return node
    return None


def _simple_assignment(statement: cst.CSTNode):
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value, small.value
    return None


def _mentions_grad(node: cst.CSTNode | None) -> bool:
    return node is not None and (".grad" in _code(node) or "grad" in (last_part(dotted_name(node)) or ""))


def _is_grad(node: cst.CSTNode) -> bool:
    return _code(node).endswith((".grad", ".grad.data"))


def _is_zero(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.value) == 0.0


def _is_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.value) == 1.0
