"""Bad arguments to every public function of xlalint.runtime (issue 40, item 12): the exception torch
raises for the same mistake (TypeError for a wrong type, ValueError for a wrong value), never a bare
AttributeError from deep inside, and a message that names the function, the argument and what was
expected."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xlalint.runtime as runtime
from xlalint.runtime import (
    DeviceAccumulator,
    bucket_size,
    clip_grad_norm_,
    masked_count,
    masked_max,
    masked_mean,
    masked_min,
    masked_sum,
    nonzero_static,
    optimizer_step,
    pad_sequences,
    pad_to_bucket,
    sync,
)

X = torch.tensor([1.0, 2.0, 3.0])
MASK = torch.tensor([True, False, True])


def _param(with_grad: bool) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.ones(3))
    if with_grad:
        p.grad = torch.full((3,), 2.0)
    return p


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([_param(True)], lr=0.1)


def _accumulator_add(value, weight=1):
    DeviceAccumulator().add(value, weight)


MASKED = [masked_sum, masked_count, masked_mean, masked_max, masked_min]

# (public name, call, exception, words the message must hold)
CASES = [
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(False)], "a"), ValueError, "'max_norm' must be a number"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(True)], "a"), ValueError, "'max_norm' must be a number"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(False)], None), TypeError, "'max_norm' must be a number"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(True)], 1.0, "b"), ValueError, "'norm_type' must be"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(False)], 1.0, None), TypeError, "'norm_type' must be"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([_param(True)], torch.ones(2)), ValueError, "one-element tensor"),
    ("clip_grad_norm_", lambda: clip_grad_norm_(torch.nn.Linear(2, 2), 1.0), TypeError, "model.parameters()"),
    ("clip_grad_norm_", lambda: clip_grad_norm_(torch.nn.Sequential(torch.nn.Linear(2, 2)), 1.0), TypeError,
     "model.parameters()"),
    ("clip_grad_norm_", lambda: clip_grad_norm_([[1.0, 2.0]], 1.0), TypeError, "it holds a list"),
    ("clip_grad_norm_", lambda: clip_grad_norm_(5, 1.0), TypeError, "iterable of tensors, not int"),
    ("optimizer_step", lambda: optimizer_step(torch.nn.Linear(2, 2)), TypeError, "not the model"),
    ("optimizer_step", lambda: optimizer_step([_param(True)]), TypeError, "must be a torch.optim.Optimizer, not list"),
    ("optimizer_step", lambda: optimizer_step(_optimizer(), lambda: 0.0), TypeError, "optimizer_args={'closure'"),
    ("optimizer_step", lambda: optimizer_step(_optimizer(), "yes"), TypeError, "'barrier' must be bool"),
    ("optimizer_step", lambda: optimizer_step(_optimizer(), True, [("closure", None)]), TypeError,
     "'optimizer_args' must be a mapping"),
    ("sync", lambda: sync(1), TypeError, "'wait' must be bool, not int"),
    ("sync", lambda: sync("no"), TypeError, "'wait' must be bool, not str"),
    ("nonzero_static", lambda: nonzero_static([True, False], 2), TypeError, "'mask' must be a Tensor, not list"),
    ("nonzero_static", lambda: nonzero_static(MASK, 2.0), TypeError, "'size' must be int, not float"),
    ("nonzero_static", lambda: nonzero_static(MASK, torch.tensor(2)), TypeError, "reads it on the host"),
    ("nonzero_static", lambda: nonzero_static(MASK, -1), ValueError, "non-negative"),
    ("nonzero_static", lambda: nonzero_static(MASK, 2, 0.5), TypeError, "'fill_value' must be int"),
    ("bucket_size", lambda: bucket_size(3, 128), TypeError, "iterable of ints such as (128, 256), not int"),
    ("bucket_size", lambda: bucket_size(3, [4.0]), TypeError, "bucket sizes must be ints"),
    ("bucket_size", lambda: bucket_size(3, [-4]), ValueError, "non-negative"),
    ("bucket_size", lambda: bucket_size(3.0, [4]), TypeError, "Python int"),
    ("pad_to_bucket", lambda: pad_to_bucket([1.0, 2.0], [4]), TypeError, "'x' must be a Tensor, not list"),
    ("pad_to_bucket", lambda: pad_to_bucket(X, [4], dim=0.0), TypeError, "'dim' must be int, not float"),
    ("pad_to_bucket", lambda: pad_to_bucket(X, [3], value="pad"), TypeError, "'value' must be a real number"),
    ("pad_sequences", lambda: pad_sequences([[1, 2], [3]], [4]), TypeError, "element 0 is list"),
    ("pad_sequences", lambda: pad_sequences(3, [4]), TypeError, "sequence of tensors, not int"),
    ("pad_sequences", lambda: pad_sequences([X], [4], value=None), TypeError, "'value' must be a real number"),
    ("DeviceAccumulator", lambda: DeviceAccumulator("float32"), TypeError, "must be a torch.dtype"),
    ("DeviceAccumulator", lambda: _accumulator_add([1.0, 2.0]), TypeError, "torch.tensor(...)"),
    ("DeviceAccumulator", lambda: _accumulator_add("1.0"), TypeError, "'value' must be a Tensor or a real number"),
    ("DeviceAccumulator", lambda: _accumulator_add(X, None), TypeError, "'weight' must be a Tensor or a real number"),
    ("DeviceAccumulator", lambda: DeviceAccumulator().read_in_step_closure("print"), TypeError, "must be callable"),
    ("DeviceAccumulator", lambda: DeviceAccumulator().read_in_step_closure(print, "yes"), TypeError,
     "'run_async' must be bool"),
]
for fn in MASKED:
    name = fn.__name__
    CASES += [
        (name, lambda fn=fn: fn([1.0, 2.0, 3.0], MASK), TypeError, f"{name}(): argument 'x' must be a Tensor, not list"),
        (name, lambda fn=fn: fn(X, [True, False, True]), TypeError, f"{name}(): argument 'mask' must be a Tensor"),
        (name, lambda fn=fn: fn(X, MASK, dim="0"), TypeError, "'dim' must be None, an int or a sequence of ints"),
        (name, lambda fn=fn: fn(X, MASK, dim=(0.0,)), TypeError, "'dim' must be None, an int or a sequence of ints"),
        (name, lambda fn=fn: fn(X, MASK, dim=0, keepdim=1), TypeError, "'keepdim' must be bool, not int"),
    ]


@pytest.mark.parametrize("name, call, error, words", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_arguments_raise_what_torch_raises_and_say_what_was_expected(name, call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert type(raised.value) is error  # not a subclass either: no AttributeError, no IndexError
    message = str(raised.value)
    assert words in message, message
    assert message.startswith(f"{name}") or message.startswith(f"{name.split('.')[0]}"), message


def test_every_public_name_has_its_bad_arguments_tested():
    assert set(runtime.__all__) == {case[0] for case in CASES}


# -- the same inputs to torch's own functions: the same exception type ------------------------------------


@pytest.mark.parametrize(
    "ours, torchs",
    [
        (lambda: clip_grad_norm_([_param(False)], "a"), lambda: torch.nn.utils.clip_grad_norm_([_param(False)], "a")),
        (lambda: clip_grad_norm_([_param(True)], "a"), lambda: torch.nn.utils.clip_grad_norm_([_param(True)], "a")),
        (lambda: clip_grad_norm_([_param(True)], None), lambda: torch.nn.utils.clip_grad_norm_([_param(True)], None)),
        (lambda: clip_grad_norm_([_param(True)], 1.0, "b"),
         lambda: torch.nn.utils.clip_grad_norm_([_param(True)], 1.0, "b")),
        (lambda: clip_grad_norm_([_param(True)], 1j), lambda: torch.nn.utils.clip_grad_norm_([_param(True)], 1j)),
        (lambda: clip_grad_norm_([_param(True)], torch.ones(2)),
         lambda: torch.nn.utils.clip_grad_norm_([_param(True)], torch.ones(2))),
        (lambda: clip_grad_norm_(5, 1.0), lambda: torch.nn.utils.clip_grad_norm_(5, 1.0)),
        (lambda: clip_grad_norm_(torch.nn.Linear(2, 2), 1.0),
         lambda: torch.nn.utils.clip_grad_norm_(torch.nn.Linear(2, 2), 1.0)),
        (lambda: masked_sum([1.0, 2.0], torch.tensor([True, False])), lambda: torch.sum([1.0, 2.0])),
        (lambda: masked_sum(X, MASK, dim=0, keepdim=1), lambda: torch.sum(X, dim=0, keepdim=1)),
        (lambda: masked_sum(X, MASK, dim="0"), lambda: torch.sum(X, dim="0")),
        (lambda: nonzero_static(MASK, 2.0), lambda: torch.nonzero_static(MASK, size=2.0)),
        (lambda: nonzero_static([True], 2), lambda: torch.nonzero_static([True], size=2)),
        (lambda: pad_to_bucket(X, [4], value="a"), lambda: X.new_full((1,), "a")),
        (lambda: pad_sequences([[1, 2]], [4]), lambda: torch.nn.utils.rnn.pad_sequence([[1, 2]], batch_first=True)),
        (lambda: DeviceAccumulator("float32"), lambda: torch.zeros(1, dtype="float32")),
    ],
)
def test_the_exception_type_is_torchs(ours, torchs):
    with pytest.raises(Exception) as expected:
        torchs()
    with pytest.raises(Exception) as got:
        ours()
    assert type(got.value) is type(expected.value), (got.value, expected.value)


# -- what is accepted stays accepted ---------------------------------------------------------------------------


def test_what_torch_accepts_is_accepted(same):
    for max_norm, norm_type in [(1, 2), ("1.5", "inf"), (np.float32(0.5), np.int64(1)), (torch.tensor(0.5), 2.0)]:
        ours, theirs = [_param(True), _param(True)], [_param(True), _param(True)]
        expected = torch.nn.utils.clip_grad_norm_(theirs, float(max_norm), norm_type)
        same(clip_grad_norm_(ours, max_norm, norm_type), expected)
        same(ours[0].grad, theirs[0].grad)
    assert clip_grad_norm_((p for p in [_param(False)]), 1.0).item() == 0.0  # a generator, no gradient
    assert masked_sum(X, MASK, dim=[0], keepdim=True).tolist() == [4.0]  # dim as a list, as torch.sum takes
    assert masked_max(X, MASK, dim=np.int64(0)).item() == 3.0  # NumPy integers, as torch takes them
    assert nonzero_static(MASK, np.int64(1)).tolist() == [[0]]
    assert nonzero_static(MASK, 2).tolist() == [[0], [2]]
    assert pad_to_bucket(X, (4,), value=np.float32(-1.0))[0].tolist() == [1.0, 2.0, 3.0, -1.0]
    assert pad_sequences((X, X[:1]), [4], value=True)[1].tolist() == [[True] * 3 + [False], [True] + [False] * 3]
    acc = DeviceAccumulator(torch.float64)
    acc.add(np.float64(2.0), weight=True)
    acc.add(torch.tensor(4.0), weight=np.int64(3))
    assert acc.read().sum == 14.0 and acc.read().weight == 4.0
    optimizer = _optimizer()
    assert optimizer_step(optimizer, barrier=False, optimizer_args={"closure": lambda: 1.5}) == 1.5
    sync(wait=True)
