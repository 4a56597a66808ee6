"""One pre-pass over a libcst module for fix builders: parents, imports and their bindings, name uses."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import cast

import libcst as cst

from .cst_names import dotted_name

Scope = cst.Module | cst.FunctionDef | cst.Lambda


@dataclass(frozen=True)
class ImportBinding:
    name: str  # the local name bound
    qualified: str  # what it refers to, e.g. "torch_xla.core.xla_model"
    statement: cst.CSTNode  # the Import / ImportFrom node
    guarded: bool  # inside try/if/function rather than at module top level
    scope: cst.CSTNode | None = None  # the Module / FunctionDef / Lambda it binds in


@dataclass
class ModuleIndex:
    parents: dict[int, cst.CSTNode] = field(default_factory=dict)
    imports: dict[str, ImportBinding] = field(default_factory=dict)  # the last binding of each name
    import_bindings: list[ImportBinding] = field(default_factory=list)  # all of them, in source order
    functions: dict[str, list[cst.FunctionDef]] = field(default_factory=lambda: defaultdict(list))
    # scope node id -> local name -> expressions assigned to it (flow-insensitive)
    assignments: dict[int, dict[str, list[cst.BaseExpression]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    # scope node id -> names bound by `for NAME in ITER` -> ITER
    loop_targets: dict[int, dict[str, list[cst.BaseExpression]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    loops: list[cst.For | cst.While] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)
    module_names: set[str] = field(default_factory=set)  # names bound at module level (any block)
    order: dict[int, int] = field(default_factory=dict)  # id(node) -> pre-order position (source order)
    # id(assigned expression) -> the assignment is an augmented one (`x += v`)
    augmented: set[int] = field(default_factory=set)
    all_names: set[str] = field(default_factory=set)  # every identifier, attribute names included
    # identifiers used or bound as names (not `.attr`, not the dotted path of an import), to pick
    # names a fix may bind without a clash
    bare_names: set[str] = field(default_factory=set)
    name_uses: dict[str, list[cst.Name]] = field(default_factory=lambda: defaultdict(list))  # outside imports

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode):
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        for anc in self.ancestors(node):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda, cst.Module)):
                return anc
        raise AssertionError("node outside the module")

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, cst.ClassDef):
                return anc
        return None


# exact classes: the parser makes no subclasses of libcst's nodes
_SCOPES = frozenset({cst.Module, cst.FunctionDef, cst.Lambda})
_GUARDS = frozenset({cst.Try, cst.If, cst.With})


class _Indexer(cst.CSTVisitor):
    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.stack: list[cst.CSTNode] = []
        self.scopes: list[Scope] = []
        self.guard_depth = 0  # try/if/with blocks at module level
        self.in_import = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        index, stack, kind = self.index, self.stack, type(node)
        if stack:
            index.parents[id(node)] = stack[-1]
        index.order[id(node)] = len(index.order)
        stack.append(node)
        if kind in _SCOPES:
            self.scopes.append(cast(Scope, node))
        elif kind in _GUARDS:
            self.guard_depth += 1
        visit = _handler("visit_", kind)
        return visit is None or visit(self, node) is not False  # (CSTVisitor.on_visit, per class found once)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        kind = type(original_node)
        leave = _handler("leave_", kind)
        if leave is not None:
            leave(self, original_node)
        self.stack.pop()
        if kind in _SCOPES:
            self.scopes.pop()
        elif kind in _GUARDS:
            self.guard_depth -= 1

    @property
    def _at_module(self) -> bool:
        return isinstance(self.scopes[-1], cst.Module)

    def _bind(self, name: str, value: cst.BaseExpression | None) -> None:
        if self._at_module:
            self.index.module_names.add(name)
        if value is not None:
            self.index.assignments[id(self.scopes[-1])][name].append(value)

    def _bind_target(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            self._bind(target.value, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            # `a, b = f()`: each name gets the whole value; tensor-ness of tuples is shared.
            for element in target.elements:
                inner = element.value
                self._bind_target(inner.value if isinstance(inner, cst.StarredElement) else inner, value)
        elif isinstance(target, (cst.Attribute, cst.Subscript)):
            name = dotted_name(target) if isinstance(target, cst.Attribute) else None
            if name and value is not None:  # self.x = ... is looked up as "self.x"
                self.index.assignments[id(self.scopes[-1])][name].append(value)

    def _import(self, local: str, qualified: str, node: cst.CSTNode) -> None:
        guarded = not self._at_module or self.guard_depth > 0
        binding = ImportBinding(local, qualified, node, guarded, self.scopes[-1])
        self.index.imports[local] = binding
        self.index.import_bindings.append(binding)
        self.index.bare_names.add(local)
        self._bind(local, None)

    def visit_Import(self, node: cst.Import) -> None:
        self.in_import += 1
        for alias in node.names:
            full = dotted_name(alias.name)
            if not full:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._import(alias.asname.name.value, full, node)
            else:
                self._import(full.split(".")[0], full.split(".")[0], node)

    def leave_Import(self, original_node: cst.Import) -> None:
        self.in_import -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.in_import += 1
        if isinstance(node.names, cst.ImportStar) or node.relative:
            return
        module = dotted_name(node.module) if node.module else None
        if not module:
            return
        for alias in node.names:
            obj = dotted_name(alias.name)
            if obj is None:  # never: an imported name is a Name or a dotted Attribute
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else obj
            self._import(local, f"{module}.{obj}", node)

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self.in_import -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.index.functions[node.name.value].append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if self._at_module:
            self.index.module_names.add(original_node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name.value, None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        # `x += t` makes x at least as tensor-like as t.
        self.index.augmented.add(id(node.value))
        self._bind_target(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self.index.loops.append(node)
        for name, iterable in loop_bindings(node.target, node.iter):
            self.index.loop_targets[id(self.scopes[-1])][name].append(iterable)
            if self._at_module:
                self.index.module_names.add(name)

    def visit_While(self, node: cst.While) -> None:
        self.index.loops.append(node)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name, node.item)

    def visit_Call(self, node: cst.Call) -> None:
        self.index.calls.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.index.all_names.add(node.value)
        parent = self.stack[-2] if len(self.stack) > 1 else None
        if not self.in_import and not (isinstance(parent, cst.Attribute) and parent.attr is node):
            self.index.bare_names.add(node.value)
            self.index.name_uses[node.value].append(node)


COUNTER = cst.Call(func=cst.Name("range"))  # what `i` iterates in `for i, x in enumerate(xs)`


def loop_bindings(target: cst.BaseExpression, iterable: cst.BaseExpression):
    """(name, iterable whose elements it takes) for a loop target; `enumerate`'s index is an int."""
    if (
        isinstance(target, (cst.Tuple, cst.List))
        and len(target.elements) == 2
        and isinstance(iterable, cst.Call)
        and dotted_name(iterable.func) == "enumerate"
    ):
        first, second = (e.value for e in target.elements)
        for name in _target_names(first):
            yield name, COUNTER
        for name in _target_names(second):
            yield name, iterable
        return
    for name in _target_names(target):
        yield name, iterable


def _target_names(target: cst.BaseExpression):
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_names(element.value)


# ("visit_", cst.Name) -> `_Indexer.visit_Name` or None, looked up once per class: kept on the class,
# not the instance (bound methods kept on an indexer make it a cycle, freed only by the collector)
_HANDLERS: dict[tuple[str, type], Callable[[_Indexer, cst.CSTNode], object] | None] = {}


def _handler(prefix: str, kind: type) -> Callable[[_Indexer, cst.CSTNode], object] | None:
    key = (prefix, kind)
    try:
        return _HANDLERS[key]
    except KeyError:
        found = _HANDLERS[key] = getattr(_Indexer, f"{prefix}{kind.__name__}", None)
        return found


def build_index(module: cst.Module) -> ModuleIndex:
    index = ModuleIndex()
    walk(module, _Indexer(index))
    return index


# -- a read-only walk ---------------------------------------------------------------------------------
# libcst's `visit` rebuilds every node it passes (each `_visit_and_replace_children` makes a new
# node, validated), which made indexing a 3,000-line module with a few fixes cost more than parsing
# it. This walk calls the same visitor methods on the same nodes in the same order, reading each
# node's children from its fields in the order libcst visits them: learnt once per node class and
# set of fields present, from libcst itself (one `_visit_and_replace_children` of a node of that
# shape), and checked there; a shape whose order cannot be told is visited by libcst, as before.


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """`node.visit(visitor)` for a visitor that only reads (no `visit_<Node>_<field>` methods)."""
    if visitor.on_visit(node):
        order = _order(node)
        if order is None:
            node._visit_and_replace_children(visitor)
        else:
            for name in order:
                value = getattr(node, name)
                if isinstance(value, cst.CSTNode):
                    walk(value, visitor)
                else:
                    for item in value:
                        walk(item, visitor)
    visitor.on_leave(node)


_FIELDS: dict[type, tuple[str, ...]] = {}
_ORDERS: dict[tuple[type, tuple[str, ...]], tuple[str, ...] | None] = {}


def _order(node: cst.CSTNode) -> tuple[str, ...] | None:
    kind = type(node)
    names = _FIELDS.get(kind)
    if names is None:  # the fields that may hold nodes (not a name's `value: str`)
        names = _FIELDS[kind] = tuple(f.name for f in fields(node) if f.type not in _SCALARS)
    present = tuple(name for name in names if _holds_nodes(getattr(node, name)))
    key = (kind, present)
    if key not in _ORDERS:
        _ORDERS[key] = _learn(node, present)
    return _ORDERS[key]


_SCALARS = frozenset({"str", "bool", "int", str, bool, int})


def _holds_nodes(value: object) -> bool:
    # (libcst's sequences hold nodes only)
    return isinstance(value, cst.CSTNode) or (type(value) in (list, tuple) and len(value) > 0)  # type: ignore[arg-type]


class _Children(cst.CSTVisitor):
    def __init__(self) -> None:
        self.seen: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.seen.append(node)
        return False


def _learn(node: cst.CSTNode, present: tuple[str, ...]) -> tuple[str, ...] | None:
    """The order libcst visits the fields `present` of nodes shaped like `node` in; None when
    its children are not those fields' nodes, field after field."""
    recorder = _Children()
    node._visit_and_replace_children(recorder)
    owner: dict[int, str] = {}
    for name in present:
        value = getattr(node, name)
        for item in [value] if isinstance(value, cst.CSTNode) else value:
            if id(item) in owner:
                return None  # one node in two places: no order of fields tells them apart
            owner[id(item)] = name
    if any(id(child) not in owner for child in recorder.seen):
        return None
    order = tuple(dict.fromkeys(owner[id(child)] for child in recorder.seen))
    flat = [
        item
        for name in order
        for item in ([getattr(node, name)] if isinstance(getattr(node, name), cst.CSTNode) else getattr(node, name))
    ]
    if len(flat) != len(recorder.seen) or any(a is not b for a, b in zip(flat, recorder.seen)):
        return None
    return order
