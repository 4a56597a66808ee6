"""`FileContext`: everything rules may ask about a file beyond its syntax, computed lazily once."""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from ..source import SourceText, is_file, stat_or_none
from . import guards, steps
from .barriers import StepBarriers
from .ddp import DataParallel
from .file import File
from .index import (
    COMPREHENSIONS,
    FUNCTIONS,
    LOOPS,
    ModuleIndex,
    build_index,
    loop_bindings,
    own_returns,
    qualname,
    target_names,
)
from .loaders import TrainingSources
from .names import argument, dotted_name, function_params, last_part, positional
from .project import NO_PROJECT, ProjectFacts, hook_names_used, project_root, written_callee
from .reads import ParamRead
from .tensors import Kind, TensorInference
from .vocabulary import XLA_MODULES

if TYPE_CHECKING:
    from .compiled import CompiledRegions
    from .evidence import Evidence
    from .jax_tracing import JittedCallable

Built = TypeVar("Built")
# Files that make a project an installable distribution (see `application_module`).
# Decorators that register a class under a name (`@register_model`, `@MODELS.register_module()`).
REGISTERS = re.compile(r"regist", re.I)
PACKAGING_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
# Top-level modules whose import makes torch tensors possible in a file (see `jax_only`).
TORCH_MODULES = ("torch", "torch_xla", "torchax", "torchvision", "torchaudio", "functorch")
# What these names mean in torch_xla code by universal convention, when no import binds them (they
# are passed around: `def _mp_fn(rank, cfg, xm):`).
CONVENTIONAL_MODULES = {
    "xm": "torch_xla.core.xla_model",
    "xr": "torch_xla.runtime",
    "xmp": "torch_xla.distributed.xla_multiprocessing",
}
MAX_CALL_SITES = 8  # call sites read for what a parameter is passed
_NOT_ENTERED: frozenset[type[ast.AST]] = frozenset({*FUNCTIONS, ast.Lambda, ast.ClassDef})  # see `calls_within`


class FileContext:
    def __init__(
        self,
        path: Path,
        tree: ast.Module,
        text: SourceText,
        *,
        assume_xla: bool = False,
        project: ProjectFacts = NO_PROJECT,
        target_version: tuple[int, ...] | None = None,
    ) -> None:
        self.path = path
        self.tree = tree
        self.text = text
        self.assume_xla = assume_xla
        self.target_version = target_version  # the oldest torch_xla the code must run on (None: the newest)
        self.project = project  # what the rest of the project says about this file
        self.index: ModuleIndex = build_index(tree)
        self._built: dict[Callable[[File], object], object] = {}  # see `cached`
        self.tensors = self.cached(TensorInference)
        self.step_loop_cache: dict[ast.AST, bool] = {}
        self.trains_cache: dict[ast.AST, bool] = {}
        self.analysis_cache: dict[str, object] = {}  # whole-file answers of `evidence`
        self.gradients_cache: dict[ast.AST, bool] = {}  # see jax_tracing.computes_gradients
        self.if_gate_cache: dict[tuple[ast.AST, str | None], bool] = {}  # see steps.gated_by
        self.gate_cache: dict[ast.AST, bool] = {}  # node -> `steps.gated_by` it and its parent
        self._off_xla: dict[ast.AST, bool] = {}  # node -> `in_non_xla_code`
        self.loop_counter_cache: dict[ast.AST, frozenset[str]] = {}  # see steps._loop_counters
        self.param_reads_cache: dict[ast.AST, list] = {}  # see reads.parameter_reads
        # (scope, name) -> the source positions of the values assigned to it, when they come in
        # source order (else None): a use finds the last one before it by bisection
        self._value_positions: dict[tuple[ast.AST, str], list[int] | None] = {}
        # (parent, field) of a block -> its statements' positions, and `x = ...` positions by target
        self._block_assignments: dict[tuple[ast.AST, str], tuple[dict[int, int], dict[str, list[int]]]] = {}
        self._calls_within: dict[ast.AST, list[ast.Call]] = {}
        self._qualified: dict[ast.AST | None, str | None] = {}  # see qualified_name

    def close(self) -> None:
        """Drop everything the file's analyses built. They hold this context and it holds them: a
        cycle, which only the collector would free (and the file's trees with it); a run pauses the
        collector for each file's work (`deep.deep_stack`) and frees it here, at once. A closed
        context answers nothing."""
        self.__dict__.clear()

    # -- source ----------------------------------------------------------------------------------
    def code(self, node: ast.AST) -> str:
        """The source text of `node`, as written."""
        return self.text.segment(node)

    def cached(self, build: Callable[[File], Built]) -> Built:
        """`build(self)`, built once per file: the per-file object of an analysis (`TensorInference`,
        `CompiledRegions`) or a memo of its answers, keyed by the function or class that builds it, so an
        analysis below this module asks for another's without naming this class (see `file.File`)."""
        try:
            found = self._built[build]
        except KeyError:
            found = self._built[build] = build(self)
        return cast("Built", found)  # (what `build` returned for this key)

    # -- imports and names ----------------------------------------------------------------------
    @cached_property
    def imports_xla(self) -> bool:
        """The file imports torch_xla or torchax."""
        return any(b.qualified.split(".")[0] in XLA_MODULES for b in self.index.imports.values())

    @cached_property
    def imports_jax(self) -> bool:
        """The file imports jax (or a library built on it: flax, optax, equinox)."""
        return any(
            b.qualified.split(".")[0] in ("jax", "flax", "optax", "equinox") for b in self.index.imports.values()
        )

    @cached_property
    def placed_off_xla(self) -> bool:
        """A module that places its tensors on CUDA (or MPS) explicitly (`placement.off_xla_placement`)
        and that no XLA code reaches. In a project that runs on XLA elsewhere: the project's GPU path
        or an evaluation on another device, which no XLA module calls. In a project with no XLA code
        at all: a CUDA training script or tool, where a host read is no graph cut; one that takes
        its device from a project function of such a module counts too (`ProjectFacts.off_xla_device`).
        None of it runs on XLA, so the XLA rules leave it alone; `--assume-xla` (the migration view:
        the user says the code moves to XLA) judges it all."""
        from .placement import ONLY_OFF_XLA, off_xla_placement

        # the module's own evidence first: the project's facts are asked of a module placed off XLA,
        # or of one that shows no placement of its own, where the project's one flag of a device
        # taken from elsewhere is asked first (a question asked is one the shared first-pass
        # analysis must answer again)
        if self.uses_xla:
            return False
        placement = off_xla_placement(self)
        if placement is None:
            # in a project with no XLA code, a device taken from a project function of another
            # backend's module (`_, device = setup()` of a `common.py` that picks CUDA) places it too
            return (
                bool(self.project.off_xla_device)
                and not self.project.project_uses_xla
                and off_xla_placement(self, device_from_elsewhere=True) is not None
            )
        if not self.project.project_uses_xla:
            return True
        # a device a caller chooses may be XLA's; a helper the XLA scripts call (a meter whose sync
        # uses CUDA) runs on XLA there
        return placement == ONLY_OFF_XLA and not self.project.called_from_xla

    @cached_property
    def imports_torch(self) -> bool:
        """The file imports torch (or torch_xla, torchvision, ...)."""
        return any(b.qualified.split(".")[0] in TORCH_MODULES for b in self.index.imports.values())

    @cached_property
    def jax_only(self) -> bool:
        """The file imports JAX (or a library built on it) and nothing of torch: its arrays are JAX
        arrays, which the PyTorch rules do not judge (the JAX rules do)."""
        return self.imports_jax and not self.imports_torch

    @property
    def uses_xla(self) -> bool:
        """XLA-only rules fire here: the file imports torch_xla/torchax, takes its device from a
        project function that returns an XLA device (`from utils import get_device`), or
        `--assume-xla` is on."""
        return self.assume_xla or self.imports_xla or self.project.xla_device

    def qualified_name(self, node: ast.AST) -> str | None:
        """`xm.mark_step` -> `torch_xla.core.xla_model.mark_step`, through this file's imports (asked
        of every call by most rules: answered once per node)."""
        try:
            return self._qualified[node]
        except KeyError:
            found = self._qualified[node] = self._qualify(node)
            return found

    def _qualify(self, node: ast.AST) -> str | None:
        name = dotted_name(node)
        if not name:
            return None
        head, _, rest = name.partition(".")
        binding = self.index.imports.get(head)
        if binding is not None:
            qualified = binding.qualified
        elif head in CONVENTIONAL_MODULES and self.uses_xla and self._unassigned(head, node):
            qualified = CONVENTIONAL_MODULES[head]
        elif head in self.lazy_module_names and (returned := self._returned_module(node)) is not None:
            qualified = returned
        else:
            return name
        return f"{qualified}.{rest}" if rest else qualified

    # -- modules imported lazily by a helper (`torch_xla_mod, xm = _import_xla()`) ------------------
    @cached_property
    def lazy_module_names(self) -> frozenset[str]:
        """Names assigned the result of a call of a function of this module that imports something:
        candidates for a module the function imports and returns (an optional backend's import)."""
        importing = {b.scope.name for b in self.index.import_bindings if isinstance(b.scope, FUNCTIONS)}
        if not importing:
            return frozenset()
        return frozenset(
            name
            for per_scope in self.index.assignments.values()
            for name, values in per_scope.items()
            if any(isinstance(v, ast.Call) and dotted_name(v.func) in importing for v in values)
        )

    def _returned_module(self, node: ast.AST) -> str | None:
        """The module a name in `node` (`torch_xla_mod.sync`) holds when every value it is assigned
        (`None` placeholders aside) is a call of a function of this module that imports that module
        and returns it (`def _import_xla(): import torch_xla; return torch_xla`)."""
        base = node
        while isinstance(base, ast.Attribute):
            base = base.value
        if not isinstance(base, ast.Name):
            return None
        found = set()
        for value in self.reaching_values(base):
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            module = self._module_returned_by(value, base.id)
            if module is None:
                return None
            found.add(module)
        return found.pop() if len(found) == 1 else None

    def _module_returned_by(self, value: ast.expr, name: str) -> str | None:
        """The module that `name` (a target of `value`'s assignment, alone or in a tuple) receives
        from the call `value`, when every `return` of its function hands back one imported name."""
        if not isinstance(value, ast.Call) or value.args or value.keywords or not isinstance(value.func, ast.Name):
            return None
        statement = self.index.parent(value)
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target = statement.targets[0]
        position, width = None, 0
        if isinstance(target, ast.Tuple):
            names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
            if names.count(name) != 1:
                return None
            position, width = names.index(name), len(target.elts)
        defs = self.index.functions.get(value.func.id, [])
        if len(defs) != 1 or not isinstance(self.index.parent(defs[0]), ast.Module):
            return None
        func = defs[0]
        modules = set()
        for ret in own_returns(func):
            returned = ret.value
            if position is not None:
                if not isinstance(returned, ast.Tuple) or len(returned.elts) != width:
                    return None
                returned = returned.elts[position]
            if isinstance(returned, ast.Constant) and returned.value is None:
                continue  # `except ImportError: return None, None`
            if not isinstance(returned, ast.Name):
                return None
            bound = [b for b in self.index.import_bindings if b.name == returned.id and b.scope in (func, self.tree)]
            if len(bound) != 1:
                return None
            modules.add(bound[0].qualified)
        return modules.pop() if len(modules) == 1 else None

    def _unassigned(self, name: str, node: ast.AST) -> bool:
        """No assignment in `node`'s scope (or the module) gives `name` a value of its own (a
        parameter or a global fits the convention; `xm = CpuShim()` does not)."""
        scope = self.index.scope_of(node)
        return not self._scope_values(scope, name) and not self._scope_values(self.tree, name)

    # -- structure --------------------------------------------------------------------------
    def parent(self, node: ast.AST | None) -> ast.AST | None:
        return self.index.parent(node)

    def calls_within(self, owner: ast.AST) -> list[ast.Call]:
        """Calls in `owner`'s body (a loop, function or module; else `owner` itself), not descending
        into nested functions, lambdas or classes; in source order."""
        found = self._calls_within.get(owner)
        if found is None:
            # by pre-order numbers (`ModuleIndex.numbered`), not a walk: the body's statements are
            # one run of numbers, and each nested scope in it a run to leave out
            # (a root, a statement of the body or `owner`, is entered whatever it is: the calls of a
            # module include those of its functions, not of the functions nested in them)
            index = self.index
            bodied = isinstance(owner, (*FUNCTIONS, ast.For, ast.AsyncFor, ast.While, ast.Module))
            roots: list[ast.AST] = list(owner.body) if bodied else [owner]  # type: ignore[attr-defined]
            if not roots:
                self._calls_within[owner] = []
                return []
            first, last = index.numbers(roots[0])[0], index.numbers(roots[-1])[1]
            entered = {id(root) for root in roots}
            nested = sorted(
                index.numbers(scope)
                for kind in _NOT_ENTERED
                for scope in index.numbered(kind, first, last)
                if id(scope) not in entered
            )
            found = index.numbered(ast.Call, first, last)
            if nested:
                order, kept, at = index.order, [], 0
                for call in found:
                    number = order[call]
                    while at < len(nested) and nested[at][1] < number:
                        at += 1
                    if at == len(nested) or number < nested[at][0]:
                        kept.append(call)
                found = kept
            self._calls_within[owner] = found
        return found

    @cached_property
    def _calls_by_callee(self) -> dict[str, list[ast.Call]]:
        """Every call of the module by its callee as written (`f`, `self.f`, `mod.f`), in source order."""
        found: dict[str, list[ast.Call]] = {}
        for call in self.index.calls:
            name = dotted_name(call.func)
            if name:
                found.setdefault(name, []).append(call)
        return found

    def calls_of(self, name: str) -> list[ast.Call]:
        """The calls `name(...)`, `self.name(...)`, `cls.name(...)` of this module, in source order."""
        by_callee = self._calls_by_callee
        found = [c for callee in (name, f"self.{name}", f"cls.{name}") for c in by_callee.get(callee, ())]
        found.sort(key=self.index.order.__getitem__)
        return found

    @cached_property
    def _loops_by_function(self) -> dict[ast.AST | None, list[ast.AST]]:
        found: dict[ast.AST | None, list[ast.AST]] = {}
        for loop in self.index.loops:
            found.setdefault(self.index.enclosing_function(loop), []).append(loop)
        return found

    def loops_of(self, func: ast.AST) -> list[ast.AST]:
        """The loops whose innermost enclosing `def` is `func`, in source order."""
        return self._loops_by_function.get(func, [])

    @cached_property
    def _functions_by_scope(self) -> dict[str, dict[ast.AST, list[ast.AST]]]:
        """Function name -> scope (module, function or lambda) -> the functions (not methods) of that
        name defined directly in it, in source order."""
        found: dict[str, dict[ast.AST, list[ast.AST]]] = {}
        for name, defs in self.index.functions.items():
            for func in defs:
                if not isinstance(self.index.parent(func), ast.ClassDef):
                    found.setdefault(name, {}).setdefault(self.index.scope_of(func), []).append(func)
        return found

    def functions_in_scope(self, name: str, scope: ast.AST) -> list[ast.AST]:
        """The functions (not methods) named `name` defined directly in `scope`."""
        return self._functions_by_scope.get(name, {}).get(scope, [])

    def defines_function(self, name: str) -> bool:
        """Some function (not a method) of this module is named `name`."""
        return name in self._functions_by_scope

    # -- step closures ------------------------------------------------------------------------
    @cached_property
    def _step_closures(self) -> set[ast.AST]:
        """Callbacks passed to `xm.add_step_closure`: they run after the step's graph executed."""
        closures: set[ast.AST] = set()
        for call in self.index.calls:
            if last_part(dotted_name(call.func)) != "add_step_closure":
                continue
            args = positional(call)
            if not args:
                continue
            target = args[0]
            if isinstance(target, ast.Call) and last_part(dotted_name(target.func)) == "partial" and target.args:
                target = target.args[0]
            if isinstance(target, ast.Lambda):
                closures.add(target)
            name = dotted_name(target)
            if name:
                closures.update(self.index.functions.get(last_part(name), ()))
        return closures

    def is_step_closure(self, func: ast.AST) -> bool:
        return func in self._step_closures

    @cached_property
    def collate_functions(self) -> set[str]:
        """Names of functions passed as `collate_fn=` in this file: they build every batch."""
        names: set[str] = set()
        for call in self.index.calls:
            for kw in call.keywords:
                if kw.arg == "collate_fn":
                    name = last_part(dotted_name(kw.value))
                    if name:
                        names.add(name)
        return names

    # -- per-step paths ----------------------------------------------------------------------------
    @cached_property
    def step_functions(self) -> set[ast.AST]:
        return steps.compute_step_functions(self)

    def is_step_function(self, func: ast.AST) -> bool:
        return steps.is_step_function(self, func)

    def externally_per_step(self, func: ast.AST) -> bool:
        """Another module of the project calls `func` every step (see `project.ProjectIndex`)."""
        return bool(self.project.steps) and qualname(self.index, func) in self.project.steps

    def externally_guessed_step(self, func: ast.AST) -> bool:
        """Another module calls `func` every step, but only from code that is a step on guessed
        evidence there (an offline script's loop, a step by its name only): no surer a step here."""
        return bool(self.project.guessed_steps) and qualname(self.index, func) in self.project.guessed_steps

    def externally_called(self, func: ast.AST) -> bool:
        """Another module of the project calls `func` (its callers, not its name, say how often)."""
        return bool(self.project.called) and qualname(self.index, func) in self.project.called

    def trains_externally(self, call: ast.Call) -> bool:
        """`call` runs a function of another module that trains (a backward or optimizer step)."""
        return (
            bool(self.project.training_calls)
            and (call.lineno, self.text.column(call.lineno, call.col_offset)) in self.project.training_calls
        )

    def helper_reads(self, call: ast.Call) -> tuple[str, str, tuple[ParamRead, ...]] | None:
        """(the function as called, its file, its host reads of its arguments) when `call` runs a
        project function that reads an argument to the host on every call (see `reads`)."""
        if not self.project.helper_reads:
            return None
        found = self.project.reads_at((call.lineno, self.text.column(call.lineno, call.col_offset)))
        return found if found is not None and self._runs_helper(call, found[0]) else None

    def helper_calls(self, call: ast.Call, kind: str) -> list[tuple[str, str, str]]:
        """(the function as called, its file, a detail) for each fact of `kind` the project index
        establishes about the project function `call` runs (see `ProjectFacts.helper_calls`)."""
        if not self.project.helper_calls:
            return []
        at = (call.lineno, self.text.column(call.lineno, call.col_offset))
        return [
            (helper, path, detail)
            for where, k, helper, path, detail in self._helper_calls.get(at, ())
            if k == kind and self._runs_helper(call, helper)
        ]

    @staticmethod
    def _runs_helper(call: ast.Call, helper: str) -> bool:
        """The project's facts name calls by where they start, and `super().forward(x)` starts
        where its `super()` does (`helper(x).item()` where `helper(x)` does): the fact is this
        call's when it names this callee (or a function this call registers, passed by name)."""
        return written_callee(call) == helper or any(dotted_name(a) == helper for a in call.args)

    @cached_property
    def _helper_calls(self) -> dict[tuple[int, int], list[tuple]]:
        found: dict[tuple[int, int], list[tuple]] = {}
        for entry in self.project.helper_calls:
            found.setdefault(entry[0], []).append(entry)
        return found

    @cached_property
    def training_sources(self) -> TrainingSources:
        """What this module's training loops iterate (see `loaders.TrainingSources`)."""
        return self.cached(TrainingSources)

    @cached_property
    def module_trains(self) -> bool:
        return steps.module_trains(self)

    def is_per_step(self, node: ast.AST, *, periodic: bool = False) -> bool:
        return steps.is_per_step(self, node, periodic=periodic)

    @cached_property
    def loop_reachable_functions(self) -> set[ast.AST]:
        return steps.loop_reachable_functions(self)

    @cached_property
    def jax_traced(self) -> set[ast.AST]:
        """Functions and lambdas JAX runs on tracers (see `jax_tracing`)."""
        from .jax_tracing import traced_functions

        return self.cached(traced_functions)

    @cached_property
    def jax_staged(self) -> dict[ast.AST, list[ast.Call]]:
        """Of those, the ones JAX stages out itself (decorated, `jax.jit(f)`, a control-flow body),
        with the decorators and calls that stage them."""
        from .jax_tracing import staged_functions

        return self.cached(staged_functions)

    @cached_property
    def jax_jitted(self) -> dict[str, JittedCallable]:
        """Names this module calls jitted functions by, with their static parameters."""
        from .jax_tracing import jitted_callables

        return self.cached(jitted_callables)

    @cached_property
    def compiled(self) -> CompiledRegions:
        """The functions `torch.compile` traces, with their options (see `compiled`)."""
        from .compiled import CompiledRegions

        return self.cached(CompiledRegions)

    @cached_property
    def barriers(self) -> StepBarriers:
        """The file's step model: barriers, step loops, who owns the step and reduces gradients."""
        return StepBarriers(self)

    @cached_property
    def data_parallel(self) -> DataParallel:
        """The file's DDP wrappers and the training paths that run through them (see `ddp`)."""
        return DataParallel(self, self.barriers)

    @cached_property
    def per_call_functions(self) -> set[ast.AST]:
        return steps.compute_per_call_functions(self)

    @cached_property
    def hook_names_used(self) -> set[str]:
        """Hook-like method names this module calls or hands on (see `project.hook_names_used`)."""
        return hook_names_used(self)

    @cached_property
    def application_module(self) -> bool:
        """A module of an application checkout, not of an installable package: no `__init__.py`
        beside it and no packaging metadata at its project's root. Only the project's own scripts
        import it, so the project index sees every use of its functions."""
        path = Path(str(self.path)).absolute()
        if is_file(path.parent / "__init__.py"):
            return False
        root = project_root(path)
        return not any(stat_or_none(root / marker) is not None for marker in PACKAGING_FILES)

    def unused_function(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """`func`, a module-level function of an application module, is called, imported and named
        nowhere in the project (not even as a string): dead code, which runs at no step."""
        if not isinstance(self.index.parent(func), ast.Module) or not self.application_module:
            return False
        name = func.name
        if self.externally_called(func) or name in self.project.imported or self.index.name_uses.get(name):
            return False
        return not any(n.attr == name for n in self.index.of_type(ast.Attribute)) and not any(
            n.value == name for n in self.index.of_type(ast.Constant)
        )

    def unmentioned_class(self, cls: ast.ClassDef) -> bool:
        """`cls`, a top-level class of an application module, is mentioned nowhere in the project
        but in its own body (no other module names it, in code or a string; this one neither
        instantiates, subclasses nor names it): never instantiated, its methods run at no step."""
        if not self.project.unmentioned_classes or cls.name not in self.project.unmentioned_classes:
            return False
        if not isinstance(self.index.parent(cls), ast.Module) or not self.application_module:
            return False
        if cls.keywords or any(REGISTERS.search(ast.unparse(d)) for d in cls.decorator_list):
            return False  # registered by a decorator or a metaclass: built from a name elsewhere
        uses: list[ast.AST] = [n for n in self.index.name_uses.get(cls.name, ()) if isinstance(n.ctx, ast.Load)]
        uses += [n for n in self.index.of_type(ast.Attribute) if n.attr == cls.name]
        uses += [
            n
            for n in self.index.of_type(ast.Constant)
            if isinstance(n.value, str) and n.value.rpartition(".")[2].strip() == cls.name
        ]
        return all(cls in self.index.ancestors(n) for n in uses)

    @cached_property
    def verification_module(self) -> bool:
        """A script that checks results (`test_*.py`, a package's `test_utils/`): see `steps.verification_check`."""
        path = Path(str(self.path)).absolute()
        return steps.is_verification_module(path, project_root(path))

    def runs_hot(self, node: ast.AST) -> bool:
        """Runs every step (or on every call of a loss/metric check), and may run on XLA."""
        return steps.runs_hot(self, node)

    def step_evidence(self, node: ast.AST) -> Evidence:
        """Why `node` runs every step, and how sure that is (see `evidence`)."""
        from . import evidence

        return evidence.step_evidence(self, node)

    def test_evidence(self, node: ast.AST) -> Evidence | None:
        """Possible evidence when `node` runs only as a test module's tests (see `evidence`)."""
        from . import evidence

        return evidence.test_evidence(self, node)

    def step_confidence(self, func: ast.AST) -> str:
        """How sure it is that every call of the step function `func` is a step (see `evidence`)."""
        from . import evidence

        return evidence.function_evidence(self, func).confidence

    def value_evidence(self, node: ast.expr | None) -> Evidence:
        """Where the device value `node` comes from, and how sure that is (see `evidence`)."""
        from . import evidence

        return evidence.value_evidence(self, node)

    @cached_property
    def xla_evidence(self) -> Evidence:
        """Why this file's code runs on XLA (`evidence.xla_evidence`), asked by every pattern finding."""
        from . import evidence

        return evidence.xla_evidence(self, self.assume_xla, self.project.xla_device)

    # -- device guards --------------------------------------------------------------------------
    def in_non_xla_code(self, node: ast.AST) -> bool:
        """`node` runs only off XLA: a CUDA-only branch, after `is_xla or`, below `if is_xla: return`.
        A node is there when the step to its parent says so (`_off_xla_below`) or its parent is;
        each node's answer is kept, so the nodes of one statement share the walk up from it."""
        known: dict[ast.AST, bool] = self._off_xla
        chain: list[ast.AST] = []
        child, found = node, False
        while True:
            answer = known.get(child)
            if answer is not None:
                found = answer
                break
            chain.append(child)
            anc = self.index.parent(child)
            if anc is None:
                break
            if self._off_xla_below(anc, child):
                found = True
                break
            child = anc
        for item in chain:
            known[item] = found
        return found

    def _off_xla_below(self, anc: ast.AST, child: ast.AST) -> bool:
        """`child`, directly below `anc`, runs only off XLA because of where it is in `anc`."""
        field = self.index.field_of(child)
        if isinstance(anc, (ast.If, ast.IfExp)):
            polarity = guards.xla_polarity(anc.test)
            if field == "body" and polarity == guards.NEGATIVE:
                return True
            if field == "orelse" and polarity == guards.POSITIVE:
                return True
        elif isinstance(anc, ast.BoolOp) and field == "values":
            position = next(i for i, v in enumerate(anc.values) if v is child)
            for earlier in anc.values[:position]:
                polarity = guards.xla_polarity(earlier)
                if isinstance(anc.op, ast.Or) and polarity == guards.POSITIVE:
                    return True
                if isinstance(anc.op, ast.And) and polarity == guards.NEGATIVE:
                    return True
        elif (
            isinstance(anc, ast.ExceptHandler)
            and field == "body"
            and anc.type is not None
            and guards.xla_polarity(anc.type) == guards.NEGATIVE
        ):
            return True  # `except torch.cuda.OutOfMemoryError:` fallbacks
        elif isinstance(anc, ast.ClassDef) and guards.names_non_xla_backend(anc.name):
            return True  # `class GemmaFlashAttention2`, `class CudaGraphRunner`: another backend's code
        return isinstance(child, ast.stmt) and self._after_xla_exit(child)

    def _after_xla_exit(self, statement: ast.stmt) -> bool:
        return self.index.after_in_block(statement, "xla-exit", _xla_exit)

    # -- values -----------------------------------------------------------------------------------
    def tensor_kind(self, node: ast.expr | None) -> Kind:
        return self.tensors.kind(node)

    def on_device(self, node: ast.expr | None) -> bool:
        return self.tensors.kind(node).on_device

    def reaching_values(self, name: ast.Name) -> list[ast.expr]:
        """Values assigned to `name` in its scope: the last assignment before it in source order
        (plus earlier ones for `x += v`), or all of them when none precedes it (loops)."""
        if self._comprehension_bound(name):
            return []  # `[f"{t:.3f}" for t in times]`: its own `t`, not the function's
        scope = self.index.scope_of(name)
        values = self._scope_values(scope, name.id)
        if not values and not isinstance(scope, ast.Module):
            if any(p.arg == name.id for p in function_params(scope)):
                return []  # a parameter: it shadows whatever the enclosing function has
            # closures read the enclosing function's variables
            for anc in self.index.ancestors(scope):
                if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.Module)):
                    values = self._scope_values(anc, name.id)
                    if values:
                        return values
            return []
        if not values:
            return []
        order = self.index.order
        position = order.get(name, 0)
        # a value precedes the use unless the use is inside it (`x = x.cpu()` reads the old x)
        inside = set(self.index.ancestors(name))
        positions = self._positions_of(scope, name.id, values)
        # the values before the use: by bisection when they are in source order (a name assigned
        # at every line of a long function must not make each of its uses read them all)
        end = bisect_left(positions, position) if positions is not None else len(values)
        reaching: list[ast.expr] = []
        for i in range(end - 1, -1, -1):  # newest first; no copy of the values
            value = values[i]
            if (positions is None and order.get(value, 0) >= position) or value in inside:
                continue
            if reaching and reaching[-1] not in self.index.augmented:
                break
            reaching.append(value)
        if not reaching:
            # a parameter, or the target of a loop around the use, is the reaching definition;
            # otherwise a loop may carry a later assignment round
            return [] if self.parameter(name) is not None or self._loop_target(name, scope) else values
        loop = self._binding_loop(name, scope)
        if loop is not None and loop not in self.index.ancestors(reaching[0]):
            # `x = x.to(device)` in an earlier loop, then `for x, y in plot_loader:`: the loop
            # around the use binds it after that assignment
            return []
        return reaching

    def _comprehension_bound(self, name: ast.Name) -> bool:
        """A comprehension around `name` binds it in a scope of its own (the first iterable is
        evaluated outside: `[x for x in x]` reads the enclosing `x` there)."""
        chain: list[ast.AST] = [name]
        for anc in self.index.ancestors(name):
            if isinstance(anc, COMPREHENSIONS):
                for position, comp in enumerate(anc.generators):
                    if name.id in target_names(comp.target) and not (position == 0 and comp.iter in chain):
                        return True
            elif isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return False
            chain.append(anc)
        return False

    def _positions_of(self, scope: ast.AST, name: str, values: list[ast.expr]) -> list[int] | None:
        key = (scope, name)
        if key not in self._value_positions:
            order = self.index.order
            positions = [order.get(v, 0) for v in values]
            ordered = all(a <= b for a, b in zip(positions, positions[1:]))
            self._value_positions[key] = positions if ordered else None
        return self._value_positions[key]

    def same_binding(self, first: ast.Name, second: ast.Name) -> bool:
        """`first` and `second` read one binding of the same variable: one scope, nothing binds the
        name between them in source order, and `first` runs before `second` (or in its statement):
        `m = h > 0; h = h.repeat(3, 1); h[m] = 0` reads two bindings of `h`, and so does a loop that
        carries `m` from the previous iteration."""
        if first.id != second.id:
            return False
        scope = self.index.scope_of(first)
        statement = self._statement(first)
        if self.index.scope_of(second) is not scope or statement is None or not self._runs_before(statement, second):
            return False
        order = self.index.order
        if order[first] > order[second] and statement is not self._statement(second):
            return False
        bindings = list(self.bindings_of(scope, first.id))
        low, high = sorted((order[first], order[second]))
        if any(low < order[node] < high for node in bindings):
            return False
        # a loop around `second` only: a binding anywhere in it reaches `second` on the next round
        first_loops = set(self.index.ancestors(first))
        for loop in self.index.ancestors(second):
            if loop is scope:
                break
            if (
                isinstance(loop, LOOPS)
                and loop not in first_loops
                and any(loop in self.index.ancestors(node) for node in bindings)
            ):
                return False
        return True

    def _runs_before(self, statement: ast.stmt, node: ast.AST) -> bool:
        """`statement` is in a block around `node` (not a branch beside it): whenever `node` runs, it
        ran before in that block (when it comes first in source order)."""
        holder, field = self.index.parent(statement), self.index.field_of(statement)
        child = node
        for anc in self.index.ancestors(node):
            if anc is holder:
                return self.index.field_of(child) == field
            child = anc
        return False

    def _statement(self, node: ast.AST) -> ast.stmt | None:
        return next((a for a in self.index.ancestors(node) if isinstance(a, ast.stmt)), None)

    def bindings_of(self, scope: ast.AST, name: str):
        """The nodes that bind `name` in `scope`: stores and deletions, definitions, imports, handlers."""
        return iter(self._bindings.get((scope, name), ()))

    @cached_property
    def _bindings(self) -> dict[tuple[ast.AST, str], list[ast.AST]]:
        """(scope, name) -> what `bindings_of` yields, found in one pass over the module rather than
        one per question (asked at every use of a deprecated API)."""
        found: dict[tuple[ast.AST, str], list[ast.AST]] = {}
        for name_node in self.index.of_type(ast.Name):
            if isinstance(name_node.ctx, (ast.Store, ast.Del)):
                found.setdefault((self.index.scope_of(name_node), name_node.id), []).append(name_node)
        for kind in (*FUNCTIONS, ast.ClassDef, ast.ExceptHandler, ast.alias):
            for node in self.index.by_type.get(kind, ()):
                if isinstance(node, ast.alias):
                    bound: str | None = node.asname or node.name.partition(".")[0]
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler)):
                    bound = node.name
                else:
                    continue
                if bound is not None:  # an `except E:` binds nothing
                    found.setdefault((self.index.scope_of(node), bound), []).append(node)
        return found

    def only_when_not_none(self, name: str, node: ast.AST) -> bool:
        """`node` runs only when `name` is not None: under `if name is not None:` (or `if name:`), in the
        else of `if name is None:`, after `name is not None and` or `name is None or`, or below
        `if name is None: return`."""
        child = node
        for anc in self.index.ancestors(node):
            field = self.index.field_of(child)
            if isinstance(anc, (ast.If, ast.IfExp, ast.While)) and field in ("body", "orelse"):
                if _none_test(anc.test, name) == (1 if field == "body" else -1):
                    return True
            elif isinstance(anc, ast.BoolOp) and field == "values" and isinstance(child, ast.expr):
                wanted = 1 if isinstance(anc.op, ast.And) else -1
                if any(_none_test(v, name) == wanted for v in anc.values[: anc.values.index(child)]):
                    return True
            if isinstance(child, ast.stmt) and self.index.after_in_block(
                child, f"none-exit:{name}", lambda earlier: _none_exit(earlier, name)
            ):
                return True
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                return False
            child = anc
        return False

    def _loop_target(self, name: ast.Name, scope: ast.AST) -> bool:
        """A `for` loop around `name` (within its scope) binds it at every iteration."""
        return self._binding_loop(name, scope) is not None

    def _binding_loop(self, name: ast.Name, scope: ast.AST) -> ast.For | ast.AsyncFor | None:
        """The innermost `for` loop around `name` (within its scope) whose target binds it."""
        child: ast.AST = name
        for anc in self.index.ancestors(name):
            if anc is scope:
                return None
            if (
                isinstance(anc, (ast.For, ast.AsyncFor))
                and self.index.field_of(child) != "iter"
                and name.id in target_names(anc.target)
            ):
                return anc
            child = anc
        return None

    def values_in_scope(self, name: ast.Name) -> list[ast.expr]:
        """Every value assigned to `name` in its scope, whatever the branch (`reaching_values` keeps
        the last before the use): what the name may hold somewhere in the function."""
        return self._scope_values(self.index.scope_of(name), name.id) or self.reaching_values(name)

    def _scope_values(self, scope: ast.AST, name: str) -> list[ast.expr]:
        per_scope = self.index.assignments.get(scope)
        return per_scope.get(name, []) if per_scope else []

    def loop_iterables(self, name: ast.Name) -> list[ast.expr]:
        for anc in self.index.ancestors(name):
            if isinstance(anc, COMPREHENSIONS):
                for comp in anc.generators:  # `[f(x) for x in xs]`: x takes the elements of xs
                    found = [it for n, it in loop_bindings(comp.target, comp.iter) if n == name.id]
                    if found:
                        return found
            elif isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                break
        scope = self.index.scope_of(name)
        # every loop of the scope binding the name: a value carried from one loop into the next
        # (`for bi, k in enumerate(sizes): d.setdefault(k, ...)`, then `for k, v in d.items():`) counts
        per_scope = self.index.loop_targets.get(scope)
        return per_scope.get(name.id, []) if per_scope else []

    @cached_property
    def _attribute_assignments(self) -> dict[str, list[ast.expr]]:
        found: dict[str, list[ast.expr]] = {}
        for per_scope in self.index.assignments.values():
            for name, values in per_scope.items():
                if "." in name:
                    found.setdefault(name, []).extend(v for v in values if not self._overwritten(name, v))
        return found

    def _overwritten(self, name: str, value: ast.expr) -> bool:
        """`self.x = value` is followed, in the same block, by another `self.x = ...` that does not
        read it, or that moves it to the host (`self.sigmas = self.sigmas.to("cpu")`): other methods
        only ever see the later value."""
        statement = self.index.parent(value)
        if not isinstance(statement, ast.Assign) or statement.value is not value:
            return False
        later = self._next_assignment(statement, name)
        if later is None:
            return False
        reads = any(dotted_name(n) == name for n in ast.walk(later.value))
        return not reads or _moves_to_host(later.value)

    def _next_assignment(self, statement: ast.stmt, name: str) -> ast.Assign | None:
        """The first later statement of `statement`'s block that is `name = ...` (one target).
        Each block is read once: a method assigning hundreds of `self.x` must not read the rest of
        its block for each of them."""
        parent = self.index.parent(statement)
        field = self.index.field_of(statement) or ""
        block = getattr(parent, field, None)
        if parent is None or not isinstance(block, list):
            return None
        key = (parent, field)
        found = self._block_assignments.get(key)
        if found is None:
            positions = {id(s): i for i, s in reversed(list(enumerate(block)))}  # the first, as list.index
            by_name: dict[str, list[int]] = {}
            for i, later in enumerate(block):
                if isinstance(later, ast.Assign) and len(later.targets) == 1:
                    target = dotted_name(later.targets[0])
                    if target:
                        by_name.setdefault(target, []).append(i)
            found = self._block_assignments[key] = (positions, by_name)
        positions, by_name = found
        candidates = by_name.get(name, [])
        at = bisect_right(candidates, positions[id(statement)])
        return block[candidates[at]] if at < len(candidates) else None

    def attribute_values(self, dotted: str) -> list[ast.expr]:
        """Values assigned to `self.x`-style targets anywhere in the file."""
        return self._attribute_assignments.get(dotted, [])

    def assigned_values(self, node: ast.expr) -> list[ast.expr]:
        if isinstance(node, ast.Name):
            return self.reaching_values(node)
        name = dotted_name(node)
        return self.attribute_values(name) if name else []

    def parameter(self, name: ast.Name) -> ast.arg | None:
        for anc in self.index.ancestors(name):
            if isinstance(anc, (*FUNCTIONS, ast.Lambda)):
                for param in function_params(anc):
                    if param.arg == name.id:
                        return param
        return None

    def call_parameters(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
        """The parameters of `func` a call fills by position: a method's `self`/`cls` left out (the
        call's receiver fills it, `self.f(a)`)."""
        params = [*func.args.posonlyargs, *func.args.args]
        method = isinstance(self.index.parent(func), ast.ClassDef)
        return params[1:] if method and params and params[0].arg in ("self", "cls") else params

    def call_position(self, func: ast.FunctionDef | ast.AsyncFunctionDef, param: ast.arg) -> int | None:
        """Where a call of `func` passes `param` by position; None: keyword-only, `*args`, `**kwargs`."""
        params = self.call_parameters(func)
        return params.index(param) if param in params else None

    def arguments_for(self, param: ast.arg) -> list[ast.expr | None]:
        """What this module's calls of the function declaring `param` (`f(...)`, `self.f(...)`)
        pass for it, the first few of them; None for a call that passes nothing (a default, *args)."""
        func = self.index.parent(self.index.parent(param))
        if not isinstance(func, FUNCTIONS):
            return []
        position = self.call_position(func, param)
        return [argument(call, position, param.arg) for call in self.calls_of(func.name)[:MAX_CALL_SITES]]


def _none_exit(earlier: ast.stmt, name: str) -> bool:
    """`if name is None: return` (or raise/continue/break): what follows runs only when it is not None."""
    return (
        isinstance(earlier, ast.If)
        and not earlier.orelse
        and guards.exits_block(earlier.body)
        and _none_test(earlier.test, name) == -1
    )


def _none_test(test: ast.expr, name: str) -> int:
    """1 if `test` holds only when `name` is not None (`name is not None`, `name`), -1 if only when it
    is None (`name is None`, `not name`), else 0."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return -_none_test(test.operand, name) if isinstance(test.operand, ast.Name) else 0
    if isinstance(test, ast.Name):
        return 1 if test.id == name else 0
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Name)
        and test.left.id == name
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return (
            1
            if isinstance(test.ops[0], (ast.IsNot, ast.NotEq))
            else -1
            if isinstance(test.ops[0], (ast.Is, ast.Eq))
            else 0
        )
    return 0


def _moves_to_host(value: ast.expr) -> bool:
    """`x.cpu()`, `x.to("cpu")`, `x.numpy()`, `x.tolist()`: a value on the host, whatever `x` was."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    method = value.func.attr
    if method in ("cpu", "numpy", "tolist", "item"):
        return True
    if method == "to":
        from .tensors import names_cpu

        targets = [k.value for k in value.keywords if k.arg == "device"] or value.args[:1]
        return any(names_cpu(t) for t in targets)
    return False


def _xla_exit(earlier: ast.stmt) -> bool:
    """`if is_xla: return` (or raise/continue): what follows runs off XLA only."""
    return (
        isinstance(earlier, ast.If)
        and not earlier.orelse
        and guards.exits_block(earlier.body)
        and guards.xla_polarity(earlier.test) == guards.POSITIVE
    )
