"""One pre-pass over a module's `ast`: parents, imports, function scopes and their assignments.

The walk is iterative (deeply nested code must not hit Python's recursion limit) and also files
every node by type, so rules are dispatched to the nodes they look at without a second walk.
"""

from __future__ import annotations

import ast
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from .names import dotted_name

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
Function = ast.FunctionDef | ast.AsyncFunctionDef
LOOPS = (ast.For, ast.AsyncFor, ast.While)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
Node = TypeVar("Node", bound=ast.AST)
_GUARDS = (ast.Try, ast.If, ast.With, ast.AsyncWith) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


@dataclass(frozen=True)
class ImportBinding:
    name: str  # the local name bound
    qualified: str  # what it refers to, e.g. "torch_xla.core.xla_model"
    statement: ast.Import | ast.ImportFrom
    guarded: bool  # inside try/if/function rather than at module top level
    scope: ast.AST | None = None  # the Module / FunctionDef / Lambda it binds in


@dataclass
class ModuleIndex:
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    fields: dict[ast.AST, str] = field(default_factory=dict)  # node -> the parent's field holding it
    imports: dict[str, ImportBinding] = field(default_factory=dict)  # the last binding of each name
    import_bindings: list[ImportBinding] = field(default_factory=list)  # all of them, in source order
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # scope -> local name (or "self.x") -> expressions assigned to it (flow-insensitive)
    assignments: dict[ast.AST, dict[str, list[ast.expr]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    # scope -> names bound by `for NAME in ITER` -> ITER
    loop_targets: dict[ast.AST, dict[str, list[ast.expr]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    loops: list[ast.For | ast.AsyncFor | ast.While] = field(default_factory=list)
    calls: list[ast.Call] = field(default_factory=list)
    module_names: set[str] = field(default_factory=set)  # names bound at module level (any block)
    order: dict[ast.AST, int] = field(default_factory=dict)  # node -> pre-order position (source order)
    augmented: set[ast.AST] = field(default_factory=set)  # values assigned by `x += v`
    all_names: set[str] = field(default_factory=set)  # every identifier, attribute names included
    # identifiers used or bound as names (not `.attr`), to pick names a fix may bind without a clash
    bare_names: set[str] = field(default_factory=set)
    name_uses: dict[str, list[ast.Name]] = field(default_factory=lambda: defaultdict(list))
    by_type: dict[type, list[ast.AST]] = field(default_factory=lambda: defaultdict(list))
    # (id of a statement block, test name) -> position of the first statement passing the test
    _first_in_block: dict[tuple[int, str], int] = field(default_factory=dict)
    _by_scope: dict[tuple[type, ...], dict[ast.AST, list[ast.AST]]] = field(default_factory=dict)
    _positions: dict[ast.AST, int] = field(default_factory=dict)  # statement -> its position in its block

    def of_type(self, kind: type[Node]) -> list[Node]:
        """The nodes of exactly `kind`, in source order: `by_type` files each node under its own class,
        so the list holds `kind`s only (a cast, not a check: this is asked per rule and per file)."""
        return cast("list[Node]", self.by_type.get(kind, []))

    def parent(self, node: ast.AST | None) -> ast.AST | None:
        """The node's parent; None for the module, or for None (so `parent(parent(x))` needs no check)."""
        return self.parents.get(node) if node is not None else None

    def within(self, kind: type[Node], node: ast.AST) -> list[Node]:
        """The nodes of `kind` in `node`'s subtree (nested functions included, as `ast.walk` finds
        them), in source order: a subtree is a run of pre-order numbers, found by bisection in the
        kind's list (filed in that order) rather than by walking it."""
        return self.numbered(kind, *self.numbers(node))

    def numbers(self, node: ast.AST) -> tuple[int, int]:
        """The first and last pre-order numbers of `node`'s subtree."""
        last = node
        while True:  # the subtree's last node in pre-order: the last child's, down to a leaf
            child = _last_child(last)
            if child is None:
                break
            last = child
        return self.order[node], self.order[last]

    def numbered(self, kind: type[Node], first: int, last: int) -> list[Node]:
        """The nodes of `kind` numbered `first` to `last` (a run of subtrees), in source order."""
        nodes = cast("list[Node]", self.by_type.get(kind, []))
        if not nodes:
            return []
        key = self.order.__getitem__
        return nodes[bisect_left(nodes, first, key=key) : bisect_right(nodes, last, key=key)]

    def field_of(self, node: ast.AST) -> str | None:
        """The field of its parent that holds `node` ("body", "orelse", "test", ...)."""
        return self.fields.get(node)

    def after_in_block(self, statement: ast.stmt, test_name: str, test) -> bool:
        """Some earlier statement of `statement`'s block passes `test` (a function of one statement
        only, named `test_name`). Memoised per block, so asking it of every statement of a
        generated 100,000-line function is linear, not quadratic."""
        parent = self.parents.get(statement)
        block = getattr(parent, self.fields.get(statement) or "", None)
        if not isinstance(block, list):
            return False
        key = (id(block), test_name)
        first = self._first_in_block.get(key)
        if first is None:
            first = next((i for i, earlier in enumerate(block) if test(earlier)), len(block))
            self._first_in_block[key] = first
        if statement not in self._positions:
            self._positions.update((s, i) for i, s in enumerate(block))
        return self._positions[statement] > first

    def ancestors(self, node: ast.AST):
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def in_scope(self, kinds: tuple[type, ...], scope: ast.AST) -> list[ast.AST]:
        """The nodes of `kinds` (by kind, then in source order) whose scope is `scope`. Grouped once
        per `kinds`: asked of every function of a module of 40,000 functions it is linear, not
        quadratic."""
        grouped = self._by_scope.get(kinds)
        if grouped is None:
            grouped = self._by_scope[kinds] = defaultdict(list)
            for kind in kinds:
                for node in self.by_type.get(kind, ()):
                    grouped[self.scope_of(node)].append(node)
        return grouped.get(scope, [])

    def scope_of(self, node: ast.AST) -> Scope:
        for anc in self.ancestors(node):
            if isinstance(anc, SCOPES):
                return anc
        raise AssertionError("node outside the module")

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return anc
        return None

    def enclosing_loop(self, node: ast.AST) -> ast.For | ast.AsyncFor | ast.While | None:
        """The innermost loop that runs `node` at every iteration, in `node`'s own function: not
        the loop whose iterable `node` is (evaluated once)."""
        child = node
        for anc in self.ancestors(node):
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return None
            if isinstance(anc, LOOPS) and self.field_of(child) not in ("iter", "target"):
                return anc
            child = anc
        return None

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost `def` around `node`; None at module level or inside a lambda."""
        for anc in self.ancestors(node):
            if isinstance(anc, ast.Lambda):
                return None
            if isinstance(anc, FUNCTIONS):
                return anc
        return None


def build_index(tree: ast.Module) -> ModuleIndex:
    # The hottest loop of a cold run: types compared exactly (`ast.parse` makes no subclasses),
    # fields read from `_fields`, and only the node types `_record` files are handed to it.
    index = ModuleIndex()
    parents, fields, order, by_type = index.parents, index.fields, index.order, index.by_type
    all_names, bare_names, name_uses, calls = index.all_names, index.bare_names, index.name_uses, index.calls
    module, name_type, attribute_type, call_type, store = ast.Module, ast.Name, ast.Attribute, ast.Call, ast.Store
    node_type = ast.AST
    # (node, scope, guard depth at module level); the node is Any: it is dispatched on its exact type
    # through the local aliases above, which mypy does not narrow on
    stack: list[tuple[Any, ast.AST, int]] = [(tree, tree, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, scope, guards = pop()
        order[node] = len(order)
        kind = type(node)
        by_type[kind].append(node)
        if kind is name_type:  # the commonest nodes, filed here as `_record` would
            all_names.add(node.id)
            bare_names.add(node.id)
            name_uses[node.id].append(node)
            if type(node.ctx) is store and type(scope) is module:
                index.module_names.add(node.id)
        elif kind is attribute_type:
            all_names.add(node.attr)
        elif kind is call_type:
            calls.append(node)
        elif kind in _RECORDED:
            _record(index, node, scope, guards)
        is_scope = kind in _SCOPE_TYPES
        inner_scope = node if is_scope else scope
        inner_guards = guards + 1 if kind in _GUARD_TYPES and type(scope) is module else guards
        outer_fields = is_scope and node is not scope  # decorators and annotations: the enclosing scope
        names = _REVERSED_FIELDS.get(kind)
        if names is None:
            names = _reversed_fields(kind)
        # children pushed last first, so they are numbered in source order; decorators and
        # annotations run in the enclosing scope, the body in the function's own
        for name in names:
            value = getattr(node, name, None)
            child_scope = scope if outer_fields and name in _OUTER_FIELDS else inner_scope
            if type(value) is list:
                for item in reversed(value):
                    if isinstance(item, node_type):
                        parents[item] = node
                        fields[item] = name
                        push((item, child_scope, inner_guards))
            elif isinstance(value, node_type):
                parents[value] = node
                fields[value] = name
                push((value, child_scope, inner_guards))
    return index


# A node class's fields that may hold nodes, less `ctx`, last first (children are pushed last first,
# so they are numbered in source order): `Load()`/`Store()` are singletons that `ast.parse` hangs
# under every name and attribute, a third of the nodes of a module, and no question is asked of them
# (their parent and place would only be the last node seen)
_REVERSED_FIELDS: dict[type, tuple[str, ...]] = {}


def _reversed_fields(kind: type) -> tuple[str, ...]:
    names = _REVERSED_FIELDS[kind] = tuple(name for name in reversed(cast(Any, kind)._fields) if name != "ctx")
    return names


_SCOPE_TYPES = frozenset(SCOPES)


def _last_child(node: ast.AST) -> ast.AST | None:
    """The child of `node` that `build_index` numbers last (fields in order, `ctx` left out)."""
    kind = type(node)
    names = _REVERSED_FIELDS.get(kind)
    for name in names if names is not None else _reversed_fields(kind):
        value = getattr(node, name, None)
        if type(value) is list:
            for item in reversed(value):
                if isinstance(item, ast.AST):
                    return item
        elif isinstance(value, ast.AST):
            return value
    return None


_GUARD_TYPES = frozenset(_GUARDS)
_OUTER_FIELDS = ("decorator_list", "returns")


def _record(index: ModuleIndex, node: ast.AST, scope: ast.AST, guards: int) -> None:
    at_module = isinstance(scope, ast.Module)
    if isinstance(node, ast.Name):
        index.all_names.add(node.id)
        index.bare_names.add(node.id)
        index.name_uses[node.id].append(node)
        if isinstance(node.ctx, ast.Store) and at_module:
            index.module_names.add(node.id)
    elif isinstance(node, ast.Attribute):
        index.all_names.add(node.attr)
    elif isinstance(node, ast.Call):
        index.calls.append(node)
    elif isinstance(node, FUNCTIONS):
        index.functions[node.name].append(node)
        if at_module:  # classes are no scope: a method of a module-level class counts too
            index.module_names.add(node.name)
        index.all_names.add(node.name)
        index.bare_names.add(node.name)
    elif isinstance(node, ast.ClassDef):
        _bind(index, scope, node.name, None)
        index.all_names.add(node.name)
        index.bare_names.add(node.name)
    elif isinstance(node, ast.arg):
        index.all_names.add(node.arg)
        index.bare_names.add(node.arg)
    elif isinstance(node, ast.keyword):
        if node.arg:
            index.all_names.add(node.arg)
    elif isinstance(node, ast.alias):
        index.all_names.update(node.name.split("."))
        if node.asname:
            index.all_names.add(node.asname)
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            _bind_target(index, scope, target, node.value)
    elif isinstance(node, ast.AnnAssign):
        _bind_target(index, scope, node.target, node.value)
    elif isinstance(node, ast.AugAssign):
        index.augmented.add(node.value)  # `x += t` makes x at least as tensor-like as t
        _bind_target(index, scope, node.target, node.value)
    elif isinstance(node, ast.NamedExpr):
        _bind_target(index, scope, node.target, node.value)
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        index.loops.append(node)
        for name, iterable in loop_bindings(node.target, node.iter):
            index.loop_targets[scope][name].append(iterable)
    elif isinstance(node, ast.While):
        index.loops.append(node)
    elif isinstance(node, ast.withitem):
        if node.optional_vars is not None:
            _bind_target(index, scope, node.optional_vars, node.context_expr)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                _import(index, scope, guards, alias.asname, alias.name, node)
            else:
                head = alias.name.split(".")[0]
                _import(index, scope, guards, head, head, node)
    elif isinstance(node, ast.ImportFrom):
        if node.level or not node.module:
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            _import(index, scope, guards, alias.asname or alias.name, f"{node.module}.{alias.name}", node)


# the node types `_record` files besides Name, Attribute and Call (which `build_index` files itself)
_RECORDED = frozenset(
    {
        *FUNCTIONS,
        ast.ClassDef,
        ast.arg,
        ast.keyword,
        ast.alias,
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.NamedExpr,
        ast.For,
        ast.AsyncFor,
        ast.While,
        ast.withitem,
        ast.Import,
        ast.ImportFrom,
    }
)


def _bind(index: ModuleIndex, scope: ast.AST, name: str, value: ast.expr | None) -> None:
    if isinstance(scope, ast.Module):
        index.module_names.add(name)
    if value is not None:
        index.assignments[scope][name].append(value)


def _bind_target(index: ModuleIndex, scope: ast.AST, target: ast.expr, value: ast.expr | None) -> None:
    if isinstance(target, ast.Name):
        _bind(index, scope, target.id, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        if (
            isinstance(value, (ast.Tuple, ast.List))
            and len(value.elts) == len(target.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        ):
            # `a, b = x, y.tolist()`: each name gets its own element
            for element, element_value in zip(target.elts, value.elts):
                _bind_target(index, scope, element, element_value)
            return
        # `a, b = f()`: each name gets the whole value; tensor-ness of tuples is shared.
        for element in target.elts:
            _bind_target(index, scope, element.value if isinstance(element, ast.Starred) else element, value)
    elif isinstance(target, ast.Attribute):
        name = dotted_name(target)
        if name and value is not None:  # self.x = ... is looked up as "self.x"
            index.assignments[scope][name].append(value)


def _import(
    index: ModuleIndex, scope: ast.AST, guards: int, local: str, qualified: str, node: ast.Import | ast.ImportFrom
) -> None:
    guarded = not isinstance(scope, ast.Module) or guards > 0
    binding = ImportBinding(local, qualified, node, guarded, scope)
    index.imports[local] = binding
    index.import_bindings.append(binding)
    index.bare_names.add(local)
    _bind(index, scope, local, None)


COUNTER = ast.Call(func=ast.Name("range", ast.Load()), args=[], keywords=[])  # `i` in `for i, x in enumerate(xs)`


def loop_bindings(target: ast.expr, iterable: ast.expr):
    """(name, iterable whose elements it takes) for a loop target; `enumerate`'s index is an int."""
    if (
        isinstance(target, (ast.Tuple, ast.List))
        and len(target.elts) == 2
        and isinstance(iterable, ast.Call)
        and dotted_name(iterable.func) == "enumerate"
    ):
        first, second = target.elts
        for name in target_names(first):
            yield name, COUNTER
        if isinstance(second, (ast.Tuple, ast.List)) and _zip_of(second, iterable.args[0] if iterable.args else None):
            yield from loop_bindings(second, iterable.args[0])
            return
        for name in target_names(second):
            yield name, iterable
        return
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(iterable, ast.Call) and _zip_of(target, iterable):
        # `for shape, idx in zip(shapes, indexes)`: each name takes the elements of its own iterable
        for element, source in zip(target.elts, iterable.args):
            yield from loop_bindings(element, source)
        return
    for name in target_names(target):
        yield name, iterable


def _zip_of(target: ast.Tuple | ast.List, iterable: ast.expr | None) -> bool:
    """`iterable` is `zip(a, b, ...)` with one plain argument per element of `target`."""
    return (
        isinstance(iterable, ast.Call)
        and dotted_name(iterable.func) == "zip"
        and not iterable.keywords
        and len(iterable.args) == len(target.elts)
        and not any(isinstance(a, ast.Starred) for a in iterable.args)
        and not any(isinstance(e, ast.Starred) for e in target.elts)
    )


def target_names(target: ast.expr):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element.value if isinstance(element, ast.Starred) else element)


def qualname(index, node: ast.AST) -> str:
    """`Trainer.step`, `train`, `outer.inner` for a function (or class) node; "" for the module."""
    parts = [node.name] if isinstance(node, (*FUNCTIONS, ast.ClassDef)) else []
    for anc in index.ancestors(node):
        if isinstance(anc, (*FUNCTIONS, ast.ClassDef)):
            parts.append(anc.name)
    return ".".join(reversed(parts))


def own_returns(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    """The `return` statements of `func` itself (not of the functions and lambdas nested in it);
    empty for a generator, whose call returns no value of its `return`s."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found
