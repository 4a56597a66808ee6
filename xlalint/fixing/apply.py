"""Applying fixes on the tree: node replacements in one pass, then the imports they need."""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from dataclasses import fields
from typing import cast

import libcst as cst
from libcst._nodes.internal import CodegenState

from ..diagnostics import Edit, Fix, ImportRequest, Location
from .context import CstContext
from .cst_names import dotted_name

NOTEBOOK_BOUNDARY = "# xlalint: cell boundary"  # notebook.BOUNDARY: the joined cells of a notebook


class _ReplaceNodes(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, object], ancestors: set[int]) -> None:
        super().__init__()
        self.replacements = replacements
        self.ancestors = ancestors  # the nodes above a replaced one: the only subtrees worth visiting

    def on_visit(self, node: cst.CSTNode) -> bool:
        # don't visit children of a node we are about to replace, nor of one without a replacement
        # below it (kept as it is, the same object: what `FixEdits` compares by)
        return id(node) not in self.replacements and id(node) in self.ancestors and super().on_visit(node)

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
    return cast(cst.SimpleStatementLine, cst.parse_statement(code, config=module.config_for_parsing))


def _already_bound(ctx: CstContext, request: ImportRequest) -> bool:
    binding = ctx.index.imports.get(import_binding_name(request))
    if binding is None:
        return False
    wanted = (
        f"{request.module}.{request.obj}"
        if request.obj
        else (request.module if request.asname else request.module.split(".")[0])
    )
    return binding.qualified == wanted or (
        not request.obj and not request.asname and binding.qualified.split(".")[0] == wanted
    )


def imports_the_linter(ctx: CstContext, fix: Fix) -> bool:
    """`fix` makes the file import xlalint (`from xlalint.runtime import ...`) where it did not: code
    that ran without the linter installed would need it at run time. Never a safe fix."""
    if any(b.qualified.split(".")[0] == "xlalint" for b in ctx.index.import_bindings):
        return False  # the file already runs with xlalint installed
    return any(r.module.split(".")[0] == "xlalint" for r in fix.imports)


def apply_fixes(ctx: CstContext, fixes: list[Fix]) -> cst.Module:
    """Apply `fixes` (already free of overlaps) to the file's module and return the new module."""
    _whole(ctx)
    replacements, top_level = _plan(ctx, fixes)
    ancestors = {id(a) for key in replacements for a in _ancestors(ctx, key)}
    transformer = _ReplaceNodes(replacements, ancestors)
    body: list = []
    for statement in ctx.module.body:  # only the statements holding a replacement are visited
        if id(statement) not in ancestors and id(statement) not in replacements:
            body.append(statement)
            continue
        new = statement.visit(transformer)
        if isinstance(new, cst.FlattenSentinel):
            body.extend(new.nodes)
        elif not isinstance(new, cst.RemovalSentinel):
            body.append(new)
    module = ctx.module.with_changes(body=body)
    if top_level:
        module = _add_imports(module, top_level, notebook=NOTEBOOK_BOUNDARY in ctx.text.text)
    return module


def _whole(ctx: CstContext) -> None:
    if ctx.partial:  # the rest of the file is blank there: applied, it would be lost
        raise ValueError("fixes are applied, and their edits made, on the whole file's tree only")


def _ancestors(ctx: CstContext, key: int):
    node = ctx.index.parents.get(key)
    while node is not None:
        yield node
        node = ctx.parent(node)


def _plan(ctx: CstContext, fixes: list[Fix]) -> tuple[dict[int, object], list[ImportRequest]]:
    """The node replacements of `fixes` (imports placed beside an existing one included, unused ones
    dropped), and the imports to add at the top of the module."""
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
    return replacements, top_level


def _add_imports(module: cst.Module, requests: list[ImportRequest], *, notebook: bool = False) -> cst.Module:
    """`module` with `requests` imported, by libcst's AddImportsVisitor. It reads and changes only the
    module's first statements (a docstring, the import block, the statement after it), so it is
    given only those: the rest of the module is neither visited nor rebuilt. In a notebook the
    imports go after the import block of the first cell that imports torch (else the first
    imports), not above its `%pip install` cell: the import runs once the packages are there."""
    from libcst.codemod import CodemodContext  # libcst's codemods cost 0.4 s to import: only here
    from libcst.codemod.visitors import AddImportsVisitor

    body = list(module.body)
    start = 1 if body and _is_docstring(body[0]) else 0
    lead = 0  # statements kept above what the visitor sees
    if notebook:
        imports = [i for i, statement in enumerate(body) if _is_import(statement)]
        torch = [i for i in imports if _imports_torch(body[i])]
        lead = start = (torch or imports or [start])[0]
    end = start
    while end < len(body) and _is_import(body[end]):
        end += 1
    head = module.with_changes(body=body[lead : end + 1])
    # AddImportsVisitor needs no metadata: visit it directly (a Codemod would deep-copy the tree)
    context = CodemodContext()
    for request in requests:
        AddImportsVisitor.add_needed_import(context, request.module, request.obj, request.asname)
    head = head.visit(AddImportsVisitor(context))
    return module.with_changes(body=[*body[:lead], *head.body, *body[end + 1 :]])


def _imports_torch(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False  # (never: an import line)
    node = statement.body[0]
    names = (
        [dotted_name(node.module) or ""]
        if isinstance(node, cst.ImportFrom) and node.module
        else [dotted_name(alias.name) or "" for alias in getattr(node, "names", ())]
    )
    return any(name.split(".")[0] in ("torch", "torch_xla") for name in names)


def _is_import(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    """What libcst's AddImportsVisitor never inserts before: a docstring or a `__strict__` flag."""
    if not isinstance(statement, cst.SimpleStatementLine) or not statement.body:
        return False
    first = statement.body[0]
    if isinstance(first, cst.Expr):
        return isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))
    return isinstance(first, cst.Assign) and any(
        isinstance(t.target, cst.Name) and t.target.value == "__strict__" for t in first.targets
    )


def _remove_if_unused(ctx: CstContext, request: ImportRequest, replacements: dict[int, object]) -> None:
    """Drop the import `request` names when every use of its binding is being replaced.

    Counted on the file's index rather than with libcst's RemoveImportsVisitor, whose scope
    analysis cost seconds per fix on large files; a same-named local variable counts as a use,
    so the import is kept then (never a broken file, at worst an unused import).
    """
    local = import_binding_name(request) if request.asname or request.obj else request.module.split(".")[0]
    qualified = (
        f"{request.module}.{request.obj}"
        if request.obj
        else (request.module if request.asname else request.module.split(".")[0])
    )
    bindings = [b for b in ctx.index.import_bindings if b.name == local]
    if not bindings or any(b.qualified != qualified for b in bindings) or _has_own_comments(ctx, request):
        return
    replaced_code = [cst.Module([]).code_for_node(r) for r in replacements.values() if isinstance(r, cst.CSTNode)]
    if any(re.search(rf"(?<![\w.]){re.escape(local)}\b", code) for code in replaced_code):  # not `torch_xla.compile`
        return
    scopes = {id(b.scope) for b in bindings}
    unused = set(scopes)  # binding scopes whose every use met so far is replaced
    served: set[int] = set()  # binding scopes with a use
    for use in ctx.index.name_uses.get(local, ()):
        scope = id(next((a for a in ctx.index.ancestors(use) if id(a) in scopes), None))
        if scope not in unused:
            continue
        served.add(scope)
        if not (id(use) in replacements or any(id(a) in replacements for a in ctx.index.ancestors(use))):
            unused.discard(scope)
            if not unused:  # every import stays: stop at the first use kept, not after every use of the file
                return
    for binding in bindings:
        scope = id(binding.scope)
        if scope in unused and scope in served and sum(b.scope is binding.scope for b in bindings) == 1:
            _drop_binding(ctx, binding, local, replacements)


def _drop_binding(ctx: CstContext, binding, local: str, replacements: dict[int, object]) -> None:
    statement = binding.statement
    line = ctx.parent(statement)
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return
    new_line: cst.SimpleStatementLine | cst.RemovalSentinel
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
        kept_line = (
            [] if new_line is cst.RemovalSentinel.REMOVE or isinstance(new_line.body[0], cst.Pass) else [new_line]
        )
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


class FixEdits:
    """Each fix's text edits (JSON and SARIF show them), in time linear in the file.

    Generating the whole fixed module and diffing it with the original once per fix cost minutes
    for a file with hundreds of fixes. A fix rebuilds only the top-level statements holding its
    nodes (and the import block): the others stay the same objects (see `_ReplaceNodes`). So only
    the statements that changed are generated and diffed, at their rows, and inside a `class` or
    `def` whose body alone changed, the statements of that body that did (see `_inner`); the result
    is the same as diffing the whole module, which is still done where this cannot be used (a module
    without a final newline, statements out of order)."""

    def __init__(self, ctx: CstContext) -> None:
        _whole(ctx)
        self.ctx = ctx
        module = ctx.module
        self.original = module.code
        self.texts = [module.code_for_node(statement) for statement in module.body]
        self.header = "".join(module.code_for_node(line) for line in module.header)
        self.footer = "".join(module.code_for_node(line) for line in module.footer)
        self.rows = [1 + self.header.count("\n")]  # the row each statement starts on, and the end's
        for text in self.texts:
            self.rows.append(self.rows[-1] + len(text.splitlines()))
        self.usable = self.header + "".join(self.texts) + self.footer == self.original and all(
            text.endswith(("\n", "\r")) for text in self.texts
        )

    def of(self, fix: Fix) -> tuple[Edit, ...]:
        new = apply_fixes(self.ctx, [fix])
        windows = self._windows(new) if self.usable else None
        if windows is None:
            return text_edits(self.original, new.code)
        edits: list[Edit] = []
        for (i1, i2), (j1, j2) in windows:
            if i2 - i1 == 1 and j2 - j1 == 1:  # one statement changed: the changed ones inside it, if a class or def
                inner = self._inner(self.ctx.module.body[i1], new.body[j1], [], self.ctx.top_statement(i1))
                if inner is not None:
                    edits += inner
                    continue
            before = "".join(self.texts[i1:i2])
            after = "".join(new.code_for_node(statement) for statement in new.body[j1:j2])
            shift = self.rows[i1] - 1
            edits += [
                Edit(
                    Location(e.location.row + shift, e.location.column),
                    Location(e.end_location.row + shift, e.end_location.column),
                    e.content,
                )
                for e in text_edits(before, after)
            ]
        return tuple(edits)

    def _inner(
        self, old: cst.CSTNode, new: cst.CSTNode, indents: list[str], piece: ast.stmt | None
    ) -> list[Edit] | None:
        """The edits of a `class` or `def` whose body alone changed, from the statements of its body
        that changed (and so on down), generated inside their blocks' indentation and diffed at the
        rows `ast` gives them: a fix in one method of a 3,000-line class diffs that method. None
        where that cannot be told (the header changed, a statement added at the block's end)."""
        if not (
            type(old) is type(new)
            and isinstance(old, (cst.FunctionDef, cst.ClassDef))
            and isinstance(piece, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and _same_but_body(old, new)
        ):
            return None
        block, new_block = old.body, cast(cst.FunctionDef | cst.ClassDef, new).body
        if not (
            isinstance(block, cst.IndentedBlock)
            and isinstance(new_block, cst.IndentedBlock)
            and _same_but_body(block, new_block)
        ):
            return None
        statements = self.ctx.block_statements(block, piece.body)
        windows = _identity_windows(block.body, new_block.body)
        if statements is None or windows is None:
            return None
        indents = [*indents, self.ctx.module.default_indent if block.indent is None else block.indent]
        edits: list[Edit] = []
        for (i1, i2), (j1, j2) in windows:
            if i1 == len(block.body):
                return None  # added after the last statement: its row is the outer diff's to find
            if i2 - i1 == 1 and j2 - j1 == 1:
                inner = self._inner(block.body[i1], new_block.body[j1], indents, statements.first[i1])
                if inner is not None:
                    edits += inner
                    continue
            row = statements.starts[i1] - len(getattr(block.body[i1], "leading_lines", ()))
            before = "".join(_code(s, indents, self.ctx.module) for s in block.body[i1:i2])
            after = "".join(_code(s, indents, self.ctx.module) for s in new_block.body[j1:j2])
            edits += _shifted(text_edits(before, after), row - 1)
        return edits

    def _windows(self, new: cst.Module) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        """The runs of statements between those `new` shares with the original: (old range, new range)."""
        if (
            "".join(new.code_for_node(line) for line in new.header) != self.header
            or "".join(new.code_for_node(line) for line in new.footer) != self.footer
        ):
            return None
        windows = _identity_windows(self.ctx.module.body, new.body)
        if windows is None:
            return None
        if not new.has_trailing_newline and windows and windows[-1][1][1] == len(new.body):
            return None  # the module drops the last statement's newline: diff the whole of it
        return windows


def _same_but_body(old: cst.CSTNode, new: cst.CSTNode) -> bool:
    """`new` is `old` rebuilt with another body: every other child the same object (a sequence of
    them, the same objects), every other value equal."""
    for field in fields(old):
        if field.name == "body":
            continue
        a, b = getattr(old, field.name), getattr(new, field.name)
        if isinstance(a, (list, tuple)):
            if not isinstance(b, (list, tuple)) or len(a) != len(b) or any(x is not y for x, y in zip(a, b)):
                return False
        elif isinstance(a, cst.CSTNode):
            if a is not b:
                return False
        elif a != b:
            return False
    return True


def _identity_windows(old: Sequence[cst.CSTNode], new: Sequence[cst.CSTNode]):
    """The runs of statements between those `new` shares (as objects) with `old`, in order:
    (old range, new range); None when the shared ones are out of order."""
    index = {id(statement): i for i, statement in enumerate(old)}
    anchors = [(-1, -1)]
    for j, statement in enumerate(new):
        i = index.get(id(statement))
        if i is not None:
            if i <= anchors[-1][0]:
                return None
            anchors.append((i, j))
    anchors.append((len(old), len(new)))
    return [
        ((i0 + 1, i1), (j0 + 1, j1)) for (i0, j0), (i1, j1) in zip(anchors, anchors[1:]) if i1 > i0 + 1 or j1 > j0 + 1
    ]


def _code(statement: cst.CSTNode, indents: list[str], module: cst.Module) -> str:
    """A statement's code as it stands in the module, inside the indentation of its blocks."""
    state = CodegenState(
        default_indent=module.default_indent, default_newline=module.default_newline, indent_tokens=list(indents)
    )
    statement._codegen(state)
    return "".join(state.tokens)


def _shifted(edits: tuple[Edit, ...], rows: int) -> list[Edit]:
    return [
        Edit(
            Location(e.location.row + rows, e.location.column),
            Location(e.end_location.row + rows, e.end_location.column),
            e.content,
        )
        for e in edits
    ]


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
        edits.append(Edit(start, end, new_text[prefix : len(new_text) - suffix]))
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
