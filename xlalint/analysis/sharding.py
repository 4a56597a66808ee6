"""Data sharding across replicas: whether the replicas a module launches each read their own part
of the training data.

`xmp.spawn(fn, nprocs=8)` and `torch_xla.launch(fn)` run `fn` once per device, each in its own
process. A `DataLoader` built there with the loader's own sampler (none given, or a plain
`RandomSampler` / `SequentialSampler`) reads the whole dataset in every process: N replicas train
N times on the same examples (with shuffling, each in its own order), so an "epoch" is N passes
over the data and the averaged gradients are of the same examples.

Sharding, or what may be it, is any of: a sampler other than the plain ones (`DistributedSampler`,
a project's own sampler class, a `batch_sampler=`), a keyword that names replicas (`num_replicas=`,
`rank=`, `world_size=`, `num_shards=`), a call that cuts a dataset (`ds.shard(...)`,
`split_dataset_by_node`), a read of the process's rank or of the world size outside a plain
comparison (`if xm.get_ordinal() == 0:` is a logging gate, not a shard), a use of the replica's
index (the launched function's first parameter), or a call into another project module that does
one of these (a dataset class that reads its rank). Any of them in the launched code means "sharded
or not known": no finding. SPMD (`xr.use_spmd()`, `xs.mark_sharding`) runs one process: none either.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from .index import FUNCTIONS
from .names import dotted_name, is_constant, keyword_value, last_part, positional
from .ranks import RANK_CALLS
from .vocabulary import REPLICA_LAUNCH, WORLD_SIZE

if TYPE_CHECKING:
    from .file import File

PLAIN_SAMPLERS = {"RandomSampler", "SequentialSampler"}
# Calls that cut a dataset into the replica's part, or that make a loader or sampler per replica.
SHARD_CALLS = {"shard", "split_dataset_by_node", "DistributedSampler", "ElasticDistributedSampler"}
SHARD_KEYWORDS = {"num_replicas", "rank", "world_size", "num_shards", "shard_id", "shard_index", "process_index"}
# A single program over all devices: one process, nothing to shard by hand. A mesh or a sharding
# spec (`MpDeviceLoader(..., input_sharding=xs.ShardingSpec(mesh, ...))`) is SPMD's too: where it
# appears without `use_spmd()`, which of the two runs is not known.
SPMD_CALLS = {"use_spmd", "mark_sharding", "enable_spmd", "Mesh", "HybridMesh", "ShardingSpec", "get_1d_mesh"}
SAMPLER = re.compile(r"Sampler$")
MAX_REACH = 200


@dataclass(frozen=True)
class Launch:
    """A call that launches replicas of a function of this module, and that function."""

    call: ast.Call
    func: ast.AST


def shards_data(ctx: File, call: ast.Call) -> bool:
    """`call` shards data across replicas, or may (see the module's docstring): a sharding call or
    keyword, a sampler other than the plain ones, or a read of the rank or world size that is not
    a plain comparison."""
    name = last_part(dotted_name(call.func))
    if name in SHARD_CALLS or any(k.arg in SHARD_KEYWORDS for k in call.keywords):
        return True
    if SAMPLER.search(name) and name not in PLAIN_SAMPLERS | {"BatchSampler"}:
        return True
    qualified = ctx.qualified_name(call.func) or ""
    if qualified in RANK_CALLS or qualified in WORLD_SIZE:
        return not isinstance(ctx.parent(call), ast.Compare)
    return False


def module_shards_data(ctx: File) -> bool:
    """Some call of the module shards data, or may: what a project module reports to its callers."""
    return any(shards_data(ctx, call) for call in ctx.index.calls)


class Replicas:
    """The replicas one module launches with `xmp.spawn` / `torch_xla.launch`, the code they run
    (the launched function and what it calls in this module), and whether that code shards data."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx

    @cached_property
    def spmd(self) -> bool:
        return any(
            last_part(dotted_name(call.func)) in SPMD_CALLS or any(k.arg == "input_sharding" for k in call.keywords)
            for call in self.ctx.index.calls
        )

    @cached_property
    def launches(self) -> list[Launch]:
        """Launches of several replicas of a function defined in this module (not `nprocs=1`, not
        `debug_single_process=True`)."""
        if self.spmd:
            return []
        found = []
        for call in self.ctx.index.calls:
            if self.ctx.qualified_name(call.func) not in REPLICA_LAUNCH or self.ctx.in_non_xla_code(call):
                continue
            nprocs = keyword_value(call, "nprocs")
            if nprocs is None and len(call.args) > 2 and last_part(dotted_name(call.func)) == "spawn":
                nprocs = call.args[2]
            single = keyword_value(call, "debug_single_process")
            if (nprocs is not None and is_constant(nprocs, 1)) or (
                single is not None and not is_constant(single, False)
            ):
                continue
            target = call.args[0] if call.args else keyword_value(call, "fn")
            if not isinstance(target, ast.Name):
                continue
            funcs = [f for f in self.ctx.functions_in_scope(target.id, self.ctx.tree) if isinstance(f, FUNCTIONS)]
            if len(funcs) == 1:
                found.append(Launch(call, funcs[0]))
        return found

    @cached_property
    def reached(self) -> dict[ast.AST, Launch]:
        """The functions the launched replicas run, through calls of this module's functions and
        classes (a class's methods all count), each with the launch that runs it."""
        found: dict[ast.AST, Launch] = {}
        for launch in self.launches:
            work = [launch.func]
            while work and len(found) < MAX_REACH:
                func = work.pop()
                if func in found:
                    continue
                found[func] = launch
                for call in self.ctx.calls_within(func):
                    work.extend(self._callees(call))
        return found

    def _callees(self, call: ast.Call) -> list[ast.AST]:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            name = func.attr
        if name is None:
            return []
        found: list[ast.AST] = []
        for defined in self.ctx.functions_in_scope(name, self.ctx.tree) if isinstance(func, ast.Name) else ():
            found.append(defined)
        for cls in self.ctx.index.by_type.get(ast.ClassDef, ()):
            assert isinstance(cls, ast.ClassDef)
            if isinstance(func, ast.Name) and cls.name == name and isinstance(self.ctx.parent(cls), ast.Module):
                found.extend(n for n in cls.body if isinstance(n, FUNCTIONS))
            elif isinstance(func, ast.Attribute):
                found.extend(n for n in cls.body if isinstance(n, FUNCTIONS) and n.name == name)
        return found

    def launch_of(self, node: ast.AST) -> Launch | None:
        """The launch whose replicas run `node` (None when none does)."""
        func = self.ctx.parent(node)
        while func is not None and not isinstance(func, FUNCTIONS):
            func = self.ctx.parent(func)
        return self.reached.get(func) if func is not None else None

    @cached_property
    def sharded(self) -> set[Launch]:
        """The launches whose code shards data, or may (see the module's docstring)."""
        found = set()
        for func, launch in self.reached.items():
            if launch in found:
                continue
            if func is launch.func and self._index_used(func):
                found.add(launch)
                continue
            for call in self.ctx.calls_within(func):
                if shards_data(self.ctx, call) or self.ctx.helper_calls(call, "shards_data"):
                    found.add(launch)
                    break
        return found

    def _index_used(self, func: ast.AST) -> bool:
        """The launched function reads its first parameter, the replica's index."""
        args = getattr(func, "args", None)
        params = [*args.posonlyargs, *args.args] if args is not None else []
        if not params:
            return False
        name = params[0].arg
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(func))


def replicas(ctx: File) -> Replicas:
    return ctx.cached(Replicas)


def plain_sampling(ctx: File, call: ast.Call) -> bool:
    """The `DataLoader(...)` draws with its own sampler or a plain `RandomSampler` /
    `SequentialSampler`: nothing it is given picks a replica's part (no `batch_sampler=`, no other
    sampler, no positional arguments past the batch size)."""
    if keyword_value(call, "batch_sampler") is not None or len(positional(call)) > 3:
        return False
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    sampler = keyword_value(call, "sampler")
    if sampler is None or is_constant(sampler, None):
        return True
    values = ctx.reaching_values(sampler) if isinstance(sampler, ast.Name) else [sampler]
    return bool(values) and all(
        isinstance(v, ast.Call) and last_part(dotted_name(v.func)) in PLAIN_SAMPLERS for v in values
    )
