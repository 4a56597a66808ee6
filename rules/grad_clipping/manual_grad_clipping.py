"""XLA502 manual-grad-clipping: Flags hand-written gradient clipping by a *global* norm that branches
on that norm."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from xlalint.analysis.index import FUNCTIONS, target_names
from xlalint.analysis.names import dotted_name, last_part, method_name, receiver
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


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
        return (
            isinstance(parent, ast.If)
            and parent.orelse == [node]
            and self.ctx.text.lines[node.lineno - 1].lstrip().startswith("elif")
        )

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
            if isinstance(loop, (ast.For, ast.AsyncFor)) and self._reads_loop_variable(
                norm, loop, set(target_names(loop.target)), 0
            ):
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
        return any(
            isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div) and _mentions_norm(v.right)
            for v in self.ctx.assigned_values(node)
        )

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
                    if (
                        any(self._is_grad(t) for t in n.targets)
                        and isinstance(n.value, ast.BinOp)
                        and isinstance(n.value.op, (ast.Mult, ast.Div))
                    ):
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
        compared: ast.expr | None = norm
        if coefficient:  # `coef = max / (norm + eps)`, as _threshold_of_coefficient found
            value = self.ctx.assigned_values(norm)[0]
            compared = _norm_denominator(value.right) if isinstance(value, ast.BinOp) else None
        if compared is None or not self._norm_over(compared, params):
            return None
        return code(params), code(threshold)

    @staticmethod
    def _fix(cctx: CstContext, if_node: ast.If, params: str, threshold: str) -> Fix:
        node = cctx.find(if_node, cst.If)
        spelled, request = cctx.importable("xlalint.runtime", "clip_grad_norm_")
        statement = cctx.parse_statement(f"{spelled}({params}, {threshold})")
        statement = statement.with_changes(leading_lines=node.leading_lines)
        return Fix.replace(node, statement, title=f"Replace with `{spelled}(...)`", safe=False, imports=[request])

    def _threshold_of_coefficient(self, coef: ast.expr):
        values = self.ctx.assigned_values(coef)
        if len(values) != 1:
            return None
        value = values[0]
        if (
            isinstance(value, ast.BinOp)
            and isinstance(value.op, ast.Div)
            and _norm_denominator(value.right) is not None
            and not self.ctx.on_device(value.left)
        ):
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
        if (
            len(statements) == 1
            and isinstance(statements[0], ast.If)
            and not statements[0].orelse
            and code(statements[0].test) == f"{var}.grad is not None"
        ):
            statements = statements[0].body
        if len(statements) != 1:
            return False
        small = statements[0]
        if (
            isinstance(small, ast.Expr)
            and isinstance(small.value, ast.Call)
            and method_name(small.value) == "mul_"
            and len(small.value.args) == 1
            and not small.value.keywords
        ):
            target, factor = receiver(small.value), small.value.args[0]
        elif isinstance(small, ast.AugAssign) and isinstance(small.op, ast.Mult):
            target, factor = small.target, small.value
        else:
            return False
        if target is None or code(target) not in (f"{var}.grad", f"{var}.grad.data", f"{var}.grad.detach()"):
            return False
        if code(factor) in coefficients:
            return True
        return (
            norm is not None
            and threshold is not None
            and code(norm) not in coefficients
            and self._is_scale_of(factor, threshold, norm)
        )

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
        return any(
            isinstance(anc, ast.For) and self.ctx.code(anc.iter) == wanted for anc in self.ctx.index.ancestors(node)
        )


def _mentions_norm(node: ast.expr) -> bool:
    """A name or attribute name in `node` reads like a norm (`total_norm`, `self.grad_norm`)."""
    return any(
        isinstance(n, ast.Name)
        and NORM_NAME.search(n.id)
        or isinstance(n, ast.Attribute)
        and NORM_NAME.search(n.attr)
        or isinstance(n, ast.keyword)
        and n.arg
        and NORM_NAME.search(n.arg)
        for n in ast.walk(node)
    )


def _norm_denominator(node: ast.expr):
    """`norm + 1e-6` -> norm, `(norm + eps)` -> norm, `norm` -> norm."""
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.right, ast.Constant)
        and type(node.right.value) is float
    ):
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
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and type(node.value) is not bool
        and float(node.value) == value
    )
