"""Bucketed padding: shapes from a small fixed set, so XLA compiles once per bucket (XLA105, XLA106).

Every new input shape compiles a new XLA graph (seconds to minutes each).
Padding each batch to the smallest of a few fixed sizes ("buckets") bounds
the number of graphs by the number of buckets; the returned boolean mask tells
the model which entries are real (use it with ``masked_mean`` & co., or as an
attention mask). These helpers run in the data pipeline: they decide sizes from
Python ints and tensor shapes only, and never read a tensor value.

Pad on the host (e.g. in a DataLoader ``collate_fn``), then move the batch to
the XLA device: padding a tensor that is already on the device still compiles
once per unpadded shape, since that shape is new to the device's graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from . import _args


def bucket_size(n: int, buckets: Iterable[int]) -> int:
    """The smallest bucket that is ``>= n``.

    ``n`` is a Python int (a length or a shape entry), ``buckets`` an iterable
    of non-negative ints in any order (e.g. ``(128, 256, 512)``). Raises
    ``ValueError`` when ``n`` exceeds the largest bucket (truncating silently
    would drop data; add a bucket or cut the input first), when ``n`` is
    negative, when ``buckets`` is empty or holds a negative size, and
    ``TypeError`` when ``buckets`` is not an iterable of ints or ``n`` is not a
    Python int, a tensor included (turning it into an int would be a host sync:
    pass ``len(seq)`` or ``x.shape[d]``).
    """
    if isinstance(n, torch.Tensor) or isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"bucket_size: n must be a Python int (a length or shape entry), got {type(n).__name__}")
    try:
        listed = list(buckets)
    except TypeError:
        raise TypeError(
            f"bucket_size(): argument 'buckets' must be an iterable of ints such as (128, 256), not {_args.describe(buckets)}"
        ) from None
    sizes = sorted(_check_bucket(b) for b in listed)
    if not sizes:
        raise ValueError("bucket_size: buckets is empty")
    if n < 0:
        raise ValueError(f"bucket_size: n must be >= 0, got {n}")
    for size in sizes:
        if size >= n:
            return size
    raise ValueError(
        f"bucket_size: {n} exceeds the largest bucket ({sizes[-1]}); add a larger bucket or truncate the input first"
    )


def _check_bucket(b: object) -> int:
    if isinstance(b, bool) or not isinstance(b, int):
        raise TypeError(f"bucket_size(): bucket sizes must be ints, not {_args.describe(b)} ({b!r})")
    if b < 0:
        raise ValueError(f"bucket_size(): bucket sizes must be non-negative, got {b}")
    return b


def _bucket_mask(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """``mask[..., j] = j < lengths[...]``: True on real entries, False on padding."""
    positions = torch.arange(size, device=lengths.device)
    return positions < lengths.unsqueeze(-1)


def pad_to_bucket(
    x: torch.Tensor, buckets: Iterable[int], dim: int = 0, value: float | int | bool = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ``x`` along ``dim`` up to ``bucket_size(x.shape[dim], buckets)``.

    Replaces padding to the batch's own length (``pad_sequence``,
    ``padding="longest"``), which gives a new shape, and a new XLA
    compilation, for nearly every batch.

    Returns ``(padded, mask)``: ``padded`` has ``x``'s dtype and device and
    the bucket's size along ``dim``, with the padding (at the end of ``dim``)
    set to ``value``; ``mask`` is a bool tensor of shape ``(bucket,)``, True
    for the ``x.shape[dim]`` real entries. ``mask`` is 1-D: to use it against
    ``padded`` with ``dim=0`` of a 2-D tensor write ``mask[:, None]``. When
    ``x`` already has a bucket's size, ``padded`` is ``x`` itself (no copy).
    Raises ``ValueError`` when the size exceeds the largest bucket,
    ``IndexError`` for a ``dim`` out of range (0-d tensors have no dim to pad)
    and ``TypeError`` when ``x`` is not a tensor, ``dim`` not an int or
    ``value`` not a real number.
    """
    _args.tensor("pad_to_bucket", "x", x)
    dim = _args.integer("pad_to_bucket", "dim", dim)
    _args.real("pad_to_bucket", "value", value)
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"pad_to_bucket: dim {dim} is out of range for a tensor with {x.ndim} dimensions")
    dim %= x.ndim
    length = x.shape[dim]
    size = bucket_size(length, buckets)
    mask = torch.arange(size, device=x.device) < length
    if size == length:
        return x, mask
    # cat, not F.pad: F.pad refuses tensors with another zero-size dimension on older torch.
    pad_shape = list(x.shape)
    pad_shape[dim] = size - length
    return torch.cat([x, x.new_full(pad_shape, value)], dim=dim), mask


def pad_sequences(
    seqs: Sequence[torch.Tensor], buckets: Iterable[int], value: float | int | bool = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length sequences into one bucket-sized batch.

    Replaces ``torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)``,
    whose width is the longest sequence of each batch (a new shape, and a new
    XLA compilation, for nearly every batch).

    ``seqs``: a non-empty sequence of tensors of shape ``(L_i, *rest)`` (1-D
    token sequences, or ``(L_i, features)``), all with the same ``rest``,
    dtype and device. Returns ``(batch, mask)``: ``batch`` has shape ``(B,
    bucket, *rest)`` where ``bucket = bucket_size(max L_i, buckets)``, the
    sequences left-aligned and padded with ``value``; ``mask`` is a bool
    tensor of shape ``(B, bucket)``, True where ``j < L_i``. The batch size
    ``B`` is not bucketed (use a fixed batch size, ``drop_last=True``, or pad
    the last batch with empty sequences). Raises ``ValueError`` for an empty
    list, a 0-d sequence, or a length above the largest bucket, and
    ``TypeError`` for an element that is not a tensor or a ``value`` that is
    not a real number.
    """
    try:
        seqs = list(seqs)
    except TypeError:
        raise TypeError(
            f"pad_sequences(): argument 'seqs' must be a sequence of tensors, not {_args.describe(seqs)}"
        ) from None
    for i, s in enumerate(seqs):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"pad_sequences(): argument 'seqs' must hold tensors; element {i} is {_args.describe(s)}")
    _args.real("pad_sequences", "value", value)
    if not seqs:
        raise ValueError("pad_sequences: seqs is empty (the dtype and device would be unknown)")
    if any(s.ndim == 0 for s in seqs):
        raise ValueError("pad_sequences: every sequence needs at least one dimension (its length)")
    lengths = [s.shape[0] for s in seqs]
    size = bucket_size(max(lengths), buckets)
    batch = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=value)
    batch, _ = pad_to_bucket(batch, [size], dim=1, value=value)
    device = seqs[0].device
    mask = _bucket_mask(torch.tensor(lengths, device=device), size)
    return batch, mask
