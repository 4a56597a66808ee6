"""`FileContext`: everything rules may ask about a file beyond its syntax, computed lazily once."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import libcst as cst

from . import guards, steps
from .index import ModuleIndex, build_index, loop_bindings
from .names import dotted_name, last_part, positional
from .tensors import Kind, TensorInference

XLA_MODULES = ("torch_xla", "torchax")


class FileContext:
    def __init__(self, path: Path, module: cst.Module) -> None:
        self.path = path
        self.module = module
        self.index: ModuleIndex = build_index(module)
        self.tensors = TensorInference(self)
        self.step_loop_cache: dict[int, bool] = {}
        self._calls_within: dict[int, list[cst.Call]] = {}

    # -- imports and names ----------------------------------------------------------------
    @cached_property
    def uses_xla(self) -> bool:
        """The file imports torch_xla or torchax (XLA-only rules fire only here)."""
        return any(b.qualified.split(".")[0] in XLA_MODULES for b in self.index.imports.values())

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """`xm.mark_step` -> `torch_xla.core.xla_model.mark_step`, through this file's imports."""
        name = dotted_name(node)
        if not name:
            return None
        head, _, rest = name.partition(".")
        binding = self.index.imports.get(head)
        if binding is None:
            return name
        return f"{binding.qualified}.{rest}" if rest else binding.qualified

    # -- structure --------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.index.parent(node)

    def calls_within(self, node: cst.CSTNode) -> list[cst.Call]:
        """Calls under `node`, not descending into nested functions, lambdas or classes."""
        key = id(node)
        if key not in self._calls_within:
            found: list[cst.Call] = []
            stack = [node]
            while stack:
                current = stack.pop()
                if isinstance(current, cst.Call):
                    found.append(current)
                for child in current.children:
                    if not isinstance(child, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                        stack.append(child)
            self._calls_within[key] = found
        return self._calls_within[key]

    # -- step closures ------------------------------------------------------------------------
    @cached_property
    def _step_closures(self) -> set[int]:
        """Callbacks passed to `xm.add_step_closure`: they run after the step's graph executed."""
        closures: set[int] = set()
        for call in self.index.calls:
            if last_part(dotted_name(call.func)) != "add_step_closure":
                continue
            args = positional(call)
            if not args:
                continue
            target = args[0].value
            if isinstance(target, cst.Call) and last_part(dotted_name(target.func)) == "partial" and target.args:
                target = target.args[0].value
            if isinstance(target, cst.Lambda):
                closures.add(id(target))
            name = dotted_name(target)
            if name:
                for func in self.index.functions.get(last_part(name), ()):
                    closures.add(id(func))
        return closures

    def is_step_closure(self, func: cst.CSTNode) -> bool:
        return id(func) in self._step_closures

    @cached_property
    def collate_functions(self) -> set[str]:
        """Names of functions passed as `collate_fn=` in this file: they build every batch."""
        names: set[str] = set()
        for call in self.index.calls:
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "collate_fn":
                    name = last_part(dotted_name(arg.value))
                    if name:
                        names.add(name)
        return names

    # -- per-step paths ----------------------------------------------------------------------------
    @cached_property
    def step_functions(self) -> set[int]:
        return steps.compute_step_functions(self)

    def is_step_function(self, func: cst.FunctionDef) -> bool:
        return steps.is_step_function(self, func)

    def is_per_step(self, node: cst.CSTNode, *, periodic: bool = False) -> bool:
        return steps.is_per_step(self, node, periodic=periodic)

    @cached_property
    def loop_reachable_functions(self) -> set[int]:
        return steps.loop_reachable_functions(self)

    @cached_property
    def per_call_functions(self) -> set[int]:
        return steps.compute_per_call_functions(self)

    def runs_hot(self, node: cst.CSTNode) -> bool:
        """Runs every step, or on every call of a loss/metric check, and may run on XLA."""
        return steps.runs_hot(self, node)

    # -- device guards --------------------------------------------------------------------------
    def in_non_xla_code(self, node: cst.CSTNode) -> bool:
        """`node` runs only off XLA: a CUDA-only branch, after `is_xla or`, below `if is_xla: return`."""
        child = node
        for anc in self.index.ancestors(node):
            if isinstance(anc, (cst.If, cst.IfExp)):
                polarity = guards.xla_polarity(anc.test)
                if child is anc.body and polarity == guards.NEGATIVE:
                    return True
                if child is anc.orelse and polarity == guards.POSITIVE:
                    return True
            elif isinstance(anc, cst.BooleanOperation) and child is anc.right:
                polarity = guards.xla_polarity(anc.left)
                if isinstance(anc.operator, cst.Or) and polarity == guards.POSITIVE:
                    return True
                if isinstance(anc, cst.BooleanOperation) and isinstance(anc.operator, cst.And) and \
                        polarity == guards.NEGATIVE:
                    return True
            elif isinstance(anc, (cst.IndentedBlock, cst.Module)) and self._after_xla_exit(anc, child):
                return True
            elif isinstance(anc, cst.ExceptHandler) and child is anc.body and anc.type is not None and \
                    guards.xla_polarity(anc.type) == guards.NEGATIVE:
                return True  # `except torch.cuda.OutOfMemoryError:` fallbacks
            elif isinstance(anc, (cst.FunctionDef, cst.ClassDef)):
                pass
            child = anc
        return False

    def _after_xla_exit(self, block: cst.IndentedBlock | cst.Module, statement: cst.CSTNode) -> bool:
        for earlier in block.body:
            if earlier is statement:
                return False
            if isinstance(earlier, cst.If) and earlier.orelse is None and guards.exits_block(earlier.body) \
                    and guards.xla_polarity(earlier.test) == guards.POSITIVE:
                return True
        return False

    # -- values -----------------------------------------------------------------------------------
    def tensor_kind(self, node: cst.BaseExpression) -> Kind:
        return self.tensors.kind(node)

    def on_device(self, node: cst.BaseExpression) -> bool:
        return self.tensors.kind(node).on_device

    def reaching_values(self, name: cst.Name) -> list[cst.BaseExpression]:
        """Values assigned to `name` in its scope: the last assignment before it in source order
        (plus earlier ones for `x += v`), or all of them when none precedes it (loops)."""
        scope = self.index.scope_of(name)
        values = self._scope_values(scope, name.value)
        if not values and not isinstance(scope, cst.Module):
            # closures read the enclosing function's variables
            for anc in self.index.ancestors(scope):
                if isinstance(anc, (cst.FunctionDef, cst.Lambda, cst.Module)):
                    values = self._scope_values(anc, name.value)
                    if values:
                        return values
            return []
        if not values:
            return []
        order = self.index.order
        position = order.get(id(name), 0)
        # a value precedes the use unless the use is inside it (`x = x.cpu()` reads the old x)
        inside = {id(a) for a in self.index.ancestors(name)}
        before = [v for v in values if order.get(id(v), 0) < position and id(v) not in inside]
        if not before:
            # a parameter is the reaching definition; otherwise a loop may carry a later assignment round
            return [] if self.parameter(name) is not None else values
        reaching = [before[-1]]
        for value in reversed(before[:-1]):
            if id(reaching[-1]) not in self.index.augmented:
                break
            reaching.append(value)
        return reaching

    def _scope_values(self, scope: cst.CSTNode, name: str) -> list[cst.BaseExpression]:
        per_scope = self.index.assignments.get(id(scope))
        return per_scope.get(name, []) if per_scope else []

    def loop_iterables(self, name: cst.Name) -> list[cst.BaseExpression]:
        for anc in self.index.ancestors(name):
            if isinstance(anc, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                comp = anc.for_in
                while comp is not None:  # `[f(x) for x in xs]`: x takes the elements of xs
                    found = [it for n, it in loop_bindings(comp.target, comp.iter) if n == name.value]
                    if found:
                        return found
                    comp = comp.inner_for_in
            elif isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                break
        scope = self.index.scope_of(name)
        per_scope = self.index.loop_targets.get(id(scope))
        return per_scope.get(name.value, []) if per_scope else []

    def attribute_values(self, dotted: str) -> list[cst.BaseExpression]:
        """Values assigned to `self.x`-style targets anywhere in the file."""
        found: list[cst.BaseExpression] = []
        for per_scope in self.index.assignments.values():
            found.extend(per_scope.get(dotted, ()))
        return found

    def assigned_values(self, node: cst.BaseExpression) -> list[cst.BaseExpression]:
        if isinstance(node, cst.Name):
            return self.reaching_values(node)
        name = dotted_name(node)
        return self.attribute_values(name) if name else []

    def parameter(self, name: cst.Name) -> cst.Param | None:
        for anc in self.index.ancestors(name):
            if isinstance(anc, (cst.FunctionDef, cst.Lambda)):
                params = anc.params
                for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                    if param.name.value == name.value:
                        return param
        return None
