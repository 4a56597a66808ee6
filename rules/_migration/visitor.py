"""The one visitor every migration rule is: it reads its table's rows for the rule's `code`.

A row's `kind` says what is looked for (a function's uses, a module's imports, code that sets an
environment variable, one argument's value), its versions whether it applies to the user's release
(`--target-version`), its `transform` how the fix rewrites, its `params` which arguments carry over.
The table's header says how findings are placed (`findings`), whether version-guarded code is left
alone (`guards`), which files it reads (`files`) and how a fix names a new module (`aliases`).
Findings are decided on `ast`; fixes are decided here and built on libcst (`fixes.py`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from functools import cached_property, partial
from typing import ClassVar

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import dotted_name, has_star_args, keyword, last_part, positional, string_value
from xlalint.diagnostics import Applicability, ImportRequest
from xlalint.rule import FixBuilder, Rule

from .fixes import (
    Carry,
    UsesFix,
    fix_drop_argument,
    fix_from_import,
    fix_from_module,
    fix_import,
    fix_value,
    rewrite,
    use_change,
)
from .guards import in_compat_fallback, own_implementation
from .resolve import (
    UNKNOWN,
    calls_init_process_group,
    carries,
    literal_values,
    module_node,
    placed,
    qualified_names,
    reaching,
    references,
    relevant,
    removed_import,
    runs_with_stand_in,
    spell,
    spell_module,
    string_names,
)
from .table import CONFIGURED, Migration, Table

# How code sets an environment variable (reads are never reported).
_ENV_SETTERS = {"setdefault", "putenv", "update"}
_SETTERS = {"os.environ.setdefault", "os.putenv"}


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


class MigrationVisitor(Rule):
    """Reports the rows of `table` whose code is the rule's; the base of every migration rule (no
    code of its own: the registry does not list it). A rule sets `table` and its `code`."""

    table: ClassVar[Table]
    ctx: FileContext

    def __init__(self, ctx: FileContext) -> None:
        super().__init__(ctx)
        profile = self.table.profile
        self.at_use = profile.findings == "at-use"
        self.moved = self.table.moved_modules
        self.aliases = dict(profile.aliases)
        target = ctx.target_version  # only moves whose replacement the user's release has
        rows = [m for m in self.table if m.code == self.code and m.applies_to(target)]
        self.functions = {m.name: m for m in rows if m.kind == "function"}
        # longest name first: `torch_xla_py.xla_model` before the catch-all `torch_xla_py`
        self.modules = sorted((m for m in rows if m.kind == "module"), key=lambda m: -len(m.name))
        self.environment = {m.name: m for m in rows if m.kind == "environment"}
        self.arguments: dict[str, list[Migration]] = {}
        for m in rows:
            if m.kind == "argument":
                self.arguments.setdefault(m.name, []).append(m)
        self.last_parts = {last_part(name) for name in self.functions}
        self.argument_last_parts = {last_part(name) for name in self.arguments}
        self.active = (profile.files == "any" or relevant(ctx)) and bool(rows)
        self.from_imports: list[tuple[ast.alias, Migration, str]] = []

    @cached_property
    def string_names(self) -> set[str]:
        return string_names(self.ctx)

    @cached_property
    def used_names(self) -> set[str]:
        return self.ctx.index.bare_names | self.string_names

    # -- uses of a function ---------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        """`xm.mark_step()`, `torch_xla.experimental.compile(f)`, where written ("at-import")."""
        if self.at_use or not self.active or node.attr not in self.last_parts:
            return
        names = qualified_names(self.ctx, node, self.moved)
        entry = next((self.functions[n] for n in sorted(names) if n in self.functions), None)
        old = dotted_name(node)  # a name chain: qualified names come from one
        if entry is None or old is None or self._excused(node, entry):
            return
        self.report(node, entry.message(old), fix=self._fix_uses([node], entry, old.partition(".")[0], None))

    def finish(self) -> None:
        if not self.active:
            return
        if self.at_use:  # each call or reference, however the function was imported
            for node, target, row, written in references(self.ctx, self.table):
                if row.code == self.code and not self._excused(node, row):
                    self.report(target, row.message(written), fix=self._rewrite(row, node, target))
            return
        # `from torch_xla.core.xla_model import xrt_world_size`: one finding on the import; its fix
        # rewrites every use and drops the import once unused
        for alias, entry, local in self.from_imports:
            uses = self._uses_of(local, entry.name)
            module, _, obj = entry.name.rpartition(".")
            removed = ImportRequest(module, obj, local if local != obj else None)
            fix = self._fix_uses(uses, entry, local, removed) if uses else None
            self.report(alias, entry.message(entry.name), fix=fix)

    # -- calls: an argument value, and environment variables set by a call -------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        if not self.active:
            return
        if self.arguments:
            for entry in self._argument_rows(node):
                self._check_argument(node, entry)
        if not self.environment:
            return
        if self.at_use:
            if self.ctx.qualified_name(node.func) in _SETTERS and positional(node):
                self._check_setting(node.args[0], None, at=node)
            return
        if last_part(dotted_name(node.func)) in _ENV_SETTERS:
            setter = qualified_names(self.ctx, node.func, self.moved)
            if setter & _SETTERS and positional(node):
                self._check_setting(node.args[0], node.args[1] if len(positional(node)) > 1 else None)
            elif "os.environ.update" in setter:
                for key, value in _update_pairs(node):
                    self._check_setting(key, value)

    # -- `os.environ["X"] = value` -----------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if not (self.active and self.environment):
            return
        for target in node.targets:
            if not isinstance(target, ast.Subscript):
                continue
            if self.at_use:
                if self.ctx.qualified_name(target.value) == "os.environ":
                    self._check_setting(target.slice, node.value, at=target)
            elif "os.environ" in qualified_names(self.ctx, target.value, self.moved):
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
            fix = partial(fix_import, alias, new, entry) if entry.applicability and new and alias.asname else None
            self.report(alias, entry.message(alias.name), fix=fix)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not self.active or node.level or node.module is None:
            return
        module = node.module
        if self.at_use:  # each name imported from a module that has a row
            for alias in node.names:
                full = f"{module}.{alias.name}"
                entry = next((m for m in self.modules if m.matches_module(full)), None)
                if entry is not None and not self._excused(node, entry):
                    self.report(alias, entry.message(full))
            return
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
                fix = partial(fix_from_import, node, new, entry) if entry.applicability and new else None
                self.report(module_node(self.ctx, node), entry.message(module), fix=fix)
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
                    fix = partial(fix_from_module, node, new, moved) if fixable and new else None
                    self.report(alias, moved.message(full), fix=fix)
            elif full in self.functions and not self._excused(node, self.functions[full]):
                self.from_imports.append((alias, self.functions[full], alias.asname or alias.name))
            elif entry is not None and not self._excused(node, entry):  # the package's other modules
                self.report(alias, entry.message(full))

    # -- helpers -----------------------------------------------------------------------------------------
    def _excused(self, node: ast.AST, entry: Migration) -> bool:
        if not self.table.profile.guards:
            return False
        return in_compat_fallback(self.ctx, node, entry, self.moved) or own_implementation(self.ctx, node, entry)

    def _check_setting(self, key: ast.expr | ast.keyword, value: ast.expr | None, at: ast.AST | None = None) -> None:
        """`key` (a keyword's name, or an expression naming the variable) is set to `value`; the
        finding goes on `key`, or on `at` (the statement, "at-use")."""
        if isinstance(key, ast.keyword):
            names: list = [key.arg]
        elif self.at_use:
            names = [string_value(key)]  # as written
        else:
            names = literal_values(self.ctx, key)
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            entry = self.environment.get(name)
            if entry is None or self._excused(key, entry):
                continue
            if entry.off:
                values = literal_values(self.ctx, value)
                if UNKNOWN not in values and all(v in entry.off for v in values):
                    continue  # `os.environ["XLA_USE_BF16"] = "0"`: the feature stays off, as without it
            self.report(at or key, entry.message(name))

    def _argument_rows(self, call: ast.Call) -> list[Migration]:
        """The argument rows of the function `call` calls, each once."""
        if self.at_use:
            return self.arguments.get(self.ctx.qualified_name(call.func) or "", [])
        if last_part(dotted_name(call.func)) not in self.argument_last_parts:
            return []
        found: dict[int, Migration] = {}
        for qualified in sorted(qualified_names(self.ctx, call.func, self.moved)):
            for entry in self.arguments.get(qualified, ()):
                found.setdefault(id(entry), entry)
        return list(found.values())

    def _check_argument(self, call: ast.Call, entry: Migration) -> None:
        """`call` passes `entry.argument` a value the row rejects: one of its string `values` as
        written, or (a row of `allowed` values) a literal, or a name or branch holding one, that is
        not allowed."""
        if entry.argument is None or entry.position is None:
            return  # (never: load_table requires both of an argument entry)
        kw = keyword(call, entry.argument)
        args = positional(call)
        if kw is not None:
            value: ast.expr = kw.value
        elif 0 <= entry.position < len(args):
            value = call.args[entry.position]
        else:
            return
        if entry.allowed is None:  # a row of `values`: the literal is replaced
            written = string_value(value)
            if written not in entry.values or self._excused(call, entry):
                return
            value_fix: FixBuilder | None = None
            if entry.applicability is not None:
                value_fix = partial(fix_value, call, value, entry)
            self.report(value, entry.message(dotted_name(call.func) or entry.name, written), fix=value_fix)
            return
        # compared with `==`, as torch_xla compares (`nprocs == 1`: `True` and `1.0` pass)
        values = literal_values(self.ctx, value)
        bad = [v for v in values if v is not UNKNOWN and v not in entry.allowed]
        # a value the file does not show (`nprocs=args.nprocs`) is passed to be configured: it works
        # only when configured to an allowed value, so it is reported with that condition
        if not (bad or UNKNOWN in values) or self._excused(call, entry):
            return
        code = self.ctx.code(value)
        resolved = (None if code == repr(bad[0]) else repr(bad[0])) if bad else CONFIGURED
        fix: FixBuilder | None = None
        if (
            entry.applicability is not None
            and not has_star_args(call)
            and (kw is not None or entry.position == len(call.args) - 1)
        ):
            index = len(call.args) + call.keywords.index(kw) if kw is not None else entry.position
            fix = partial(fix_drop_argument, call, index, f"Drop `{entry.argument}={code}`", entry)
        # at the callee, where the call starts: the argument may sit lines below it
        self.report(
            call.func, entry.message(dotted_name(call.func) or self.ctx.code(call.func), code, resolved), fix=fix
        )

    def _uses_of(self, local: str, qualified: str) -> list[ast.Name]:
        """The names that refer to the import `local` of `qualified`; none when `local` is also a
        definition, parameter or keyword (no call or decorator the fix could rewrite)."""
        binding = self.ctx.index.imports.get(local)
        if binding is None or binding.qualified != qualified or local in self.string_names:
            return []
        return self.ctx.index.name_uses.get(local, [])

    # -- fixes ------------------------------------------------------------------------------------------
    def _fix_uses(
        self, refs: Sequence[ast.expr], entry: Migration, beside: str | None, removed: ImportRequest | None
    ) -> FixBuilder | None:
        """The fix renaming `refs` (uses of `entry`, "at-import"), decided here, built on libcst;
        None when a use can't be rewritten."""
        if entry.applicability is None or not entry.replacement:
            return None
        ctx = self.ctx
        if beside in ctx.lazy_module_names and any(reaching(ctx, beside, ref) is None for ref in refs):
            return None  # `xm = _import_xla()`: a new top-level import would make the optional torch_xla required
        changes: list[tuple[ast.expr, list[Carry] | None, str]] = []
        own_imports: dict[ast.stmt, list[ImportRequest]] = {}
        imports: list[ImportRequest] = []
        spelled = None
        for ref in refs:
            spelling = spell(ctx, self.used_names, entry.replacement, ref, self.aliases)
            change = use_change(ctx, ref, entry)
            if spelling is None or change is None:
                return None
            spelled, needed = spelling
            changes.append((*change, spelled))
            requests, anchor_statement = placed(ctx, needed, beside, ref)
            if anchor_statement is not None:
                own_imports[anchor_statement] = needed
            imports.extend(r for r in requests if r not in imports)
        anchor = reaching(ctx, beside, refs[0]) if beside and refs else None
        applicability, title = entry.applicability, f"Use `{spelled}`"
        if (
            applicability is Applicability.SAFE
            and anchor is not None
            and any(runs_with_stand_in(ctx, anchor, ref, self.table.packages) for ref in refs)
        ):
            applicability, title = Applicability.UNSAFE, f"{title} (`{beside}` has a stand-in without {entry.package})"
        if removed is None and anchor is not None:
            if isinstance(anchor.statement, ast.Import):
                if anchor.name != anchor.qualified.split(".")[0]:  # `import a.b as x`; never `import a.b`
                    removed = ImportRequest(anchor.qualified, asname=anchor.name)
            else:
                module, _, obj = anchor.qualified.rpartition(".")
                removed = ImportRequest(module, obj, anchor.name if anchor.name != obj else None)
        return UsesFix(
            applicability, title, tuple(changes), own_imports, tuple(imports), (removed,) if removed else ()
        ).build

    def _rewrite(self, row: Migration, ref: ast.expr, target: ast.AST) -> FixBuilder | None:
        """The fix rewriting one call (or decorator) `target` of `row`'s function ("at-use")."""
        if row.applicability is None:
            return None
        ctx = self.ctx
        decorator = ctx.index.field_of(ref) == "decorator_list"
        if not isinstance(target, ast.Call) and not (decorator and row.transform == "compile"):
            return None  # a reference (`f = xm.get_ordinal`): the arguments it will get are unknown
        if isinstance(target, ast.Call) and (has_star_args(target) or not carries(target, row)):
            return None
        spelled = self._spellings(row, ref)
        if spelled is None:
            return None
        applicability = row.applicability
        if row.needs_process_group and not calls_init_process_group(ctx):
            applicability = Applicability.UNSAFE
        if row.transform == "unwrap" and not (isinstance(target, ast.Call) and positional(target)):
            return None
        return partial(rewrite, row, target, spelled, applicability, removed_import(ctx, ref))

    def _spellings(self, row: Migration, ref: ast.expr) -> dict[str, str] | None:
        """The spellings of `torch` (and `torch.distributed` / `torch.accelerator`) a rewrite writes,
        with the imports they need (under the key `imports`)."""
        needed = ["torch"] if row.transform in ("device", "compile", "autocast", "save") else []
        if row.transform == "rename" and row.replacement:
            needed.append(row.replacement.rpartition(".")[0])
        found: dict = {"imports": []}
        for module in needed:
            spelling = spell_module(self.ctx, module, ref)
            if spelling is None:
                return None
            found[module] = spelling[0]
            found["imports"] += [r for r in spelling[1] if r not in found["imports"]]
        return found
