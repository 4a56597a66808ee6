"""XLA501/XLA502: import spellings, infinite-norm spellings, argument positions, fix formatting."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

XLA501 = RULES_BY_CODE["XLA501"]
XLA502 = RULES_BY_CODE["XLA502"]


def _codes(code: str, rule) -> list[int]:
    return [d.location.row for d in lint_code(textwrap.dedent(code).lstrip(), [rule])]


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.nn.utils.clip_grad_norm_"),
        ("import torch.nn as nn", "nn.utils.clip_grad_norm_"),
        ("from torch import nn", "nn.utils.clip_grad_norm_"),
        ("from torch.nn.utils import clip_grad_norm_", "clip_grad_norm_"),
        ("from torch.nn.utils import clip_grad_norm_ as clip", "clip"),
        ("from torch.nn.utils.clip_grad import clip_grad_norm_", "clip_grad_norm_"),
        ("import torch", "torch.nn.utils.clip_grad.clip_grad_norm_"),
        ("import torch", "torch.nn.utils.clip_grad_norm"),
    ],
)
def test_import_spellings(imports, call):
    code = f"import torch_xla\n{imports}\n{call}(params, 1.0, error_if_nonfinite=True)\n"
    assert _codes(code, XLA501) == [3]


@pytest.mark.parametrize(
    "inf",
    ['float("inf")', "float('Inf')", "math.inf", "torch.inf", "np.inf", "numpy.inf", "'inf'", "INF_NORM"],
)
def test_infinite_norm_spellings(inf):
    code = f"import math\nimport numpy as np\nimport torch\nimport torch_xla\nINF_NORM = math.inf\n" \
           f"torch.nn.utils.clip_grad_norm_(params, 1.0, {inf})\n"
    assert _codes(code, XLA501) == [6]


@pytest.mark.parametrize("norm", ["2.0", "2", "1", "norm_type", "'fro'"])
def test_finite_norms_are_fine(norm):
    code = f"import torch\nimport torch_xla\ntorch.nn.utils.clip_grad_norm_(params, 1.0, {norm})\n"
    assert _codes(code, XLA501) == []


def test_not_torch_clip_function():
    code = """
    import torch_xla
    from mylib import clip_grad_norm_
    clip_grad_norm_(params, 1.0, foreach=True, error_if_nonfinite=True)
    """
    assert _codes(code, XLA501) == []


def test_error_if_nonfinite_false_parameter_default():
    code = """
    import torch
    def clip(params, max_norm, error_if_nonfinite=False):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=error_if_nonfinite)
    """
    assert _codes(code, XLA501) == []


def test_positional_foreach_is_dropped_and_trailing_comma_kept():
    code = textwrap.dedent(
        """
        import torch
        import torch_xla
        torch.nn.utils.clip_grad_norm_(params, 1.0, 2.0, False, True)
        torch.nn.utils.clip_grad_norm_(
            params,
            max_norm=1.0,
            foreach=True,
        )
        """
    ).lstrip()
    assert fix_code(code, [XLA501], unsafe=False) == code  # it imports xlalint.runtime: unsafe
    fixed = fix_code(code, [XLA501], unsafe=True)
    assert "clip_grad_norm_(params, 1.0, 2.0, False)\n" in fixed
    assert "clip_grad_norm_(\n    params,\n    max_norm=1.0,\n)\n" in fixed
    assert "True" not in fixed
    compile(fixed, "fixed.py", "exec")
    assert fix_code(fixed, [XLA501], unsafe=True) == fixed


def test_error_if_nonfinite_fix_is_unsafe_only():
    code = "import torch\ntorch.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)\n"
    assert fix_code(code, [XLA501], unsafe=False) == code
    fixed = fix_code(code, [XLA501], unsafe=True)
    assert "from xlalint.runtime import clip_grad_norm_" in fixed
    assert "\nclip_grad_norm_(params, 1.0, error_if_nonfinite=True)\n" in fixed


def test_foreach_and_inf_need_torch_xla():
    code = "import torch\ntorch.nn.utils.clip_grad_norm_(params, 1.0, float('inf'), foreach=True)\n"
    assert _codes(code, XLA501) == []


def test_manual_clipping_in_cuda_branch_is_not_reported():
    code = """
    import torch
    for x, y in loader:
        loss_fn(model(x), y).backward()
        total_norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
        if torch.cuda.is_available():
            if total_norm > max_norm:
                for p in params:
                    p.grad.mul_(max_norm / (total_norm + 1e-6))
    """
    assert _codes(code, XLA502) == []


def test_manual_clipping_without_exact_recovery_has_no_fix():
    # the norm is an inf-norm: `clip_grad_norm_(params, max_norm)` would not be the same clipping
    code = textwrap.dedent(
        """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            total_norm = max(p.grad.abs().max() for p in params)
            if total_norm > max_norm:
                for p in params:
                    p.grad.mul_(max_norm / (total_norm + 1e-6))
        """
    ).lstrip()
    found = lint_code(code, [XLA502])
    assert [d.location.row for d in found] == [5]
    assert found[0].fix is None
    assert fix_code(code, [XLA502], unsafe=True) == code


def test_manual_clipping_in_an_elif_has_no_fix():
    # replacing the `elif` with a call would clip whenever the `if` above it fails
    code = textwrap.dedent(
        """
        import torch
        for x, y in loader:
            loss_fn(model(x), y).backward()
            params = [p for p in model.parameters() if p.grad is not None]
            total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
            if skip_clipping:
                pass
            elif total_norm > max_norm:
                for p in params:
                    p.grad.mul_(max_norm / (total_norm + 1e-6))
        """
    ).lstrip()
    found = lint_code(code, [XLA502])
    assert [d.location.row for d in found] == [8]
    assert found[0].fix is None
    assert fix_code(code, [XLA502], unsafe=True) == code
    # an `if` nested in an `else:` block may still be replaced
    nested = code.replace("    elif total_norm", "    else:\n        if total_norm").replace(
        "        for p in params:\n            p.grad", "            for p in params:\n                p.grad")
    assert "clip_grad_norm_(params, max_norm)" in fix_code(nested, [XLA502], unsafe=True)
