"""A running (weighted) sum/mean that stays on the device (XLA101, XLA107, XLA110).

``running += loss.item()`` reads the loss on the host every step (on XLA: an
extra graph execution and a device-to-host copy per step), and
``losses.append(loss)`` followed by ``torch.stack(losses)`` grows the graph
every step. ``DeviceAccumulator`` keeps two device tensors instead and reads
them on the host only when asked.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from . import _args
from ._xla import xla_model

_Number = int | float | bool


class Reading(NamedTuple):
    """Host values of a :class:`DeviceAccumulator`: Python floats (nested lists for non-scalar values)."""

    mean: float | list[Any]
    sum: float | list[Any]
    weight: float | list[Any]


def _on_torch_xla(t: torch.Tensor) -> bool:
    """True when ``t`` lives on a torch_xla device and torch_xla is already imported."""
    return t.device.type == "xla" and "torch_xla" in sys.modules


class DeviceAccumulator:
    """Running weighted sum and mean of tensors (losses, metrics), kept on their device.

    Replaces ``total += loss.item()`` / ``losses.append(loss)`` loops::

        acc = DeviceAccumulator()
        for step, batch in enumerate(loader):
            loss = ...
            acc.add(loss, weight=batch_size)   # on the device: no host sync
            if step % 50 == 0:
                print(acc.read().mean)         # the one host sync, every 50 steps
                acc.reset()

    Semantics, after ``add(v_1, w_1)``, ..., ``add(v_n, w_n)``:

    * ``sum()`` is ``sum_i w_i * v_i`` and ``total_weight()`` is ``sum_i w_i``
      (both tensors). With the default ``weight=1`` they are the plain sum
      and the number of ``add`` calls.
    * ``mean()`` is ``sum() / total_weight()``: the weighted mean, NaN when
      nothing was added (0 / 0).
    * An entry with weight 0 contributes nothing, even when its value is NaN
      or inf (``torch.where``, not ``0 * v``). Weights are not checked (that
      would read them on the host): negative weights are used as given.
    * Values may be tensors of any shape (accumulated elementwise) or Python
      numbers; weights are Python numbers or tensors broadcastable to the
      value. The first ``add`` fixes the state's shape (the broadcast of value
      and weight), device and dtype; later values must broadcast to that shape.
    * The state dtype is ``dtype`` if given, else the value's dtype promoted
      to at least float32 (bf16/fp16 losses accumulate in float32, integer
      values in float32, float64 stays float64).
    * Values and weights are detached: the accumulator never keeps an
      autograd graph alive.

    Nothing here reads a tensor value on the host except :meth:`read` (and
    :meth:`read_in_step_closure` where it calls back immediately). On XLA the
    graph of ``add`` has the same shape every step, so it compiles once.
    """

    def __init__(self, dtype: torch.dtype | None = None) -> None:
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(
                f"DeviceAccumulator(): argument 'dtype' must be a torch.dtype such as torch.float32, not {dtype!r}"
            )
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"DeviceAccumulator: dtype must be a floating dtype, got {dtype}")
        self._dtype = dtype
        self._sum: torch.Tensor | None = None
        self._weight: torch.Tensor | None = None

    @torch.no_grad()
    def add(self, value: torch.Tensor | _Number, weight: torch.Tensor | _Number = 1) -> None:
        """Add ``weight * value`` to the sum and ``weight`` to the total weight, on the device.

        ``value`` and ``weight`` are tensors or real Python numbers (a list is a ``TypeError``: make it
        a tensor first)."""
        _check_number("value", value)
        _check_number("weight", weight)
        if not isinstance(value, torch.Tensor):
            device = self._sum.device if self._sum is not None else None
            value = torch.tensor(value, device=device)
        if self._sum is None:
            dtype, device = self._dtype or _state_dtype(value.dtype), value.device
        else:
            dtype, device = self._sum.dtype, self._sum.device
        value = value.detach().to(device=device, dtype=dtype)
        if isinstance(weight, torch.Tensor):
            weight = weight.detach().to(device=device, dtype=dtype)
            shape = torch.broadcast_shapes(value.shape, weight.shape)
            weighted = torch.where(weight != 0, value * weight, 0)
            weight = weight.expand(shape)
        else:
            shape = value.shape
            # A Python weight is known on the host: branching on it is free.
            weighted = value * weight if weight != 0 else torch.zeros_like(value)
            weight = torch.full(shape, weight, dtype=dtype, device=device)
        weighted = weighted.expand(shape)
        if self._sum is None or self._weight is None:  # both or neither
            self._sum, self._weight = weighted.clone(), weight.clone()
            return
        if torch.broadcast_shapes(shape, self._sum.shape) != self._sum.shape:
            raise ValueError(
                f"DeviceAccumulator.add: a value/weight of shape {tuple(shape)} does not "
                f"broadcast to the accumulated shape {tuple(self._sum.shape)}"
            )
        self._sum = self._sum + weighted
        self._weight = self._weight + weight

    def sum(self) -> torch.Tensor:
        """``sum_i w_i * v_i`` as a tensor on the state's device (0.0 on the CPU when empty)."""
        return self._sum if self._sum is not None else torch.tensor(0.0, dtype=self._empty_dtype())

    def total_weight(self) -> torch.Tensor:
        """``sum_i w_i`` as a tensor (the number of ``add`` calls when every weight is 1)."""
        return self._weight if self._weight is not None else torch.tensor(0.0, dtype=self._empty_dtype())

    def mean(self) -> torch.Tensor:
        """``sum() / total_weight()`` as a tensor: NaN where the total weight is 0."""
        return self.sum() / self.total_weight()

    def reset(self) -> None:
        """Zero the sum and the weight, keeping their shape, device and dtype.

        Zeroing in place of forgetting keeps the step graphs identical after a
        reset (the totals stay device tensors of the same shape).
        """
        if self._sum is not None and self._weight is not None:
            self._sum = torch.zeros_like(self._sum)
            self._weight = torch.zeros_like(self._weight)

    def read(self) -> Reading:
        """The current mean, sum and total weight as Python floats: ONE host sync.

        Call it every N steps (or after ``torch_xla.sync()``), not every step.
        Non-scalar accumulators give nested lists of floats. An empty
        accumulator reads ``Reading(nan, 0.0, 0.0)`` without touching a device.
        """
        return _to_reading(self._snapshot())

    def read_in_step_closure(self, callback: Callable[[Reading], object], run_async: bool = False) -> None:
        """Call ``callback(reading)`` once the values are ready, without stalling the XLA step.

        On torch_xla (the totals are on an ``'xla'`` device and torch_xla is
        already imported) this registers the read with
        ``torch_xla.core.xla_model.add_step_closure(..., run_async=run_async)``:
        the callback runs after the current step's graph has executed (at the
        next ``torch_xla.sync()`` / ``optimizer_step(barrier=True)``), so the
        read copies finished values instead of forcing an extra execution. The
        values are those at the time of this call, even if ``add``/``reset``
        run before the step ends. Anywhere else the callback runs immediately
        with ``self.read()``'s values (a host sync on CUDA, free on CPU).
        """
        if not callable(callback):
            raise TypeError(
                "DeviceAccumulator.read_in_step_closure(): argument 'callback' must be callable "
                f"(it is called with the Reading), not {_args.describe(callback)}"
            )
        _args.flag("DeviceAccumulator.read_in_step_closure", "run_async", run_async)
        snapshot = self._snapshot()
        if isinstance(snapshot, torch.Tensor) and _on_torch_xla(snapshot):
            xm = xla_model()
            if xm is not None:
                xm.add_step_closure(_deliver, args=(snapshot, callback), run_async=run_async)
                return
        _deliver(snapshot, callback)

    def _snapshot(self) -> torch.Tensor | None:
        """(mean, sum, weight) stacked into one tensor, so reading them is one transfer."""
        if self._sum is None or self._weight is None:
            return None
        return torch.stack([self.mean(), self._sum, self._weight])

    def _empty_dtype(self) -> torch.dtype:
        return self._dtype or torch.get_default_dtype()


def _check_number(name: str, value: object) -> None:
    if isinstance(value, (torch.Tensor, numbers.Real)):  # Real: int, float, bool and NumPy's scalars
        return
    hint = " (make it a tensor first: torch.tensor(...))" if isinstance(value, (list, tuple)) else ""
    raise TypeError(
        f"DeviceAccumulator.add(): argument '{name}' must be a Tensor or a real number, not {_args.describe(value)}{hint}"
    )


def _state_dtype(dtype: torch.dtype) -> torch.dtype:
    """``dtype`` promoted to at least float32 (plain Python: no torch op to intercept under torchax)."""
    if dtype.is_complex:
        raise TypeError(f"DeviceAccumulator: cannot accumulate {dtype} values")
    if dtype.is_floating_point and dtype.itemsize > 4:
        return dtype
    return torch.float32


def _to_reading(snapshot: torch.Tensor | None) -> Reading:
    if snapshot is None:
        return Reading(math.nan, 0.0, 0.0)
    mean, total, weight = snapshot.tolist()  # the one intended host read
    return Reading(mean, total, weight)


def _deliver(snapshot: torch.Tensor | None, callback: Callable[[Reading], object]) -> None:
    callback(_to_reading(snapshot))
