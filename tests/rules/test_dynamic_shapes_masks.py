"""What counts as a boolean mask for XLA302/XLA303 beyond the docstring examples."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules.dynamic_shapes.boolean_mask_assign import BooleanMaskAssign
from xlalint.testing import lint_code


def rows(source: str) -> list[int]:
    return [d.location.row for d in lint_code(textwrap.dedent(source).lstrip("\n"), [BooleanMaskAssign])]


@pytest.mark.parametrize("mask", [
    "torch.all(h == 0, dim=-1)",
    "torch.any(h.isnan(), -1)",
    "(h == 0).all(dim=-1)",
])
def test_reductions_over_a_dimension_are_masks(mask):
    source = f"""
    import torch
    def forward(self, x, fill):
        h = self.encoder(x)
        keep = {mask}
        h[keep] = fill
        return h
    """
    assert rows(source) == [5]


def test_a_full_reduction_is_no_mask():
    source = """
    import torch
    def forward(self, x, table):
        h = self.encoder(x)
        done = torch.all(h == 0)
        table[done] = 1
        return h
    """
    assert rows(source) == []
