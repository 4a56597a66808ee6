"""Row tables of the objects of a batch: a collate that concatenates each sample's targets into one
tensor (`torch.cat(labels, 0)`, YOLO's `(image, class, x, y, w, h)` rows) hands the step a tensor
whose length is the number of objects in the batch, new every batch. What sizes a tensor by that
length (`nt = targets.shape[0]` then `.repeat(1, nt)`) compiles a new graph per batch.

The evidence is followed syntactically through the project: the collate (`row_collate`), the
`collate_fn=` of the loader a loop iterates or a helper returns (`loader_refs`, `batch_origin`),
and the calls that hand a batch element on (`CallSite.row_args`); `ProjectIndex` resolves the
references between modules (`ProjectFacts.row_refs`, `row_params`), and `ragged_rows` answers for
an expression in a module."""

from __future__ import annotations

import ast
import builtins

from .index import FUNCTIONS
from .names import dotted_name, function_params, keyword_value, last_part, method_name, receiver
from .vocabulary import SIZED_FACTORIES

CONCATENATIONS = {"cat", "concat", "concatenate"}
# a batch element keeps its rows through these (`targets.to(device)`, `targets.float()`)
SAME_ROWS = {"to", "cuda", "xla", "float", "half", "double", "long", "int", "type", "detach", "clone", "contiguous"}
# what a loop's iterable wraps without changing its batches (`enumerate` adds a counter)
TRANSPARENT = {"tqdm", "iter", "islice", "cycle", "mpdeviceloader", "parallelloader", "track", "progress_bar"}
MAX_DEPTH = 4


# -- the collate -------------------------------------------------------------------------------------


def row_collates(ctx) -> dict[ast.AST, list[tuple[str, int]]]:
    """`row_collate` of each function of this module that unpacks `zip(*batch)`."""
    found: dict[ast.AST, list[tuple[str, int]]] = {}
    for call in ctx.index.calls:
        if dotted_name(call.func) == "zip" and len(call.args) == 1 and isinstance(call.args[0], ast.Starred):
            func = ctx.index.enclosing_function(call)
            if func is not None and func not in found:
                found[func] = row_collate(ctx, func)
    return {func: tables for func, tables in found.items() if tables}


def row_collate(ctx, func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, int]]:
    """(the position in what `func` returns, "0"..., the line of the concatenation) of each row
    table a collate builds: `torch.cat(labels, 0)` of the samples' targets after it wrote each
    sample's index into a column of its rows (`for i, l in enumerate(labels): l[:, 0] = i`), the
    mark of rows that are objects, several per sample."""
    params = {p.arg for p in function_params(func)} - {"self", "cls"}
    if not params:
        return []
    samples = _per_sample_names(func, params)
    indexed = {name for name in samples if _indexes_rows(func, name)}
    if not indexed:
        return []
    tables: dict[str, int] = {}  # name of the concatenation (or "" for the call itself) -> its line
    found: list[tuple[str, int]] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and _row_concatenation(node.value, indexed):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    tables[target.id] = node.value.lineno
    for node in ast.walk(func):
        if not isinstance(node, ast.Return) or not isinstance(node.value, ast.Tuple):
            continue
        for position, element in enumerate(node.value.elts):
            if _row_concatenation(element, indexed):
                found.append((str(position), element.lineno))
            elif isinstance(element, ast.Name) and element.id in tables:
                found.append((str(position), tables[element.id]))
    return found


def _per_sample_names(func: ast.AST, params: set[str]) -> set[str]:
    """Names bound to the samples' fields: `imgs, labels = zip(*batch)` (or `list(zip(*batch))`)."""
    found: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        value = node.value
        if isinstance(value, ast.Call) and dotted_name(value.func) in ("list", "tuple") and value.args:
            value = value.args[0]
        if not (isinstance(value, ast.Call) and dotted_name(value.func) == "zip" and len(value.args) == 1):
            continue
        star = value.args[0]
        if not (isinstance(star, ast.Starred) and isinstance(star.value, ast.Name) and star.value.id in params):
            continue
        target = node.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)):
            found.update(e.id for e in target.elts if isinstance(e, ast.Name))
    return found


def _indexes_rows(func: ast.AST, name: str) -> bool:
    """`for i, rows in enumerate(name): rows[:, 0] = i`: each sample's index written into its rows."""
    for loop in ast.walk(func):
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)):
            continue
        if dotted_name(loop.iter.func) != "enumerate" or not loop.iter.args:
            continue
        if not (isinstance(loop.iter.args[0], ast.Name) and loop.iter.args[0].id == name):
            continue
        target = loop.target
        if not (
            isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)
        ):
            continue
        counter, rows = (e.id for e in target.elts)  # type: ignore[attr-defined]
        for stmt in ast.walk(loop):
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Name)
                and stmt.value.id == counter
                and any(_column_of(t, rows) for t in stmt.targets)
            ):
                return True
    return False


def _column_of(target: ast.expr, rows: str) -> bool:
    """`rows[:, k]`: a column of every row."""
    return (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and target.value.id == rows
        and isinstance(target.slice, ast.Tuple)
        and len(target.slice.elts) == 2
        and isinstance(target.slice.elts[0], ast.Slice)
    )


def _row_concatenation(expr: ast.expr, names: set[str]) -> bool:
    """`torch.cat(name, 0)` (along the rows) of one of `names`."""
    if not (isinstance(expr, ast.Call) and last_part(dotted_name(expr.func)) in CONCATENATIONS and expr.args):
        return False
    if not (isinstance(expr.args[0], ast.Name) and expr.args[0].id in names):
        return False
    dim = expr.args[1] if len(expr.args) > 1 else keyword_value(expr, "dim")
    return dim is None or (isinstance(dim, ast.Constant) and dim.value == 0)


# -- the loaders, in the module that builds or iterates them --------------------------------------------


def collate_refs(ctx, loader: ast.expr) -> list[str]:
    """The collates a loader call names, as written (`collate_fn=dataset.collate_fn` names the
    method of `dataset`'s class: "ListDataset.collate_fn"); and "call:f:i" for a loader that is
    element `i` (-1: the whole value) of what the project function `f` returns."""
    if not isinstance(loader, ast.Call):
        return []
    given = keyword_value(loader, "collate_fn")
    if given is not None:
        return [ref for value in _alternatives(given) for ref in _function_ref(ctx, value)]
    callee = dotted_name(loader.func)
    if (
        callee is None
        or last_part(callee).lower() in TRANSPARENT
        or "DataLoader" in callee
        or hasattr(builtins, callee)
    ):
        return []  # `range(n)`, `zip(a, b)`: no project function returns a loader there
    return [f"call:{callee}:{_unpacked_index(ctx, loader)}"]


def _alternatives(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.IfExp):
        return [*_alternatives(expr.body), *_alternatives(expr.orelse)]
    return [expr]


def _function_ref(ctx, value: ast.expr, depth: int = 0) -> list[str]:
    if isinstance(value, ast.Name):
        bound = ctx.reaching_values(value) if depth < MAX_DEPTH else []
        if bound:  # `collate = A.collate_fn if quad else B.collate_fn`
            return [ref for v in bound for alt in _alternatives(v) for ref in _function_ref(ctx, alt, depth + 1)]
        return [value.id]
    if not isinstance(value, ast.Attribute):
        return []
    owner = value.value
    if isinstance(owner, ast.Name):
        classes = [dotted_name(v.func) for v in ctx.reaching_values(owner) if isinstance(v, ast.Call)]
        if classes:  # `dataset.collate_fn`: the method of the class `dataset` was built from
            return [f"{c}.{value.attr}" for c in classes if c]
    written = dotted_name(value)
    return [written] if written else []


def _unpacked_index(ctx, call: ast.Call) -> int:
    """Where `call`'s result is unpacked to the loader (`loader, dataset = create_dataloader(...)`):
    0 there; -1 when it is assigned whole. The loader is the first name unpacked that is iterated;
    without that knowledge, the first."""
    parent = ctx.parent(call)
    if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], ast.Tuple):
        return 0
    return -1


def _loop_loader(ctx, loop: ast.For) -> tuple[ast.expr | None, ast.expr | None]:
    """(the loader expression a loop iterates, the part of its target that is the batch)."""
    return _loader_of(ctx, loop.iter, loop.target, 0)


def _loader_of(ctx, iterable: ast.expr, batch: ast.expr | None, depth: int) -> tuple[ast.expr | None, ast.expr | None]:
    if depth > MAX_DEPTH * 2:
        return None, None
    if isinstance(iterable, ast.Call) and iterable.args:
        name = last_part(dotted_name(iterable.func))
        if name == "enumerate":  # `for i, batch in enumerate(loader)`
            inner = batch.elts[1] if isinstance(batch, ast.Tuple) and len(batch.elts) == 2 else None
            return _loader_of(ctx, iterable.args[0], inner, depth + 1)
        if name.lower() in TRANSPARENT:  # `tqdm(loader)`, YOLOv5's `TQDM(pbar)`
            return _loader_of(ctx, iterable.args[0], batch, depth + 1)
    if isinstance(iterable, ast.Name):
        # `pbar = enumerate(loader)`, then maybe `pbar = tqdm(pbar)`: the first that leads to a loader
        for value in ctx.reaching_values(iterable):
            if isinstance(value, ast.Call) and _unpacked_index(ctx, value) == 0:
                if _first_unpacked(ctx, value, iterable.id):  # `loader, dataset = create_dataloader(...)`
                    return value, batch
                continue
            found = _loader_of(ctx, value, batch, depth + 1)
            if found[0] is not None:
                return found
        return None, None
    return iterable, batch


def _first_unpacked(ctx, call: ast.Call, name: str) -> bool:
    target = ctx.parent(call).targets[0]
    return bool(target.elts) and isinstance(target.elts[0], ast.Name) and target.elts[0].id == name


def loader_refs(ctx) -> list[str]:
    """Every collate reference the loops of this module iterate batches of (see `collate_refs`)."""
    found: list[str] = []
    for loop in ctx.index.loops:
        if isinstance(loop, ast.For):
            loader, _ = _loop_loader(ctx, loop)
            if loader is not None:
                found.extend(r for r in collate_refs(ctx, loader) if r not in found)
    return found


def returned_collates(ctx, func: ast.AST) -> list[tuple[int, str]]:
    """(index in the returned tuple, -1 for the whole value; collate reference) of each loader with
    a `collate_fn=` that `func` returns (`return dataloader`, `return loader, dataset`)."""
    from .loaders import returned_calls

    return [
        (index, ref)
        for index, call in returned_calls(ctx, func)
        if keyword_value(call, "collate_fn") is not None
        for ref in collate_refs(ctx, call)
    ]


def batch_origin(ctx, value: ast.expr, depth: int = 0) -> tuple[str, int] | None:
    """(collate reference, position in the batch) when `value` is an element of the batches of a
    loop over a loader (`for i, (imgs, targets) in enumerate(loader)`: `targets` is position 1),
    through `.to(device)` and rebinding."""
    value = rows_of(value)
    if not isinstance(value, ast.Name) or depth > MAX_DEPTH:
        return None
    for bound in ctx.reaching_values(value):
        found = batch_origin(ctx, bound, depth + 1)
        if found is not None:
            return found
    for anc in ctx.index.ancestors(value):
        if isinstance(anc, FUNCTIONS):
            break
        if not isinstance(anc, ast.For):
            continue
        loader, batch = _loop_loader(ctx, anc)
        if loader is None or not isinstance(batch, ast.Tuple):
            continue
        for position, element in enumerate(batch.elts):
            if isinstance(element, ast.Name) and element.id == value.id:
                refs = collate_refs(ctx, loader)
                return (refs[0], position) if len(refs) == 1 else None
    return None


def rows_of(value: ast.expr) -> ast.expr:
    """What `value` keeps the rows of: `targets.to(device).float()` -> `targets`."""
    while isinstance(value, ast.Call) and method_name(value) in SAME_ROWS and receiver(value) is not None:
        value = receiver(value)  # type: ignore[assignment]
    return value


# -- the judgement, in the module that uses the rows ----------------------------------------------------


def ragged_rows(ctx, value: ast.expr, depth: int = 0) -> tuple[str, bool] | None:
    """(where, "file:line", the rows of `value` were concatenated per sample; whether code that
    runs on XLA hands them here) when `value` is a row table of the batch's objects: a batch element
    of a loader with such a collate, or a parameter the callers (here or in another module) pass one."""
    value = rows_of(value)
    if not isinstance(value, ast.Name) or depth > MAX_DEPTH:
        return None
    facts = ctx.project
    origin = batch_origin(ctx, value)
    if origin is not None:
        ref, position = origin
        for known, at, where in facts.row_refs:
            if known == ref and at == position:
                return where, ctx.uses_xla
        return None
    for bound in ctx.reaching_values(value):
        found = ragged_rows(ctx, bound, depth + 1)
        if found is not None:
            return found
    param = ctx.parameter(value)
    if param is None or ctx.reaching_values(value):
        return None
    func = ctx.index.parent(ctx.index.parent(param))
    if not isinstance(func, FUNCTIONS):
        return None
    if facts.row_params:
        from .index import qualname

        qualified = qualname(ctx.index, func)
        keys = _param_keys(ctx, func, param)
        for name, key, where, xla in facts.row_params:
            if name == qualified and key in keys:
                return where, xla or ctx.uses_xla
    for passed in ctx.arguments_for(param):
        if passed is not None:
            found = ragged_rows(ctx, passed, depth + 1)
            if found is not None:
                return found
    return None


def _param_keys(ctx, func: ast.AST, param: ast.arg) -> set[str]:
    position = _positions(ctx, func).get(param.arg)
    return {f"k:{param.arg}", *([str(position)] if position is not None else [])}


def row_args(ctx, call: ast.Call) -> tuple[str, ...]:
    """The arguments of `call` that are batch elements of a loop over a loader ("key=ref#position",
    keyed as `project._host_args`): resolved between modules by `ProjectIndex`."""
    found = []
    for key, value in _passed(call):
        origin = batch_origin(ctx, value)
        if origin is not None:
            found.append(f"{key}={origin[0]}#{origin[1]}")
    return tuple(found)


# -- counts of rows used as sizes -------------------------------------------------------------------------

# calls whose arguments are sizes: factories, `repeat`/`view`/`expand` and their kind
SIZING = SIZED_FACTORIES | {
    "randperm",
    "linspace",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "repeat",
    "view",
    "reshape",
    "expand",
    "tile",
}


def row_count(node: ast.AST) -> ast.expr | None:
    """What `node` counts the rows of: `x.shape[0]`, `x.size(0)`, `len(x)`."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    ):
        return node.value.value
    if isinstance(node, ast.Call):
        if method_name(node) == "size" and len(node.args) == 1 and getattr(node.args[0], "value", None) == 0:
            return receiver(node)
        if isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1:
            return node.args[0]
    return None


def sized_by(ctx, count: ast.expr) -> ast.Call | None:
    """The first call that takes `count` (or the name it is assigned to, in its function) as a size:
    `torch.zeros(nt, 6)`, `.repeat(1, nt)`, `arange(nt)`."""
    used: list[ast.expr] = [count]
    parent = ctx.parent(count)
    names: set[str] = set()
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        names.add(parent.targets[0].id)  # `nt = targets.shape[0]`
    elif isinstance(parent, ast.Tuple) and isinstance(ctx.parent(parent), ast.Assign):
        target = ctx.parent(parent).targets[0]  # `na, nt = 3, targets.shape[0]`
        if isinstance(target, ast.Tuple) and len(target.elts) == len(parent.elts):
            for t, v in zip(target.elts, parent.elts):
                if v is count and isinstance(t, ast.Name):
                    names.add(t.id)
    scope = ctx.index.scope_of(count)
    if names:
        used += [
            n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
        ]
    for use in used:
        call = _sizing_call(ctx, use)
        if call is not None:
            return call
    return None


def _sizing_call(ctx, use: ast.expr) -> ast.Call | None:
    """The sizing call `use` is an argument of, directly or in a tuple of sizes or arithmetic."""
    child: ast.AST = use
    for anc in ctx.index.ancestors(use):
        if isinstance(anc, ast.Call):
            name = method_name(anc) or last_part(dotted_name(anc.func))
            if child is not anc.func and name in SIZING:
                return anc
            return None
        if isinstance(anc, ast.keyword) and anc.arg in ("size", "end", "steps"):
            child = anc
            continue
        if not isinstance(anc, (ast.Tuple, ast.List, ast.BinOp, ast.keyword)):
            return None
        child = anc
    return None


def count_sized_params(ctx) -> dict[ast.AST, dict[str, int]]:
    """Per function of this module, the keys ("0" without self, "k:name") of its parameters whose
    row count sizes a tensor, in it or in a function of this module it hands them to
    (`self.build_targets(p, targets)`), with the line of the count: what a caller passing a row
    table there is told. One pass over the module's counts, then the forwarding calls."""
    from .steps import local_callees_of

    index = ctx.index
    sized: dict[ast.AST, dict[str, int]] = {}  # function -> parameter name -> line
    counts = [*index.by_type.get(ast.Subscript, ()), *index.calls]
    for node in counts:
        measured = row_count(node)
        if measured is None or not isinstance(node, ast.expr):
            continue
        measured = rows_of(measured)
        if not isinstance(measured, ast.Name):
            continue
        func = index.enclosing_function(node)
        if func is None or measured.id not in _positions(ctx, func) or measured.id in sized.get(func, {}):
            continue
        if not ctx.reaching_values(measured) and sized_by(ctx, node) is not None:
            sized.setdefault(func, {})[measured.id] = node.lineno
    for _ in range(MAX_DEPTH if sized else 0):  # callers that hand their parameter on, level by level
        grown = False
        callee_names = {func.name for func in sized}  # type: ignore[attr-defined]
        for call in index.calls:
            if last_part(dotted_name(call.func)) not in callee_names:
                continue
            callees = [c for c in local_callees_of(ctx, call) if c in sized]
            func = index.enclosing_function(call) if callees else None
            if func is None:
                continue
            names = _positions(ctx, func)
            for key, value in _passed(call):
                value = rows_of(value)
                if not (isinstance(value, ast.Name) and value.id in names) or value.id in sized.get(func, {}):
                    continue
                for callee in callees:
                    line = _sized_at(ctx, callee, sized[callee], key)
                    if callee is not func and line is not None:
                        sized.setdefault(func, {})[value.id] = line
                        grown = True
                        break
        if not grown:
            break
    found: dict[ast.AST, dict[str, int]] = {}
    for func, params in sized.items():
        positions = _positions(ctx, func)
        for name, line in params.items():
            found.setdefault(func, {})[f"k:{name}"] = line
            if positions[name] is not None:
                found[func][str(positions[name])] = line
    return found


def _positions(ctx, func: ast.AST) -> dict[str, int | None]:
    """Parameter name -> its position without self/cls (None: keyword-only)."""
    params = ctx.call_parameters(func)
    found: dict[str, int | None] = {p.arg: i for i, p in enumerate(params)}
    found.update((p.arg, None) for p in func.args.kwonlyargs)  # type: ignore[attr-defined]
    return found


def _passed(call: ast.Call) -> list[tuple[str, ast.expr]]:
    passed = [(str(i), a) for i, a in enumerate(call.args) if not isinstance(a, ast.Starred)]
    return passed + [(f"k:{kw.arg}", kw.value) for kw in call.keywords if kw.arg]


def _sized_at(ctx, callee: ast.AST, params: dict[str, int], key: str) -> int | None:
    """The line of the count of the parameter of `callee` that a call's argument `key` binds."""
    for name, position in _positions(ctx, callee).items():
        if name in params and (key == f"k:{name}" or (position is not None and key == str(position))):
            return params[name]
    return None
