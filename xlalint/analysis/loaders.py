"""Training data loaders: which `DataLoader(...)` feeds training, and ends each epoch with a
smaller batch.

XLA compiles the step once per input shape. A loader whose dataset size is not a multiple of its
batch size yields a last, smaller batch every epoch: one more compile (XLA311). Whether a loader
feeds training is told by how it is built (it shuffles, takes a training sampler, is named for
training) or by where it goes: a loop that trains iterates it, here or in the project function it
is handed to (`Trainer(cfg, model, data_iter)` that keeps it as `self.data_iter` and trains over
it), or it is what a project helper returns (`train_loader, val_loader = setup_dataloaders(...)`).
"""

from __future__ import annotations

import ast
import re
from functools import cached_property
from typing import TYPE_CHECKING

from .index import FUNCTIONS, own_returns
from .names import dotted_name, is_constant, keyword, keyword_value, last_part, method_name, positional
from .steps import loop_trains

if TYPE_CHECKING:
    from .file import File

TRAIN = re.compile(r"train", re.I)
NOT_TRAIN = re.compile(
    r"(^|_|\b)(eval|evaluation|test|testing|val|valid|validation|dev|predict|prediction|"
    r"inference|infer|calib|calibration)(_|$|\b|s\b)",
    re.I,
)
# Iterating these wraps another iterable: its batches are the wrapped loader's.
WRAPPERS = {
    "enumerate",
    "tqdm",
    "iter",
    "trange",
    "islice",
    "cycle",
    "MpDeviceLoader",
    "ParallelLoader",
    "per_device_loader",
    "prepare",
    "prepare_data_loader",
    "setup_dataloaders",
}
MAX_DEPTH = 4


def ragged_loader(ctx: File, call: ast.Call) -> bool:
    """A `torch.utils.data.DataLoader(...)` of batches of more than one example without
    `drop_last=True` or a batch sampler: its last batch is smaller unless the dataset divides."""
    name = dotted_name(call.func)
    if last_part(name) != "DataLoader":
        return False
    qualified = ctx.qualified_name(call.func) or ""
    if qualified.split(".")[0] not in ("torch", "DataLoader") and qualified != name:
        return False
    spread = _spread_keywords(ctx, call)
    if spread is None or keyword(call, "batch_sampler") or "batch_sampler" in spread:
        return False
    drop_last = keyword_value(call, "drop_last")
    if drop_last is not None and not is_constant(drop_last, False):
        return False
    if any(not is_constant(value, False) for value in spread.get("drop_last", ())):
        return False
    args = positional(call)
    batch = keyword_value(call, "batch_size")
    if batch is None and len(args) > 1:
        batch = args[1]
    if (
        batch is None
        or is_constant(batch, None)
        or (isinstance(batch, ast.Constant) and type(batch.value) is int and batch.value <= 1)
    ):
        return False
    return len(args) <= 2  # positional shuffle/sampler...: unusual, leave it


# What a dict of keyword arguments may have done to it after its display: keys added or changed.
DICT_CHANGES = {"update", "setdefault", "__setitem__", "pop", "clear"}


def _spread_keywords(ctx: File, call: ast.Call) -> dict[str, list[ast.expr]] | None:
    """The keywords `call` passes through `**name`, by key, with each value they may have: every
    binding of `name` in its function is a dict display of constant keys (`kwargs = {}`, `kwargs =
    {"num_workers": 4}` on another branch) and nothing stores into it afterwards. {} for a call
    with no `*`/`**` arguments; None when what they pass is not seen."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    spread: dict[str, list[ast.expr]] = {}
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        if not isinstance(kw.value, ast.Name) or ctx.parameter(kw.value) is not None:
            return None
        scope = ctx.index.scope_of(kw.value)
        bound = False
        for use in ctx.index.name_uses.get(kw.value.id, ()):
            if ctx.index.scope_of(use) is not scope or use is kw.value:
                continue
            parent = ctx.parent(use)
            if isinstance(use.ctx, ast.Store):
                if not (
                    isinstance(parent, ast.Assign) and parent.targets == [use] and isinstance(parent.value, ast.Dict)
                ):
                    return None  # not a dict display, or `kwargs |= {...}`
                bound = True
                for key, value in zip(parent.value.keys, parent.value.values):
                    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                        return None  # `{**base, ...}` or a computed key
                    spread.setdefault(key.value, []).append(value)
            elif isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
                return None  # `kwargs["drop_last"] = True`
            elif isinstance(parent, ast.Attribute) and parent.attr in DICT_CHANGES:
                return None
            elif isinstance(parent, ast.Call) or (isinstance(parent, ast.keyword) and parent.arg is not None):
                return None  # handed to a function that may change it (`**kwargs` elsewhere copies it)
        if not bound:
            return None  # bound outside the function (a module's `LOADER_KWARGS`): not seen here
    return spread


def ragged_training_loader(ctx: File, call: ast.Call) -> bool:
    """`ragged_loader`, and it feeds training (see the module's docstring)."""
    return training_sign(ctx, call) is not None


# why a loader is taken for training: where it shows, and how (the finding's chain)
Sign = tuple[ast.AST, str]


def training_sign(ctx: File, call: ast.Call) -> Sign | None:
    """For a `ragged_loader` that feeds training, the sign that shows it does: how it is built or
    named, else the loop or function that trains on it. None for any other call."""
    if not ragged_loader(ctx, call) or never_partial(ctx, call) or used_outside_training(ctx, call):
        return None
    named = _named_for_training(ctx, call)
    if named is not None:
        return named or None
    return _fed_to_training(ctx, call)


# Samplers that never end an epoch (or end it on a whole batch): no last, smaller batch.
ENDLESS_SAMPLER = re.compile(r"Infinite|Endless|Repeat|Forever", re.I)


def never_partial(ctx: File, call: ast.Call) -> bool:
    """The loader's sampler never yields a partial batch: an endless sampler (`InfiniteSampler`,
    `RepeatSampler`), or a `RandomSampler(..., num_samples=k * batch_size)` of whole batches."""
    sampler = keyword_value(call, "sampler")
    if sampler is None:
        return False
    values = ctx.reaching_values(sampler) if isinstance(sampler, ast.Name) else [sampler]
    if not values:
        return bool(ENDLESS_SAMPLER.search(ctx.code(sampler)))
    batch = keyword_value(call, "batch_size")
    for value in values:
        if not isinstance(value, ast.Call):
            return False
        if ENDLESS_SAMPLER.search(last_part(dotted_name(value.func))):
            continue
        samples = keyword_value(value, "num_samples")
        if not (samples is not None and batch is not None and _multiple_of(ctx, samples, batch)):
            return False
    return True


def _multiple_of(ctx: File, total: ast.expr, batch: ast.expr) -> bool:
    """`steps * batch_size` (or `batch_size * steps`) for the loader's `batch_size`."""
    return (
        isinstance(total, ast.BinOp)
        and isinstance(total.op, ast.Mult)
        and any(ctx.code(side) == ctx.code(batch) for side in (total.left, total.right))
    )


def used_outside_training(ctx: File, call: ast.Call) -> bool:
    """The loader (assigned to a name) is only drawn from once (`next(iter(loader))`: one sample
    batch, for a plot or a shape check) or iterated by loops that do not train: no last batch of a
    training epoch. Any other use (passed on, returned, stored) keeps it a candidate."""
    target = _target(ctx, call)
    if not isinstance(target, ast.Name):
        return False
    scope = ctx.index.scope_of(call)
    uses = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.Name)
        and n.id == target.id
        and isinstance(n.ctx, ast.Load)
        and ctx.index.scope_of(n) is scope
        and call in ctx.reaching_values(n)
    ]
    return bool(uses) and all(_drawn_once(ctx, use) or _iterated_without_training(ctx, use) for use in uses)


def _drawn_once(ctx: File, use: ast.Name) -> bool:
    """`next(iter(loader))`, `len(loader)`."""
    parent = ctx.parent(use)
    if isinstance(parent, ast.Call) and dotted_name(parent.func) == "len":
        return True
    grand = ctx.parent(parent)
    return (
        isinstance(parent, ast.Call)
        and dotted_name(parent.func) == "iter"
        and isinstance(grand, ast.Call)
        and dotted_name(grand.func) == "next"
    )


def _iterated_without_training(ctx: File, use: ast.Name) -> bool:
    """`for batch in loader:` (through `enumerate`, `tqdm`...) in a loop that does not train."""
    node: ast.AST = use
    parent = ctx.parent(node)
    while isinstance(parent, ast.Call) and last_part(dotted_name(parent.func)) in WRAPPERS and node in parent.args:
        node, parent = parent, ctx.parent(parent)
    return isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node and not loop_trains(ctx, parent)


def _named_for_training(ctx: File, call: ast.Call) -> Sign | tuple[()] | None:
    """The sign when how the loader is built or named says it is for training; () when it says it
    is not; None when nothing does."""
    code = ctx.code
    words = [code(a) for a in call.args] + [code(k.value) for k in call.keywords if k.arg in ("dataset", "sampler")]
    target = _target(ctx, call)
    if target is not None:
        words.append(code(target))
    text = " ".join(words)
    if NOT_TRAIN.search(text.replace(".", "_")):
        return ()
    named: Sign | None = None
    if TRAIN.search(text):
        named = (
            (target, f"named for training (`{code(target)}`)")
            if target is not None and TRAIN.search(code(target))
            else (call, "built for training (by its dataset's or sampler's name)")
        )
    shuffle = keyword_value(call, "shuffle")
    if shuffle is not None:
        if _shuffles(ctx, shuffle):
            return shuffle, f"shuffles its batches (`shuffle={code(shuffle)}`): a training loader"
        if is_constant(shuffle, False):
            return named
    sampler = keyword_value(call, "sampler")
    if sampler is not None and re.search(r"train|RandomSampler", code(sampler)):
        return sampler, f"its sampler `{code(sampler)}` draws training samples"
    # `sampler = DistributedSampler(ds, shuffle=train)`: a sampler that shuffles feeds training
    for value in _samplers(ctx, sampler) if sampler is not None else ():
        if last_part(dotted_name(value.func)).endswith("Sampler"):
            sampler_shuffle = keyword_value(value, "shuffle")
            if sampler_shuffle is not None and _shuffles(ctx, sampler_shuffle):
                return value, f"its sampler shuffles (`shuffle={code(sampler_shuffle)}`): a training loader"
    return named


def shuffled_sign(ctx: File, call: ast.Call) -> Sign | None:
    """The loader draws its examples in a random order from a map-style dataset: `shuffle=True`
    (or a training flag), or a `RandomSampler`. None when it does not, or it is not seen."""
    shuffle = keyword_value(call, "shuffle")
    if shuffle is not None and _shuffles(ctx, shuffle):
        return shuffle, f"shuffles a map-style dataset (`shuffle={ctx.code(shuffle)}`)"
    sampler = keyword_value(call, "sampler")
    for value in _samplers(ctx, sampler) if sampler is not None else ():
        if last_part(dotted_name(value.func)) == "RandomSampler":
            return value, "draws with a `RandomSampler` over the whole dataset"
    return None


def _samplers(ctx: File, sampler: ast.expr) -> list[ast.Call]:
    """The calls that build the loader's sampler: the value passed, what its name holds, or what a
    function of this module called for it returns (`sampler = get_sampler(ds, mode=mode)`)."""
    values = ctx.reaching_values(sampler) if isinstance(sampler, ast.Name) else [sampler]
    found: list[ast.Call] = []
    for value in values:
        if not isinstance(value, ast.Call):
            continue
        found.append(value)
        if isinstance(value.func, ast.Name):
            for func in ctx.functions_in_scope(value.func.id, ctx.tree):
                found.extend(call for index, call in returned_calls(ctx, func) if index == -1)
    return found


def _shuffles(ctx: File, shuffle: ast.expr, depth: int = 0) -> bool:
    """`shuffle=True`, `shuffle=is_train`: order is shuffled for training; so is it when either
    branch of `False if sampler else shuffle` (a sampler shuffles in its place) or the value a name
    holds (`shuffle = train is True`) says so."""
    if is_constant(shuffle, True) or TRAIN.search(ctx.code(shuffle)):
        return True
    if depth >= MAX_DEPTH:
        return False
    if isinstance(shuffle, ast.IfExp):
        return any(_shuffles(ctx, branch, depth + 1) for branch in (shuffle.body, shuffle.orelse))
    if isinstance(shuffle, ast.Name) and ctx.parameter(shuffle) is None:
        return any(_shuffles(ctx, value, depth + 1) for value in ctx.reaching_values(shuffle))
    return False


def _target(ctx: File, call: ast.Call) -> ast.expr | None:
    """What the loader is assigned to (`loader = DataLoader(...)`, through `prepare(DataLoader(...))`)."""
    parent = ctx.parent(call)
    while isinstance(parent, (ast.Call, ast.keyword)):
        parent = ctx.parent(parent)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return parent.targets[0]
    return None


# -- where a loader goes ---------------------------------------------------------------------------


def _fed_to_training(ctx: File, call: ast.Call) -> Sign | None:
    """A loop that trains iterates the loader `call` builds: in this module, or in the project
    function it is passed to (`ProjectFacts.helper_calls`, kind "trains_on")."""
    if call in training_sources(ctx).loaders:
        return call, "a loop that trains iterates it"
    for site, position, name in _passed_to(ctx, call):
        if _trains_on(ctx, site, position, name):
            return site, f"handed to `{dotted_name(site.func) or 'a call'}` (line {site.lineno}), which trains on it"
    return None


def _passed_to(ctx: File, call: ast.Call):
    """(call, positional index, keyword) for each call this loader is passed to: directly
    (`Trainer(DataLoader(...))`), or by the name it is assigned to, in the same scope."""
    parent = ctx.parent(call)
    if isinstance(parent, ast.Call) and call in parent.args:
        yield parent, parent.args.index(call), None
    elif isinstance(parent, ast.keyword) and isinstance(ctx.parent(parent), ast.Call):
        yield ctx.parent(parent), None, parent.arg
    target = _target(ctx, call)
    if not isinstance(target, ast.Name):
        return
    scope = ctx.index.scope_of(call)
    for site in ctx.index.calls:
        if ctx.index.scope_of(site) is not scope:
            continue
        for position, arg in enumerate(site.args):
            if isinstance(arg, ast.Name) and arg.id == target.id and call in ctx.reaching_values(arg):
                yield site, position, None
        for kw in site.keywords:
            if isinstance(kw.value, ast.Name) and kw.value.id == target.id and call in ctx.reaching_values(kw.value):
                yield site, None, kw.arg


def _trains_on(ctx: File, site: ast.Call, position: int | None, name: str | None) -> bool:
    for _, _, detail in ctx.helper_calls(site, "trains_on"):
        at, _, param = detail.partition(":")
        if (position is not None and at == str(position)) or (name is not None and param == name):
            return True
    return False


class TrainingSources:
    """What the loops of one module that train iterate: loaders built here, and parameters of its
    functions (directly, or kept as `self.x` by a method and iterated by another)."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx

    @cached_property
    def _leaves(self) -> list[ast.expr]:
        found: list[ast.expr] = []
        for loop in self.ctx.index.loops:
            if isinstance(loop, (ast.For, ast.AsyncFor)) and loop_trains(self.ctx, loop):
                found.extend(self._resolve(loop.iter, 0))
        return found

    @cached_property
    def loaders(self) -> set[ast.Call]:
        return {leaf for leaf in self._leaves if isinstance(leaf, ast.Call)}

    def loop_of(self, loader: ast.Call) -> ast.AST | None:
        """The first loop that trains over the batches of `loader` (one of `loaders`)."""
        for loop in self.ctx.index.loops:
            if isinstance(loop, (ast.For, ast.AsyncFor)) and loop_trains(self.ctx, loop):
                if loader in self._resolve(loop.iter, 0):
                    return loop
        return None

    @cached_property
    def params(self) -> dict[ast.AST, list[tuple[int | None, str]]]:
        """Function -> (positional index without self, name) of its parameters a training loop iterates."""
        found: dict[ast.AST, list[tuple[int | None, str]]] = {}
        for leaf in self._leaves:
            if not isinstance(leaf, ast.Name):
                continue
            param = self.ctx.parameter(leaf)
            func = self.ctx.index.parent(self.ctx.index.parent(param)) if param is not None else None
            if param is None or not isinstance(func, FUNCTIONS):
                continue
            position = self.ctx.call_position(func, param)
            entry = (position, param.arg)
            if entry not in found.setdefault(func, []):
                found[func].append(entry)
        return found

    def _resolve(self, expr: ast.expr, depth: int) -> list[ast.expr]:
        """The values `expr` (a loop's iterable) evidently holds: loader calls, and parameter names
        (a name and a wrapper are a link each: `tqdm(device_loader)`, `device_loader =
        ParallelLoader(loader, [d]).per_device_loader(d)`, `loader = DataLoader(...)`)."""
        if depth > 2 * MAX_DEPTH:
            return []
        if isinstance(expr, ast.Call):
            inner = wrapped_loader(expr)
            return self._resolve(inner, depth + 1) if inner is not None else [expr]
        if isinstance(expr, ast.Name):
            values = self.ctx.reaching_values(expr)
            if not values:
                return [expr] if self.ctx.parameter(expr) is not None else []
            return [leaf for v in values for leaf in self._resolve(v, depth + 1)]
        if isinstance(expr, ast.Attribute) and dotted_name(expr):  # `self.train_loader`
            return [leaf for v in self.ctx.assigned_values(expr) for leaf in self._resolve(v, depth + 1)]
        return []


def wrapped_loader(call: ast.Call) -> ast.expr | None:
    """The loader a wrapper call iterates: `tqdm(loader)` (see `WRAPPERS`), and `loader` in
    `ParallelLoader(loader, [d]).per_device_loader(d)` (the `ParallelLoader(...)`, itself a wrapper);
    None for any other call."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "per_device_loader":
        return call.func.value
    if last_part(dotted_name(call.func)) in WRAPPERS and call.args:
        return call.args[0]
    return None


def training_sources(ctx: File) -> TrainingSources:
    return ctx.cached(TrainingSources)


# -- what helpers return -------------------------------------------------------------------------------


def returned_calls(ctx: File, func: ast.AST) -> tuple[tuple[int, ast.Call], ...]:
    """(index in the returned tuple, -1 for the whole value; the call) for each call whose value
    `func` returns, directly or through the name it is bound to (`return train_loader, dataset`).
    Found once per function: the module summary asks it for both its ragged loaders and its
    returned sources."""
    memo = ctx.cached(_returned_calls_by_function)
    if func not in memo:
        memo[func] = tuple(_returned_calls(ctx, func))
    return memo[func]


def _returned_calls_by_function(ctx: File) -> dict[ast.AST, tuple[tuple[int, ast.Call], ...]]:
    return {}


def _returned_calls(ctx: File, func: ast.AST) -> list[tuple[int, ast.Call]]:
    found: list[tuple[int, ast.Call]] = []
    for ret in own_returns(func):  # type: ignore[arg-type]
        if ret.value is None:
            continue
        elements = list(enumerate(ret.value.elts)) if isinstance(ret.value, ast.Tuple) else [(-1, ret.value)]
        for index, element in elements:
            values = ctx.reaching_values(element) if isinstance(element, ast.Name) else [element]
            found.extend((index, value) for value in values if isinstance(value, ast.Call))
    return found


def returned_ragged_loaders(ctx: File, func: ast.AST) -> list[tuple[int, int]]:
    """(line of the `DataLoader(...)`, index in the returned tuple, -1 for the whole value) for each
    ragged training loader `func` returns (`return train_loader, val_loader`)."""
    found: list[tuple[int, int]] = []
    for index, call in returned_calls(ctx, func):
        if (call.lineno, index) not in found and ragged_training_loader(ctx, call):
            found.append((call.lineno, index))
    return found


# -- batches of one length -------------------------------------------------------------------------------


def padded_to_fixed_length(ctx: File, call: ast.Call) -> bool:
    """The batch a collate function pads with `pad_sequence(seqs)` has one length every time: each
    example is cut to a fixed block (`[x[i : i + block] for i in starts]`), or the padded batch is
    padded again to a constant length (`F.pad(t, (0, MAX_LEN - t.shape[1]))`)."""
    seqs = call.args[0] if call.args else None
    if isinstance(seqs, ast.Name):
        values = ctx.reaching_values(seqs)
        seqs = values[0] if len(values) == 1 else None
    if isinstance(seqs, (ast.ListComp, ast.GeneratorExp)) and _fixed_window(ctx, seqs.elt):
        return True
    parent = ctx.parent(call)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    name = parent.targets[0].id
    func = ctx.index.enclosing_function(call)
    order = ctx.index.order
    return any(
        order.get(later, 0) > order[call] and _pads_to_constant(later, name)
        for later in (ctx.calls_within(func) if func is not None else ())
    )


def _fixed_window(ctx: File, expr: ast.expr) -> bool:
    """`x[i : i + block]` (or `x[:, i : i + block]`): a slice of a fixed length."""
    if not isinstance(expr, ast.Subscript):
        return False
    parts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
    window = parts[-1]
    return (
        isinstance(window, ast.Slice)
        and window.lower is not None
        and isinstance(window.upper, ast.BinOp)
        and isinstance(window.upper.op, ast.Add)
        and ctx.code(window.upper.left) == ctx.code(window.lower)
        and window.step is None
    )


def _pads_to_constant(call: ast.Call, name: str) -> bool:
    """`F.pad(name, (0, LENGTH - name.shape[1]))`: padded up to a length that does not depend on it."""
    if last_part(dotted_name(call.func)) != "pad" or not call.args or dotted_name(call.args[0]) != name:
        return False
    widths = call.args[1] if len(call.args) > 1 else keyword_value(call, "pad")
    if not isinstance(widths, (ast.Tuple, ast.List)):
        return False
    for width in widths.elts:
        if isinstance(width, ast.BinOp) and isinstance(width.op, ast.Sub):
            right = width.right
            measured = right.value if isinstance(right, ast.Subscript) else right
            if isinstance(measured, ast.Call):
                measured = measured.func
            if isinstance(measured, ast.Attribute) and measured.attr in ("shape", "size"):
                return dotted_name(measured.value) == name and name not in {
                    n.id for n in ast.walk(width.left) if isinstance(n, ast.Name)
                }
    return False


# -- batches moved by hand -------------------------------------------------------------------------------

DEVICE_WORDS = re.compile(r"device|\bdev\b|xla|tpu", re.I)


def moves_batches_by_hand(ctx: File, loop: ast.AST) -> bool:
    """The loop moves what it iterates to the device itself (`x, y = x.to(device), y.to(device)`,
    `[t.to(self.device) for t in batch]`): evidence of a plain host loader, which a device loader
    would have made needless."""
    return bool(batch_moves(ctx, loop))


def batch_moves(ctx: File, loop: ast.AST, *, parts: bool = False) -> list[ast.Call]:
    """The `.to(device)` calls by which the loop moves what it iterates to the device, in order.
    With `parts`, also the parts of a batch: `batch["input_ids"].to(device)`, `x.to(device)` after
    `x = batch["image"]` in the loop."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return []
    found: list[ast.Call] = []
    targets = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for call in ctx.calls_within(loop):
        if method_name(call) != "to" or not isinstance(call.func, ast.Attribute):
            continue
        where = keyword_value(call, "device") or (call.args[0] if call.args else None)
        if where is None or not DEVICE_WORDS.search(ctx.code(where)):
            continue  # `x.to(torch.float16)`: a cast
        moved = call.func.value
        if parts:
            if _part_of_batch(ctx, loop, moved, targets, set()):
                found.append(call)
            continue
        if not isinstance(moved, ast.Name):
            continue
        if (moved.id in targets and not ctx.reaching_values(moved)) or any(
            # a comprehension over the batch: `[t.to(device) for t in batch]`
            isinstance(root, ast.Name) and root.id in targets
            for it in ctx.loop_iterables(moved)
            for root in ast.walk(it)
        ):
            found.append(call)
    return found


def _part_of_batch(ctx: File, loop: ast.AST, expr: ast.expr, targets: set[str], seen: set[ast.Name]) -> bool:
    """`expr` is the loop's batch or a part of it: a loop variable, an item of one (`batch["x"]`,
    `batch[0]`), an element of a comprehension over one (`for k, v in batch.items()`), or a name
    bound in the loop to any of these (also when moved or cast: `x = x.to(device)`)."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            break
    if not isinstance(expr, ast.Name) or len(seen) > MAX_DEPTH:
        return False
    if expr.id in targets:
        return True
    if expr in seen or any(n.id == expr.id for n in seen):
        return True  # `x = x.to(device)`: the name's other values decide
    seen = seen | {expr}
    values = [v for v in ctx.reaching_values(expr) if isinstance(v, ast.expr)]
    if not values:
        return any(_part_of_batch(ctx, loop, it, targets, seen) for it in ctx.loop_iterables(expr))
    return all(_within(ctx, value, loop) and _part_of_batch(ctx, loop, value, targets, seen) for value in values)


def _within(ctx: File, node: ast.AST, loop: ast.AST) -> bool:
    return any(anc is loop for anc in ctx.index.ancestors(node))


# -- loaders that flow through helpers' returns into training elsewhere ------------------------------


def returned_sources(ctx: File, func: ast.AST) -> list[tuple[int, ast.Call, bool]]:
    """(index in the returned tuple or -1, the call, whether it is a ragged `DataLoader(...)`) for
    each ragged loader `func` returns and each other call whose value it returns (a helper that
    builds the loader: `train_loader = get_loader(ds, is_train=True)` ... `return train_loader, ...`)."""
    found: list[tuple[int, ast.Call, bool]] = []
    for index, call in returned_calls(ctx, func):
        if last_part(dotted_name(call.func)) == "DataLoader":
            if ragged_loader(ctx, call) and not never_partial(ctx, call):
                found.append((index, call, True))
        elif dotted_name(call.func):
            found.append((index, call, False))
    return found


def trained_results(ctx: File) -> list[tuple[ast.Call, int, ast.AST]]:
    """(call, index in its result or -1 for the whole value, the loop) for each call of a function
    whose result a loop that trains here iterates: `self.train_loader, self.val_loader =
    prepare_loaders(...)` then `for batch in tqdm(self.train_loader):` gives (the call, 0, the loop)."""
    found: list[tuple[ast.Call, int, ast.AST]] = []
    for loop in ctx.index.loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)) and loop_trains(ctx, loop):
            for call, index in _result_sources(ctx, loop.iter, -1, 0):
                if (call, index) not in [(c, i) for c, i, _ in found]:
                    found.append((call, index, loop))
    return found


def _result_sources(ctx: File, expr: ast.expr, index: int, depth: int) -> list[tuple[ast.Call, int]]:
    if depth > 2 * MAX_DEPTH:
        return []
    if isinstance(expr, ast.Call):
        inner = wrapped_loader(expr)
        if inner is not None:
            return _result_sources(ctx, inner, index, depth + 1)
        name = dotted_name(expr.func)
        return [] if not name or last_part(name) == "DataLoader" else [(expr, index)]
    if not isinstance(expr, (ast.Name, ast.Attribute)) or not dotted_name(expr):
        return []
    found: list[tuple[ast.Call, int]] = []
    for value in ctx.assigned_values(expr):
        statement = ctx.parent(value)
        element = -1
        if isinstance(statement, ast.Assign) and statement.value is value and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, (ast.Tuple, ast.List)):
                names = [dotted_name(e) for e in target.elts]
                if dotted_name(expr) not in names:
                    continue
                element = names.index(dotted_name(expr))
        found.extend(_result_sources(ctx, value, element, depth + 1))
    return found
