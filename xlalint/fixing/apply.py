"""Applying fixes on the tree: node replacements in one pass, then the imports they need."""

from __future__ import annotations

import difflib
import re

import libcst as cst

from ..diagnostics import Edit, Fix, ImportRequest, Location
from .context import CstContext
from .cst_names import dotted_name


class _ReplaceNodes(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, object]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_visit(self, node: cst.CSTNode) -> bool:
        # don't visit children of a node we are about to replace
        return id(node) not in self.replacements and super().on_visit(node)

    def on_leave(self, original_node, updated_node):
        replacement = self.replacements.get(id(original_node))
        if replacement is None:
            return super().on_leave(original_node, updated_node)
        return replacement


def import_binding_name(request: ImportRequest) -> str:
    if request.asname:
        return request.asname
    return request.obj if request.obj else request.module.split(".")[0]


def _import_line(request: ImportRequest, module: cst.Module) -> cst.SimpleStatementLine:
    alias = f" as {request.asname}" if request.asname else ""
    code = f"from {request.module} import {request.obj}{alias}" if request.obj else f"import {request.module}{alias}"
    return cst.parse_statement(code, config=module.config_for_parsing)


def _already_bound(ctx: CstContext, request: ImportRequest) -> bool:
    binding = ctx.index.imports.get(import_binding_name(request))
    if binding is None:
        return False
    wanted = f"{request.module}.{request.obj}" if request.obj else (
        request.module if request.asname else request.module.split(".")[0])
    return binding.qualified == wanted or (not request.obj and not request.asname and
                                            binding.qualified.split(".")[0] == wanted)


def imports_the_linter(ctx: CstContext, fix: Fix) -> bool:
    """`fix` makes the file import xlalint (`from xlalint.runtime import ...`) where it did not: code
    that ran without the linter installed would need it at run time. Never a safe fix."""
    if any(b.qualified.split(".")[0] == "xlalint" for b in ctx.index.import_bindings):
        return False  # the file already runs with xlalint installed
    return any(r.module.split(".")[0] == "xlalint" for r in fix.imports)


def apply_fixes(ctx: CstContext, fixes: list[Fix]) -> cst.Module:
    """Apply `fixes` (already free of overlaps) to the file's module and return the new module."""
    replacements: dict[int, object] = {}
    for fix in fixes:
        for key, (_, replacement) in fix.replacements.items():
            replacements[key] = replacement
    top_level: list[ImportRequest] = []
    seen: set[ImportRequest] = set()
    for fix in fixes:
        for request in fix.imports:
            if request in seen or _already_bound(ctx, request):
                continue
            seen.add(request)
            anchor = ctx.index.imports.get(request.beside) if request.beside else None
            line = ctx.parent(anchor.statement) if anchor is not None else None
            if isinstance(line, cst.SimpleStatementLine):
                # next to the old import: under the same guard (try/except ImportError), in the same
                # function, and after any set-up the file does before importing torch_xla
                previous = replacements.get(id(line))
                lines = list(previous.nodes) if isinstance(previous, cst.FlattenSentinel) else [line]
                replacements[id(line)] = cst.FlattenSentinel([*lines, _import_line(request, ctx.module)])
            else:
                top_level.append(request)
    for request in {r for fix in fixes for r in fix.removed_imports}:
        _remove_if_unused(ctx, request, replacements)
    module = ctx.module.visit(_ReplaceNodes(replacements))
    if top_level:
        from libcst.codemod import CodemodContext  # libcst's codemods cost 0.4 s to import: only here
        from libcst.codemod.visitors import AddImportsVisitor

        # AddImportsVisitor needs no metadata: visit it directly (a Codemod would deep-copy the tree)
        context = CodemodContext()
        for request in top_level:
            AddImportsVisitor.add_needed_import(context, request.module, request.obj, request.asname)
        module = module.visit(AddImportsVisitor(context))
    return module


def _remove_if_unused(ctx: CstContext, request: ImportRequest, replacements: dict[int, object]) -> None:
    """Drop the import `request` names when every use of its binding is being replaced.

    Counted on the file's index rather than with libcst's RemoveImportsVisitor, whose scope
    analysis cost seconds per fix on large files; a same-named local variable counts as a use,
    so the import is kept then (never a broken file, at worst an unused import).
    """
    local = import_binding_name(request) if request.asname or request.obj else request.module.split(".")[0]
    qualified = f"{request.module}.{request.obj}" if request.obj else (
        request.module if request.asname else request.module.split(".")[0])
    bindings = [b for b in ctx.index.import_bindings if b.name == local]
    if not bindings or any(b.qualified != qualified for b in bindings) or _has_own_comments(ctx, request):
        return
    replaced_code = [cst.Module([]).code_for_node(r) for r in replacements.values() if isinstance(r, cst.CSTNode)]
    if any(re.search(rf"(?<![\w.]){re.escape(local)}\b", code) for code in replaced_code):  # not `torch_xla.compile`
        return
    scopes = {id(b.scope) for b in bindings}
    uses: dict[int, list[bool]] = {}  # binding scope -> replaced? per use it serves
    for use in ctx.index.name_uses.get(local, ()):
        scope = next((a for a in ctx.index.ancestors(use) if id(a) in scopes), None)
        replaced = id(use) in replacements or any(id(a) in replacements for a in ctx.index.ancestors(use))
        uses.setdefault(id(scope), []).append(replaced)
    for binding in bindings:
        served = uses.get(id(binding.scope), [])
        if served and all(served) and sum(b.scope is binding.scope for b in bindings) == 1:
            _drop_binding(ctx, binding, local, replacements)


def _drop_binding(ctx: CstContext, binding, local: str, replacements: dict[int, object]) -> None:
    statement = binding.statement
    line = ctx.parent(statement)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return
    if len(statement.names) > 1:
        kept = [a for a in statement.names if import_alias_name(a) != local]
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new_line = line.with_changes(body=[statement.with_changes(names=kept)])
    else:
        block = ctx.parent(line)
        siblings = block.body if isinstance(block, (cst.IndentedBlock, cst.Module)) else ()
        new_line = cst.RemovalSentinel.REMOVE
        if len(siblings) == 1 and isinstance(block, cst.IndentedBlock):
            new_line = line.with_changes(body=[cst.Pass()])  # a block may not be empty
    previous = replacements.get(id(line))
    if isinstance(previous, cst.FlattenSentinel):  # new imports were placed beside this one
        rest = list(previous.nodes)[1:]
        kept_line = [] if new_line is cst.RemovalSentinel.REMOVE or isinstance(new_line.body[0], cst.Pass) else [new_line]
        replacements[id(line)] = cst.FlattenSentinel([*kept_line, *rest])
    else:
        replacements[id(line)] = new_line


def import_alias_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return (dotted_name(alias.name) or "").split(".")[0]


def _has_own_comments(ctx: CstContext, request: ImportRequest) -> bool:
    """The import to drop carries comments (above it or after it): removing the statement would
    lose them, so an unused import stays instead."""
    local = import_binding_name(request) if request.asname or request.obj else request.module.split(".")[0]
    for binding in ctx.index.import_bindings:
        if binding.name != local:
            continue
        line = ctx.parent(binding.statement)
        if isinstance(line, cst.SimpleStatementLine) and (
            any(empty.comment is not None for empty in line.leading_lines)
            or line.trailing_whitespace.comment is not None
        ):
            return True
    return False


def text_edits(before: str, after: str) -> tuple[Edit, ...]:
    """The smallest edits (by line blocks, trimmed to columns) turning `before` into `after`."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    edits = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old_text, new_text = "".join(old[i1:i2]), "".join(new[j1:j2])
        prefix = len(_common_prefix(old_text, new_text))
        suffix = len(_common_prefix(old_text[prefix:][::-1], new_text[prefix:][::-1]))
        start = _location(old, i1, old_text[:prefix])
        end = _location(old, i1, old_text[: len(old_text) - suffix])
        edits.append(Edit(start, end, new_text[prefix: len(new_text) - suffix]))
    return tuple(edits)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def _location(lines: list[str], first_line: int, consumed: str) -> Location:
    """1-based row/column of the point `consumed` characters after the start of `first_line`."""
    row = first_line + 1
    newline_parts = consumed.splitlines(keepends=True)
    if not newline_parts:
        return Location(row, 1)
    full_lines = [p for p in newline_parts if p.endswith(("\n", "\r"))]
    if len(full_lines) == len(newline_parts):
        return Location(row + len(full_lines), 1)
    return Location(row + len(full_lines), len(newline_parts[-1]) + 1)


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )
