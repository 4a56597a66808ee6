"""The torch_xla -> TorchTPU migration table (`torchtpu_migrations.toml`) and the visitor its rules share.

TorchFix's model, as `rules/deprecated_api.py`: the moves are data, validated at import; one
generic visitor finds them through the file's imports (`import torch_xla.core.xla_model as xm`,
`from torch_xla.core import xla_model`, `import torch_xla` + the dotted name, `from ... import f as
g`), and each TPU1xx rule is that visitor restricted to its `code`. Findings are decided on `ast`;
fixes are built on libcst and go only into plain PyTorch (`torch.device`, `torch.distributed`,
`torch.autocast`, `torch.compile`, `torch.save`, `torch.accelerator`).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING

from xlalint.analysis.names import dotted_name, has_star_args, keyword, positional, string_value
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import Rule

from ._common import spell_module

if TYPE_CHECKING:
    from xlalint.analysis.context import FileContext
    from xlalint.fixing.context import CstContext

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE_FILE = "torchtpu_migrations.toml"
KINDS = ("call", "module", "argument", "environment")
FIXES = ("safe", "unsafe", "none")
TRANSFORMS = ("rename", "device", "unwrap", "value", "compile", "autocast", "save")
REQUIRED = ("code", "name", "fix", "checked", "note")
OPTIONAL = ("kind", "transform", "to", "params", "argument", "position", "values", "drop", "needs_process_group")
_CODE = re.compile(r"TPU1\d\d")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV = re.compile(r"[A-Z_][A-Z0-9_]*")
# the names a fix writes must be plain PyTorch
_PLAIN = ("torch.distributed.", "torch.accelerator.")


class MigrationTableError(ValueError):
    """The TorchTPU migration table is malformed (raised at import time, naming the row and the key)."""


@dataclass(frozen=True)
class Move:
    code: str
    name: str
    fix: str
    checked: str
    note: str
    kind: str = "call"
    transform: str | None = None
    to: str | None = None
    params: tuple[str, ...] | None = None
    argument: str | None = None
    position: int | None = None
    values: tuple[str, ...] = ()
    drop: tuple[tuple[str, str], ...] = ()
    needs_process_group: bool = False

    @property
    def applicability(self) -> Applicability | None:
        return {"safe": Applicability.SAFE, "unsafe": Applicability.UNSAFE}.get(self.fix)


def load_table(text: str, source: str = TABLE_FILE) -> tuple[Move, ...]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MigrationTableError(f"{source}: not valid TOML: {exc}") from None
    if set(data) - {"move"} or not isinstance(data.get("move"), list) or not data["move"]:
        raise MigrationTableError(f"{source}: expected only a non-empty list of [[move]] tables")
    seen: set[tuple] = set()
    return tuple(
        _validate(row, f"{source}: [[move]] #{i + 1} ({row.get('name', '?')})", seen)
        for i, row in enumerate(data["move"])
    )


def _validate(row: dict, where: str, seen: set[tuple]) -> Move:
    def fail(problem: str):
        raise MigrationTableError(f"{where}: {problem}")

    unknown = set(row) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        fail(f"unknown keys {sorted(unknown)} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        fail(f"missing keys {missing}")
    for key in ("code", "name", "fix", "checked", "note", "kind", "transform", "to", "argument"):
        if key in row and not isinstance(row[key], str):
            fail(f"`{key}` must be a string, got {row[key]!r}")
    if not _CODE.fullmatch(row["code"]):
        fail(f"`code` must be a TPU1xx code, got {row['code']!r}")
    kind = row.get("kind", "call")
    if kind not in KINDS:
        fail(f"`kind` must be one of {KINDS}, got {kind!r}")
    if not (_ENV if kind == "environment" else _DOTTED).fullmatch(row["name"]):
        fail(f"`name` is not a {'variable' if kind == 'environment' else 'dotted'} name: {row['name']!r}")
    identity = (kind, row["name"], row.get("argument"))
    if identity in seen:
        fail("duplicate row")
    seen.add(identity)
    if row["fix"] not in FIXES:
        fail(f"`fix` must be one of {FIXES}, got {row['fix']!r}")
    transform = row.get("transform")
    if row["fix"] == "none":
        if transform is not None:
            fail("a row without a fix takes no `transform`")
    elif transform not in TRANSFORMS:
        fail(f"a fix needs `transform`, one of {TRANSFORMS}, got {transform!r}")
    if kind in ("module", "environment") and row["fix"] != "none":
        fail(f'a {kind} row takes `fix = "none"`')
    if transform == "rename":
        to = row.get("to")
        if not isinstance(to, str) or not _DOTTED.fullmatch(to) or not to.startswith(_PLAIN):
            fail(f"`to` must name a plain PyTorch function ({' or '.join(_PLAIN)}...), got {to!r}")
    extra: dict = {}
    if "params" in row:
        if not isinstance(row["params"], list) or not all(
            isinstance(p, str) and p.isidentifier() for p in row["params"]
        ):
            fail(f"`params` must be a list of parameter names, got {row['params']!r}")
        extra["params"] = tuple(row["params"])
    elif transform in ("rename", "autocast", "compile", "save"):
        fail(f"transform {transform!r} needs `params`")
    if kind == "argument":
        for k in ("argument", "position", "values"):
            if k not in row:
                fail(f"an argument row needs `{k}`")
        if type(row["position"]) is not int or row["position"] < -1:
            fail(f"`position` must be the parameter's positional index (-1: keyword only), got {row['position']!r}")
        if (
            not isinstance(row["values"], list)
            or not row["values"]
            or not all(isinstance(v, str) for v in row["values"])
        ):
            fail(f"`values` must be a non-empty list of strings, got {row['values']!r}")
        extra["values"] = tuple(row["values"])
        if row["fix"] != "none":
            try:
                if not isinstance(ast.literal_eval(row.get("to", "")), str):
                    raise ValueError
            except (ValueError, SyntaxError):
                fail(f"`to` must be a string literal such as '\"tpu\"', got {row.get('to')!r}")
        drop = row.get("drop", {})
        if not isinstance(drop, dict) or not all(isinstance(v, str) for v in drop.values()):
            fail(f"`drop` must map keywords to the string values dropped with the argument, got {drop!r}")
        extra["drop"] = tuple(drop.items())
    elif any(k in row for k in ("argument", "position", "values", "drop")):
        fail('`argument`, `position`, `values` and `drop` are only for kind "argument"')
    if "needs_process_group" in row and not isinstance(row["needs_process_group"], bool):
        fail("`needs_process_group` must be true or false")
    fields = {k: v for k, v in row.items() if k not in extra}
    return Move(**fields, **extra)


TABLE: tuple[Move, ...] = load_table(
    resources.files(__package__ or "xlalint.rules.torchtpu").joinpath(TABLE_FILE).read_text(encoding="utf-8")
)


def rows_doc(code: str) -> str:
    """The table's rows for `code`, as a Markdown list for the rule's docs."""
    lines = []
    for move in TABLE:
        if move.code != code:
            continue
        what = {
            "argument": f"`{move.name}({move.argument}={' / '.join(map(repr, move.values))})`",
            "environment": f"setting `{move.name}`",
            "module": f"imports of `{move.name}`",
        }.get(move.kind, f"`{move.name}()`")
        fix = {"safe": "safe fix", "unsafe": "unsafe fix", "none": "no fix"}[move.fix]
        lines.append(f"- {what} ({fix}): {move.note}. Checked: {move.checked}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Finding the moves
# --------------------------------------------------------------------------------------------------

_SETTERS = ("os.environ.setdefault", "os.putenv")
_BY_NAME: dict[tuple[str, str], dict[str, Move]] = {}


class MigrationVisitor(Rule):
    """Base of a TPU1xx rule: reports this code's rows of the table (set `code` on the rule; without one
    the registry does not list it)."""

    @classmethod
    def rows(cls) -> tuple[Move, ...]:
        return tuple(m for m in TABLE if m.code == cls.code)

    def _by_name(self, kind: str) -> dict[str, Move]:
        key = (self.code, kind)
        found = _BY_NAME.get(key)
        if found is None:
            found = _BY_NAME[key] = {m.name: m for m in self.rows() if m.kind == kind}
        return found

    # -- calls and references ------------------------------------------------------------------
    def finish(self) -> None:
        for node, target, move, written in _references(self.ctx):
            if move.code == self.code:
                self.report(target, _message(move, written), fix=self._fix(move, node, target))

    # -- argument values -----------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        moves = self._by_name("argument")
        if moves:
            move = moves.get(self.ctx.qualified_name(node.func) or "")
            if move is not None:
                self._argument(node, move)
        envs = self._by_name("environment")
        if envs and self.ctx.qualified_name(node.func) in _SETTERS:
            args = positional(node)
            name = string_value(args[0]) if args else None
            if name in envs:
                self.report(node, _message(envs[name], name))

    def _argument(self, call: ast.Call, move: Move) -> None:
        if move.argument is None or move.position is None:
            return  # (never: an `argument` row has both)
        kw = keyword(call, move.argument)
        args = positional(call)
        value = kw.value if kw is not None else (args[move.position] if 0 <= move.position < len(args) else None)
        if value is None or string_value(value) not in move.values:
            return
        fix = None
        if move.applicability is not None:
            fix = partial(_fix_value, call, value, move)
        self.report(value, _message(move, dotted_name(call.func) or move.name, string_value(value)), fix=fix)

    # -- environment and modules ----------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        envs = self._by_name("environment")
        if not envs:
            return
        for target in node.targets:
            if isinstance(target, ast.Subscript) and self.ctx.qualified_name(target.value) == "os.environ":
                name = string_value(target.slice)
                if name in envs:
                    self.report(target, _message(envs[name], name))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        for alias in node.names:
            if not self._module(alias, f"{node.module}.{alias.name}"):
                self._module(alias, node.module)

    def _module(self, alias: ast.alias, qualified: str) -> bool:
        for move in self.rows():
            if move.kind == "module" and (qualified == move.name or qualified.startswith(move.name + ".")):
                self.report(alias, _message(move, qualified))
                return True
        return False

    # -- fixes ----------------------------------------------------------------------------------
    def _fix(self, move: Move, ref: ast.expr, target: ast.AST):
        if move.applicability is None:
            return None
        ctx = self.ctx
        decorator = ctx.index.field_of(ref) == "decorator_list"
        if not isinstance(target, ast.Call) and not (decorator and move.transform == "compile"):
            return None  # a reference (`f = xm.get_ordinal`): the arguments it will get are unknown
        if isinstance(target, ast.Call) and (has_star_args(target) or not _carries(target, move)):
            return None
        spelled = self._spellings(move, ref)
        if spelled is None:
            return None
        applicability = move.applicability
        if move.needs_process_group and not _calls_init_process_group(ctx):
            applicability = Applicability.UNSAFE
        if move.transform == "unwrap" and not (isinstance(target, ast.Call) and positional(target)):
            return None
        return partial(_build, move, target, spelled, applicability, _removed_import(ctx, ref))

    def _spellings(self, move: Move, ref: ast.expr) -> dict[str, str] | None:
        """The spellings of `torch` (and `torch.distributed` / `torch.accelerator`) the fix writes,
        with the imports they need (under the key `imports`)."""
        ctx = self.ctx
        needed = ["torch"] if move.transform in ("device", "compile", "autocast", "save") else []
        if move.transform == "rename" and move.to:
            needed.append(move.to.rpartition(".")[0])
        found: dict = {"imports": []}
        for module in needed:
            spelling = spell_module(ctx, module, ref)
            if spelling is None:
                return None
            found[module] = spelling[0]
            found["imports"] += [r for r in spelling[1] if r not in found["imports"]]
        return found


_CALLS: dict[str, Move] = {m.name: m for m in TABLE if m.kind == "call"}


def _references(ctx: FileContext) -> list[tuple[ast.expr, ast.AST, Move, str]]:
    """Every reference to a `call` row's function in the file (resolved once for all TPU1xx rules):
    (the reference, what is reported: its call or itself, the row, the name as written)."""
    cached = ctx.__dict__.get("_torchtpu_references")
    if cached is not None:
        return cached
    found: list[tuple[ast.expr, ast.AST, Move, str]] = []
    names = [n for n in ctx.index.by_type.get(ast.Name, ()) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    for node in (*ctx.index.by_type.get(ast.Attribute, ()), *names):
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute):
            continue  # the longest chain is the reference
        qualified = ctx.qualified_name(node)
        move = _CALLS.get(qualified or "")
        if move is None or (isinstance(node, ast.Name) and node.id == qualified):
            continue  # a bare name the file defines itself
        if not isinstance(node, (ast.Attribute, ast.Name)) or qualified is None:
            continue  # (never: by_type's Attributes, and a name that has a move)
        target = parent if isinstance(parent, ast.Call) and parent.func is node else node
        found.append((node, target, move, dotted_name(node) or qualified))
    found.sort(key=lambda item: ctx.index.order.get(item[0], 0))
    ctx.__dict__["_torchtpu_references"] = found
    return found


def _message(move: Move, old: str, value: str | None = None) -> str:
    if move.kind == "argument":
        head = f"`{move.argument}={value!r}` in `{old}()` is torch_xla's"
    elif move.kind == "environment":
        head = f"setting `{old}` is for torch_xla"
    elif move.kind == "module":
        head = f"`{old}` has no TorchTPU counterpart"
    else:
        head = f"`{old}()` is {'early TorchTPU' if move.name.startswith('torch_tpu.') else 'torch_xla'}'s"
    return f"{head}: {short_note(move.note, len(head) + 2)}".rstrip(": ")


MAX_MESSAGE = 160  # a finding's message is one short sentence; the whole note is in the rule's docs


def short_note(note: str, used: int) -> str:
    """The note's first clause (before `; `) when it fits a message, else nothing (the docs have it all)."""
    clause = note.split("; ")[0]
    return clause if used + len(clause) <= MAX_MESSAGE else ""


def _carries(call: ast.Call, move: Move) -> bool:
    """Every argument of `call` is one the replacement takes (`params`, by position or keyword)."""
    if move.params is None:
        return True
    if move.transform == "device":
        return not call.args and not call.keywords
    return len(call.args) <= len(move.params) and all(k.arg in move.params for k in call.keywords)


def _calls_init_process_group(ctx: FileContext) -> bool:
    return any(
        ctx.qualified_name(c.func)
        in ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
        for c in ctx.index.calls
    )


def _removed_import(ctx: FileContext, ref: ast.expr) -> ImportRequest | None:
    """The torch_xla import `ref` goes through, to drop once no use is left."""
    head = (dotted_name(ref) or "").split(".")[0]
    binding = ctx.index.imports.get(head)
    if binding is None:
        return None
    if isinstance(binding.statement, ast.Import):
        if binding.name == binding.qualified.split(".")[0]:
            return None  # `import torch_xla`: may be there for its side effects, kept
        return ImportRequest(binding.qualified, asname=binding.name)
    module, _, obj = binding.qualified.rpartition(".")
    return ImportRequest(module, obj, binding.name if binding.name != obj else None)


# --------------------------------------------------------------------------------------------------
# Building the fixes on libcst
# --------------------------------------------------------------------------------------------------


def _build(
    move: Move,
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
        if call is None or move.to is None:
            return None  # (a reference is not fixed, see _fix; a `rename` row has its `to`)
        module, _, func = move.to.rpartition(".")
        new = call.with_changes(func=cctx.parse_expression(f"{spelled[module]}.{func}"))
        title = f"Use `{move.to}()`"
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


def _fix_value(call: ast.Call, value: ast.expr, move: Move, cctx: CstContext) -> Fix | None:
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
