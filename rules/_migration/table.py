"""One schema for every migration table: its header (`[table]`), its rows (`[[migration]]`), their checks.

A table is data (TorchFix's `deprecated_symbols.yaml`): each row names an old API (a function, a
module, an environment variable, or one argument of a call), what replaces it, since when, and the
fix's applicability; `MigrationVisitor` reads any table. What differs between two tables is in their
header, never in code:

    [table]
    codes = { removed = "XLA601", deprecated = "XLA602" }  # a row's code from its `status` ...
    code_prefix = "XLA6"          # ... or from its own `code`, which starts with this
    required = ["status", "reference"]  # keys every row must have, beyond name, fix and note
    files = "xla"                 # "xla": only files that import torch_xla / torchax / torch_xla_py;
                                  # "any": the rule's own `applies` decides
    guards = true                 # code on the old side of a version check or fallback is left alone
    findings = "at-import"        # "at-import": an imported function is reported once, at its import
                                  # (its fix rewrites every use), an attribute where written, a setting
                                  # at the variable's name; "at-use": every call (or reference) is a
                                  # finding of its own, a setting is reported on its statement
    replacements_under = []       # a fix may write only names under these prefixes ([]: any); such a
                                  # move must list its `params` (the new signature is another project's)
    aliases = { "torch_xla.runtime" = "xr" }  # how a fix names a module the file has not imported
    package = "torch_xla"         # whose releases the rows' versions are (named in messages)

Any problem raises `MigrationTableError`, one line naming the table, the row and the key.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from xlalint.config import parse_version
from xlalint.diagnostics import Applicability

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STATUSES = ("removed", "deprecated")
FIXES = ("safe", "unsafe", "none")
KINDS = ("function", "module", "environment", "argument")
FINDINGS = ("at-import", "at-use")
FILES = ("xla", "any")
# How a fix rewrites a use (`transform`; a function row with a fix defaults to `rename`, an argument
# row to `drop`, or to `value` when it names the literal `to` write):
#   rename   -> `replacement(<carried arguments>)`; `params` says which carry over
#   device   -> `torch.device("tpu")` (a call without arguments)
#   unwrap   -> the call's first argument (`MpDeviceLoader(loader, dev)` -> `loader`)
#   compile  -> `torch.compile(f, backend="tpu")` / `@torch.compile(backend="tpu")`
#   autocast -> `torch.autocast("tpu", ...)`, with `dtype=torch.bfloat16` when none is given
#   save     -> `torch.save(<the object with its tensors moved to the CPU>, path)`
#   value    -> (argument) the argument's literal becomes `to`; `drop` keywords go with it
#   drop     -> (argument) the argument goes
TRANSFORMS = ("rename", "device", "unwrap", "compile", "autocast", "save", "value", "drop")
FUNCTION_TRANSFORMS = ("rename", "device", "unwrap", "compile", "autocast", "save")
ARGUMENT_TRANSFORMS = ("value", "drop")
CONFIGURED = "<configured>"  # an argument value the file does not show

REQUIRED = ("name", "fix", "note")
OPTIONAL = (
    "code",
    "status",
    "reference",
    "checked",
    "kind",
    "replacement",
    "deprecated_in",
    "removed_in",
    "replacement_since",
    "transform",
    "params",
    "params_since",
    "needs_process_group",
    "argument",
    "position",
    "allowed",
    "values",
    "to",
    "drop",
    "off",
)
# Keys only some kinds take (every other optional key fits every kind).
KIND_KEYS = {
    "params": ("function",),
    "params_since": ("function",),
    "needs_process_group": ("function",),
    "argument": ("argument",),
    "position": ("argument",),
    "allowed": ("argument",),
    "values": ("argument",),
    "to": ("argument",),
    "drop": ("argument",),
    "off": ("environment",),
}
NOT_STRINGS = ("params", "params_since", "needs_process_group", "position", "allowed", "values", "drop", "off")
HEADER = ("codes", "code_prefix", "required", "files", "guards", "findings", "replacements_under", "aliases", "package")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV = re.compile(r"[A-Z_][A-Z0-9_]*")
_VERSION = re.compile(r"\d+\.\d+(\.\d+)?")
_PARAM = re.compile(r"([A-Za-z_]\w*)(:([A-Za-z_]\w*))?")


class MigrationTableError(ValueError):
    """A migration table is malformed (raised at import time, naming the table, the row and the key)."""


@dataclass(frozen=True)
class Profile:
    """A table's header: what its rows share (see the module's docstring)."""

    codes: tuple[tuple[str, str], ...] = ()
    code_prefix: str = ""
    required: tuple[str, ...] = ()
    files: str = "xla"
    guards: bool = True
    findings: str = "at-import"
    replacements_under: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    package: str = "torch_xla"


@dataclass(frozen=True)
class Migration:
    """One row of a table."""

    code: str
    name: str
    fix: str
    note: str
    status: str | None = None  # "removed" | "deprecated": the message names the release
    reference: str | None = None  # a URL: where the move is announced
    checked: str | None = None  # where the target was checked to work
    kind: str = "function"
    replacement: str | None = None
    deprecated_in: str | None = None
    removed_in: str | None = None
    replacement_since: str | None = None
    transform: str | None = None  # how the fix rewrites a use (TRANSFORMS); None without a fix
    params: tuple[tuple[str, str], ...] | None = None  # (old keyword, new keyword); None: every argument carries
    params_since: tuple[tuple[str, str], ...] = ()  # (new keyword, first release whose replacement takes it)
    needs_process_group: bool = False  # the fix is safe only in a file that calls init_process_group
    argument: str | None = None  # kind "argument": the parameter whose value is checked ...
    position: int | None = None  # ... its positional index (-1: keyword only) ...
    allowed: tuple[object, ...] | None = None  # ... the values it may still take (any other is reported) ...
    values: tuple[str, ...] = ()  # ... or the string literals that are reported ...
    to: str | None = None  # ... and the literal the fix writes instead (transform "value")
    drop: tuple[tuple[str, str], ...] = ()  # keyword = literal pairs the `value` fix drops with it
    off: tuple[str, ...] = ()  # kind "environment": values that leave the variable's feature off
    package: str = "torch_xla"  # the table's `package`: whose releases the versions are

    @property
    def applicability(self) -> Applicability | None:
        return {"safe": Applicability.SAFE, "unsafe": Applicability.UNSAFE}.get(self.fix)

    def matches_module(self, qualified: str) -> bool:
        return qualified == self.name or qualified.startswith(self.name + ".")

    def applies_to(self, target: tuple[int, ...] | None) -> bool:
        """Worth reporting to code that must run on release `target` (None: the newest): the
        replacement exists there (never suggest what the user's version lacks); an entry without one
        once the old name is deprecated or gone there. A row without versions always applies."""
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

    # -- messages: a row with a `status` names its release, one without says whose API it is ---------
    def message(self, old: str, value: str | None = None, resolved: str | None = None) -> str:
        """The finding's message for `old` as written (for an argument entry, `value` is the
        argument's code, or its string for a row of `values`, and `resolved` the literal it can hold,
        when that is not what is written)."""
        if self.status is None:
            return self._platform_message(old, value)
        if self.kind == "environment":
            return self._environment_message()
        if self.kind == "argument":
            return self._argument_message(old, value, resolved)
        call = "()" if self.kind == "function" else ""
        new = f"`{self.replacement}{call}`" if self.replacement else None
        if self.status == "removed":
            head = f"`{old}{call}` was removed in {self.package} {self.removed_in}{self._deprecated_since()}"
            head += f": use {new}" if new else ""
        elif self.deprecated_in:
            head = f"`{old}{call}` is deprecated since {self.package} {self.deprecated_in}"
            if self.removed_in:
                head += f" and removed in {self.removed_in}"
            head += f": use {new}" if new else ""
        else:
            head = f"`{old}{call}` is superseded by {new} ({self.package} {self.replacement_since}+)"
        return head  # the note is in `xlalint explain` (the table): a message is one short sentence

    def _environment_message(self) -> str:
        if self.status == "removed":
            head = (
                f"setting `{self.name}` has no effect since {self.package} {self.removed_in}{self._deprecated_since()}"
            )
        else:
            head = f"the environment variable `{self.name}` is deprecated since {self.package} {self.deprecated_in}"
        if self.replacement:
            head += (
                f": call `{self.replacement}()` instead"
                if "." in self.replacement
                else f": set `{self.replacement}` instead"
            )
        return head

    def _argument_message(self, old: str, value: str | None, resolved: str | None) -> str:
        if resolved is CONFIGURED:
            passed = f"`{self.argument}={value}` unless it is " + " or ".join(repr(v) for v in self.allowed or ())
        else:
            passed = f"`{self.argument}={value}`" + (f" (which can be `{resolved}`)" if resolved else "")
        if self.status == "removed":
            return (
                f"`{old}()` no longer accepts {passed} since {self.package} {self.removed_in}{self._deprecated_since()}"
            )
        return f"{passed} in `{old}()` is deprecated since {self.package} {self.deprecated_in}"

    def _deprecated_since(self) -> str:
        return f" (deprecated in {self.deprecated_in})" if self.deprecated_in else ""

    def _platform_message(self, old: str, value: str | None) -> str:
        """A move off a platform (worded for TorchTPU, the one such table): whose API `old` is, and
        the note's first clause when it fits."""
        if self.kind == "argument":
            head = f"`{self.argument}={value!r}` in `{old}()` is {self.package}'s"
        elif self.kind == "environment":
            head = f"setting `{old}` is for {self.package}"
        elif self.kind == "module":
            head = f"`{old}` has no TorchTPU counterpart"
        else:
            head = f"`{old}()` is {'early TorchTPU' if self.name.startswith('torch_tpu.') else self.package}'s"
        return f"{head}: {short_note(self.note, len(head) + 2)}".rstrip(": ")


MAX_MESSAGE = 160  # a finding's message is one short sentence; the whole note is in the rule's docs


def short_note(note: str, used: int) -> str:
    """The note's first clause (before `; `) when it fits a message, else nothing (the docs have it all)."""
    clause = note.split("; ")[0]
    return clause if used + len(clause) <= MAX_MESSAGE else ""


@dataclass(frozen=True, eq=False)  # a table is itself (hashable by identity), not its fields
class Table:
    """A loaded table: its rows (iterating a table gives them) and its header."""

    source: str
    rows: tuple[Migration, ...]
    profile: Profile
    # module moves, longest name first, to see through an old import to today's name
    moved_modules: tuple[Migration, ...] = field(init=False)
    functions: dict[str, Migration] = field(init=False, repr=False)  # the function rows by name
    packages: frozenset[str] = field(init=False)  # the top-level packages the rows' names are in

    def __post_init__(self) -> None:
        moved = sorted((m for m in self.rows if m.kind == "module" and m.replacement), key=lambda m: -len(m.name))
        object.__setattr__(self, "moved_modules", tuple(moved))
        object.__setattr__(self, "functions", {m.name: m for m in self.rows if m.kind == "function"})
        object.__setattr__(
            self, "packages", frozenset(m.name.split(".")[0] for m in self.rows if m.kind != "environment")
        )

    def __iter__(self) -> Iterator[Migration]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def load_table(text: str, source: str, profile: Profile | None = None) -> Table:
    """Parse and validate a table; its `[table]` header, or `profile` for a text without one. Any
    problem raises `MigrationTableError` naming the table and the row."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MigrationTableError(f"{source}: not valid TOML: {exc}") from None
    if set(data) - {"migration", "table"}:
        raise MigrationTableError(
            f"{source}: unknown top-level keys {sorted(set(data) - {'migration', 'table'})} "
            "(a table has a [table] header and [[migration]] rows)"
        )
    if "table" in data:
        profile = _header(data["table"], source)
    elif profile is None:
        raise MigrationTableError(f"{source}: no [table] header (what the rows share: codes, files, findings)")
    rows = data.get("migration", [])
    if not isinstance(rows, list) or not rows:
        raise MigrationTableError(f"{source}: expected a list of [[migration]] tables")
    seen: set[tuple] = set()
    entries = tuple(
        _validate(row, f"{source}: [[migration]] #{i + 1} ({row.get('name', '?')})", seen, profile)
        for i, row in enumerate(rows)
    )
    return Table(source, entries, profile)


def _header(raw: object, source: str) -> Profile:
    def fail(problem: str) -> None:
        raise MigrationTableError(f"{source}: [table]: {problem}")

    if not isinstance(raw, dict):
        fail("must be a table")
        raise AssertionError  # (fail raised)
    unknown = set(raw) - set(HEADER)
    if unknown:
        fail(f"unknown keys {sorted(unknown)} (allowed: {', '.join(HEADER)})")
    codes = raw.get("codes", {})
    if not isinstance(codes, dict) or not all(k in STATUSES and isinstance(v, str) for k, v in codes.items()):
        fail(f"`codes` must map a status ({' or '.join(STATUSES)}) to a rule's code, got {codes!r}")
    for key in ("required", "replacements_under"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            fail(f"`{key}` must be a list of strings, got {value!r}")
    if not set(raw.get("required", ())) <= set(OPTIONAL):
        fail(f"`required` names keys a row may have ({', '.join(OPTIONAL)}), got {raw['required']!r}")
    aliases = raw.get("aliases", {})
    if not isinstance(aliases, dict) or not all(
        _DOTTED.fullmatch(k) and isinstance(v, str) and v.isidentifier() for k, v in aliases.items()
    ):
        fail(f"`aliases` must map a dotted module name to an identifier, got {aliases!r}")
    for key, choices in (("files", FILES), ("findings", FINDINGS)):
        if raw.get(key, choices[0]) not in choices:
            fail(f"`{key}` must be one of {choices}, got {raw[key]!r}")
    if not isinstance(raw.get("guards", True), bool):
        fail("`guards` must be true or false")
    prefix = raw.get("code_prefix", "")
    if not isinstance(prefix, str) or not re.fullmatch(r"([A-Z]{3}\d{0,2})?", prefix):
        fail(f"`code_prefix` must be the start of a code like XLA6 or TPU1, got {prefix!r}")
    if not isinstance(raw.get("package", "torch_xla"), str) or not _DOTTED.fullmatch(raw.get("package", "torch_xla")):
        fail(f"`package` must be a package name, got {raw['package']!r}")
    if not codes and not prefix:
        fail("needs `codes` (by status) or `code_prefix` (each row names its `code`)")
    return Profile(
        codes=tuple(codes.items()),
        code_prefix=prefix,
        required=tuple(raw.get("required", ())),
        files=raw.get("files", "xla"),
        guards=raw.get("guards", True),
        findings=raw.get("findings", "at-import"),
        replacements_under=tuple(raw.get("replacements_under", ())),
        aliases=tuple(aliases.items()),
        package=raw.get("package", "torch_xla"),
    )


def _validate(row: dict, where: str, seen: set[tuple], profile: Profile) -> Migration:
    def fail(problem: str) -> None:
        raise MigrationTableError(f"{where}: {problem}")

    unknown = set(row) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        fail(f"unknown keys {sorted(unknown)} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    missing = [key for key in (*REQUIRED, *profile.required) if key not in row]
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
    if kind != "environment" and not _DOTTED.fullmatch(row["name"]):
        fail(f"`name` must be a dotted Python name, got {row['name']!r}")
    if "replacement" in row and not _DOTTED.fullmatch(row["replacement"]):
        fail(f"`replacement` must be a dotted Python name, got {row['replacement']!r}")
    namespace = "environment" if kind == "environment" else "python"
    if (namespace, row["name"], row.get("argument")) in seen:
        fail("duplicate name")
    seen.add((namespace, row["name"], row.get("argument")))
    if "status" in row and row["status"] not in STATUSES:
        fail(f"`status` must be one of {STATUSES}, got {row['status']!r}")
    if row["fix"] not in FIXES:
        fail(f"`fix` must be one of {FIXES}, got {row['fix']!r}")
    code = _code(row, profile, fail)
    for key in ("deprecated_in", "removed_in", "replacement_since"):
        if key in row and not _VERSION.fullmatch(row[key]):
            fail(f"`{key}` must be a version like 2.7, got {row[key]!r}")
    if row.get("status") == "removed" and "removed_in" not in row:
        fail("a removed API needs `removed_in`")
    if row.get("status") == "deprecated" and not ("deprecated_in" in row or "replacement_since" in row):
        fail("a deprecated API needs `deprecated_in` (or `replacement_since` when it is only superseded)")
    if "reference" in row and not row["reference"].startswith(("https://", "http://")):
        fail(f"`reference` must be a URL, got {row['reference']!r}")
    if "needs_process_group" in row and not isinstance(row["needs_process_group"], bool):
        fail("`needs_process_group` must be true or false")
    extra: dict = {"code": code, "package": profile.package}
    if kind == "environment":
        extra["off"] = _validate_environment(row, fail)
    elif kind == "argument":
        extra.update(_validate_argument(row, fail))
    else:
        extra["transform"] = _validate_rewrite(row, kind, profile, fail)
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


def _code(row: dict, profile: Profile, fail: Callable[[str], None]) -> str:
    """The row's rule: its own `code` (starting with the table's `code_prefix`), else its status's."""
    if "code" in row:
        prefix = profile.code_prefix
        if not re.fullmatch(re.escape(prefix) + r"\d" * (6 - len(prefix)), row["code"]):
            fail(f"`code` must be a {prefix}{'x' * (6 - len(prefix))} code, got {row['code']!r}")
        return row["code"]
    code = dict(profile.codes).get(row.get("status", ""))
    if code is None:
        fail("needs a `code`" + (" or a `status` (the table's `codes` map it to one)" if profile.codes else ""))
        raise AssertionError  # (fail raised)
    return code


def _validate_rewrite(row: dict, kind: str, profile: Profile, fail: Callable[[str], None]) -> str | None:
    """A function's or module's fix: `transform` (default `rename`), and what it needs."""
    transform = row.get("transform")
    if row["fix"] == "none":
        if transform is not None:
            fail("a row without a fix takes no `transform`")
        return None
    if kind == "module":
        if transform is not None:
            fail("a module row takes no `transform` (its fix rewrites the import)")
        if "replacement" not in row:
            fail("a fix needs a `replacement`")
        return None
    transform = transform or "rename"
    if transform not in FUNCTION_TRANSFORMS:
        fail(f"`transform` must be one of {FUNCTION_TRANSFORMS}, got {transform!r}")
    if transform == "rename":
        replacement = row.get("replacement")
        if replacement is None:
            fail("a fix needs a `replacement`")
        under = profile.replacements_under
        if under and not str(replacement).startswith(under):
            fail(f"`replacement` must name a function under {' or '.join(under)}, got {replacement!r}")
    if profile.replacements_under and transform in ("rename", "autocast", "compile", "save") and "params" not in row:
        fail(f"transform {transform!r} needs `params` (the new signature is another project's)")
    return transform


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
    if "transform" in row:
        fail("an environment entry takes no `transform`")
    off = row.get("off", [])
    if not isinstance(off, list) or not all(isinstance(v, str) for v in off):
        fail(f"`off` must be a list of strings, got {off!r}")
    return tuple(off)


def _validate_argument(row: dict, fail: Callable[[str], None]) -> dict:
    """One argument of a function: its keyword, its position, and the literal values still `allowed`
    (the fix drops the argument) or the string `values` reported (the fix writes `to` instead)."""
    for key in ("argument", "position"):
        if key not in row:
            fail(f"an argument entry needs `{key}`")
    if ("allowed" in row) == ("values" in row):
        fail("an argument entry needs `allowed` (the literals it may still take) or `values` (those reported)")
    if not isinstance(row["argument"], str) or not row["argument"].isidentifier():
        fail(f"`argument` must be a parameter name, got {row['argument']!r}")
    position = row["position"]
    if type(position) is not int or position < -1:
        fail(
            "`position` must be a non-negative integer (the parameter's positional index), or -1 for a "
            f"keyword-only parameter, got {position!r}"
        )
    if "replacement" in row:
        fail("an argument entry has no `replacement` (its fix drops the argument, or writes `to`)")
    found: dict = {"argument": row["argument"], "position": position}
    if "allowed" in row:
        raw = row["allowed"]
        if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
            fail(f"`allowed` must be a non-empty list of Python literals written as strings, got {raw!r}")
        allowed = []
        for literal in raw:
            try:
                allowed.append(ast.literal_eval(literal))
            except (ValueError, SyntaxError):
                fail(f'`allowed` must hold Python literals such as "None" or "1", got {literal!r}')
        found["allowed"] = tuple(allowed)
    else:
        raw = row["values"]
        if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
            fail(f"`values` must be a non-empty list of strings, got {raw!r}")
        found["values"] = tuple(raw)
    transform = row.get("transform")
    if row["fix"] == "none":
        if transform is not None:
            fail("a row without a fix takes no `transform`")
    else:
        transform = transform or ("value" if "to" in row else "drop")
        if transform not in ARGUMENT_TRANSFORMS:
            fail(f"`transform` of an argument must be one of {ARGUMENT_TRANSFORMS}, got {transform!r}")
    found["transform"] = transform
    if transform == "value":
        try:
            if not isinstance(ast.literal_eval(row.get("to", "")), str):
                raise ValueError
        except (ValueError, SyntaxError):
            fail(f"`to` must be a string literal such as '\"tpu\"', got {row.get('to')!r}")
    elif "to" in row or "drop" in row:
        fail('`to` and `drop` are for transform "value"')
    drop = row.get("drop", {})
    if not isinstance(drop, dict) or not all(isinstance(v, str) for v in drop.values()):
        fail(f"`drop` must map keywords to the string values dropped with the argument, got {drop!r}")
    found["drop"] = tuple(drop.items())
    return found
