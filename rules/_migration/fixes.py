"""How the migration engine's fixes are built on libcst, once the visitor decided them on `ast`.

Two families of rewrites, picked by a row's `transform` (TorchFix keeps its hard rewrites in sibling
modules picked by the same key): `rename` as a table "at-import" makes it (`UsesFix`: every use of
an imported function renamed, its arguments carried by `params`, the new module spelled through the
file's imports), the imports' own moves (`fix_import`, `fix_from_import`, `fix_from_module`), an
argument dropped (`fix_drop_argument`) or its literal replaced (`fix_value`), and the rewrites of one
call into plain PyTorch (`rewrite`: rename, device, unwrap, compile, autocast, save).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import has_star_args
from xlalint.config import parse_version
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst

from .table import Migration

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

# --------------------------------------------------------------------------------------------------
# Renames of an imported function's uses, and of imports
# --------------------------------------------------------------------------------------------------

# What becomes of one argument, in source order: None drops it; else (keyword, value): the keyword it
# is passed as (None: as written) and the code of its new value (None: as written).
Carry = tuple[str | None, str | None] | None
KEEP: Carry = (None, None)


def carry_arguments(ctx: FileContext, call: ast.Call, entry: Migration) -> list[Carry] | None:
    """What becomes of each argument of `call` (in source order), or None when one has no equivalent."""
    if entry.params is None:
        return [KEEP] * (len(call.args) + len(call.keywords))
    renames = dict(entry.params)
    keywords = [kw.arg for kw in call.keywords if kw.arg is not None]  # all of them: `**kw` is a star argument
    if has_star_args(call) or len(call.args) > len(entry.params) or any(k not in renames for k in keywords):
        return None
    # the replacement at the target release must take every argument passed, not only exist there
    passed = [new for _, new in entry.params[: len(call.args)]] + [renames[k] for k in keywords]
    since = dict(entry.params_since)
    target = ctx.target_version
    if target is not None and any(p in since and parse_version(since[p]) > target for p in passed):
        return None
    return [KEEP] * len(call.args) + [(renames[k], None) for k in keywords]


def use_change(ctx: FileContext, ref: ast.expr, entry: Migration) -> tuple[ast.expr, list[Carry] | None] | None:
    """What a fix replaces for one reference `ref` to the old function: the call (with what becomes of
    its arguments) or a decorator (None), or None when it can't."""
    parent = ctx.parent(ref)
    if isinstance(parent, ast.Call) and parent.func is ref:
        carry = carry_arguments(ctx, parent, entry)
        return None if carry is None else (parent, carry)
    if ctx.index.field_of(ref) == "decorator_list" and (entry.params is None or entry.params):
        return ref, None  # called with the decorated function alone
    return None  # a reference (`f = xm.mark_step`): we can't see the arguments it will get


# --------------------------------------------------------------------------------------------------
# Building the fixes on libcst
# --------------------------------------------------------------------------------------------------


def _as_keyword(arg: cst.Arg, keyword: str, value: cst.BaseExpression | None = None) -> cst.Arg:
    equal = (
        arg.equal
        if arg.keyword is not None
        else cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    )
    return arg.with_changes(keyword=cst.Name(keyword), equal=equal, value=value if value is not None else arg.value)


def _carried(cctx: CstContext, call: cst.Call, carry: list[Carry]) -> list[cst.Arg]:
    kept: list[cst.Arg] = []
    for arg, change in zip(call.args, carry):
        if change is None:
            continue
        keyword, value = change
        kept.append(
            arg
            if keyword is None
            else _as_keyword(arg, keyword, cctx.parse_expression(value) if value is not None else None)
        )
    if kept and len(kept) < len(call.args):
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return kept


def _import_line(cctx: CstContext, request: ImportRequest) -> cst.BaseStatement:
    code = f"from {request.module} import {request.obj}" if request.obj else f"import {request.module}"
    return cctx.parse_statement(code + (f" as {request.asname}" if request.asname else ""))


@dataclass(frozen=True)
class UsesFix:
    """A fix of the uses of an old function, decided on `ast`; `build` makes it on libcst."""

    applicability: Applicability
    title: str
    changes: tuple[tuple[ast.expr, list[Carry] | None, str], ...]  # (call or decorator, its arguments, new name)
    own_imports: dict[ast.stmt, list[ImportRequest]]  # imports to place right after these import statements
    imports: tuple[ImportRequest, ...]
    removed: tuple[ImportRequest, ...]

    def build(self, cctx: CstContext) -> Fix | None:
        replacements: dict[int, tuple] = {}
        for node, carry, name in self.changes:
            old = cast("cst.CSTNode", cctx.locate(node))  # decided on `ast`: its libcst twin is there
            new = cctx.parse_expression(name)
            if carry is not None:  # a call: the new function, with the arguments that carry over
                call = cast("cst.Call", old)
                new = call.with_changes(func=new, args=_carried(cctx, call, carry))
            replacements[id(old)] = (old, new)
        for statement, requests in self.own_imports.items():
            line = cctx.parent(cast("cst.CSTNode", cctx.locate(statement)))
            if not isinstance(line, cst.SimpleStatementLine):
                return None  # `try: import x` on one line: no line of its own to add ours after
            replacements[id(line)] = (line, cst.FlattenSentinel([line, *(_import_line(cctx, r) for r in requests)]))
        return Fix(self.applicability, self.title, replacements, self.imports, self.removed)


def fix_import(alias: ast.alias, new: str, entry: Migration, cctx: CstContext) -> Fix:
    """`import old.module as x` -> `import new.module as x`."""
    return Fix.replace(
        cast("cst.ImportAlias", cctx.locate(alias)).name,
        cst.parse_expression(new),
        title=f"Import `{new}`",
        safe=entry.fix == "safe",
    )


def fix_from_import(node: ast.ImportFrom, new: str, entry: Migration, cctx: CstContext) -> Fix:
    """`from old.module import ...` -> `from new.module import ...`."""
    return Fix.replace(
        cast("cst.ImportFrom", cctx.locate(node)).module,
        cst.parse_expression(new),
        title=f"Import from `{new}`",
        safe=entry.fix == "safe",
    )


def fix_from_module(node: ast.ImportFrom, new: str, entry: Migration, cctx: CstContext) -> Fix:
    """`from torch_xla.experimental import xla_sharding` (its only name) -> `from torch_xla.distributed
    import spmd as xla_sharding`."""
    statement = cast("cst.ImportFrom", cctx.locate(node))
    alias = cast("Sequence[cst.ImportAlias]", statement.names)[0]  # not `*`: one name is imported
    new_module, _, new_obj = new.rpartition(".")
    old_obj = node.names[0].name
    asname = alias.asname or (cst.AsName(name=cst.Name(old_obj)) if new_obj != old_obj else None)
    replacement = statement.with_changes(
        module=cst.parse_expression(new_module),
        names=[alias.with_changes(name=cst.Name(new_obj), asname=asname, comma=cst.MaybeSentinel.DEFAULT)],
    )
    return Fix.replace(statement, replacement, title=f"Import `{new}`", safe=entry.fix == "safe")


def fix_drop_argument(call: ast.Call, index: int, title: str, entry: Migration, cctx: CstContext) -> Fix:
    """`f(a, nprocs=8)` -> `f(a)`: the argument at `index` (in source order) goes."""
    old = cast("cst.Call", cctx.locate(call))
    carry: list[Carry] = [KEEP] * len(old.args)
    carry[index] = None
    return Fix.replace(old, old.with_changes(args=_carried(cctx, old, carry)), title=title, safe=entry.fix == "safe")


# --------------------------------------------------------------------------------------------------
# Rewrites of one call into plain PyTorch
# --------------------------------------------------------------------------------------------------


def rewrite(
    move: Migration,
    target: ast.AST,
    spelled: dict,
    applicability: Applicability,
    removed: ImportRequest | None,
    cctx: CstContext,
) -> Fix | None:
    torch = spelled.get("torch", "torch")
    old = cctx.locate(target)
    if old is None:
        return None
    new: cst.CSTNode
    call = old if isinstance(old, cst.Call) else None  # a decorator otherwise (`@torch_xla.compile`)
    if move.transform == "device":
        new = cctx.parse_expression(f'{torch}.device("tpu")')
        title = 'Use `torch.device("tpu")`'
    elif move.transform == "rename":
        if call is None or move.replacement is None:
            return None  # (a reference is not fixed, see the visitor; a `rename` row has its `replacement`)
        module, _, func = move.replacement.rpartition(".")
        new = call.with_changes(func=cctx.parse_expression(f"{spelled[module]}.{func}"))
        renamed = {old: new for old, new in move.params or () if old != new}  # `params = ["old:new"]`
        if renamed:
            new = new.with_changes(
                args=[
                    _as_keyword(a, renamed[a.keyword.value])
                    if a.keyword is not None and a.keyword.value in renamed
                    else a
                    for a in call.args
                ]
            )
        title = f"Use `{move.replacement}()`"
    elif move.transform == "unwrap":
        if call is None:
            return None
        new = call.args[0].value
        title = "Iterate the loader itself"
    elif move.transform == "compile":
        backend = 'backend="tpu"'
        if isinstance(old, cst.Call):
            args = "".join(f"{cctx.code(a.value)}, " for a in old.args)  # only `f` carries (params)
            new = cctx.parse_expression(f"{torch}.compile({args}{backend})")
        else:  # `@torch_xla.compile`
            new = cctx.parse_expression(f"{torch}.compile({backend})")
        title = 'Use `torch.compile(..., backend="tpu")`'
    elif move.transform == "autocast":
        if call is None:
            return None
        new = _autocast(cctx, call, torch)
        title = 'Use `torch.autocast("tpu", dtype=torch.bfloat16)`'
    elif move.transform == "save":
        if call is None or len(call.args) != 2 or any(a.keyword is not None for a in call.args):
            return None
        obj, path = (cctx.code(a.value) for a in call.args)
        new = cctx.parse_expression(
            f"{torch}.save({torch}.utils._pytree.tree_map_only({torch}.Tensor, {torch}.Tensor.cpu, {obj}), {path})"
        )
        title = "Use `torch.save` of CPU values"
    else:  # pragma: no cover - the table is validated
        return None
    if isinstance(old, cst.Decorator):
        new = old.with_changes(decorator=new)
    return Fix(applicability, title, {id(old): (old, new)}, tuple(spelled["imports"]), (removed,) if removed else ())


def _autocast(cctx: CstContext, old: cst.Call, torch: str) -> cst.Call:
    """`torch_xla.amp.autocast(dev, enabled, dtype=..., cache_enabled=...)` -> `torch.autocast("tpu", ...)`."""
    names = ["device", "enabled", "dtype", "cache_enabled"]
    passed: dict[str, str] = {}
    for i, arg in enumerate(old.args):
        name = arg.keyword.value if arg.keyword is not None else names[i]
        passed[name] = cctx.code(arg.value)
    rest = [f"{k}={passed[k]}" for k in ("dtype", "enabled", "cache_enabled") if k in passed]
    if "dtype" not in passed:
        rest.insert(0, f"dtype={torch}.bfloat16")
    return cctx.parse_expression(f'{torch}.autocast("tpu", {", ".join(rest)})')


def fix_value(call: ast.Call, value: ast.expr, move: Migration, cctx: CstContext) -> Fix | None:
    """The argument's literal becomes `move.to`; keywords of `move.drop` holding their value go."""
    old_call = cctx.locate(call, cst.Call)
    old_value = cctx.locate(value)
    if not isinstance(old_call, cst.Call) or old_value is None or move.to is None or move.applicability is None:
        return None
    new_value = cctx.parse_expression(move.to)
    drop = dict(move.drop)
    args = []
    for arg in old_call.args:
        if arg.keyword is not None and arg.keyword.value in drop:
            text = arg.value.evaluated_value if isinstance(arg.value, cst.SimpleString) else None
            if text == drop[arg.keyword.value]:
                continue
        args.append(arg.with_changes(value=new_value) if arg.value is old_value else arg)
    if args and len(args) < len(old_call.args):
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    new = old_call.with_changes(args=args)
    return Fix(move.applicability, f"Pass {move.to}", {id(old_call): (old_call, new)})
