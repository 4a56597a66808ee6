"""``clip_grad_norm_`` that never reads a tensor value on the host (XLA112)."""

from __future__ import annotations

import math
import sys
import types
import warnings
from collections.abc import Iterable
from typing import NoReturn, cast

import torch

from . import _args
from ._xla import is_lazy_device, xla_model

try:  # The same helpers torch's own clip_grad_norm_ uses, so CPU/CUDA results match bit for bit.
    from torch.utils._foreach_utils import (
        _device_has_foreach_support,
        _group_tensors_by_device_and_dtype,
        _has_foreach_support,
    )
except ImportError:  # pragma: no cover - torch releases without these private helpers
    _group_tensors_by_device_and_dtype = None  # type: ignore[assignment]  # checked where used

    def _device_has_foreach_support(device: torch.device) -> bool:
        return device.type in ("cpu", "cuda")

    def _has_foreach_support(tensors: list[torch.Tensor], device: torch.device) -> bool:
        return _device_has_foreach_support(device) and all(
            type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors
        )


_Params = torch.Tensor | Iterable[torch.Tensor]


def _group(tensors: list[torch.Tensor]) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    # torch's C++ grouping fixes the order of the per-group norms, and with it
    # the rounding of the final reduction over mixed dtypes; use it when present.
    if _group_tensors_by_device_and_dtype is not None:
        # (torch annotates the lists as holding Optional tensors; these hold tensors only)
        grouped = _group_tensors_by_device_and_dtype([cast("list[torch.Tensor | None]", tensors)])
        return {key: cast("list[torch.Tensor]", lists[0]) for key, (lists, _) in grouped.items()}
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    return groups


def _use_foreach(foreach: bool | None, tensors: list[torch.Tensor], device: torch.device) -> bool:
    # Lazy XLA devices always take the per-tensor loop: that is what torch does
    # there for foreach=None, and torch_xla raises on foreach=True.
    if is_lazy_device(device) or foreach is False:
        return False
    if foreach is None:
        return _has_foreach_support(tensors, device)
    return _device_has_foreach_support(device)  # foreach=True: never raise, fall back to the loop


def _check_finite(total_norm: torch.Tensor, norm_type: float) -> None:
    if total_norm.device.type == "xla" and "torch_xla" in sys.modules:
        xm = xla_model()
        if xm is not None:
            # Checked once the step's graph has run (at the barrier): a copy of a value that is
            # computed anyway, with no graph cut and no extra execution.
            xm.add_step_closure(_raise_if_nonfinite, args=(total_norm, norm_type))
            return
    if is_lazy_device(total_norm.device):
        # torchax ('jax') has no step closures, and a Python `if` on a lazy tensor executes the
        # graph and copies to the host every step, which is what this runtime exists to avoid.
        warnings.warn(
            "xlalint.runtime.clip_grad_norm_: error_if_nonfinite=True is not checked on "
            f"'{total_norm.device.type}' devices (it would force a host sync); a non-finite "
            "total norm is returned and the gradients are scaled by it.",
            stacklevel=4,  # user -> no_grad wrapper -> clip_grad_norm_ -> here
        )
        return
    # Elsewhere keep torch's behaviour (and its sync: the caller asked for it).
    if torch.logical_or(total_norm.isnan(), total_norm.isinf()):
        _raise_nonfinite(norm_type)


def _raise_if_nonfinite(total_norm: torch.Tensor, norm_type: float) -> None:
    if not math.isfinite(total_norm.item()):  # after the step ran: the value exists
        _raise_nonfinite(norm_type)


def _raise_nonfinite(norm_type: float) -> None:
    raise RuntimeError(
        f"The total norm of order {norm_type} for gradients from "
        "`parameters` is non-finite, so it cannot be clipped. To disable "
        "this error and scale the gradients by the non-finite norm anyway, "
        "set `error_if_nonfinite=False`"
    )


def _bad_parameters(parameters: object, hint: str = "") -> NoReturn:
    raise TypeError(
        "clip_grad_norm_(): argument 'parameters' must be a tensor or an iterable of tensors, "
        f"not {_args.describe(parameters)}{hint}"
    )


def _number(name: str, value: object, expected: str) -> float:
    """``float(value)`` as torch takes it (``'inf'`` too), with the error saying what was expected."""
    try:
        return float(value)  # type: ignore[arg-type]  # float() says what it takes, below
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"clip_grad_norm_(): argument '{name}' must be {expected}, not {value!r}") from None


@torch.no_grad()
def clip_grad_norm_(
    parameters: _Params,
    max_norm: float | torch.Tensor,
    norm_type: float | str = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """Clip the gradient norm of ``parameters`` in place, without any host sync.

    Same math, arguments and return value as upstream
    ``torch.nn.utils.clip_grad_norm_`` (not torch_xla's monkeypatched copy):
    the total norm is ``vector_norm`` of the stacked per-gradient
    ``vector_norm``s (a max for ``norm_type=inf`` / ``'inf'``), each gradient is
    multiplied in place by ``clamp(max_norm / (total_norm + 1e-6), max=1.0)``,
    and the total norm is returned as a tensor (``torch.tensor(0.0)`` when no
    parameter has a gradient). On CPU and CUDA the results are bit-identical
    to torch's. No tensor value is ever read on the host, so on XLA no graph
    is cut and nothing is copied to the host.

    Differences from torch:

    * ``error_if_nonfinite=True`` on torch_xla (``'xla'``) raises torch's
      ``RuntimeError`` at the step barrier instead of in the call: a step
      closure reads the norm after the step's graph ran (no graph cut, no
      extra execution; one scalar copy per step), so the update of that step
      has already been applied when it raises. On torchax (``'jax'``), which
      has no step closures, it is NOT checked: it warns, and a non-finite norm
      propagates as with ``error_if_nonfinite=False`` (a NaN norm makes every
      gradient NaN, an inf norm zeroes the finite entries);
      ``torch.isfinite(total_norm)`` is the sync-free flag to act on, e.g. in
      ``torch.where``. On other devices it raises exactly like torch (which
      syncs on CUDA).
    * ``foreach=True`` never raises: devices without foreach kernels (and XLA
      devices, where torch_xla's patch raises) silently use the per-tensor
      loop. ``foreach=None`` picks kernels exactly as torch does;
      ``foreach=False`` always uses the per-tensor loop.
    * A tensor ``max_norm`` is used on the device as is (torch calls
      ``float(max_norm)``, a host sync when it lives on XLA).

    Bad arguments raise what torch raises, with a message saying what was
    expected: ``TypeError`` for ``parameters`` that are not tensors (a model
    instead of ``model.parameters()``) and for a ``max_norm``/``norm_type`` of
    the wrong type, ``ValueError`` for a string that is no number and a
    ``max_norm`` tensor of more than one element, also when no parameter has a
    gradient.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    else:
        if isinstance(parameters, torch.nn.Module):  # iterable when a Sequential: it yields modules
            _bad_parameters(parameters, ": pass model.parameters()")
        is_generator = isinstance(parameters, types.GeneratorType)
        try:
            parameters = list(parameters)  # a generator must be read only once
        except TypeError:
            _bad_parameters(parameters)
        if is_generator and not parameters:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=3,
            )
    # checked before the gradients, as torch converts both: a bad value raises with or without them
    norm_type = _number("norm_type", norm_type, "a number or 'inf'")  # also maps 'inf' to math.inf
    if isinstance(max_norm, torch.Tensor):
        if max_norm.numel() != 1:  # shape only: no host read
            raise ValueError(
                "clip_grad_norm_(): argument 'max_norm' must be a number or a one-element tensor, "
                f"not a tensor of shape {tuple(max_norm.shape)}"
            )
    else:
        max_norm = _number("max_norm", max_norm, "a number or a one-element tensor")
    try:
        grads = [p.grad for p in parameters if p.grad is not None]
    except AttributeError:  # an element without .grad: found only now, at no cost when all are tensors
        bad = next((p for p in parameters if not isinstance(p, torch.Tensor)), None)
        if bad is None:
            raise
        raise TypeError(
            "clip_grad_norm_(): argument 'parameters' must be a tensor or an iterable of tensors "
            f"(e.g. model.parameters()); it holds a {_args.describe(bad)}"
        ) from None
    if not grads:
        return torch.tensor(0.0)

    groups = _group(grads)
    norms: list[torch.Tensor] = []
    for (device, _), tensors in groups.items():
        if _use_foreach(foreach, tensors, device):
            norms.extend(torch._foreach_norm(tensors, norm_type))
        else:
            norms.extend(torch.linalg.vector_norm(g, norm_type) for g in tensors)
    first_device = grads[0].device
    total_norm: torch.Tensor = torch.linalg.vector_norm(torch.stack([n.to(first_device) for n in norms]), norm_type)
    if error_if_nonfinite:
        _check_finite(total_norm, norm_type)

    if isinstance(max_norm, torch.Tensor):
        # Python's `float / tensor` is `tensor.reciprocal() * float`: same ops, same rounding.
        max_norm = max_norm.to(device=total_norm.device, dtype=total_norm.dtype)
        clip_coef = (total_norm + 1e-6).reciprocal() * max_norm
    else:
        clip_coef = max_norm / (total_norm + 1e-6)
    # clamp instead of `if coef < 1:`, which would be a host sync.
    clip_coef = torch.clamp(clip_coef, max=1.0)
    for (device, _), tensors in groups.items():
        coef = clip_coef.to(device)
        if _use_foreach(foreach, tensors, device):
            torch._foreach_mul_(tensors, coef)
        else:
            for g in tensors:
                g.mul_(coef)
    return total_norm
