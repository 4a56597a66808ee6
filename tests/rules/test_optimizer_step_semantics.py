"""End to end: fix small XLA training scripts (XLA401, XLA501, XLA502), then run the original and the
fixed script on CPU and compare the trained parameters.

On CPU `xlalint.runtime.optimizer_step` is exactly `optimizer.step()` and `clip_grad_norm_` is torch's
math, so XLA401/XLA501 fixes must give identical parameters; the XLA502 fix recomputes the clip
coefficient the way torch does, so it gives close ones.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import fix_code, lint_code

RULES = [RULES_BY_CODE[c] for c in ("XLA401", "XLA501", "XLA502")]

PRELUDE = """
import math

import torch
from torch import nn

try:
    import torch_xla.core.xla_model as xm
except ImportError:  # runs on CPU without torch_xla
    xm = None

torch.manual_seed(0)
device = torch.device("cpu")
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
loss_fn = nn.MSELoss()
batches = [(torch.randn(4, 8) * 3, torch.randn(4, 1) * 5) for _ in range(25)]
"""

# XLA401 (plain step) + XLA501 (foreach=True and an infinite norm): identical results.
FOREACH_INF = PRELUDE + """
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for x, y in batches:
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, norm_type=math.inf, foreach=True)
    optimizer.step()
"""

# XLA401 with a closure (LBFGS) + XLA501 error_if_nonfinite=True (unsafe; on CPU it still raises).
CLOSURE = PRELUDE + """
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
for x, y in batches:
    x, y = x.to(device), y.to(device)

    def closure():
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, error_if_nonfinite=True)
        return loss

    optimizer.step(closure=closure)
"""

# XLA401 + XLA502 (hand-written clipping that branches on the norm): close results.
MANUAL = PRELUDE + """
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
max_norm = 0.25
for x, y in batches:
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    total_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
    if total_norm > max_norm:
        for p in params:
            p.grad.mul_(max_norm / (total_norm + 1e-6))
    optimizer.step()
"""


def _train(code: str) -> list[torch.Tensor]:
    namespace: dict = {"__name__": "__xlalint_e2e__"}
    exec(compile(code, "<script>", "exec"), namespace)  # noqa: S102 - our own test script
    return [p.detach().clone() for p in namespace["model"].parameters()]


@pytest.mark.parametrize(
    "script, codes, exact",
    [
        pytest.param(FOREACH_INF, {"XLA401", "XLA501"}, True, id="step+foreach+inf"),
        pytest.param(CLOSURE, {"XLA401", "XLA501"}, True, id="closure+error_if_nonfinite"),
        pytest.param(MANUAL, {"XLA401", "XLA502"}, False, id="step+manual-clipping"),
    ],
)
def test_fixed_script_trains_the_same(script, codes, exact):
    script = textwrap.dedent(script).lstrip()
    found = {d.code for d in lint_code(script, RULES)}
    assert found == codes, found

    fixed = fix_code(script, RULES, unsafe=True)
    assert fixed != script
    tree = ast.parse(fixed)
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert "xlalint.runtime" in imported, fixed
    assert ".step(" not in fixed.replace("optimizer_step(", ""), fixed
    assert not lint_code(fixed, RULES), fixed
    assert fix_code(fixed, RULES, unsafe=True) == fixed, "a second fix run changed the code"

    before, after = _train(script), _train(fixed)
    assert len(before) == len(after)
    for b, a in zip(before, after):
        if exact:
            assert torch.equal(b, a)
        else:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # training really moved the parameters
    assert any(not torch.equal(b, p) for b, p in zip(before, _initial_params()))


def _initial_params() -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return [p.detach().clone() for p in model.parameters()]


def test_safe_fixes_change_nothing_and_the_clipping_fix_trains_the_same():
    """Every fix here imports xlalint.runtime: none is safe. The XLA501 foreach/inf rewrite alone
    trains exactly as before."""
    script = textwrap.dedent(FOREACH_INF).lstrip()
    assert fix_code(script, RULES, unsafe=False) == script
    fixed = fix_code(script, [RULES_BY_CODE["XLA501"]], unsafe=True)
    assert "optimizer.step()" in fixed
    assert "foreach=True" not in fixed
    assert "clip_grad_norm_(model.parameters(), 0.5, norm_type=math.inf)" in fixed
    before, after = _train(script), _train(fixed)
    assert all(torch.equal(b, a) for b, a in zip(before, after))
