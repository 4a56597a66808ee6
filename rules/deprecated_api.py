"""Removed and deprecated torch_xla APIs, read from the migration table `xla_migrations.toml`.

TorchFix's model: the moves are data, one generic visitor reads them. `status` picks the code
(removed -> XLA601, deprecated -> XLA602), `fix` the applicability, `params` which arguments carry
over, and `rewrite` names a hand-written rewrite below for what a rename cannot express.
Names are resolved through the file's imports, so `import torch_xla.core.xla_model as foo;
foo.mark_step()` and `from torch_xla.core import xla_model` are found too.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Callable, ClassVar

import libcst as cst

from xlalint.analysis.context import FileContext
from xlalint.analysis.index import ImportBinding
from xlalint.analysis.guards import exits_block, words
from xlalint.analysis.names import dotted_name
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.rule import Invalid, Rule, Valid

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

TABLE_FILE = "xla_migrations.toml"
STATUSES = ("removed", "deprecated")
FIXES = ("safe", "unsafe", "none")
KINDS = ("function", "module")
REQUIRED = ("name", "status", "fix", "reference", "note")
OPTIONAL = ("kind", "replacement", "deprecated_in", "removed_in", "replacement_since", "params", "rewrite")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
_PARAM = re.compile(r"([A-Za-z_]\w*)(:([A-Za-z_]\w*))?")


class MigrationTableError(ValueError):
    """The migration table is malformed (raised at import time, naming the entry and the key)."""


@dataclass(frozen=True)
class Migration:
    name: str
    status: str
    fix: str
    reference: str
    note: str
    kind: str = "function"
    replacement: str | None = None
    deprecated_in: str | None = None
    removed_in: str | None = None
    replacement_since: str | None = None
    params: tuple[tuple[str, str], ...] | None = None  # (old keyword, new keyword); None: every argument carries
    rewrite: str | None = None

    @property
    def applicability(self) -> Applicability | None:
        return {"safe": Applicability.SAFE, "unsafe": Applicability.UNSAFE}.get(self.fix)

    def matches_module(self, qualified: str) -> bool:
        return qualified == self.name or qualified.startswith(self.name + ".")

    def moved(self, qualified: str) -> str | None:
        """`torch_xla_py.xla_model.foo` -> `torch_xla.core.xla_model.foo` for a module entry."""
        if self.replacement is None or not self.matches_module(qualified):
            return None
        return self.replacement + qualified[len(self.name):]

    def message(self, old: str) -> str:
        call = "()" if self.kind == "function" else ""
        new = f"`{self.replacement}{call}`" if self.replacement else None
        if self.status == "removed":
            since = f" (deprecated in {self.deprecated_in})" if self.deprecated_in else ""
            head = f"`{old}{call}` was removed in torch_xla {self.removed_in}{since}"
            head += f": use {new}" if new else ""
        elif self.deprecated_in:
            head = f"`{old}{call}` is deprecated since torch_xla {self.deprecated_in}"
            if self.removed_in:
                head += f" and removed in {self.removed_in}"
            head += f": use {new}" if new else ""
        else:
            head = f"`{old}{call}` is superseded by {new} (torch_xla {self.replacement_since}+)"
        return f"{head}; {self.note}" if self.note else head


def load_table(text: str, source: str = TABLE_FILE) -> tuple[Migration, ...]:
    """Parse and validate the table; any problem raises `MigrationTableError` naming the entry."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MigrationTableError(f"{source}: not valid TOML: {exc}") from None
    if set(data) - {"migration"}:
        raise MigrationTableError(f"{source}: unknown top-level keys {sorted(set(data) - {'migration'})}")
    rows = data.get("migration", [])
    if not isinstance(rows, list) or not rows:
        raise MigrationTableError(f"{source}: expected a list of [[migration]] tables")
    entries: list[Migration] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"{source}: [[migration]] #{i + 1} ({row.get('name', '?')})"
        entries.append(_validate(row, where, seen))
    return tuple(entries)


def _validate(row: dict, where: str, seen: set[str]) -> Migration:
    def fail(problem: str) -> None:
        raise MigrationTableError(f"{where}: {problem}")

    unknown = set(row) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        fail(f"unknown keys {sorted(unknown)} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        fail(f"missing keys {missing}")
    for key, value in row.items():
        if key != "params" and not isinstance(value, str):
            fail(f"`{key}` must be a string, got {value!r}")
    for key in ("name", "replacement"):
        if key in row and not _DOTTED.fullmatch(row[key]):
            fail(f"`{key}` must be a dotted Python name, got {row[key]!r}")
    if row["name"] in seen:
        fail("duplicate name")
    seen.add(row["name"])
    if row["status"] not in STATUSES:
        fail(f"`status` must be one of {STATUSES}, got {row['status']!r}")
    if row["fix"] not in FIXES:
        fail(f"`fix` must be one of {FIXES}, got {row['fix']!r}")
    if row.get("kind", "function") not in KINDS:
        fail(f"`kind` must be one of {KINDS}, got {row['kind']!r}")
    for key in ("deprecated_in", "removed_in", "replacement_since"):
        if key in row and not _VERSION.fullmatch(row[key]):
            fail(f"`{key}` must be a version like 2.7, got {row[key]!r}")
    if row["status"] == "removed" and "removed_in" not in row:
        fail("a removed API needs `removed_in`")
    if row["status"] == "deprecated" and not ("deprecated_in" in row or "replacement_since" in row):
        fail("a deprecated API needs `deprecated_in` (or `replacement_since` when it is only superseded)")
    if not row["reference"].startswith(("https://", "http://")):
        fail(f"`reference` must be a URL, got {row['reference']!r}")
    if row["fix"] != "none" and "replacement" not in row:
        fail("a fix needs a `replacement`")
    if "rewrite" in row and row["rewrite"] not in REWRITES:
        fail(f"`rewrite` names no rewrite in {__name__} (known: {sorted(REWRITES)}), got {row['rewrite']!r}")
    params = None
    if "params" in row:
        raw = row["params"]
        if not isinstance(raw, list) or not all(isinstance(p, str) and _PARAM.fullmatch(p) for p in raw):
            fail(f"`params` must be a list of 'old' or 'old:new' parameter names, got {raw!r}")
        params = tuple((p.partition(":")[0], p.partition(":")[2] or p.partition(":")[0]) for p in raw)
    fields = {k: v for k, v in row.items() if k != "params"}
    return Migration(**fields, params=params)


# --------------------------------------------------------------------------------------------------
# Hand-written rewrites (`rewrite = "..."` in the table): call -> new argument list, or None (no fix)
# --------------------------------------------------------------------------------------------------

_SPAWN_PARAMS = ("fn", "args", "nprocs", "join", "daemon", "start_method")


def _is_literal(node: cst.BaseExpression, value: str) -> bool:
    if value in ("None", "True", "False"):
        return isinstance(node, cst.Name) and node.value == value
    return isinstance(node, cst.Integer) and node.value == value


def _as_keyword(arg: cst.Arg, keyword: str, value: cst.BaseExpression | None = None) -> cst.Arg:
    equal = arg.equal if arg.keyword is not None else cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return arg.with_changes(keyword=cst.Name(keyword), equal=equal, value=value if value is not None else arg.value)


def spawn_to_launch(ctx: FileContext, call: cst.Call) -> list[cst.Arg] | None:
    """`xmp.spawn(fn, args, nprocs=None|1, join=True, daemon=False, start_method=...)` as a statement ->
    `torch_xla.launch(fn, args, start_method=..., debug_single_process=True if nprocs was 1)`.
    `launch` returns None, so a call whose result is used gets no fix; any other `nprocs`, `join` or
    `daemon` value has no equivalent."""
    if not isinstance(ctx.parent(call), cst.Expr):
        return None
    kept: list[cst.Arg] = []
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        key = arg.keyword.value if arg.keyword else (_SPAWN_PARAMS[i] if i < len(_SPAWN_PARAMS) else None)
        if key in ("fn", "args"):
            kept.append(arg)
        elif key == "start_method":
            kept.append(_as_keyword(arg, "start_method"))
        elif key == "nprocs" and _is_literal(arg.value, "1"):
            kept.append(_as_keyword(arg, "debug_single_process", cst.Name("True")))
        elif (key, arg.value.value if isinstance(arg.value, cst.Name) else None) in (
                ("nprocs", "None"), ("join", "True"), ("daemon", "False")):
            continue  # the defaults of spawn, which launch always uses
        else:
            return None
    if kept and len(kept) < len(call.args):
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return kept


REWRITES: dict[str, Callable[[FileContext, cst.Call], list[cst.Arg] | None]] = {
    "spawn_to_launch": spawn_to_launch,
}

TABLE: tuple[Migration, ...] = load_table(
    resources.files(__package__ or "xlalint.rules").joinpath(TABLE_FILE).read_text(encoding="utf-8")
)

# Conventional aliases for new modules, used when the file has no binding for them yet.
ALIASES = {"torch_xla.runtime": "xr", "torch_xla.distributed.spmd": "xs"}


def _functions(status: str) -> dict[str, Migration]:
    return {m.name: m for m in TABLE if m.status == status and m.kind == "function"}


def _modules(status: str) -> list[Migration]:
    # longest name first: `torch_xla_py.xla_model` before the catch-all `torch_xla_py`
    return sorted((m for m in TABLE if m.status == status and m.kind == "module"), key=lambda m: -len(m.name))


def _entries_doc(status: str) -> str:
    lines = []
    for m in TABLE:
        if m.status != status:
            continue
        new = f"`{m.replacement}`" if m.replacement else "no direct replacement"
        when = f"removed in {m.removed_in}" if status == "removed" else (
            f"deprecated in {m.deprecated_in}" if m.deprecated_in else f"superseded since {m.replacement_since}")
        lines.append(f"- `{m.name}` -> {new} ({when}; fix: {m.fix})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Qualified names, resolved only for files that may hold a finding
# --------------------------------------------------------------------------------------------------

def _qualified_names(ctx: FileContext, node: cst.CSTNode) -> set[str]:
    """What `node` names through this file's imports (`xm.mark_step` ->
    `torch_xla.core.xla_model.mark_step`); empty when its head is not an imported name.

    The file's import table, not libcst's `QualifiedNameProvider`: that needs `ScopeProvider`, which
    cost 6 s on a 4,800-line trainer (8x its parse) for the same answers on this table's names."""
    name = dotted_name(node)
    if not name or name.split(".")[0] not in ctx.index.imports:
        return set()
    qualified = ctx.qualified_name(node)
    return {qualified} if qualified else set()


def _relevant(ctx: FileContext) -> bool:
    """The file imports torch_xla/torchax, or the pre-2020 `torch_xla_py` package."""
    return ctx.uses_xla or any(
        b.qualified == "torch_xla_py" or b.qualified.startswith("torch_xla_py.") for b in ctx.index.imports.values()
    )


# --------------------------------------------------------------------------------------------------
# Version-guarded fallbacks: code written for an older torch_xla on purpose
# --------------------------------------------------------------------------------------------------

NEW, OLD, EITHER = 1, -1, 0  # the branch runs on the newer torch_xla / on the older one / can't tell
_VERSION_WORD = re.compile(
    r"version|\d+_\d+|greater|at_?least|newer|older|lower|less_than|torch_xla\s*[<>=!~]|^\s*[<>=!~]=?\s*\d+\.\d+",
    re.I,
)
_NEW_WORD = re.compile(r"greater|at_?least|newer|>", re.I)
_OLD_WORD = re.compile(r"older|lower|less|<", re.I)
_MISSING_API_ERRORS = {"AttributeError", "ImportError", "ModuleNotFoundError", "NameError"}


def _version_polarity(test: cst.BaseExpression) -> int | None:
    """None if `test` is no version/feature check; else which torch_xla its body is written for."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _version_polarity(test.expression)
        return None if inner is None else -inner
    if isinstance(test, cst.Call) and dotted_name(test.func) in ("hasattr", "getattr"):
        return EITHER  # feature detection: either branch may be the compatibility path
    if isinstance(test, cst.BooleanOperation):
        sides = [_version_polarity(test.left), _version_polarity(test.right)]
        known = [s for s in sides if s is not None]
        if not known:
            return None
        return known[0] if len(set(known)) == 1 and len(known) == 2 else EITHER
    test_words = words(test)
    if not any(_VERSION_WORD.search(w) for w in test_words):
        return None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and not isinstance(
            test.left, (cst.SimpleString, cst.Integer, cst.Float, cst.Tuple)):
        op = test.comparisons[0].operator
        if isinstance(op, (cst.LessThan, cst.LessThanEqual)):
            return OLD
        if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
            return NEW
    new = any(_NEW_WORD.search(w) for w in test_words)
    old = any(_OLD_WORD.search(w) for w in test_words)
    return NEW if new and not old else OLD if old and not new else EITHER


def _catches_missing_api(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for t in types:
        value = t.value if isinstance(t, cst.Element) else t
        if (dotted_name(value) or "").rsplit(".", 1)[-1] in _MISSING_API_ERRORS | {"Exception", "BaseException"}:
            return True
    return False


def _falls_back(handler: cst.ExceptHandler) -> bool:
    """The handler does something (an import or a call), not just `xm = None` / `pass`."""
    found = False

    class Find(cst.CSTVisitor):
        def visit_Call(self, node):
            nonlocal found
            found = True

        def visit_Import(self, node):
            nonlocal found
            found = True

        def visit_ImportFrom(self, node):
            nonlocal found
            found = True

        def visit_Raise(self, node):
            return False

    handler.body.visit(Find())
    return found


def _in_compat_fallback(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` is the old-torch_xla side of a version/feature check or of a try/except fallback."""
    child = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, (cst.If, cst.IfExp)):
            polarity = _version_polarity(anc.test)
            if polarity is not None:
                if child is anc.body and polarity != NEW:
                    return True
                if child is anc.orelse and polarity != OLD:
                    return True
        elif isinstance(anc, cst.ExceptHandler) and _catches_missing_api(anc):
            return True
        elif isinstance(anc, cst.Try) and child is anc.body:
            if any(_catches_missing_api(h) and _falls_back(h) for h in anc.handlers):
                return True
        elif isinstance(anc, (cst.IndentedBlock, cst.Module)):
            for earlier in anc.body:
                if earlier is child:
                    break
                if isinstance(earlier, cst.If) and earlier.orelse is None and exits_block(earlier.body):
                    polarity = _version_polarity(earlier.test)
                    if polarity is not None and polarity != OLD:
                        return True  # `if new_xla: ...; return` then the old path
        child = anc
    return False


def _own_implementation(ctx: FileContext, node: cst.CSTNode, entry: Migration) -> bool:
    """torch_xla's own code implementing the API (e.g. `torch_xla.launch` delegating to `xmp.spawn`)."""
    if "torch_xla" not in ctx.path.parts[:-1]:
        return False
    names = {entry.name.rsplit(".", 1)[-1]}
    if entry.replacement:
        names.add(entry.replacement.rsplit(".", 1)[-1])
    return any(isinstance(a, cst.FunctionDef) and a.name.value in names for a in ctx.index.ancestors(node))


# --------------------------------------------------------------------------------------------------
# Spelling the replacement in the user's file
# --------------------------------------------------------------------------------------------------


def _used_names(ctx: FileContext) -> set[str]:
    """Identifiers the file uses or binds, outside the dotted paths of its import statements
    (`torch_xla` in `import torch_xla.core.xla_model as xm` binds nothing)."""
    return ctx.index.bare_names


def _bindings(ctx: FileContext) -> list[ImportBinding]:
    """Every import binding of the file, function-local ones included."""
    return ctx.index.import_bindings


def _reaching(ctx: FileContext, name: str, use: cst.CSTNode) -> ImportBinding | None:
    """The import that binds `name` where `use` is: the innermost scope that imports it, the last
    such import before `use` (or the last one, for conditional imports after it)."""
    chain = [a for a in ctx.index.ancestors(use) if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.Module))]
    position = ctx.index.order.get(id(use), 0)
    for scope in chain:
        candidates = [b for b in _bindings(ctx) if b.name == name and b.scope is scope]
        if candidates:
            before = [b for b in candidates if ctx.index.order.get(id(b.statement), 0) < position]
            return (before or candidates)[-1]
    return None


def _spell(ctx: FileContext, target: str, use: cst.CSTNode) -> tuple[str, list[ImportRequest]] | None:
    """How the fixed code names `target` at `use`, reusing the file's imports (TorchFix's
    `call_with_name_changes`), and the imports that make it valid. None when no spelling is safe."""
    module, _, obj = target.rpartition(".")
    for binding in _bindings(ctx):  # an import of the target or of its module that reaches `use`
        if binding.qualified in (target, module) and _reaching(ctx, binding.name, use) is binding:
            return (binding.name if binding.qualified == target else f"{binding.name}.{obj}"), []
    used = _used_names(ctx)
    alias = ALIASES.get(module)
    if alias and alias not in used:
        return f"{alias}.{obj}", [ImportRequest(module, asname=alias)]
    top = module.split(".")[0]
    bound = _reaching(ctx, top, use)
    if top not in used or (bound is not None and bound.name == bound.qualified == top):
        return target, ([] if bound is not None and module == top else [ImportRequest(module)])
    return None


def _placed(ctx: FileContext, requests: list[ImportRequest], beside: str | None, use: cst.CSTNode):
    """Where the new imports go: next to the import that binds `beside` at `use` (the old module), so a
    guarded (try/except ImportError) or function-local import stays guarded. Returns the requests for
    `apply_fixes` and any replacement we must do ourselves, or None when no placement is right."""
    if not requests:
        return [], None
    anchor = _reaching(ctx, beside, use) if beside else None
    if anchor is None:
        return [ImportRequest(r.module, r.obj, r.asname) for r in requests], None
    indexed = ctx.index.imports.get(beside)
    if indexed is not None and indexed.statement is anchor.statement:
        return [ImportRequest(r.module, r.obj, r.asname, beside=beside) for r in requests], None
    # the engine places `beside` imports next to the last import of that name only: do it here
    line = ctx.parent(anchor.statement)
    if not isinstance(line, cst.SimpleStatementLine):
        return None
    new_lines = [cst.parse_statement(
        (f"from {r.module} import {r.obj}" if r.obj else f"import {r.module}") + (f" as {r.asname}" if r.asname else ""),
        config=ctx.module.config_for_parsing) for r in requests]
    return [], (line, cst.FlattenSentinel([line, *new_lines]))


def _carry_arguments(ctx: FileContext, call: cst.Call, entry: Migration) -> list[cst.Arg] | None:
    if entry.rewrite:
        return REWRITES[entry.rewrite](ctx, call)
    if entry.params is None:
        return list(call.args)
    renames = dict(entry.params)
    out = []
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None:
            if i >= len(entry.params):
                return None
            out.append(arg)
            continue
        new = renames.get(arg.keyword.value)
        if new is None:
            return None
        out.append(arg if new == arg.keyword.value else arg.with_changes(keyword=cst.Name(new)))
    return out


def _use_replacement(ctx: FileContext, ref: cst.BaseExpression, entry: Migration, new_name: str):
    """(node to replace, replacement) for one reference `ref` to the old function, or None."""
    parent = ctx.parent(ref)
    expr = cst.parse_expression(new_name, config=ctx.module.config_for_parsing)
    if isinstance(parent, cst.Call) and parent.func is ref:
        args = _carry_arguments(ctx, parent, entry)
        if args is None:
            return None
        return parent, parent.with_changes(func=expr, args=args)
    if isinstance(parent, cst.Decorator) and entry.rewrite is None and (entry.params is None or entry.params):
        return ref, expr  # called with the decorated function alone
    return None  # a reference (`f = xm.mark_step`): we can't see the arguments it will get


def _binding_name(ref: cst.BaseExpression) -> str | None:
    while isinstance(ref, cst.Attribute):
        ref = ref.value
    return ref.value if isinstance(ref, cst.Name) else None


# --------------------------------------------------------------------------------------------------
# The visitor, shared by both codes
# --------------------------------------------------------------------------------------------------


class _MigrationVisitor:
    """Reports uses of the table's entries with `status`; mixed into the two rule classes."""

    status: ClassVar[str]
    ctx: FileContext

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        self.functions = _functions(self.status)
        self.modules = _modules(self.status)
        self.last_parts = {name.rsplit(".", 1)[-1] for name in self.functions}
        self.active = _relevant(ctx) and bool(self.functions or self.modules)
        self.from_imports: list[tuple[cst.ImportAlias, Migration, str]] = []

    # -- uses: `xm.mark_step()`, `torch_xla.experimental.compile(f)` ----------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if not self.active or node.attr.value not in self.last_parts or self._in_import(node):
            return
        names = _qualified_names(self.ctx, node)
        entry = next((self.functions[n] for n in sorted(names) if n in self.functions), None)
        if entry is None or self._excused(node, entry):
            return
        old = dotted_name(node) or entry.name
        self.report(node, entry.message(old), fix=self._fix_uses([node], entry, _binding_name(node), None))

    # -- imports ---------------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        if not self.active:
            return
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            entry = next((m for m in self.modules if m.matches_module(full)), None)
            if entry is None or self._excused(node, entry):
                continue
            fix = None
            new = entry.moved(full)
            if entry.applicability and new and alias.asname is not None:
                fix = Fix.replace(alias.name, cst.parse_expression(new), title=f"Import `{new}`",
                                  safe=entry.fix == "safe")
            self.report(alias, entry.message(full), fix=fix)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not self.active or node.relative or node.module is None:
            return
        module = dotted_name(node.module) or ""
        entry = next((m for m in self.modules if m.matches_module(module)), None)
        if entry is not None:  # `from torch_xla_py.xla_model import *`: the module moved
            if not self._excused(node, entry):
                new = entry.moved(module)
                fix = Fix.replace(node.module, cst.parse_expression(new), title=f"Import from `{new}`",
                                  safe=entry.fix == "safe") if entry.applicability and new else None
                self.report(node.module, entry.message(module), fix=fix)
            return
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            obj = dotted_name(alias.name) or ""
            full = f"{module}.{obj}"
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else obj
            moved = next((m for m in self.modules if m.matches_module(full)), None)
            if moved is not None:  # `from torch_xla.experimental import pjrt`
                if not self._excused(node, moved):
                    self.report(alias, moved.message(full), fix=self._fix_from_module(node, alias, moved, full))
            elif full in self.functions and not self._excused(node, self.functions[full]):
                self.from_imports.append((alias, self.functions[full], local))

    def leave_Module(self, original_node: cst.Module) -> None:
        # `from torch_xla.core.xla_model import xrt_world_size`: one finding on the import; its fix
        # rewrites every use and drops the import once unused
        for alias, entry, local in self.from_imports:
            uses = self._uses_of(local, entry.name)
            module, _, obj = entry.name.rpartition(".")
            removed = ImportRequest(module, obj, local if local != obj else None)
            fix = self._fix_uses(uses, entry, local, removed) if uses else None
            self.report(alias, entry.message(entry.name), fix=fix)

    # -- helpers -----------------------------------------------------------------------------------------
    def _in_import(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in self.ctx.index.ancestors(node))

    def _excused(self, node: cst.CSTNode, entry: Migration) -> bool:
        return _in_compat_fallback(self.ctx, node) or _own_implementation(self.ctx, node, entry)

    def _uses_of(self, local: str, qualified: str) -> list[cst.Name]:
        ctx = self.ctx
        found: list[cst.Name] = []

        class Find(cst.CSTVisitor):
            def visit_Import(self, node):
                return False

            def visit_ImportFrom(self, node):
                return False

            def visit_Attribute(self, node):
                node.value.visit(self)  # the attribute name itself is no use of `local`
                return False

            def visit_Name(self, node):
                if node.value == local and qualified in _qualified_names(ctx, node):
                    found.append(node)

        ctx.module.visit(Find())
        return found

    def _fix_uses(self, refs, entry: Migration, beside: str | None, removed: ImportRequest | None) -> Fix | None:
        if entry.applicability is None or not entry.replacement:
            return None
        ctx = self.ctx
        replacements: dict[int, tuple] = {}
        imports: list[ImportRequest] = []
        spelled = None
        for ref in refs:
            spelling = _spell(ctx, entry.replacement, ref)
            if spelling is None:
                return None
            spelled, needed = spelling
            change = _use_replacement(ctx, ref, entry, spelled)
            placed = _placed(ctx, needed, beside, ref)
            if change is None or placed is None:
                return None
            replacements[id(change[0])] = change
            requests, own = placed
            if own is not None:
                replacements[id(own[0])] = own
            imports.extend(r for r in requests if r not in imports)
        anchor = _reaching(ctx, beside, refs[0]) if beside and refs else None
        if removed is None and anchor is not None:
            if isinstance(anchor.statement, cst.Import):
                if anchor.name != anchor.qualified.split(".")[0]:  # `import a.b as x`; never `import a.b`
                    removed = ImportRequest(anchor.qualified, asname=anchor.name)
            else:
                module, _, obj = anchor.qualified.rpartition(".")
                removed = ImportRequest(module, obj, anchor.name if anchor.name != obj else None)
        return Fix(entry.applicability, f"Use `{spelled}`", replacements, tuple(imports), (removed,) if removed else ())

    def _fix_from_module(self, node: cst.ImportFrom, alias: cst.ImportAlias, entry: Migration, full: str) -> Fix | None:
        new = entry.moved(full)
        if entry.applicability is None or new is None or len(node.names) != 1 or "." not in new:
            return None
        new_module, _, new_obj = new.rpartition(".")
        old_obj = dotted_name(alias.name)
        asname = alias.asname or (cst.AsName(name=cst.Name(old_obj)) if new_obj != old_obj else None)
        replacement = node.with_changes(
            module=cst.parse_expression(new_module),
            names=[alias.with_changes(name=cst.Name(new_obj), asname=asname, comma=cst.MaybeSentinel.DEFAULT)],
        )
        return Fix.replace(node, replacement, title=f"Import `{new}`", safe=entry.fix == "safe")


# --------------------------------------------------------------------------------------------------
# The two codes
# --------------------------------------------------------------------------------------------------

_REMOVED_DOC = """## What it does
Flags uses and imports of torch_xla APIs that current releases no longer have, from the migration
table `rules/xla_migrations.toml`:

{entries}

## Why is this bad?
The code fails with `AttributeError`/`ImportError` on a current torch_xla: `xm.xrt_world_size()`
and `xm.get_ordinal()` were deleted in 2.7 after two releases of warnings (RFC #8000), and downstream
projects (accelerate, transformers, Lightning) had to ship fixes. Code that must keep working on
an old torch_xla should guard the old call by version (that is not reported).

## Example
```python
import torch_xla.core.xla_model as xm

world_size = xm.xrt_world_size()
rank = xm.get_ordinal()
```

Use instead:
```python
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

world_size = xr.world_size()
rank = xr.global_ordinal()
```

## Fix safety
The renames are safe: the new functions are what the old ones called (an existing alias of the new
module is reused, else `import torch_xla.runtime as xr` is added next to the old import, inside the
same `try/except ImportError` when it is guarded; the old import goes once unused). A call passing
an argument the new function lacks (`defval`) gets no fix. The `torch_xla.experimental.xla_sharding`
move is unsafe (`torch_xla.distributed.spmd` re-exports only the public names); `pjrt` and
`parse_xla_device` have no automatic fix.

## Known problems
Version checks are recognised by their words (`version`, `_GREATER_EQUAL_2_1`, `hasattr`), and a
call in an `except AttributeError/ImportError` handler counts as a fallback.

## References
- torch_xla deprecation policy: https://github.com/pytorch/xla/issues/8000
- torch_xla deprecation tracking issue: https://github.com/pytorch/xla/issues/8915
- each table entry's `reference`
"""

_DEPRECATED_DOC = """## What it does
Flags uses of torch_xla APIs that still work but warn or are superseded, from the migration table
`rules/xla_migrations.toml`:

{entries}

## Why is this bad?
`xm.mark_step()` and `xm.xla_device()` print a deprecation warning since torch_xla 2.8 and will go
after the two-release grace period; the new names (`torch_xla.sync()`, `torch_xla.device()`) exist
since 2.4 and 2.3. `xmp.spawn` is superseded by `torch_xla.launch`, which also runs under torchrun.

## Example
```python
import torch_xla.core.xla_model as xm

device = xm.xla_device()
for x, y in loader:
    loss = loss_fn(model(x.to(device)), y.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.mark_step()
```

Use instead:
```python
import torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
for x, y in loader:
    loss = loss_fn(model(x.to(device)), y.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    torch_xla.sync()
```

## Fix safety
`mark_step` -> `sync` and `xla_device` -> `device` are safe: in 2.8 the old functions just call the
new ones (`wait`, `reset_scope` and the device index are kept; `xla_device(n, devkind)` gets no fix).
`import torch_xla` is added next to the import of `xm`, inside its `try/except ImportError` when it
is guarded. `xmp.spawn(...)` -> `torch_xla.launch(...)` is unsafe: `launch` calls the function
directly under torchrun, takes no `nprocs`/`join`/`daemon` (only their defaults and `nprocs=1` carry
over) and returns None, so a call whose result is used gets no fix.

## References
- `torch_xla.sync`: https://github.com/pytorch/xla/pull/9086
- `torch_xla.device`: https://github.com/pytorch/xla/pull/9200
- `torch_xla.launch`: https://github.com/pytorch/xla/pull/7648
"""


class RemovedXlaApi(_MigrationVisitor, Rule):
    __doc__ = _REMOVED_DOC.format(entries=_entries_doc("removed"))

    code, name, category = "XLA601", "removed-xla-api", "deprecated_xla_api"
    summary = "this torch_xla API was removed"
    hint = "use the replacement named in the message (torch_xla.runtime, torch_xla.compile, torch_xla.distributed.spmd)"
    fix_availability = "sometimes"
    status = "removed"

    VALID = [
        Valid(
            """
            import torch_xla.runtime as xr
            world_size = xr.world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            if _XLA_GREATER_EQUAL_2_1:
                import torch_xla.runtime as xr
                world_size = xr.world_size()
            else:
                world_size = xm.xrt_world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm

            def world_size():
                if XLA_VERSION >= version.parse("2.1"):
                    from torch_xla import runtime as xr
                    return xr.world_size()
                return xm.xrt_world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            try:
                import torch_xla.runtime as xr
                rank = xr.global_ordinal()
            except (AttributeError, ImportError):
                rank = xm.get_ordinal()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            if hasattr(xm, "xrt_world_size"):  # a string, and a feature check
                n = getattr(xm, "xrt_world_size")()
            """
        ),
        Valid(
            """
            import torch_xla
            class Trainer:
                def xrt_world_size(self):  # a definition
                    '''Replaces xm.xrt_world_size().'''
                    return self.get_ordinal() + 1
            """
        ),
        Valid("import torch_xla_py_helpers\nimport torch_xla.distributed.spmd as xs\n"),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            world_size = xm.xrt_world_size()
            """,
            line=3,
            expected_replacement="""
            import torch_xla.runtime as xr

            world_size = xr.world_size()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            from torch_xla import runtime as rt

            def shard():
                return xm.get_ordinal(), xm.xla_real_devices()
            """,
            line=5,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            from torch_xla import runtime as rt

            def shard():
                return rt.global_ordinal(), xm.xla_real_devices()
            """,
        ),
        Invalid(
            """
            try:
                import torch_xla.core.xla_model as xm
            except ImportError:
                xm = None

            def world_size():
                return xm.xrt_world_size() if xm is not None else 1
            """,
            line=7,
            expected_replacement="""
            try:
                import torch_xla.core.xla_model as xm
                import torch_xla.runtime as xr
            except ImportError:
                xm = None

            def world_size():
                return xr.world_size() if xm is not None else 1
            """,
        ),
        Invalid(
            """
            import torch_xla
            from torch_xla.core.xla_model import xrt_world_size as get_world_size

            print(get_world_size())
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            import torch_xla.runtime as xr

            print(xr.world_size())
            """,
        ),
        Invalid(
            """
            import torch_xla

            @torch_xla.experimental.compile
            def step(x):
                return x * 2
            """,
            line=3,
            expected_replacement="""
            import torch_xla

            @torch_xla.compile
            def step(x):
                return x * 2
            """,
        ),
        Invalid(
            """
            import torch_xla.experimental.xla_sharding as xs
            xs.mark_sharding(t, mesh, (0, 1))
            """,
            line=1,
            expected_replacement="""
            import torch_xla.distributed.spmd as xs
            xs.mark_sharding(t, mesh, (0, 1))
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla_py.xla_model as xm
            device = xm.xla_device()
            """,
            line=1,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            device = xm.xla_device()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            n = xm.xrt_world_size(defval=8)  # no equivalent: no fix
            """,
            line=2,
        ),
        Invalid(
            """
            import torch_xla
            from torch_xla.experimental import pjrt
            """,
            line=2,
        ),
    ]


class DeprecatedXlaApi(_MigrationVisitor, Rule):
    __doc__ = _DEPRECATED_DOC.format(entries=_entries_doc("deprecated"))

    code, name, category = "XLA602", "deprecated-xla-api", "deprecated_xla_api"
    summary = "this torch_xla API is deprecated"
    hint = "use the replacement named in the message (torch_xla.sync, torch_xla.device, torch_xla.launch)"
    fix_availability = "sometimes"
    status = "deprecated"

    VALID = [
        Valid(
            """
            import torch_xla
            device = torch_xla.device()
            torch_xla.sync()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            class Accelerator:
                def __init__(self):
                    self.xla_device = None  # an attribute of ours
                def mark_step(self):
                    print("xm.mark_step() is deprecated")
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            get_device = getattr(xm, "xla_device", None)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            try:
                import torch_xla
                torch_xla.sync()
            except AttributeError:
                xm.mark_step()  # torch_xla < 2.4
            """
        ),
        Valid("model.mark_step()\nthing.xla_device()\n"),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla.core.xla_model as xm

            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                xm.optimizer_step(optimizer)
                xm.mark_step()
            """,
            line=7,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            import torch_xla

            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                xm.optimizer_step(optimizer)
                torch_xla.sync()
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            device = xm.xla_device(n=1)
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            device = torch_xla.device(index=1)
            """,
        ),
        Invalid(
            """
            try:
                import torch_xla.core.xla_model as xm
            except ImportError:
                xm = None

            def barrier():
                if xm is not None:
                    xm.mark_step(wait=True)
            """,
            line=8,
            expected_replacement="""
            try:
                import torch_xla.core.xla_model as xm
                import torch_xla
            except ImportError:
                xm = None

            def barrier():
                if xm is not None:
                    torch_xla.sync(wait=True)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xla_mod
            import torch_xla as tx
            dev = xla_mod.xla_device(0)
            """,
            line=3,
            expected_replacement="""
            import torch_xla as tx
            dev = tx.device(0)
            """,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            dev = xm.xla_device(devkind="TPU")  # devkind was dropped: no fix
            """,
            line=2,
        ),
        Invalid(
            """
            import torch_xla.distributed.xla_multiprocessing as xmp

            if __name__ == "__main__":
                xmp.spawn(_mp_fn, args=(flags,), nprocs=None, start_method="fork")
            """,
            line=4,
            expected_replacement="""
            import torch_xla

            if __name__ == "__main__":
                torch_xla.launch(_mp_fn, args=(flags,), start_method="fork")
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.distributed.xla_multiprocessing as xmp
            context = xmp.spawn(_mp_fn, args=(), nprocs=8, join=False)  # no equivalent: no fix
            """,
            line=2,
        ),
    ]
