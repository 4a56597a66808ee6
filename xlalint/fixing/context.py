"""`CstContext`: a file's libcst tree for building and applying fixes, with the libcst node of each
finding located by its `ast` node's position. Built only for files with a fix to build or apply."""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, TypeVar, cast, overload

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from ..diagnostics import ImportRequest
from ..source import SourceText
from .cst_index import ModuleIndex, build_index
from .cst_names import dotted_name
from .partial import WholeFileNeeded

N = TypeVar("N", bound=cst.CSTNode)

# The libcst node classes that stand for an `ast` node class (same span, same construct).
AST_TO_CST: dict[type, tuple[type, ...]] = {
    ast.Call: (cst.Call,),
    ast.Attribute: (cst.Attribute,),
    ast.Name: (cst.Name,),
    ast.Subscript: (cst.Subscript,),
    ast.Assign: (cst.Assign,),
    ast.AugAssign: (cst.AugAssign,),
    ast.AnnAssign: (cst.AnnAssign,),
    ast.Expr: (cst.Expr,),
    ast.If: (cst.If,),
    ast.For: (cst.For,),
    ast.While: (cst.While,),
    ast.With: (cst.With,),
    ast.FunctionDef: (cst.FunctionDef,),
    ast.Compare: (cst.Comparison,),
    ast.BoolOp: (cst.BooleanOperation,),
    ast.UnaryOp: (cst.UnaryOperation,),
    ast.BinOp: (cst.BinaryOperation,),
    ast.Import: (cst.Import,),
    ast.ImportFrom: (cst.ImportFrom,),
    ast.alias: (cst.ImportAlias,),
    ast.keyword: (cst.Arg,),
    ast.Constant: (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.Name),
}

Span = tuple[int, int, int, int]  # start line, start column, end line, end column (characters)


class CstContext:
    def __init__(
        self,
        module: cst.Module,
        text: SourceText,
        tree: ast.Module | None = None,
        *,
        kept: list[tuple[int, int]] | None = None,
        bare_names: set[str] | None = None,
    ) -> None:
        self.module = module
        self.text = text
        self.index: ModuleIndex = build_index(module)
        # `kept`: `module` is a part of the file (`partial.partial_source`): the row ranges it holds,
        # each a whole statement as in the file, and the file's bare names, read from its `ast`
        self._kept = kept
        if bare_names is not None:
            self.index.bare_names = bare_names
        # `tree`: the `ast` of the same text. With it, a node's position comes from the positions of
        # the innermost statement around it, positioned alone (see `_around`), not from the whole
        # module's: a fix in a 5,000-line file no longer pays for a position of each of its nodes
        self._tree = tree
        self._statements = _statement_lines(module.body, tree.body) if tree is not None else None
        self._blocks: dict[int, _Statements | None] = {}  # id(an indented block) -> its statements
        # id(a statement positioned alone) -> its nodes' positions, and its nodes by span
        self._of_statement: dict[int, tuple[Mapping[cst.CSTNode, CodeRange], dict[Span, list[cst.CSTNode]]]] = {}

    @property
    def partial(self) -> bool:
        """The tree is of a part of the file (`partial.partial_source`)."""
        return self._kept is not None

    def importable(self, module: str, obj: str) -> tuple[str, ImportRequest]:
        """How fixed code should spell `module.obj`, and the import that makes it valid.

        `from module import obj` when `obj` is free in the file (or already that import), else
        `import module` and the dotted name.
        """
        binding = self.index.imports.get(obj)
        if binding is not None and binding.qualified == f"{module}.{obj}":
            return obj, ImportRequest(module, obj)
        if obj not in self.index.bare_names:
            return obj, ImportRequest(module, obj)
        return f"{module}.{obj}", ImportRequest(module)

    def bound_name(self, qualified: str, node: cst.CSTNode) -> str | None:
        """The local name `qualified` (a module) is imported as where `node` is: at module level, or
        in a function around `node`; None when no such import reaches it."""
        scopes = {id(a) for a in self.index.ancestors(node)}
        for binding in self.index.import_bindings:
            if binding.qualified == qualified and (
                binding.scope is None or isinstance(binding.scope, cst.Module) or id(binding.scope) in scopes
            ):
                return binding.name
        return None

    @cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        return MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)

    @cached_property
    def _by_span(self) -> dict[Span, list[cst.CSTNode]]:
        spans: dict[Span, list[cst.CSTNode]] = {}
        for node, where in self.positions.items():
            spans.setdefault((where.start.line, where.start.column, where.end.line, where.end.column), []).append(node)
        return spans

    def span_of(self, node: ast.AST) -> Span:
        n: Any = node  # a located node (expr, stmt, arg, alias...): ast.AST itself declares no position
        return (
            n.lineno,
            self.text.column(n.lineno, n.col_offset),
            n.end_lineno,
            self.text.column(n.end_lineno, n.end_col_offset),
        )

    def position(self, node: cst.CSTNode) -> CodeRange:
        """`node`'s position in the module: from the positions of a statement around it positioned
        alone (see `_positioned`), else from the module's."""
        for around in (node, *self.index.ancestors(node)):
            found = self._of_statement.get(id(around))
            if found is not None:
                return found[0][node]
        if self._statements is not None:
            chain = [node, *self.index.ancestors(node)]
            if len(chain) > 1 and chain[-1] is self.module:  # its top-level statement
                number = self._statements.number.get(id(chain[-2]))
                found = self._positioned(chain[-2], [], self._statements.lines[number]) if number is not None else None
                if found is not None:
                    return found[0][node]
        return self.positions[node]

    def _positioned(
        self, statement: cst.CSTNode, indents: list[str], lines: tuple[int, int]
    ) -> tuple[Mapping[cst.CSTNode, CodeRange], dict[Span, list[cst.CSTNode]]] | None:
        """The positions of the nodes of `statement` (and its nodes by span), as the whole module's
        positions give them: the statement's code is generated alone, inside the indentation of the
        blocks around it (`indents`), and moved to `lines`, where `ast` says it is (the
        positions are libcst's own: its `PositionProvider`, on one statement). None where the
        result is not where `ast` says the statement is: never guessed."""
        found = self._of_statement.get(id(statement))
        if found is not None:
            return found
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=provider,
            indent_tokens=list(indents),
        )
        statement._codegen(state)
        raw = cast("Mapping[cst.CSTNode, CodeRange]", provider._computed)  # (filled eagerly by codegen)
        where = raw.get(statement)
        shift = lines[0] - where.start.line if where is not None else 0
        if where is None or where.start.column != sum(map(len, indents)) or where.end.line + shift != lines[1]:
            return None
        positions = {
            n: CodeRange(
                CodePosition(w.start.line + shift, w.start.column), CodePosition(w.end.line + shift, w.end.column)
            )
            for n, w in raw.items()
        }
        spans: dict[Span, list[cst.CSTNode]] = {}
        for n, w in positions.items():
            spans.setdefault((w.start.line, w.start.column, w.end.line, w.end.column), []).append(n)
        found = self._of_statement[id(statement)] = (positions, spans)
        return found

    def top_statement(self, number: int) -> ast.stmt | None:
        """The first `ast` statement of the module's top-level statement `number` (None without the `ast`)."""
        return self._statements.first[number] if self._statements is not None else None

    def block_statements(self, block: cst.IndentedBlock, tree_body: list[ast.stmt]) -> _Statements | None:
        """Where each statement of `block` is, from `tree_body`, the `ast` statements of the same block."""
        if id(block) not in self._blocks:
            self._blocks[id(block)] = _statement_lines(block.body, tree_body)
        return self._blocks[id(block)]

    def _around(self, row: int) -> tuple[Mapping[cst.CSTNode, CodeRange], dict[Span, list[cst.CSTNode]]]:
        """The positions and spans of the innermost statement holding line `row` (the module's where
        none does, or it cannot be positioned alone). From the module down, a `class` or `def`
        whose body holds the line gives way to the statement of its body that does: a fix in a
        method of a 3,000-line test class positions that method's statement, not the class."""
        statements, tree_body = self._statements, self._tree.body if self._tree else []
        body: Sequence[cst.BaseStatement] = self.module.body
        indents: list[str] = []
        chain: list[tuple[cst.CSTNode, list[str], tuple[int, int]]] = []  # the statements around, outermost first
        while statements is not None:
            at = bisect_right(statements.starts, row) - 1
            if at < 0 or row > statements.ends[at]:
                break
            number = statements.order[at]
            statement: cst.CSTNode = body[number]
            piece = statements.first[number]
            chain.append((statement, indents, statements.lines[number]))
            block = getattr(statement, "body", None)
            if not (
                isinstance(statement, (cst.FunctionDef, cst.ClassDef))
                and isinstance(block, cst.IndentedBlock)
                and isinstance(piece, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            ):
                break
            indents = [*indents, self.module.default_indent if block.indent is None else block.indent]
            body, tree_body = block.body, piece.body
            statements = self.block_statements(block, tree_body)
        for statement, around, lines in reversed(chain):  # the innermost that can be positioned alone
            found = self._positioned(statement, around, lines)
            if found is not None:
                return found
        return self.positions, self._by_span

    def locate(self, node: ast.AST, kind: type | tuple[type, ...] | None = None) -> cst.CSTNode | None:
        """The libcst node for `node`: same span, of the class `kind` (default: the class that
        stands for `node`'s). Parenthesised expressions may differ by their parentheses: then the
        smallest such node containing the span (both within `node`'s top-level statement, which
        holds every node that spans it)."""
        kinds = (kind if isinstance(kind, tuple) else (kind,)) if kind else AST_TO_CST.get(type(node), ())
        span = self.span_of(node)
        if self._kept is not None and not any(first <= span[0] and span[2] <= last for first, last in self._kept):
            raise WholeFileNeeded(f"the {type(node).__name__} at {span} is outside the part parsed")
        positions, by_span = self._around(span[0])
        for candidate in by_span.get(span, ()):
            if isinstance(candidate, kinds):
                return candidate
        best = None
        for candidate, where in positions.items():
            if not isinstance(candidate, kinds):
                continue
            outer = (where.start.line, where.start.column, where.end.line, where.end.column)
            if (outer[0], outer[1]) <= (span[0], span[1]) and (outer[2], outer[3]) >= (span[2], span[3]):
                if best is None or _size(outer) < _size(best[1]):
                    best = (candidate, outer)
        return best[0] if best else None

    @overload
    def find(self, node: ast.AST) -> cst.CSTNode: ...
    @overload
    def find(self, node: ast.AST, kind: type[N]) -> N: ...

    def find(self, node: ast.AST, kind: type[cst.CSTNode] | None = None) -> cst.CSTNode:
        """`locate` for a node a fix was decided on, which is there (the same text gave both trees), typed
        as `kind` when given. A miss is a bug in the fix: ValueError, after which the engine keeps the file."""
        found = self.locate(node, kind)
        if found is None or (kind is not None and not isinstance(found, kind)):
            raise ValueError(f"no libcst node for the {type(node).__name__} at {self.span_of(node)}")
        return found

    # -- what fix builders ask, as on the analysis side ------------------------------------------
    def parent(self, node: cst.CSTNode | None) -> cst.CSTNode | None:
        return self.index.parent(node) if node is not None else None

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        name = dotted_name(node)
        if not name:
            return None
        head, _, rest = name.partition(".")
        binding = self.index.imports.get(head)
        if binding is None:
            return name
        return f"{binding.qualified}.{rest}" if rest else binding.qualified

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def parse_expression(self, text: str) -> cst.BaseExpression:
        return cst.parse_expression(text, config=self.module.config_for_parsing)

    def parse_statement(self, text: str) -> cst.BaseStatement:
        return cst.parse_statement(text, config=self.module.config_for_parsing)


class _Statements:
    """Where each statement of a block is: `lines[number]`: (the line its first statement starts
    on, as `ast` gives it (a `def` line, not its decorators'), its last line); `first[number]`: that
    first `ast` statement; `starts`/`ends`/`order`: the lines it spans (decorators included), sorted,
    for bisection; `number`: id(statement) -> its number in the block's body."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, int]] = []
        self.first: list[ast.stmt] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.order: list[int] = []
        self.number: dict[int, int] = {}


def _statement_lines(body: Sequence[cst.BaseStatement], tree_body: list[ast.stmt]) -> _Statements | None:
    """The lines of each statement of a block (`body`, a module's or an indented block's), from
    `tree_body` (the `ast` statements of the same block: a simple statement line holds as many
    `ast` statements as it has small statements, a compound statement one); None when the two do
    not pair up."""
    found = _Statements()
    at = 0
    for number, statement in enumerate(body):
        count = len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
        pieces = tree_body[at : at + count]
        if len(pieces) != count:
            return None
        at += count
        first, last = pieces[0], pieces[-1]
        top = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))])
        end = last.end_lineno if last.end_lineno is not None else last.lineno
        found.lines.append((first.lineno, end))
        found.first.append(first)
        found.starts.append(top)
        found.ends.append(end)
        found.order.append(number)
        found.number[id(statement)] = number
    return found if at == len(tree_body) else None


def _size(span: Span) -> tuple[int, int]:
    return (span[2] - span[0], span[3] - span[1])
