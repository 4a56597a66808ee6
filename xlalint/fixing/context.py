"""`CstContext`: a file's libcst tree for building and applying fixes, with the libcst node of each
finding located by its `ast` node's position. Built only for files with a fix to build or apply."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cached_property
from typing import Any, TypeVar, overload

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from ..diagnostics import ImportRequest
from ..source import SourceText
from .cst_index import ModuleIndex, build_index
from .cst_names import dotted_name

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
    def __init__(self, module: cst.Module, text: SourceText) -> None:
        self.module = module
        self.text = text
        self.index: ModuleIndex = build_index(module)

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

    def locate(self, node: ast.AST, kind: type | tuple[type, ...] | None = None) -> cst.CSTNode | None:
        """The libcst node for `node`: same span, of the class `kind` (default: the class that
        stands for `node`'s). Parenthesised expressions may differ by their parentheses: then the
        smallest such node containing the span."""
        kinds = (kind if isinstance(kind, tuple) else (kind,)) if kind else AST_TO_CST.get(type(node), ())
        span = self.span_of(node)
        for candidate in self._by_span.get(span, ()):
            if isinstance(candidate, kinds):
                return candidate
        best = None
        for candidate, where in self.positions.items():
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


def _size(span: Span) -> tuple[int, int]:
    return (span[2] - span[0], span[3] - span[1])
