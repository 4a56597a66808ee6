"""Argument checks of the public functions: the error torch raises for the same mistake, said clearly.

A wrong type is a ``TypeError`` and a wrong value a ``ValueError``, as in torch; each message names the
function, the argument, what it must be and what it got (``masked_sum(): argument 'x' must be a Tensor,
not list``), with the likely fix where there is one. The checks look at the Python objects passed (their
type, a tensor's ``numel``), never at a tensor's values: no host read, and a constant cost per call, not
per element.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TypeGuard

import torch


def describe(value: object) -> str:
    """The type of ``value`` as the messages name it: ``list``, ``Linear (a torch.nn.Module)``."""
    name = type(value).__name__
    if isinstance(value, torch.nn.Module):
        return f"{name} (a torch.nn.Module)"
    return name


def tensor(func: str, name: str, value: object) -> torch.Tensor:
    """``value`` when it is a tensor; else torch's TypeError, with how to make one."""
    if isinstance(value, torch.Tensor):
        return value
    hint = ""
    if isinstance(value, (list, tuple, numbers.Number)):
        hint = " (make one with torch.tensor(...) or torch.as_tensor(...), on the data's device)"
    raise TypeError(f"{func}(): argument '{name}' must be a Tensor, not {describe(value)}{hint}")


def _is_int(value: object) -> TypeGuard[numbers.Integral]:
    # numbers.Integral: int and NumPy's integers, as torch takes them; not a bool, not a tensor
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(func: str, name: str, value: object) -> int:
    """An integer (not a bool, not a tensor: turning one into an int reads it on the host)."""
    if _is_int(value):
        return int(value)
    hint = " (int() of a tensor reads it on the host: pass a Python int)" if isinstance(value, torch.Tensor) else ""
    raise TypeError(f"{func}(): argument '{name}' must be int, not {describe(value)}{hint}")


def flag(func: str, name: str, value: object) -> bool:
    """True or False, as torch's ``keepdim`` (``keepdim=1`` is a TypeError there too)."""
    if isinstance(value, bool):
        return value
    raise TypeError(f"{func}(): argument '{name}' must be bool, not {describe(value)}")


def real(func: str, name: str, value: object) -> float | int | bool:
    """A real Python (or NumPy) number: a fill or padding value."""
    if isinstance(value, numbers.Real) and not isinstance(value, torch.Tensor):
        return value  # type: ignore[return-value]  # numbers.Real: int, float, bool or a NumPy scalar
    raise TypeError(f"{func}(): argument '{name}' must be a real number, not {describe(value)}")


def dims(func: str, value: object) -> int | tuple[int, ...] | None:
    """``dim`` as torch's reductions take it: None, an int or a sequence of ints."""
    if value is None:
        return None
    if _is_int(value):
        return int(value)
    if isinstance(value, Sequence) and not isinstance(value, str) and all(_is_int(d) for d in value):
        return tuple(int(d) for d in value)
    raise TypeError(f"{func}(): argument 'dim' must be None, an int or a sequence of ints, not {value!r}")
