"""Shared helpers for the xlalint.runtime tests."""

from __future__ import annotations

import pytest
import torch


def _make_params(dtypes, seed=0, grad_scale=1.0, with_grad=None, devices=None):
    """Parameters of varied shapes with deterministic gradients; ``with_grad[i]=False`` leaves ``.grad`` None."""
    gen = torch.Generator().manual_seed(seed)
    params = []
    for i, dtype in enumerate(dtypes):
        device = "cpu" if devices is None else devices[i % len(devices)]
        data = torch.randn(3 + i, 2 + i % 3, generator=gen, dtype=torch.float64)
        p = torch.nn.Parameter(data.to(device=device, dtype=dtype))
        if with_grad is None or with_grad[i]:
            grad = torch.randn(p.shape, generator=gen, dtype=torch.float64) * grad_scale
            p.grad = grad.to(device=device, dtype=dtype)
        params.append(p)
    return params


@pytest.fixture
def make_params():
    return _make_params


def assert_same(actual, expected):
    """Exact equality (dtype included) that treats NaN as equal to NaN."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


@pytest.fixture
def same():
    return assert_same
