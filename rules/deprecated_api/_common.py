"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast
import io
import itertools
import re
import sys
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from importlib import resources
from typing import TYPE_CHECKING, ClassVar, cast

from xlalint.analysis.context import FileContext
from xlalint.analysis.guards import exits_block, words
from xlalint.analysis.index import FUNCTIONS, SCOPES, ImportBinding
from xlalint.analysis.names import dotted_name, has_star_args, last_part, positional
from xlalint.config import parse_version
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.fixing.lazy import cst
from xlalint.rule import FixBuilder, Rule

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext

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
KINDS = ("function", "module", "environment", "argument")
CONFIGURED = "<configured>"  # an argument value the file does not show
REQUIRED = ("name", "status", "fix", "reference", "note")
OPTIONAL = (
    "kind",
    "replacement",
    "deprecated_in",
    "removed_in",
    "replacement_since",
    "params",
    "params_since",
    "argument",
    "position",
    "allowed",
    "off",
)
# Keys only some kinds take (every other optional key fits every kind).
KIND_KEYS = {
    "params": ("function",),
    "params_since": ("function",),
    "argument": ("argument",),
    "position": ("argument",),
    "allowed": ("argument",),
    "off": ("environment",),
}
NOT_STRINGS = ("params", "params_since", "position", "allowed", "off")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV = re.compile(r"[A-Z_][A-Z0-9_]*")
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
    params_since: tuple[tuple[str, str], ...] = ()  # (new keyword, first release whose replacement takes it)
    argument: str | None = None  # kind "argument": the parameter whose value is checked ...
    position: int | None = None  # ... its positional index ...
    allowed: tuple[object, ...] | None = None  # ... and the values it may still take
    off: tuple[str, ...] = ()  # kind "environment": values that leave the variable's feature off

    @property
    def applicability(self) -> Applicability | None:
        return {"safe": Applicability.SAFE, "unsafe": Applicability.UNSAFE}.get(self.fix)

    def matches_module(self, qualified: str) -> bool:
        return qualified == self.name or qualified.startswith(self.name + ".")

    def applies_to(self, target: tuple[int, ...] | None) -> bool:
        """Worth reporting to code that must run on torch_xla `target` (None: the newest): the
        replacement exists there (never suggest what the user's version lacks); an entry without one
        once the old name is deprecated or gone there."""
        if target is None:
            return True
        available = self.replacement_since or (self.deprecated_in if self.replacement else None)
        if available is not None:
            return parse_version(available) <= target
        since = self.deprecated_in or self.removed_in
        return since is None or parse_version(since) <= target

    def moved(self, qualified: str) -> str | None:
        """`torch_xla_py.xla_model.foo` -> `torch_xla.core.xla_model.foo` for a module entry."""
        if self.replacement is None or not self.matches_module(qualified):
            return None
        return self.replacement + qualified[len(self.name) :]

    def message(self, old: str, value: str | None = None, resolved: str | None = None) -> str:
        """The finding's message for `old` as written (for an argument entry, `value` is the
        argument's code and `resolved` the literal it can hold, when that is not what is written)."""
        if self.kind == "environment":
            return self._environment_message()
        if self.kind == "argument":
            return self._argument_message(old, value, resolved)
        call = "()" if self.kind == "function" else ""
        new = f"`{self.replacement}{call}`" if self.replacement else None
        if self.status == "removed":
            head = f"`{old}{call}` was removed in torch_xla {self.removed_in}{self._deprecated_since()}"
            head += f": use {new}" if new else ""
        elif self.deprecated_in:
            head = f"`{old}{call}` is deprecated since torch_xla {self.deprecated_in}"
            if self.removed_in:
                head += f" and removed in {self.removed_in}"
            head += f": use {new}" if new else ""
        else:
            head = f"`{old}{call}` is superseded by {new} (torch_xla {self.replacement_since}+)"
        return self._with_note(head)

    def _environment_message(self) -> str:
        if self.status == "removed":
            head = f"setting `{self.name}` has no effect since torch_xla {self.removed_in}{self._deprecated_since()}"
        else:
            head = f"the environment variable `{self.name}` is deprecated since torch_xla {self.deprecated_in}"
        if self.replacement:
            head += (
                f": call `{self.replacement}()` instead"
                if "." in self.replacement
                else f": set `{self.replacement}` instead"
            )
        return self._with_note(head)

    def _argument_message(self, old: str, value: str | None, resolved: str | None) -> str:
        if resolved is CONFIGURED:
            passed = f"`{self.argument}={value}` unless it is " + " or ".join(repr(v) for v in self.allowed or ())
        else:
            passed = f"`{self.argument}={value}`" + (f" (which can be `{resolved}`)" if resolved else "")
        if self.status == "removed":
            head = f"`{old}()` no longer accepts {passed} since torch_xla {self.removed_in}{self._deprecated_since()}"
        else:
            head = f"{passed} in `{old}()` is deprecated since torch_xla {self.deprecated_in}"
        return self._with_note(head)

    def _deprecated_since(self) -> str:
        return f" (deprecated in {self.deprecated_in})" if self.deprecated_in else ""

    def _with_note(self, head: str) -> str:
        # the note is in `xlalint explain` (the table): a message is one short sentence
        return head


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
    seen: set[tuple] = set()
    for i, row in enumerate(rows):
        where = f"{source}: [[migration]] #{i + 1} ({row.get('name', '?')})"
        entries.append(_validate(row, where, seen))
    return tuple(entries)


def _validate(row: dict, where: str, seen: set[tuple]) -> Migration:
    def fail(problem: str) -> None:
        raise MigrationTableError(f"{where}: {problem}")

    unknown = set(row) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        fail(f"unknown keys {sorted(unknown)} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        fail(f"missing keys {missing}")
    for key, value in row.items():
        if key not in NOT_STRINGS and not isinstance(value, str):
            fail(f"`{key}` must be a string, got {value!r}")
    kind = row.get("kind", "function")
    if kind not in KINDS:
        fail(f"`kind` must be one of {KINDS}, got {kind!r}")
    for key, kinds in KIND_KEYS.items():
        if key in row and kind not in kinds:
            fail(f"`{key}` is only for kind {' or '.join(map(repr, kinds))}, not {kind!r}")
    for key in ("name", "replacement"):
        if key in row and not _DOTTED.fullmatch(row[key]):
            fail(f"`{key}` must be a dotted Python name, got {row[key]!r}")
    namespace = "environment" if kind == "environment" else "python"
    if (namespace, row["name"], row.get("argument")) in seen:
        fail("duplicate name")
    seen.add((namespace, row["name"], row.get("argument")))
    if row["status"] not in STATUSES:
        fail(f"`status` must be one of {STATUSES}, got {row['status']!r}")
    if row["fix"] not in FIXES:
        fail(f"`fix` must be one of {FIXES}, got {row['fix']!r}")
    for key in ("deprecated_in", "removed_in", "replacement_since"):
        if key in row and not _VERSION.fullmatch(row[key]):
            fail(f"`{key}` must be a version like 2.7, got {row[key]!r}")
    if row["status"] == "removed" and "removed_in" not in row:
        fail("a removed API needs `removed_in`")
    if row["status"] == "deprecated" and not ("deprecated_in" in row or "replacement_since" in row):
        fail("a deprecated API needs `deprecated_in` (or `replacement_since` when it is only superseded)")
    if not row["reference"].startswith(("https://", "http://")):
        fail(f"`reference` must be a URL, got {row['reference']!r}")
    extra: dict = {}
    if kind == "environment":
        extra["off"] = _validate_environment(row, fail)
    elif kind == "argument":
        extra.update(_validate_argument(row, fail))
    elif row["fix"] != "none" and "replacement" not in row:
        fail("a fix needs a `replacement`")
    if "params" in row:
        raw = row["params"]
        if not isinstance(raw, list) or not all(isinstance(p, str) and _PARAM.fullmatch(p) for p in raw):
            fail(f"`params` must be a list of 'old' or 'old:new' parameter names, got {raw!r}")
        extra["params"] = tuple((p.partition(":")[0], p.partition(":")[2] or p.partition(":")[0]) for p in raw)
    if "params_since" in row:
        since = row["params_since"]
        new_names = {new for _, new in extra.get("params", ())}
        if not isinstance(since, dict) or not all(
            k in new_names and isinstance(v, str) and _VERSION.fullmatch(v) for k, v in since.items()
        ):
            fail(f"`params_since` must map parameters of `params` (new names) to versions like 2.8, got {since!r}")
        extra["params_since"] = tuple(since.items())
    fields = {k: v for k, v in row.items() if k not in extra}
    return Migration(**fields, **extra)


def _validate_environment(row: dict, fail: Callable[[str], None]) -> tuple[str, ...]:
    """An environment variable: its name, what replaces it (another variable, or a function to call
    when there is a dotted name), never a fix, and the values that leave it off."""
    if not _ENV.fullmatch(row["name"]):
        fail(f"an environment entry's `name` must be a variable name like XLA_USE_BF16, got {row['name']!r}")
    replacement = row.get("replacement")
    if replacement is not None and not (_ENV.fullmatch(replacement) or "." in replacement):
        fail(
            "an environment entry's `replacement` must be a variable name (XLA_FLAGS) or a dotted function "
            f"name (torch_xla.runtime.use_spmd), got {replacement!r}"
        )
    if row["fix"] != "none":
        fail(
            'an environment entry takes `fix = "none"`: renaming a variable is exact only when the new one '
            "reads the same values, and no replacement here does"
        )
    off = row.get("off", [])
    if not isinstance(off, list) or not all(isinstance(v, str) for v in off):
        fail(f"`off` must be a list of strings, got {off!r}")
    return tuple(off)


def _validate_argument(row: dict, fail: Callable[[str], None]) -> dict:
    """One argument of a function: its keyword, its position and the literal values still allowed; the
    fix drops the argument, so there is no `replacement`."""
    for key in ("argument", "position", "allowed"):
        if key not in row:
            fail(f"an argument entry needs `{key}`")
    if not isinstance(row["argument"], str) or not row["argument"].isidentifier():
        fail(f"`argument` must be a parameter name, got {row['argument']!r}")
    position = row["position"]
    if type(position) is not int or position < 0:
        fail(f"`position` must be a non-negative integer (the parameter's positional index), got {position!r}")
    if "replacement" in row:
        fail("an argument entry has no `replacement` (its fix drops the argument)")
    raw = row["allowed"]
    if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
        fail(f"`allowed` must be a non-empty list of Python literals written as strings, got {raw!r}")
    allowed = []
    for literal in raw:
        try:
            allowed.append(ast.literal_eval(literal))
        except (ValueError, SyntaxError):
            fail(f'`allowed` must hold Python literals such as "None" or "1", got {literal!r}')
    return {"argument": row["argument"], "position": position, "allowed": tuple(allowed)}


TABLE: tuple[Migration, ...] = load_table(
    resources.files("xlalint.rules").joinpath(TABLE_FILE).read_text(encoding="utf-8")
)

# Module moves, longest name first, to see through an old import to today's name.
MOVED_MODULES = sorted((m for m in TABLE if m.kind == "module" and m.replacement), key=lambda m: -len(m.name))

# Conventional aliases for new modules, used when the file has no binding for them yet.
ALIASES = {"torch_xla.runtime": "xr", "torch_xla.distributed.spmd": "xs"}


def _entries(status: str, kind: str, target: tuple[int, ...] | None = None) -> list[Migration]:
    return [m for m in TABLE if m.status == status and m.kind == kind and m.applies_to(target)]


def _modules(status: str, target: tuple[int, ...] | None = None) -> list[Migration]:
    # longest name first: `torch_xla_py.xla_model` before the catch-all `torch_xla_py`
    return sorted(_entries(status, "module", target), key=lambda m: -len(m.name))


def _group_of(lines: dict[tuple, list[str]], m) -> tuple:
    """The line an environment variable joined (one that was already there)."""
    return next(key for key, names in lines.items() if f"`{m.name}`" in names)


def entries_doc(status: str) -> str:
    """The table's entries with `status`, one line each; environment variables that share a
    replacement, release and fix are listed on one line."""
    lines: dict[tuple, list[str]] = {}
    notes: dict[tuple, list[str]] = {}  # each entry's note, shown here: the message leaves it out
    for m in TABLE:
        if m.status != status:
            continue
        before = set(lines)
        when = (
            f"removed in {m.removed_in}"
            if status == "removed"
            else (f"deprecated in {m.deprecated_in}" if m.deprecated_in else f"superseded since {m.replacement_since}")
        )
        if m.kind == "environment":
            call = "()" if m.replacement and "." in m.replacement else ""
            new = f"`{m.replacement}{call}`" if m.replacement else "no direct replacement"
            lines.setdefault(("environment variable", new, when, m.fix), []).append(f"`{m.name}`")
        elif m.kind == "argument":
            allowed = " or ".join(repr(v) for v in m.allowed or ())
            lines[(f"`{m.name}({m.argument}=...)`", f"only {allowed}", when, m.fix)] = []
        else:
            new = f"`{m.replacement}`" if m.replacement else "no direct replacement"
            lines[(f"`{m.name}`", new, when, m.fix)] = []
        key = next(iter(set(lines) - before), None) or _group_of(lines, m)
        if m.note and m.note not in notes.setdefault(key, []):
            notes[key].append(m.note)
    out = []
    for key, names in lines.items():
        what, new, when, fix = key
        if names:
            what = f"{what}{'s' if len(names) > 1 else ''} {', '.join(names)}"
        note = f": {'; '.join(notes[key])}" if notes.get(key) else ""
        out.append(f"- {what} -> {new} ({when}; fix: {fix}){note}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# Qualified names and literal values, resolved only for files that may hold a finding
# --------------------------------------------------------------------------------------------------


def _qualified_names(ctx: FileContext, node: ast.expr) -> set[str]:
    """What `node` names through this file's imports (`xm.mark_step` ->
    `torch_xla.core.xla_model.mark_step`), also where its module has moved since
    (`torch_xla_py.xla_model.get_ordinal` is `torch_xla.core.xla_model.get_ordinal`); empty when its
    head is not an imported name (or `xm`-style parameter)."""
    name = dotted_name(node)
    qualified = ctx.qualified_name(node) if name else None
    if not qualified or (qualified == name and name.partition(".")[0] not in ctx.index.imports):
        return set()  # the head is no import (nor an `xm`-style module parameter)
    moved = next((m.moved(qualified) for m in MOVED_MODULES if m.matches_module(qualified)), None)
    return {qualified, moved} if moved else {qualified}


UNKNOWN = object()  # a value `_literal_values` can't tell


def _literal_values(ctx: FileContext, node: ast.expr | None, seen: frozenset = frozenset()) -> list:
    """The values `node` may have, as far as literals in this file tell: a literal itself, both
    branches of `a if c else b`, what reaches a name (`n = 8; f(n)`); `UNKNOWN` for anything else."""
    if node is None:
        return [UNKNOWN]
    try:
        return [ast.literal_eval(node)]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.IfExp):
        return [*_literal_values(ctx, node.body, seen), *_literal_values(ctx, node.orelse, seen)]
    if isinstance(node, ast.Call) and dotted_name(node.func) == "str" and len(node.args) == 1 and not node.keywords:
        return [str(v) if v is not UNKNOWN else UNKNOWN for v in _literal_values(ctx, node.args[0], seen)]
    if isinstance(node, ast.Name) and node.id not in seen:
        values = ctx.assigned_values(node)
        if values:
            return [v for value in values for v in _literal_values(ctx, value, seen | {node.id})]
    return [UNKNOWN]


def _relevant(ctx: FileContext) -> bool:
    """The file imports torch_xla/torchax, or the pre-2020 `torch_xla_py` package."""
    return ctx.uses_xla or any(
        b.qualified == "torch_xla_py" or b.qualified.startswith("torch_xla_py.") for b in ctx.index.imports.values()
    )


def _module_node(ctx: FileContext, node: ast.ImportFrom) -> ast.AST:
    """A node spanning MODULE in `from MODULE import ...`, for the finding (`ast` keeps only its text)."""
    tokens = tokenize.generate_tokens(io.StringIO(ctx.code(node)).readline)
    next(tokens)  # `from`
    parts = list(itertools.takewhile(lambda t: t.string != "import", tokens))

    def position(row: int, column: int, line: str) -> tuple[int, int]:  # a row and UTF-8 offset, as `ast` has
        return node.lineno + row - 1, (node.col_offset if row == 1 else 0) + len(line[:column].encode())

    (row, col), (end_row, end_col) = position(*parts[0].start, parts[0].line), position(*parts[-1].end, parts[-1].line)
    return ast.Name(
        node.module or "", ast.Load(), lineno=row, col_offset=col, end_lineno=end_row, end_col_offset=end_col
    )


# --------------------------------------------------------------------------------------------------
# Version-guarded fallbacks: code written for an older torch_xla on purpose
# --------------------------------------------------------------------------------------------------

NEW, OLD, EITHER = 1, -1, 0  # the branch runs on the newer torch_xla / on the older one / can't tell
_VERSION_WORD = re.compile(
    r"version|\d+_\d+|greater|at_?least|newer|older|lower|less_than|torch_xla\s*[<>=!~]|^\s*[<>=!~]=?\s*\d+\.\d+|"
    r"(^|_)(ge|gt|le|lt)_?\d",  # `XLA_GE_28`, `_TORCH_XLA_LT_2_8`
    re.I,
)
_NEW_WORD = re.compile(r"greater|at_?least|newer|>|(^|_)(ge|gt)_?\d", re.I)
_OLD_WORD = re.compile(r"older|lower|less|<|(^|_)(le|lt)_?\d", re.I)
_MISSING_API_ERRORS = {"AttributeError", "ImportError", "ModuleNotFoundError", "NameError"}


def _version_polarity(test: ast.expr) -> int | None:
    """None if `test` is no version/feature check; else which torch_xla its body is written for."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _version_polarity(test.operand)
        return None if inner is None else -inner
    if isinstance(test, ast.Call) and dotted_name(test.func) in ("hasattr", "getattr"):
        return EITHER  # feature detection: either branch may be the compatibility path
    if isinstance(test, ast.BoolOp):  # `a and b and c` is `(a and b) and c`
        polarity = _version_polarity(test.values[0])
        for value in test.values[1:]:
            polarity = _combined(polarity, _version_polarity(value))
        return polarity
    # keyword and parameter names are words too: `if check(min_version=...)`
    test_words = [*words(test), *(n.arg for n in ast.walk(test) if isinstance(n, (ast.keyword, ast.arg)) and n.arg)]
    if not any(_VERSION_WORD.search(w) for w in test_words):
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and not isinstance(test.left, (ast.Constant, ast.Tuple)):
        op = test.ops[0]
        if isinstance(op, (ast.Lt, ast.LtE)):
            return OLD
        if isinstance(op, (ast.Gt, ast.GtE)):
            return NEW
    new = any(_NEW_WORD.search(w) for w in test_words)
    old = any(_OLD_WORD.search(w) for w in test_words)
    return NEW if new and not old else OLD if old and not new else EITHER


def _combined(left: int | None, right: int | None) -> int | None:
    """Both sides of `and`/`or`: the same direction when both check versions, else EITHER."""
    known = [s for s in (left, right) if s is not None]
    if not known:
        return None
    return known[0] if len(known) == 2 and left == right else EITHER


def _catches_missing_api(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(last_part(dotted_name(t)) in _MISSING_API_ERRORS | {"Exception", "BaseException"} for t in types)


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """The handler does something (an import or a call), not just `xm = None` / `pass` / `raise ...`."""
    stack: list[ast.AST] = list(handler.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Call, ast.Import, ast.ImportFrom)):
            return True
        if not isinstance(node, ast.Raise):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _in_compat_fallback(ctx: FileContext, node: ast.AST, entry: Migration | None = None) -> bool:
    """`node` is the old-torch_xla side of a version/feature check or of a try/except fallback, or
    of an `if`/`else` whose other branch calls `entry`'s replacement (`if flag: torch_xla.sync()
    else: xm.mark_step()`: whatever the flag is, the file already chose per version)."""
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child) or ""
        if isinstance(anc, (ast.If, ast.IfExp)):
            polarity = _version_polarity(anc.test)
            other = {"body": anc.orelse, "orelse": anc.body}.get(field)
            if entry is not None and entry.replacement and other and _names(ctx, other, entry.replacement):
                return True
            if polarity is not None:
                if field == "body" and polarity != NEW:
                    return True
                if field == "orelse" and polarity != OLD:
                    return True
        elif isinstance(anc, ast.Try):
            if field == "handlers" and isinstance(child, ast.ExceptHandler) and _catches_missing_api(child):
                return True
            if field == "body" and any(_catches_missing_api(h) and _falls_back(h) for h in anc.handlers):
                return True
        if isinstance(child, ast.stmt) and ctx.index.after_in_block(child, "new-xla-exit", _new_xla_exit):
            return True  # `if new_xla: ...; return` then the old path
        child = anc
    return False


def _new_xla_exit(earlier: ast.stmt) -> bool:
    """`if new_xla: ...; return`: the statements after it run on old torch_xla only."""
    if isinstance(earlier, ast.If) and not earlier.orelse and exits_block(earlier.body):
        polarity = _version_polarity(earlier.test)
        return polarity is not None and polarity != OLD
    return False


def _names(ctx: FileContext, branch: ast.AST | list[ast.stmt], qualified: str) -> bool:
    """Some name or attribute in `branch` refers to `qualified` through the file's imports."""
    for root in branch if isinstance(branch, list) else [branch]:
        for node in ast.walk(root):
            if isinstance(node, (ast.Name, ast.Attribute)) and qualified in _qualified_names(ctx, node):
                return True
    return False


def _own_implementation(ctx: FileContext, node: ast.AST, entry: Migration) -> bool:
    """torch_xla's own code implementing the API (e.g. `torch_xla.runtime.use_spmd` setting `XLA_USE_SPMD`)."""
    if "torch_xla" not in ctx.path.parts[:-1]:
        return False
    names = {entry.name.rsplit(".", 1)[-1]}
    if entry.replacement:
        names.add(entry.replacement.rsplit(".", 1)[-1])
    return any(isinstance(a, FUNCTIONS) and a.name in names for a in ctx.index.ancestors(node))


# --------------------------------------------------------------------------------------------------
# Spelling the replacement in the user's file (decided on `ast`)
# --------------------------------------------------------------------------------------------------

# Identifiers `ast` keeps as strings, not `Name` nodes: a fix binds none of them, and they are no
# call or decorator it could rewrite.
_STRING_NAMES = {
    ast.FunctionDef: "name",
    ast.AsyncFunctionDef: "name",
    ast.ClassDef: "name",
    ast.arg: "arg",
    ast.keyword: "arg",
    ast.ExceptHandler: "name",
    ast.Global: "names",
    ast.Nonlocal: "names",
    ast.MatchAs: "name",
    ast.MatchStar: "name",
    ast.MatchMapping: "rest",
    ast.MatchClass: "kwd_attrs",
}


def _string_names(ctx: FileContext) -> set[str]:
    found: set[str] = set()
    for kind, field in _STRING_NAMES.items():
        for node in ctx.index.by_type.get(kind, ()):
            value = getattr(node, field)
            if isinstance(value, list):
                found.update(value)
            elif value:
                found.add(value)
    return found


def _reaching(ctx: FileContext, name: str, use: ast.AST) -> ImportBinding | None:
    """The import that binds `name` where `use` is: the innermost scope that imports it, the last
    such import before `use` (or the last one, for conditional imports after it)."""
    order = ctx.index.order
    for scope in (a for a in ctx.index.ancestors(use) if isinstance(a, SCOPES)):
        candidates = [b for b in ctx.index.import_bindings if b.name == name and b.scope is scope]
        if candidates:
            before = [b for b in candidates if order[b.statement] < order[use]]
            return (before or candidates)[-1]
    return None


def _runs_with_stand_in(ctx: FileContext, anchor: ImportBinding, use: ast.AST) -> bool:
    """The file also binds the torch_xla import's name to something else (`except ImportError:` a
    class, a `SimpleNamespace`, another import, `None`) and `use` may run with it: on CPU the old
    call reaches the stand-in, the new spelling names a module that was never imported (NameError).
    `None` counts only where `use` may run when the name is None (not under `if xm is not None:`)."""
    if anchor.scope is None:
        return False
    for node in ctx.bindings_of(anchor.scope, anchor.name):
        if isinstance(node, ast.alias):
            statement = ctx.parent(node)
            module = f"{statement.module}.{node.name}" if isinstance(statement, ast.ImportFrom) else node.name
            if module.split(".")[0] in ("torch_xla", "torch_xla_py"):
                continue  # the import itself, or another spelling of a torch_xla module
        assigned = ctx.parent(node)
        if (
            isinstance(assigned, ast.Assign)
            and isinstance(assigned.value, ast.Constant)
            and assigned.value.value is None
            and ctx.only_when_not_none(anchor.name, use)
        ):
            continue
        return True
    return False


def _spell(ctx: FileContext, used: set[str], target: str, use: ast.AST) -> tuple[str, list[ImportRequest]] | None:
    """How the fixed code names `target` at `use`, reusing the file's imports (TorchFix's
    `call_with_name_changes`), and the imports that make it valid. None when no spelling is safe.
    `used`: the identifiers the file uses or binds."""
    module, _, obj = target.rpartition(".")
    for binding in ctx.index.import_bindings:  # an import of the target or of its module that reaches `use`
        if binding.qualified in (target, module) and _reaching(ctx, binding.name, use) is binding:
            return (binding.name if binding.qualified == target else f"{binding.name}.{obj}"), []
    alias = ALIASES.get(module)
    if alias and alias not in used:
        return f"{alias}.{obj}", [ImportRequest(module, asname=alias)]
    top = module.split(".")[0]
    bound = _reaching(ctx, top, use)
    if top not in used or (bound is not None and bound.name == bound.qualified == top):
        return target, ([] if bound is not None and module == top else [ImportRequest(module)])
    return None


def _placed(ctx: FileContext, requests: list[ImportRequest], beside: str | None, use: ast.AST):
    """Where the new imports go: next to the import that binds `beside` at `use` (the old module), so a
    guarded (try/except ImportError) or function-local import stays guarded. Returns the requests for
    `apply_fixes`, and the import statement to place them after ourselves (or None)."""
    if not requests:
        return [], None
    anchor = _reaching(ctx, beside, use) if beside else None
    if anchor is None:
        return requests, None
    indexed = ctx.index.imports.get(beside) if beside else None
    if indexed is not None and indexed.statement is anchor.statement:
        return [ImportRequest(r.module, r.obj, r.asname, beside=beside) for r in requests], None
    return [], anchor.statement  # the engine places `beside` imports next to the last import of that name only


# What becomes of one argument, in source order: None drops it; else (keyword, value): the keyword it
# is passed as (None: as written) and the code of its new value (None: as written).
Carry = tuple[str | None, str | None] | None
KEEP: Carry = (None, None)


def _carry_arguments(ctx: FileContext, call: ast.Call, entry: Migration) -> list[Carry] | None:
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


def _use_change(ctx: FileContext, ref: ast.expr, entry: Migration) -> tuple[ast.expr, list[Carry] | None] | None:
    """What a fix replaces for one reference `ref` to the old function: the call (with what becomes of
    its arguments) or a decorator (None), or None when it can't."""
    parent = ctx.parent(ref)
    if isinstance(parent, ast.Call) and parent.func is ref:
        carry = _carry_arguments(ctx, parent, entry)
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
class _UsesFix:
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


def _fix_import(alias: ast.alias, new: str, entry: Migration, cctx: CstContext) -> Fix:
    """`import old.module as x` -> `import new.module as x`."""
    return Fix.replace(
        cast("cst.ImportAlias", cctx.locate(alias)).name,
        cst.parse_expression(new),
        title=f"Import `{new}`",
        safe=entry.fix == "safe",
    )


def _fix_from_import(node: ast.ImportFrom, new: str, entry: Migration, cctx: CstContext) -> Fix:
    """`from old.module import ...` -> `from new.module import ...`."""
    return Fix.replace(
        cast("cst.ImportFrom", cctx.locate(node)).module,
        cst.parse_expression(new),
        title=f"Import from `{new}`",
        safe=entry.fix == "safe",
    )


def _fix_from_module(node: ast.ImportFrom, new: str, entry: Migration, cctx: CstContext) -> Fix:
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


def _fix_drop_argument(call: ast.Call, index: int, title: str, entry: Migration, cctx: CstContext) -> Fix:
    """`f(a, nprocs=8)` -> `f(a)`: the argument at `index` (in source order) goes."""
    old = cast("cst.Call", cctx.locate(call))
    carry: list[Carry] = [KEEP] * len(old.args)
    carry[index] = None
    return Fix.replace(old, old.with_changes(args=_carried(cctx, old, carry)), title=title, safe=entry.fix == "safe")


# How code sets an environment variable (reads are never reported).
_ENV_SETTERS = {"setdefault", "putenv", "update"}


def _update_pairs(call: ast.Call) -> list[tuple[ast.expr | ast.keyword, ast.expr]]:
    """The (key, value) pairs `os.environ.update(...)` sets: a dict display, `dict(K=v)`, keywords."""
    pairs: list[tuple[ast.expr | ast.keyword, ast.expr]] = []
    mapping = call.args[0] if call.args else None
    if isinstance(mapping, ast.Dict):
        pairs += [(k, v) for k, v in zip(mapping.keys, mapping.values) if k is not None]
    elif isinstance(mapping, ast.Call) and dotted_name(mapping.func) == "dict":
        pairs += [(k, k.value) for k in mapping.keywords if k.arg]
    pairs += [(k, k.value) for k in call.keywords if k.arg]
    return pairs


# --------------------------------------------------------------------------------------------------
# The visitor, shared by both codes
# --------------------------------------------------------------------------------------------------


class MigrationVisitor(Rule):
    """Reports uses of the table's entries with `status`; the base of the two rule classes (no code of its
    own: the registry does not list it)."""

    status: ClassVar[str]
    ctx: FileContext

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        target = ctx.target_version  # only moves whose replacement the user's torch_xla has
        self.functions = {m.name: m for m in _entries(self.status, "function", target)}
        self.modules = _modules(self.status, target)
        self.environment = {m.name: m for m in _entries(self.status, "environment", target)}
        self.arguments: dict[str, list[Migration]] = {}
        for m in _entries(self.status, "argument", target):
            self.arguments.setdefault(m.name, []).append(m)
        self.last_parts = {last_part(name) for name in self.functions}
        self.argument_last_parts = {last_part(name) for name in self.arguments}
        self.active = _relevant(ctx) and bool(self.functions or self.modules or self.environment or self.arguments)
        self.from_imports: list[tuple[ast.alias, Migration, str]] = []

    @cached_property
    def string_names(self) -> set[str]:
        return _string_names(self.ctx)

    @cached_property
    def used_names(self) -> set[str]:
        return self.ctx.index.bare_names | self.string_names

    # -- uses: `xm.mark_step()`, `torch_xla.experimental.compile(f)` ----------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self.active or node.attr not in self.last_parts:
            return
        names = _qualified_names(self.ctx, node)
        entry = next((self.functions[n] for n in sorted(names) if n in self.functions), None)
        old = dotted_name(node)  # a name chain: qualified names come from one
        if entry is None or old is None or self._excused(node, entry):
            return
        self.report(node, entry.message(old), fix=self._fix_uses([node], entry, old.partition(".")[0], None))

    # -- calls: an argument value that is gone, and environment variables set by a call ------------
    def visit_Call(self, node: ast.Call) -> None:
        if not self.active:
            return
        tail = last_part(dotted_name(node.func))
        if tail in self.argument_last_parts:
            checked: set[int] = set()
            for qualified in sorted(_qualified_names(self.ctx, node.func)):
                for entry in self.arguments.get(qualified, ()):
                    if id(entry) not in checked:
                        checked.add(id(entry))
                        self._check_argument(node, entry)
        if self.environment and tail in _ENV_SETTERS:
            setter = _qualified_names(self.ctx, node.func)
            if setter & {"os.environ.setdefault", "os.putenv"} and positional(node):
                self._check_setting(node.args[0], node.args[1] if len(positional(node)) > 1 else None)
            elif "os.environ.update" in setter:
                for key, value in _update_pairs(node):
                    self._check_setting(key, value)

    # -- `os.environ["X"] = value` -----------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if not (self.active and self.environment):
            return
        for target in node.targets:
            if isinstance(target, ast.Subscript) and "os.environ" in _qualified_names(self.ctx, target.value):
                self._check_setting(target.slice, node.value)

    # -- imports ---------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        if not self.active:
            return
        for alias in node.names:
            entry = next((m for m in self.modules if m.matches_module(alias.name)), None)
            if entry is None or self._excused(node, entry):
                continue
            new = entry.moved(alias.name)
            fix = partial(_fix_import, alias, new, entry) if entry.applicability and new and alias.asname else None
            self.report(alias, entry.message(alias.name), fix=fix)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not self.active or node.level or node.module is None:
            return
        module = node.module
        entry = next((m for m in self.modules if m.matches_module(module)), None)
        # `from torch_xla_py import xla_model`: the row of the module imported is more specific
        # (it has a replacement) than the package's
        specific = (
            entry is not None
            and node.names[0].name != "*"
            and any(
                len(m.name) > len(entry.name) and m.matches_module(f"{module}.{a.name}")
                for a in node.names
                for m in self.modules
            )
        )
        if entry is not None and not specific:  # `from torch_xla_py.xla_model import *`: the module moved
            if not self._excused(node, entry):
                new = entry.moved(module)
                fix = partial(_fix_from_import, node, new, entry) if entry.applicability and new else None
                self.report(_module_node(self.ctx, node), entry.message(module), fix=fix)
            return
        if node.names[0].name == "*":
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            moved = next((m for m in self.modules if m.matches_module(full)), None)
            if moved is not None:  # `from torch_xla.experimental import pjrt`
                if not self._excused(node, moved):
                    new = moved.moved(full)
                    fixable = moved.applicability and new and len(node.names) == 1 and "." in new
                    fix = partial(_fix_from_module, node, new, moved) if fixable and new else None
                    self.report(alias, moved.message(full), fix=fix)
            elif full in self.functions and not self._excused(node, self.functions[full]):
                self.from_imports.append((alias, self.functions[full], alias.asname or alias.name))
            elif entry is not None and not self._excused(node, entry):  # the package's other modules
                self.report(alias, entry.message(full))

    def finish(self) -> None:
        # `from torch_xla.core.xla_model import xrt_world_size`: one finding on the import; its fix
        # rewrites every use and drops the import once unused
        for alias, entry, local in self.from_imports:
            uses = self._uses_of(local, entry.name)
            module, _, obj = entry.name.rpartition(".")
            removed = ImportRequest(module, obj, local if local != obj else None)
            fix = self._fix_uses(uses, entry, local, removed) if uses else None
            self.report(alias, entry.message(entry.name), fix=fix)

    # -- helpers -----------------------------------------------------------------------------------------
    def _excused(self, node: ast.AST, entry: Migration) -> bool:
        return _in_compat_fallback(self.ctx, node, entry) or _own_implementation(self.ctx, node, entry)

    def _check_setting(self, key: ast.expr | ast.keyword, value: ast.expr | None) -> None:
        """`key` (a keyword's name, or an expression naming the variable) is set to `value`."""
        names = [key.arg] if isinstance(key, ast.keyword) else _literal_values(self.ctx, key)
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            entry = self.environment.get(name)
            if entry is None or self._excused(key, entry):
                continue
            values = _literal_values(self.ctx, value)
            if entry.off and UNKNOWN not in values and all(v in entry.off for v in values):
                continue  # `os.environ["XLA_USE_BF16"] = "0"`: the feature stays off, as without it
            self.report(key, entry.message(name))

    def _check_argument(self, call: ast.Call, entry: Migration) -> None:
        """`call` passes `entry.argument` a value (a literal, or a name or branch holding one) that
        is no longer allowed."""
        kw = next((k for k in call.keywords if k.arg == entry.argument), None)
        if entry.position is None or entry.allowed is None:
            return  # (never: load_table requires both of an argument entry)
        if kw is not None:
            value: ast.expr = kw.value
        elif entry.position < len(positional(call)):
            value = call.args[entry.position]
        else:
            return
        # compared with `==`, as torch_xla compares (`nprocs == 1`: `True` and `1.0` pass)
        values = _literal_values(self.ctx, value)
        bad = [v for v in values if v is not UNKNOWN and v not in entry.allowed]
        # a value the file does not show (`nprocs=args.nprocs`) is passed to be configured: it works
        # only when configured to an allowed value, so it is reported with that condition
        if not (bad or UNKNOWN in values) or self._excused(call, entry):
            return
        written = self.ctx.code(value)
        resolved = (None if written == repr(bad[0]) else repr(bad[0])) if bad else CONFIGURED
        fix = None
        if (
            entry.applicability is not None
            and not has_star_args(call)
            and (kw is not None or entry.position == len(call.args) - 1)
        ):
            index = len(call.args) + call.keywords.index(kw) if kw is not None else entry.position
            fix = partial(_fix_drop_argument, call, index, f"Drop `{entry.argument}={written}`", entry)
        # at the callee, where the call starts: the argument may sit lines below it
        self.report(
            call.func, entry.message(dotted_name(call.func) or self.ctx.code(call.func), written, resolved), fix=fix
        )

    def _uses_of(self, local: str, qualified: str) -> list[ast.Name]:
        """The names that refer to the import `local` of `qualified`; none when `local` is also a
        definition, parameter or keyword (no call or decorator the fix could rewrite)."""
        binding = self.ctx.index.imports.get(local)
        if binding is None or binding.qualified != qualified or local in self.string_names:
            return []
        return self.ctx.index.name_uses.get(local, [])

    def _fix_uses(
        self, refs: Sequence[ast.expr], entry: Migration, beside: str | None, removed: ImportRequest | None
    ) -> FixBuilder | None:
        """The fix rewriting `refs` (uses of `entry`), decided here, built on libcst; None when a use
        can't be rewritten."""
        if entry.applicability is None or not entry.replacement:
            return None
        ctx = self.ctx
        if beside in ctx.lazy_module_names and any(_reaching(ctx, beside, ref) is None for ref in refs):
            return None  # `xm = _import_xla()`: a new top-level import would make the optional torch_xla required
        changes: list[tuple[ast.expr, list[Carry] | None, str]] = []
        own_imports: dict[ast.stmt, list[ImportRequest]] = {}
        imports: list[ImportRequest] = []
        spelled = None
        for ref in refs:
            spelling = _spell(ctx, self.used_names, entry.replacement, ref)
            change = _use_change(ctx, ref, entry)
            if spelling is None or change is None:
                return None
            spelled, needed = spelling
            changes.append((*change, spelled))
            requests, anchor_statement = _placed(ctx, needed, beside, ref)
            if anchor_statement is not None:
                own_imports[anchor_statement] = needed
            imports.extend(r for r in requests if r not in imports)
        anchor = _reaching(ctx, beside, refs[0]) if beside and refs else None
        applicability, title = entry.applicability, f"Use `{spelled}`"
        if (
            applicability is Applicability.SAFE
            and anchor is not None
            and any(_runs_with_stand_in(ctx, anchor, ref) for ref in refs)
        ):
            applicability, title = Applicability.UNSAFE, f"{title} (`{beside}` has a stand-in without torch_xla)"
        if removed is None and anchor is not None:
            if isinstance(anchor.statement, ast.Import):
                if anchor.name != anchor.qualified.split(".")[0]:  # `import a.b as x`; never `import a.b`
                    removed = ImportRequest(anchor.qualified, asname=anchor.name)
            else:
                module, _, obj = anchor.qualified.rpartition(".")
                removed = ImportRequest(module, obj, anchor.name if anchor.name != obj else None)
        return _UsesFix(
            applicability, title, tuple(changes), own_imports, tuple(imports), (removed,) if removed else ()
        ).build
