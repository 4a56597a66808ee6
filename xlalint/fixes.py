"""Applying fixes on the tree: node replacements in one pass, then the imports they need."""

from __future__ import annotations

import difflib

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

from .analysis.context import FileContext
from .diagnostics import Edit, Fix, ImportRequest, Location


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


def _already_bound(ctx: FileContext, request: ImportRequest) -> bool:
    binding = ctx.index.imports.get(import_binding_name(request))
    if binding is None:
        return False
    wanted = f"{request.module}.{request.obj}" if request.obj else (
        request.module if request.asname else request.module.split(".")[0])
    return binding.qualified == wanted or (not request.obj and not request.asname and
                                            binding.qualified.split(".")[0] == wanted)


def apply_fixes(ctx: FileContext, fixes: list[Fix]) -> cst.Module:
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
    module = ctx.module.visit(_ReplaceNodes(replacements))
    removals = [r for fix in fixes for r in fix.removed_imports if not _has_own_comments(ctx, r)]
    if top_level or removals:
        # the import codemods read the tree's layout fresh: a tree stitched from replacements can
        # carry blank lines on nodes they then drop
        module = cst.parse_module(module.bytes)
        context = CodemodContext()
        for request in top_level:
            AddImportsVisitor.add_needed_import(context, request.module, request.obj, request.asname)
        module = AddImportsVisitor(context).transform_module(module)
        if removals:
            context = CodemodContext()
            for request in removals:
                RemoveImportsVisitor.remove_unused_import(context, request.module, request.obj, request.asname)
            module = RemoveImportsVisitor(context).transform_module(module)
    return module


def _has_own_comments(ctx: FileContext, request: ImportRequest) -> bool:
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


def importable(ctx: FileContext, module: str, obj: str) -> tuple[str, ImportRequest]:
    """How fixed code should spell `module.obj`, and the import that makes it valid.

    `from module import obj` when `obj` is free in the file (or already that import), else
    `import module` and the dotted name.
    """
    binding = ctx.index.imports.get(obj)
    if binding is not None and binding.qualified == f"{module}.{obj}":
        return obj, ImportRequest(module, obj)
    if obj not in ctx.index.bare_names:
        return obj, ImportRequest(module, obj)
    return f"{module}.{obj}", ImportRequest(module)
