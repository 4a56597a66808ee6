"""Boolean-mask code without data-dependent shapes (XLA103): ``nonzero_static`` and masked reductions.

``x[mask]``, ``torch.nonzero`` and ``masked_select`` give a result whose size
depends on the mask's values: on torch_xla they fall back to the CPU (a host
sync every step) and every new size compiles a new graph. The functions here
keep every shape static: ``nonzero_static`` pads to a fixed ``size``, and the
reductions select with ``torch.where`` instead of indexing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import _args

_Dim = int | Sequence[int] | None


def nonzero_static(mask: torch.Tensor, size: int, fill_value: int = -1) -> torch.Tensor:
    """Indices of the nonzero entries of ``mask``, padded or truncated to ``size`` rows.

    Replaces ``torch.nonzero(mask)`` / ``torch.argwhere(mask)`` when an upper
    bound on the count is known, and ``torch.nonzero_static`` itself, which on
    torch_xla falls back to the CPU (``aten::nonzero_static``: a host round trip
    every call).

    Same result as ``torch.nonzero_static(mask, size=size, fill_value=fill_value)``:
    an int64 tensor of shape ``(size, mask.ndim)`` on ``mask``'s device whose
    rows are the multi-indices of the nonzero entries in row-major order; rows
    past the number of nonzero entries are filled with ``fill_value``, and when
    there are more than ``size`` nonzero entries only the first ``size`` are
    kept (silently, like torch).

    * Non-bool masks count entries ``!= 0`` (NaN counts as nonzero), as torch does.
    * A 0-d mask gives shape ``(size, 0)``; an empty mask gives only fill rows;
      ``size=0`` gives shape ``(0, mask.ndim)``.
    * ``size`` must be a non-negative Python int (a tensor would be a host
      read): another type is a ``TypeError`` and a negative size a ``ValueError``,
      as in torch; ``fill_value`` must be a Python int.

    How: each position ``i`` of the flattened mask gets the key ``M - i`` when
    it is nonzero and ``0`` otherwise (``M = max(numel, size)``; the key vector
    is zero-padded to length ``M`` so ``topk`` can take ``size`` entries).
    ``torch.topk(key, size)`` then returns the nonzero positions first, in
    increasing order, and a key of 0 marks a fill row. Flat positions are
    unravelled with the mask's (static) strides. No value is read on the host
    and every shape depends only on ``mask.shape`` and ``size``.
    """
    _args.tensor("nonzero_static", "mask", mask)
    size = _args.integer("nonzero_static", "size", size)
    if size < 0:
        raise ValueError(f"nonzero_static(): argument 'size' must be a non-negative int, got {size}")
    fill_value = _args.integer("nonzero_static", "fill_value", fill_value)
    device, shape = mask.device, tuple(mask.shape)
    if size == 0 or not shape:
        # Nothing to select (size 0), or nothing to write (0-d: each row is empty).
        return torch.empty((size, len(shape)), dtype=torch.int64, device=device)
    numel = math.prod(shape)
    length = max(numel, size)
    flat = mask.reshape(-1)
    nonzero = flat if flat.dtype == torch.bool else flat != 0
    positions = torch.arange(numel, dtype=torch.int64, device=device)
    key = torch.where(nonzero, length - positions, 0)
    if length > numel:
        key = torch.cat([key, key.new_zeros(length - numel)])
    top = torch.topk(key, size, sorted=True).values  # distinct keys for nonzero entries: no ties matter
    found = top > 0
    flat_index = length - top
    coords = []
    stride = numel  # a zero-size dim means numel == 0: every row is a fill row, any index will do
    for dim_size in shape:
        stride //= dim_size if dim_size else 1
        coords.append(torch.div(flat_index, max(stride, 1), rounding_mode="floor") % max(dim_size, 1))
    index = torch.stack(coords, dim=1)
    return torch.where(found.unsqueeze(1), index, fill_value)


def _check_mask(x: torch.Tensor, mask: torch.Tensor, name: str, dim: _Dim, keepdim: bool) -> None:
    _args.tensor(name, "x", x)
    _args.tensor(name, "mask", mask)
    _args.dims(name, dim)
    _args.flag(name, "keepdim", keepdim)
    if mask.dtype != torch.bool:
        # x[int_tensor] is integer indexing, not masking: refuse rather than guess.
        raise TypeError(f"{name}: mask must be a bool tensor, got {mask.dtype}")
    try:
        shape = torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        shape = None
    if shape != x.shape:
        raise ValueError(
            f"{name}: mask of shape {tuple(mask.shape)} does not broadcast to x of shape "
            f"{tuple(x.shape)}. Masks broadcast from the trailing dimension, like "
            "torch.where: to select rows of x (shape (n, d)) with a mask of shape (n,), "
            "pass mask[:, None]."
        )


def _dims(x: torch.Tensor, dim: _Dim) -> tuple[int, ...]:
    """``dim`` as a tuple of non-negative dims (all of them for None)."""
    if dim is None:
        return tuple(range(x.ndim))
    checked = _args.dims("masked", dim)  # checked by _check_mask already: this maps NumPy ints to int
    dims = (checked,) if isinstance(checked, int) else checked or ()
    rank = max(x.ndim, 1)  # a 0-d tensor accepts dim 0 / -1, like torch
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(f"dim {d} is out of range for a tensor with {x.ndim} dimensions")
    normalized = tuple(d % rank for d in dims)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"dim {dim!r} names a dimension more than once")
    return normalized if x.ndim else ()


def _reduce_arg(x: torch.Tensor, dim: _Dim) -> tuple[int, ...] | None:
    """The ``dim`` argument to hand to torch's reductions (None reduces everything)."""
    return None if dim is None else _dims(x, dim)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: _Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Sum of the entries of ``x`` where ``mask`` is True, with a static shape.

    Replaces ``x[mask].sum()`` (``dim=None``) and per-dimension masked sums,
    whose boolean indexing has a data-dependent shape (a host sync and a CPU
    fallback on torch_xla). Computed as ``torch.where(mask, x, 0).sum(dim,
    keepdim)``: entries outside the mask are replaced, not multiplied by 0, so a
    NaN or inf there cannot leak into the result (``x * mask`` would give NaN).

    * ``mask`` is a bool tensor broadcastable to ``x`` (the result of
      broadcasting must be ``x``'s shape). Broadcasting aligns trailing
      dimensions, so a per-row mask of shape ``(n,)`` over ``x`` of shape
      ``(n, d)`` must be passed as ``mask[:, None]``; a mask that does not
      broadcast raises ``ValueError``. (When ``n == d`` the ``(n,)`` mask does
      broadcast, over columns: the shape cannot tell, so check your mask.)
    * ``dim``: None (all dimensions), an int, or a tuple of ints, as in
      ``torch.sum``; ``keepdim`` as in ``torch.sum``.
    * Dtype as ``x[mask].sum()``: integer and bool inputs sum in int64, floating
      inputs keep their dtype. An empty selection sums to 0.
    * Floating sums equal the eager reference up to summation order (a few ulps).
    """
    _check_mask(x, mask, "masked_sum", dim, keepdim)
    selected = torch.where(mask, x, 0)
    return torch.sum(selected, dim=_reduce_arg(x, dim), keepdim=keepdim)


def masked_count(x: torch.Tensor, mask: torch.Tensor, dim: _Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Number of entries of ``x`` selected by ``mask``, as an int64 tensor.

    Replaces ``x[mask].numel()`` / ``len(x[mask])`` (``dim=None``) and
    ``mask.sum(dim)`` when ``mask`` is broadcast against ``x`` (a mask of shape
    ``(n, 1)`` over ``x`` of shape ``(n, d)`` counts ``d`` per selected row).
    Same ``mask``/``dim``/``keepdim`` rules as :func:`masked_sum`. The count
    stays on the device: calling ``int()`` on it is a host sync.
    """
    _check_mask(x, mask, "masked_count", dim, keepdim)
    selected = mask.expand(x.shape)
    return torch.sum(selected, dim=_reduce_arg(x, dim), keepdim=keepdim, dtype=torch.int64)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: _Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Mean of the entries of ``x`` where ``mask`` is True: ``masked_sum / masked_count``.

    Replaces ``x[mask].mean()`` and per-dimension masked means (see
    :func:`masked_sum` for the ``mask``/``dim``/``keepdim`` rules and NaN
    safety). An empty selection gives NaN, like ``x[mask].mean()`` (0 / 0); no
    ``clamp_min(1)``, which would silently turn it into 0.

    * Floating ``x``: the result has ``x``'s dtype and equals the eager
      reference up to summation order.
    * Integer and bool ``x`` (where ``torch.mean`` raises): the sum is taken
      exactly in int64, then divided in the default floating dtype
      (``torch.get_default_dtype()``, normally float32).
    """
    _check_mask(x, mask, "masked_mean", dim, keepdim)
    total = masked_sum(x, mask, dim, keepdim)
    count = masked_count(x, mask, dim, keepdim)
    if not total.dtype.is_floating_point and not total.dtype.is_complex:
        total = total.to(torch.get_default_dtype())
    return total / count.to(total.dtype)


def _empty_value(dtype: torch.dtype, largest: bool) -> float | int | bool:
    """What a max (``largest``) or min over an empty selection returns: the reduction's identity."""
    if dtype == torch.bool:
        return not largest
    if dtype.is_floating_point:
        return -math.inf if largest else math.inf
    info = torch.iinfo(dtype)
    return info.min if largest else info.max


def _masked_extreme(
    x: torch.Tensor, mask: torch.Tensor, dim: _Dim, keepdim: bool, largest: bool, name: str
) -> torch.Tensor:
    _check_mask(x, mask, name, dim, keepdim)
    if x.dtype.is_complex:
        raise TypeError(f"{name}: complex tensors have no ordering")
    fill = _empty_value(x.dtype, largest)
    dims = _dims(x, dim)
    if any(x.shape[d] == 0 for d in dims):
        # amax refuses to reduce an empty dimension; every slice is an empty selection.
        shape = (
            [1 if d in dims else n for d, n in enumerate(x.shape)]
            if keepdim
            else [n for d, n in enumerate(x.shape) if d not in dims]
        )
        return torch.full(shape, fill, dtype=x.dtype, device=x.device)
    selected = torch.where(mask, x, fill)  # a Python scalar keeps x's dtype and needs no transfer
    reduce = torch.amax if largest else torch.amin
    result: torch.Tensor = reduce(selected, dim=dims, keepdim=keepdim)
    if x.dtype.is_floating_point:
        # torch_xla starts max/min reductions from the largest finite value, not inf: a slice
        # of only -inf (an empty selection) reduces to -3.4e38 there. Restore torch's answer.
        only_fill = torch.all(selected == fill, dim=dims, keepdim=keepdim)
        result = torch.where(only_fill, fill, result)
    return result


def masked_max(x: torch.Tensor, mask: torch.Tensor, dim: _Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Maximum of the entries of ``x`` where ``mask`` is True, with a static shape.

    Replaces ``x[mask].max()`` and per-dimension masked maxima (``.values`` of
    ``x.max(dim)`` restricted to the mask; no indices are returned). Computed
    as ``torch.amax(torch.where(mask, x, lowest), dim, keepdim)``; see
    :func:`masked_sum` for the ``mask``/``dim``/``keepdim`` rules. A NaN inside
    the selection gives NaN (as ``torch.max`` does); outside it is ignored.

    An empty selection (a slice with no True entry) gives the identity of max
    instead of raising as ``x[mask].max()`` does: ``-inf`` for floating dtypes,
    ``torch.iinfo(dtype).min`` for integer dtypes, ``False`` for bool. Test
    ``masked_count(...) > 0`` where that matters. The result keeps ``x``'s dtype.
    On torch_xla, whose max reductions start from the lowest finite float, a
    slice of only ``-inf`` is mapped back to ``-inf`` (one extra boolean
    reduction), so results match CPU there too.
    """
    return _masked_extreme(x, mask, dim, keepdim, largest=True, name="masked_max")


def masked_min(x: torch.Tensor, mask: torch.Tensor, dim: _Dim = None, keepdim: bool = False) -> torch.Tensor:
    """Minimum of the entries of ``x`` where ``mask`` is True, with a static shape.

    The mirror of :func:`masked_max` (``torch.amin`` over ``torch.where(mask,
    x, highest)``). An empty selection gives ``+inf`` for floating dtypes,
    ``torch.iinfo(dtype).max`` for integer dtypes and ``True`` for bool, where
    ``x[mask].min()`` raises.
    """
    return _masked_extreme(x, mask, dim, keepdim, largest=False, name="masked_min")
