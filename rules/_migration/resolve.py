"""How the migration engine reads a file: qualified names through its imports, the literal values an
argument can hold, and how a fix spells a new name there (reusing the file's imports, TorchFix's
`call_with_name_changes`). Decided on `ast`; nothing here loads libcst."""

from __future__ import annotations

import ast
import io
import itertools
import tokenize
from collections.abc import Sequence

from xlalint.analysis.context import FileContext
from xlalint.analysis.index import SCOPES, ImportBinding
from xlalint.analysis.names import dotted_name
from xlalint.diagnostics import ImportRequest

from .table import Migration, Table

# --------------------------------------------------------------------------------------------------
# Qualified names and literal values, resolved only for files that may hold a finding
# --------------------------------------------------------------------------------------------------


def qualified_names(ctx: FileContext, node: ast.expr, moved_modules: Sequence[Migration] = ()) -> set[str]:
    """What `node` names through this file's imports (`xm.mark_step` ->
    `torch_xla.core.xla_model.mark_step`), also where its module has moved since
    (`torch_xla_py.xla_model.get_ordinal` is `torch_xla.core.xla_model.get_ordinal`); empty when its
    head is not an imported name (or `xm`-style parameter)."""
    name = dotted_name(node)
    qualified = ctx.qualified_name(node) if name else None
    if not qualified or (qualified == name and name.partition(".")[0] not in ctx.index.imports):
        return set()  # the head is no import (nor an `xm`-style module parameter)
    moved = next((m.moved(qualified) for m in moved_modules if m.matches_module(qualified)), None)
    return {qualified, moved} if moved else {qualified}


UNKNOWN = object()  # a value `literal_values` can't tell


def literal_values(ctx: FileContext, node: ast.expr | None, seen: frozenset = frozenset()) -> list:
    """The values `node` may have, as far as literals in this file tell: a literal itself, both
    branches of `a if c else b`, what reaches a name (`n = 8; f(n)`); `UNKNOWN` for anything else."""
    if node is None:
        return [UNKNOWN]
    try:
        return [ast.literal_eval(node)]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.IfExp):
        return [*literal_values(ctx, node.body, seen), *literal_values(ctx, node.orelse, seen)]
    if isinstance(node, ast.Call) and dotted_name(node.func) == "str" and len(node.args) == 1 and not node.keywords:
        return [str(v) if v is not UNKNOWN else UNKNOWN for v in literal_values(ctx, node.args[0], seen)]
    if isinstance(node, ast.Name) and node.id not in seen:
        values = ctx.assigned_values(node)
        if values:
            return [v for value in values for v in literal_values(ctx, value, seen | {node.id})]
    return [UNKNOWN]


def relevant(ctx: FileContext) -> bool:
    """The file imports torch_xla/torchax, or the pre-2020 `torch_xla_py` package."""
    return ctx.uses_xla or any(
        b.qualified == "torch_xla_py" or b.qualified.startswith("torch_xla_py.") for b in ctx.index.imports.values()
    )


def module_node(ctx: FileContext, node: ast.ImportFrom) -> ast.AST:
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
# Spelling the replacement in the user's file
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


def string_names(ctx: FileContext) -> set[str]:
    found: set[str] = set()
    for kind, field in _STRING_NAMES.items():
        for node in ctx.index.by_type.get(kind, ()):
            value = getattr(node, field)
            if isinstance(value, list):
                found.update(value)
            elif value:
                found.add(value)
    return found


def reaching(ctx: FileContext, name: str, use: ast.AST) -> ImportBinding | None:
    """The import that binds `name` where `use` is: the innermost scope that imports it, the last
    such import before `use` (or the last one, for conditional imports after it)."""
    order = ctx.index.order
    for scope in (a for a in ctx.index.ancestors(use) if isinstance(a, SCOPES)):
        candidates = [b for b in ctx.index.import_bindings if b.name == name and b.scope is scope]
        if candidates:
            before = [b for b in candidates if order[b.statement] < order[use]]
            return (before or candidates)[-1]
    return None


def runs_with_stand_in(ctx: FileContext, anchor: ImportBinding, use: ast.AST, packages: frozenset[str]) -> bool:
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
            if module.split(".")[0] in packages:
                continue  # the import itself, or another spelling of a module of the table's packages
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


def spell(
    ctx: FileContext, used: set[str], target: str, use: ast.AST, aliases: dict[str, str]
) -> tuple[str, list[ImportRequest]] | None:
    """How the fixed code names `target` at `use`, reusing the file's imports (TorchFix's
    `call_with_name_changes`), and the imports that make it valid. None when no spelling is safe.
    `used`: the identifiers the file uses or binds; `aliases`: the conventional names of new modules."""
    module, _, obj = target.rpartition(".")
    for binding in ctx.index.import_bindings:  # an import of the target or of its module that reaches `use`
        if binding.qualified in (target, module) and reaching(ctx, binding.name, use) is binding:
            return (binding.name if binding.qualified == target else f"{binding.name}.{obj}"), []
    alias = aliases.get(module)
    if alias and alias not in used:
        return f"{alias}.{obj}", [ImportRequest(module, asname=alias)]
    top = module.split(".")[0]
    bound = reaching(ctx, top, use)
    if top not in used or (bound is not None and bound.name == bound.qualified == top):
        return target, ([] if bound is not None and module == top else [ImportRequest(module)])
    return None


def placed(ctx: FileContext, requests: list[ImportRequest], beside: str | None, use: ast.AST):
    """Where the new imports go: next to the import that binds `beside` at `use` (the old module), so a
    guarded (try/except ImportError) or function-local import stays guarded. Returns the requests for
    `apply_fixes`, and the import statement to place them after ourselves (or None)."""
    if not requests:
        return [], None
    anchor = reaching(ctx, beside, use) if beside else None
    if anchor is None:
        return requests, None
    indexed = ctx.index.imports.get(beside) if beside else None
    if indexed is not None and indexed.statement is anchor.statement:
        return [ImportRequest(r.module, r.obj, r.asname, beside=beside) for r in requests], None
    return [], anchor.statement  # the engine places `beside` imports next to the last import of that name only


def spell_module(ctx: FileContext, module: str, use: ast.AST) -> tuple[str, list[ImportRequest]] | None:
    """How fixed code names `module` (`torch`, `torch.distributed`) at `use`, and the import it needs.

    An import of the module itself (`import torch.distributed as dist`) is reused; else the dotted
    name, with `import <module>` when `torch` is not bound to something else. None: no safe spelling.
    """
    for binding in ctx.index.import_bindings:
        if binding.qualified == module and ctx.index.imports.get(binding.name) is binding:
            return binding.name, []
    top = module.split(".")[0]
    bound = ctx.index.imports.get(top)
    if bound is not None and bound.qualified != top:
        return None  # `torch` names something else here
    if bound is None and (top in ctx.index.bare_names or any(top in names for names in ctx.index.assignments.values())):
        return None
    return module, ([] if bound is not None and module == top else [ImportRequest(module)])


# --------------------------------------------------------------------------------------------------
# Each use, for a table whose findings are "at-use"
# --------------------------------------------------------------------------------------------------


def references(ctx: FileContext, table: Table) -> list[tuple[ast.expr, ast.AST, Migration, str]]:
    """Every reference to a function row of `table` in the file (resolved once for all its rules):
    (the reference, what is reported: its call or itself, the row, the name as written)."""
    key = f"_migration_references:{id(table)}"
    cached = ctx.__dict__.get(key)
    if cached is not None:
        return cached
    found: list[tuple[ast.expr, ast.AST, Migration, str]] = []
    names = [n for n in ctx.index.by_type.get(ast.Name, ()) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    for node in (*ctx.index.by_type.get(ast.Attribute, ()), *names):
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute):
            continue  # the longest chain is the reference
        qualified = ctx.qualified_name(node)
        row = table.functions.get(qualified or "")
        if row is None or (isinstance(node, ast.Name) and node.id == qualified):
            continue  # a bare name the file defines itself
        if not isinstance(node, (ast.Attribute, ast.Name)) or qualified is None:
            continue  # (never: by_type's Attributes, and a name that has a row)
        target = parent if isinstance(parent, ast.Call) and parent.func is node else node
        found.append((node, target, row, dotted_name(node) or qualified))
    found.sort(key=lambda item: ctx.index.order.get(item[0], 0))
    ctx.__dict__[key] = found
    return found


def carries(call: ast.Call, row: Migration) -> bool:
    """Every argument of `call` is one the replacement takes (`params`, by position or keyword)."""
    if row.params is None:
        return True
    if row.transform == "device":
        return not call.args and not call.keywords
    names = [old for old, _ in row.params]
    return len(call.args) <= len(names) and all(k.arg in names for k in call.keywords)


def calls_init_process_group(ctx: FileContext) -> bool:
    return any(
        ctx.qualified_name(c.func)
        in ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
        for c in ctx.index.calls
    )


def removed_import(ctx: FileContext, ref: ast.expr) -> ImportRequest | None:
    """The import `ref` goes through, to drop once no use is left."""
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
