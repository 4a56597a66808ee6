"""XLA302/XLA303 fixes run under torch on CPU: the original and the fixed function are compared on
real tensors, and what the safe fixes would change (a float16 fill that overflows, a mask of an
earlier binding of the name) keeps them from being safe."""

from __future__ import annotations

import textwrap

import pytest
import torch

from xlalint.diagnostics import Applicability
from xlalint.rules.dynamic_shapes.boolean_mask_assign import BooleanMaskAssign
from xlalint.rules.dynamic_shapes.boolean_mask_index import BooleanMaskIndex
from xlalint.testing import fix_code, lint_code


def dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def fixes(code: str, rule) -> list:
    return [d.fix for d in lint_code(code, [rule], with_edits=True)]


def run(code: str, *args):
    """`forward(None, *args)` of `code`, or the exception it raises."""
    namespace: dict = {"torch": torch}
    exec(compile(code, "<fixed>", "exec"), namespace)
    try:
        return namespace["forward"](None, *args)
    except RuntimeError as exc:
        return exc


ATTENTION = dedent("""
def forward(self, h):
    h[h < 0] = {fill}
    return h
""")


@pytest.mark.parametrize("fill", ["-1e9", "-70000.0", "float('-1e5')"])
def test_a_fill_float16_overflows_is_no_safe_masked_fill(fill):
    code = ATTENTION.format(fill=fill)
    [fix] = fixes(code, BooleanMaskAssign)
    assert fix.applicability is Applicability.UNSAFE
    assert fix_code(code, [BooleanMaskAssign], unsafe=False) == code
    fixed = fix_code(code, [BooleanMaskAssign], unsafe=True)
    assert "masked_fill_" in fixed
    # under autocast the scores are float16: indexing saturates to -inf, masked_fill_ raises
    h = torch.tensor([[-1.0, 2.0], [3.0, -4.0]], dtype=torch.float16)
    before, after = run(code, h.clone()), run(fixed, h.clone())
    assert torch.equal(before, torch.tensor([[-float("inf"), 2.0], [3.0, -float("inf")]], dtype=torch.float16))
    assert isinstance(after, RuntimeError) and "overflow" in str(after)


@pytest.mark.parametrize("fill", ["-65504.0", "-1e4", "0", "1", "True", "float('-inf')", "float('nan')", "-math.inf"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_a_fill_every_float_dtype_holds_stays_safe_and_equal(fill, dtype):
    code = "import math\n" + ATTENTION.format(fill=fill)
    [fix] = fixes(code, BooleanMaskAssign)
    assert fix.applicability is Applicability.SAFE
    fixed = fix_code(code, [BooleanMaskAssign], unsafe=False)
    assert "masked_fill_" in fixed
    if not dtype.is_floating_point and ("inf" in fill or "nan" in fill):
        return  # both raise: an integer tensor holds no inf
    h = torch.tensor([[-1.0, 2.0], [3.0, -4.0]]).to(dtype)
    before, after = run(code, h.clone()), run(fixed, h.clone())
    torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True)  # dtypes included


REBOUND_ASSIGN = dedent("""
def forward(self, h):
    m = h > 0
    h = h.unsqueeze(0).repeat(3, 1)
    h[m] = 0
    return h
""")

REBOUND_SUM = dedent("""
import torch

def forward(self, h):
    m = h > 0
    h = h.unsqueeze(0).repeat(3, 1)
    return h[m].sum()
""")


@pytest.mark.parametrize("code, rule", [(REBOUND_ASSIGN, BooleanMaskAssign), (REBOUND_SUM, BooleanMaskIndex)])
def test_a_mask_of_an_earlier_binding_is_no_safe_fix(code, rule):
    [fix] = fixes(code, rule)
    assert fix.applicability is Applicability.UNSAFE
    assert fix_code(code, [rule], unsafe=False) == code
    # the unsafe fix is a different computation: the (N,) mask broadcasts over (3, N) instead of
    # selecting through the old shape (which raises for the new one)
    fixed = fix_code(code, [rule], unsafe=True)
    h = torch.tensor([1.0, -2.0, 3.0])
    before, after = run(code, h.clone()), run(fixed, h.clone())
    assert isinstance(before, RuntimeError) or isinstance(after, RuntimeError) or not torch.equal(before, after)


@pytest.mark.parametrize("code, rule", [
    (dedent("""
    def forward(self, h):
        m = h > 0
        h[m] = 0
        h = h.unsqueeze(0).repeat(3, 1)
        return h
    """), BooleanMaskAssign),
    (dedent("""
    import torch

    def forward(self, h):
        h = h * 2
        m = (h > 0) & ~torch.isnan(h)
        return h[m].sum()
    """), BooleanMaskIndex),
])
def test_a_mask_of_the_binding_indexed_stays_safe_and_equal(code, rule):
    [fix] = fixes(code, rule)
    assert fix.applicability is Applicability.SAFE
    fixed = fix_code(code, [rule], unsafe=False)
    assert fixed != code
    h = torch.tensor([1.0, -2.0, 3.0, float("nan")])
    before, after = run(code, h.clone()), run(fixed, h.clone())
    torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("code", [
    dedent("""
    import torch

    def forward(self, h, steps):
        m = h > 0
        for _ in range(steps):
            h[m] = 0  # from the second round on, `m` and `h` come from different rounds
            m = h > 1
            h = torch.cat([h, h])
        return h
    """),
    dedent("""
    def forward(self, h, row_mask, elementwise):
        m = row_mask
        if elementwise:
            m = h > 0
        h[m] = 0  # `m` may still be the row mask
        return h
    """),
])
def test_a_mask_from_another_round_or_branch_is_no_safe_fix(code):
    [fix] = fixes(code, BooleanMaskAssign)
    assert fix.applicability is Applicability.UNSAFE


SUM = dedent("""
import torch

def forward(self, h):
    return h[h > 0].sum()
""")


def test_the_sum_fix_says_it_is_exact_up_to_summation_order():
    [fix] = fixes(SUM, BooleanMaskIndex)
    assert fix.applicability is Applicability.SAFE
    assert "exact up to summation order" in fix.title
    assert "exact up to summation order" in BooleanMaskIndex.documentation()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.bool, torch.float16, torch.bfloat16,
                                   torch.float32, torch.float64])
def test_the_sum_fix_keeps_the_dtype_and_integer_sums(dtype):
    fixed = fix_code(SUM, [BooleanMaskIndex], unsafe=False)
    assert "torch.where(h > 0, h, 0).sum()" in fixed
    generator = torch.Generator().manual_seed(0)
    h = (torch.randn(257, generator=generator) * 50).to(dtype)
    before, after = run(SUM, h), run(fixed, h)
    assert before.dtype == after.dtype
    if dtype.is_floating_point:
        torch.testing.assert_close(after, before)
    else:
        assert torch.equal(before, after)


REDUCE = dedent("""
def forward(self, h):
    return h[h > 0].{reduction}()
""")


@pytest.mark.parametrize("reduction", ["mean", "max", "min"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_masked_mean_max_min_is_the_runtime_function_unsafe_and_equal(reduction, dtype):
    code = REDUCE.format(reduction=reduction)
    [fix] = fixes(code, BooleanMaskIndex)
    assert fix.applicability is Applicability.UNSAFE  # it makes the code import xlalint
    assert fix_code(code, [BooleanMaskIndex], unsafe=False) == code
    fixed = fix_code(code, [BooleanMaskIndex], unsafe=True)
    assert f"from xlalint.runtime import masked_{reduction}" in fixed
    assert fix_code(fixed, [BooleanMaskIndex], unsafe=True) == fixed  # idempotent
    h = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    h[0, 0] = 1.0  # at least one selected entry
    before, after = run(code, h.clone()), run(fixed, h.clone())
    assert after.dtype == before.dtype and after.shape == before.shape
    torch.testing.assert_close(after, before)
    # where the original raises (an empty selection's max), the runtime returns the identity: unsafe
    if reduction != "mean":
        empty = -h.abs() - 1
        assert isinstance(run(code, empty), RuntimeError) and not isinstance(run(fixed, empty), RuntimeError)
