"""The part of a file a fix is built on, when only the fix's title, applicability and span are
wanted (the text report): libcst parses the statements holding the findings and the file's imports,
not the whole file (a 97 KB test module with three fixes: 0.5 CPU-s of parsing and indexing).

Every other statement of the module, and of a class around a finding, becomes blank lines: the
kept lines are the file's own bytes at their own rows and columns, so each kept node's position,
code and surroundings are those of the whole file's tree. What a fix asks about the rest of the
file comes from the whole file: its imports are all kept (every statement holding one), and the
names it uses (`bare_names`, which a fix's new name must not clash with) are read from the `ast`
in libcst's terms (`cst_bare_names`). A builder that looks for a node outside the kept lines gets
`WholeFileNeeded`, and the engine builds its fixes on the whole file instead: never a guess.
"""

from __future__ import annotations

import ast
from bisect import bisect_left
from collections.abc import Iterable

COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),  # (Python 3.11)
)


class WholeFileNeeded(Exception):
    """A fix builder asked for a node on lines the partial tree left out."""


def _top(statement: ast.stmt) -> int:
    """The first row of `statement`, its decorators included."""
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def _end(statement: ast.stmt) -> int:
    return statement.end_lineno if statement.end_lineno is not None else statement.lineno


def _groups(body: list[ast.stmt]) -> list[tuple[int, int, list[ast.stmt]]]:
    """The statements of a block by the rows they span, statements sharing a row (`a = 1; b = 2`,
    or a call's last line followed by `; b = 2`) in one group: a group is kept or blanked whole."""
    groups: list[tuple[int, int, list[ast.stmt]]] = []
    for statement in body:
        top, end = _top(statement), _end(statement)
        if groups and top <= groups[-1][1]:
            first, last, members = groups[-1]
            groups[-1] = (first, max(last, end), [*members, statement])
        else:
            groups.append((top, end, [statement]))
    return groups


def _starts_line(lines: list[bytes], statement: ast.stmt) -> bool:
    row = lines[statement.lineno - 1] if statement.lineno <= len(lines) else b""
    return not row[: statement.col_offset].strip()


def _indents(lines: list[bytes], statement: ast.stmt) -> bool:
    """`statement` holds an indented block (the tokenizer's INDENT), not only `if x: y` suites."""
    if not isinstance(statement, COMPOUND):
        return False
    blocks: list[list[ast.stmt]] = [
        getattr(statement, name) for name in ("body", "orelse", "finalbody") if getattr(statement, name, None)
    ]
    blocks += [h.body for h in getattr(statement, "handlers", ())]
    blocks += [c.body for c in getattr(statement, "cases", ())]
    return any(_starts_line(lines, block[0]) for block in blocks if block)


def partial_source(
    raw: bytes, tree: ast.Module, wanted: Iterable[int], imports: Iterable[ast.stmt]
) -> tuple[bytes, list[tuple[int, int]]] | None:
    """`raw` with every statement of the module (and of a class around a wanted row) blanked but
    those spanning a `wanted` row or holding one of `imports` (the file's import statements), and the
    first block the tokenizer indents (libcst takes the file's default indentation from it); with
    the kept statements' row ranges. None when nothing would be left out."""
    lines = raw.splitlines(keepends=True)
    wanted_rows = sorted(set(wanted))
    import_rows = sorted(node.lineno for node in imports)
    blank: list[tuple[int, int]] = []
    kept: list[tuple[int, int]] = []
    indent_seen = False

    def reduce(body: list[ast.stmt], in_class: bool) -> None:
        nonlocal indent_seen
        groups = _groups(body)
        keep = [
            _holds_any(first, last, wanted_rows) or _holds_any(first, last, import_rows) for first, last, _ in groups
        ]
        if in_class:
            keep[0] = True  # the class's block starts as in the file (and is never empty)
        for index, (first, last, members) in enumerate(groups):
            if not indent_seen and any(_indents(lines, s) for s in members):
                indent_seen = True
                keep[index] = True  # the file's first indented block, where libcst reads its indentation
            if not keep[index]:
                blank.append((first, last))
                continue
            only = members[0] if len(members) == 1 else None
            if isinstance(only, ast.ClassDef) and len(only.body) > 1 and _starts_line(lines, only.body[0]):
                inner_first = _top(only.body[0])
                kept.append((first, inner_first - 1))  # the header (and what precedes the body)
                reduce(only.body, True)
            else:
                kept.append((first, last))

    reduce(tree.body, False)
    if not blank:
        return None
    out = list(lines)
    for first, last in blank:
        for row in range(first, min(last, len(out)) + 1):
            line = out[row - 1]
            content = line.rstrip(b"\r\n")
            out[row - 1] = (b"\xef\xbb\xbf" if row == 1 and content.startswith(b"\xef\xbb\xbf") else b"") + line[
                len(content) :
            ]
    return b"".join(out), [(a, b) for a, b in kept if a <= b]


def _holds_any(first: int, last: int, rows: list[int]) -> bool:
    at = bisect_left(rows, first)
    return at < len(rows) and rows[at] <= last


def cst_bare_names(tree: ast.Module) -> set[str]:
    """The names libcst's index counts as bare names (`cst_index.ModuleIndex.bare_names`: every
    `Name` node outside an import statement and not an attribute's name, and the names imports
    bind), read from the `ast`: libcst makes a `Name` of what `ast` keeps as strings or constants
    (a parameter, a keyword argument's name, `True`, a `global` name, a `def`'s name...)."""
    names: set[str] = set()
    add = names.add
    for node in ast.walk(tree):
        kind = type(node)
        if kind is ast.Name:
            add(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Constant:
            value = node.value  # type: ignore[attr-defined]
            if value is None or value is True or value is False:
                add(repr(value))
        elif kind is ast.keyword:
            if node.arg is not None:  # type: ignore[attr-defined]
                add(node.arg)  # type: ignore[attr-defined]
        elif kind is ast.arg:
            add(node.arg)  # type: ignore[attr-defined]
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            add(node.name)  # type: ignore[attr-defined]
        elif kind in (ast.Global, ast.Nonlocal):
            names.update(node.names)  # type: ignore[attr-defined]
        elif kind is ast.ExceptHandler:
            if node.name:  # type: ignore[attr-defined]
                add(node.name)  # type: ignore[attr-defined]
        elif kind in (ast.MatchAs, ast.MatchStar):
            if node.name:  # type: ignore[attr-defined]
                add(node.name)  # type: ignore[attr-defined]
        elif kind is ast.MatchMapping:
            if node.rest:  # type: ignore[attr-defined]
                add(node.rest)  # type: ignore[attr-defined]
        elif kind is ast.MatchClass:
            names.update(node.kwd_attrs)  # type: ignore[attr-defined]
        elif kind is ast.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                add(alias.asname or alias.name.split(".")[0])
        elif kind is ast.ImportFrom:
            if node.module and not node.level:  # type: ignore[attr-defined]
                for alias in node.names:  # type: ignore[attr-defined]
                    if alias.name != "*":
                        add(alias.asname or alias.name)
    return names
