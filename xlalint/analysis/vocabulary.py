"""The torch / torch_xla names the analysis knows, once: what steps an optimizer, what cuts a step's
graph, who reduces gradients, what wraps a loader, what builds a tensor. Data only (no `ast`
logic): the analysis and the rules read these tables, and a name added here is known everywhere.
(JAX's names live with their analysis, `jax_tracing`, which has its own model of tracing.)"""

from __future__ import annotations

import re

XM = "torch_xla.core.xla_model"

# -- optimizers --------------------------------------------------------------------------------------
# Receivers named like an optimizer (`optimizer`, `self.opt`, `g_optim`, `optimizers[0]`).
OPTIMIZER_NAME = re.compile(r"(^|_)(optim|optimizer|optimiser|opt)s?$|optimi[sz]er", re.I)
# ... but never these: they have a `.step()` of their own that is not an optimizer step.
NOT_OPTIMIZER = re.compile(r"sched|lr|prof|ema|swa|scaler|warmup|averag|plateau|callback|hook", re.I)
# Optimizer classes outside `torch.optim` (timm, transformers, apex, bitsandbytes, ...).
OPTIMIZER_CLASS = re.compile(
    r"^(SGD|ASGD|Adam|AdamW|Adamax|NAdam|RAdam|Adagrad|Adadelta|Adafactor|RMSprop|Rprop|LBFGS|Lamb|Lars|"
    r"Lion|Adan|SparseAdam|FusedAdam|FusedLAMB|\w*Optimizer)$"
)

# -- the step barrier --------------------------------------------------------------------------------
XM_OPTIMIZER_STEP = f"{XM}.optimizer_step"
XM_REDUCE_GRADIENTS = f"{XM}.reduce_gradients"
RUNTIME_OPTIMIZER_STEP = "xlalint.runtime.optimizer_step"
# Calls that cut the step's graph wherever they run (`torch_xla.step()` as the call of a `with`).
SYNC_CALLS = {
    "torch_xla.sync",
    "torch_xla.step",
    "torch_xla.debug.profiler.StepTrace",
    "torch_xla.compile",
    f"{XM}.mark_step",
    "xlalint.runtime.sync",
}
# Spelled through a wrapper or a differently named import: judged by the called name alone.
SYNC_NAMES = {"mark_step", "xla_sync", "sync_xla"}
# Run inside one of these, a step is cut by the compiled program's own execution.
COMPILE_CALLS = {"torch_xla.compile", "torch_xla.step", "torch_xla.experimental.compile"}
# ... and blocks under these `with`s end in a sync (`StepTrace.__exit__` calls `torch_xla.sync()`).
STEP_CONTEXTS = COMPILE_CALLS | {"torch_xla.debug.profiler.StepTrace"}
# The frameworks that own the step barrier of the loops they drive: the data loader accelerate
# prepares for XLA is an `MpDeviceLoader`; Lightning's XLA strategy wraps the loader the same way.
FRAMEWORK_MODULES = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric")
# The methods through which they hand back the objects they manage.
PREPARE_METHODS = {
    "prepare",
    "prepare_optimizer",
    "prepare_data_loader",
    "setup",
    "setup_optimizers",
    "setup_dataloaders",
}

# -- gradient reduction ------------------------------------------------------------------------------
# Wrappers and calls that reduce the gradients themselves (and never add a barrier), by the name torch
# / torch_xla give them, and `FSDPv2`, the name torch_xla's docs import SPMD FSDP as; the value names
# them in messages. XLA_FACTS (XLA111): `xm.optimizer_step` is safe only with no DDP/FSDP/ZeRO/SPMD
# wrapper, FSDP2's `fully_shard` included (it reduce-scatters the gradients in backward).
GRADIENT_REDUCERS = {
    "DistributedDataParallel": "DDP",
    "XlaFullyShardedDataParallel": "XLA FSDP",
    "FullyShardedDataParallel": "FSDP",
    "fully_shard": "FSDP",
    "SpmdFullyShardedDataParallel": "FSDPv2",
    "FSDPv2": "FSDPv2",
    "ZeroRedundancyOptimizer": "ZeRO",
    "use_spmd": "SPMD",
    "mark_sharding": "SPMD",
}
# Modules whose import alone says a wrapper owns the reduction.
GRADIENT_REDUCER_MODULES = (
    "torch.nn.parallel",
    "torch.distributed.fsdp",
    "torch_xla.distributed.fsdp",
    "torch_xla.distributed.spmd",
    "torch_xla.distributed.zero_redundancy_optimizer",
)
# Optimizer steps that all-reduce the gradients (when the world size is above 1) just before stepping.
LATE_REDUCTION = {XM_OPTIMIZER_STEP, RUNTIME_OPTIMIZER_STEP}
# Reductions a step may run before it clips.
EARLY_REDUCTION = {
    XM_REDUCE_GRADIENTS,
    f"{XM}.all_reduce",
    f"{XM}.all_reduce_bucketized_gradients",
    "torch.distributed.all_reduce",
    "torch.distributed.all_reduce_coalesced",
}
# The file runs several replicas: it launches them, feeds each its own device loader, or asks how many.
REPLICA_LAUNCH = {"torch_xla.distributed.xla_multiprocessing.spawn", "torch_xla.launch"}
WORLD_SIZE = {"torch_xla.runtime.world_size", f"{XM}.xrt_world_size", "torch.distributed.get_world_size"}

# -- data loaders ------------------------------------------------------------------------------------
# torch_xla's device loaders: they sync at every batch.
DEVICE_LOADER = re.compile(r"^(MpDeviceLoader|ParallelLoader|per_device_loader)$")
# `torch.utils.data.DataLoader` and friends: host-side loaders, no barrier.
PLAIN_LOADER = re.compile(r"^(DataLoader|StatefulDataLoader)$")
# Iterating these wraps another iterable without changing what a step is (its batches are the loader's).
ITERABLE_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "reversed", "trange", "islice", "chain", "cycle"}
# ... of these, the ones whose loop variable holds (a tuple around) the wrapped iterable's elements, for
# the kind of that variable (`trange(n)` yields numbers, `chain(a, b)` the elements of two iterables).
ELEMENT_WRAPPERS = {"enumerate", "tqdm", "zip", "iter", "reversed"}

# -- tensors -----------------------------------------------------------------------------------------
# `torch.<name>(...)` builds a new tensor (on the device it is given).
FACTORIES = {
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "range",
    "linspace",
    "logspace",
    "eye",
    "rand",
    "randn",
    "randint",
    "randperm",
    "normal",
    "bernoulli",
    "tril_indices",
    "triu_indices",
    "empty_strided",
    "scalar_tensor",
    "from_numpy",
    "frombuffer",
}
# ... of these, the ones whose size is their argument (`torch.zeros(n)`): a size read from data is a new shape.
SIZED_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint"}
# `torch.<name>(x)`: a new tensor with `x`'s shape, dtype and device.
LIKE_FACTORIES = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
# torch functions and tensor methods whose result is boolean, elementwise (a bool tensor of their input's shape).
FLOAT_TESTS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit"}
COMPARISONS = {"eq", "ne", "gt", "ge", "lt", "le", "greater", "greater_equal", "less", "less_equal", "not_equal"}
LOGICAL_OPS = {"logical_not", "logical_and", "logical_or", "logical_xor"}
BOOL_FUNCTIONS = FLOAT_TESTS | COMPARISONS | LOGICAL_OPS | {"isreal", "isclose", "isin"}
BOOL_METHODS = FLOAT_TESTS | COMPARISONS | LOGICAL_OPS | {"bool", "isclose"}
# torch functions and tensor methods whose result holds integer indices (an index with them is a
# gather of static size, whatever the value is named): `argmax`, `arange`, `randperm`, `nonzero`...
INDEX_FUNCTIONS = {
    "argmax",
    "argmin",
    "argsort",
    "arange",
    "randperm",
    "randint",
    "multinomial",
    "searchsorted",
    "bucketize",
    "nonzero",
    "tril_indices",
    "triu_indices",
}
INDEX_METHODS = {"argmax", "argmin", "argsort", "nonzero", "long", "int", "multinomial"}
# ... and the ops whose named result `.indices` (or second element) holds them: `x.topk(k).indices`.
INDEXED_RESULTS = {"topk", "sort", "max", "min", "kthvalue", "mode", "median", "cummax", "cummin"}
# (not uint8: torch indexes with a uint8 tensor as with a bool mask)
INTEGER_DTYPES = {"long", "int", "int64", "int32", "int16", "int8", "short"}
# Ops that keep the shape of their (single tensor) input, for "the mask is built from x itself".
ELEMENTWISE_FUNCTIONS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "signbit", "logical_not", "abs"}
ELEMENTWISE_METHODS = FLOAT_TESTS | COMPARISONS | {"logical_not", "abs", "bool", "detach"}
# Tensor methods whose result is a tensor when the receiver is one: evident tensor values.
TENSOR_REDUCTIONS = {
    "any",
    "all",
    "isnan",
    "isinf",
    "isfinite",
    "isneginf",
    "isposinf",
    "logical_not",
    "logical_and",
    "logical_or",
    "eq",
    "ne",
    "gt",
    "ge",
    "lt",
    "le",
    "greater",
    "less",
    "greater_equal",
    "less_equal",
    "max",
    "min",
    "amax",
    "amin",
    "sum",
    "mean",
    "norm",
    "abs",
    "count_nonzero",
    "prod",
    "std",
    "var",
}

# the packages whose import makes a file XLA code (torch_xla, and torchax: torch on JAX's XLA)
XLA_MODULES = ("torch_xla", "torchax")
