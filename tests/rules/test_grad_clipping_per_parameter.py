"""XLA502 is clipping by a global norm: per-parameter clipping branches on a tensor too, but that `if`
is XLA201's finding alone, and nothing rewrites it into `clip_grad_norm_` (other math)."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

XLA201 = RULES_BY_CODE["XLA201"]
XLA502 = RULES_BY_CODE["XLA502"]
BOTH = [XLA201, XLA502]


def _dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip()


PER_PARAMETER = {
    "named-norm": """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            for p in model.parameters():
                param_norm = p.grad.norm(2)
                if param_norm > max_norm:
                    p.grad.mul_(max_norm / (param_norm + 1e-6))
            optimizer.step()
        """,
    "inline-norm": """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            for p in model.parameters():
                if p.grad.norm() > max_norm:
                    p.grad.mul_(max_norm / (p.grad.norm() + 1e-6))
            optimizer.step()
        """,
    "coefficient": """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            for name, p in model.named_parameters():
                clip_coef = max_norm / (torch.linalg.vector_norm(p.grad) + 1e-6)
                if clip_coef < 1:
                    p.grad.mul_(clip_coef)
            optimizer.step()
        """,
    "param-groups": """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            for group in optimizer.param_groups:
                for p in group["params"]:
                    grad_norm = p.grad.data.norm()
                    if grad_norm > group["max_norm"]:
                        p.grad.data *= group["max_norm"] / grad_norm
            optimizer.step()
        """,
}


@pytest.mark.parametrize("code", PER_PARAMETER.values(), ids=PER_PARAMETER.keys())
def test_per_parameter_if_is_reported_once_by_xla201(code):
    code = _dedent(code)
    found = lint_code(code, BOTH)
    assert [d.code for d in found] == ["XLA201"]
    assert found[0].fix is None
    assert fix_code(code, BOTH, unsafe=True) == code


def test_global_norm_from_a_loop_with_the_same_variable_stays_xla502():
    # the norm is accumulated in an earlier loop over `p`; the `if` in the next loop tests the total
    code = _dedent(
        """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            total_norm = 0.0
            for p in model.parameters():
                total_norm += p.grad.norm() ** 2
            total_norm = total_norm ** 0.5
            for p in model.parameters():
                if total_norm > max_norm:
                    p.grad.mul_(max_norm / (total_norm + 1e-6))
            optimizer.step()
        """
    )
    assert [(d.code, d.location.row) for d in lint_code(code, [XLA502])] == [("XLA502", 9)]


def test_global_norm_clipping_is_still_reported_with_its_fix():
    code = _dedent(
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
        """
    )
    found = lint_code(code, [XLA502])
    assert [d.location.row for d in found] == [6]
    assert "clip_grad_norm_(params, max_norm)" in fix_code(code, [XLA502], unsafe=True)
