"""The project-wide index: which functions run every step, across the modules of a project.

A file's own analysis sees the step loops and step functions it defines. A helper, a metric's
`update`, a loss or a hook called every step from *another module* looks like setup code there.
So every Python file of the project is summarised (`ModuleSummary`: imports, classes, functions,
call sites with what they call and whether they run every time their caller runs), the calls are
resolved through imports, `self`, base classes and evident receiver classes, and per-step
reachability is propagated over the resulting call graph. Summaries are plain data, computed
from the same `ast` analysis as the rules and cached by content hash.
"""

from __future__ import annotations

import ast
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from ..diagnostics import HIGH
from ..source import is_file, stat_or_none
from .compiled import CompileOptions, summary_entries
from .guards import names_non_xla_feature
from .index import FUNCTIONS, qualname
from .loaders import returned_ragged_loaders, returned_sources, trained_results, training_sources
from .names import dotted_name, last_part, method_name, receiver
from .placement import OTHER_DEVICES, off_xla_placement
from .project_names import ProjectNames
from .reads import REDUCTIONS, ParamRead, host_read, parameter_reads, state_reads
from .sharding import module_shards_data
from .steps import (
    HOOK_NAME,
    in_loop_within,
    in_raise,
    other_update,
    runs_less_often,
    trains,
    unbarriered_optimizer_step,
)
from .vocabulary import DEVICE_LOADER, GRADIENT_REDUCERS, REPLICA_LAUNCH

PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Calls that register a callback the framework runs on every forward/backward/iteration.
HOOK_REGISTRATION = {
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_backward_hook",
    "register_full_backward_pre_hook",
    "register_hook",
}
PER_ITERATION_EVENT = ("ITERATION_COMPLETED", "ITERATION_STARTED", "GET_BATCH_COMPLETED")
MAX_HIERARCHY = 6


@dataclass(frozen=True)
class CallSite:
    caller: str  # qualified name of the enclosing function in its module ("" at module level)
    callee: str  # as written: "f", "self.m", "mod.f", "self.attr.m", "super().m"
    receiver_class: str | None  # the class of `x` in `x.m()` where it is evident, as written
    hot: bool  # runs every time its caller runs (not every N steps, not off XLA, not in a raise)
    per_step: bool  # runs every step by its own module's analysis
    looped: bool  # in a loop of its caller: runs many times per call of the caller
    line: int
    column: int  # 0-based, in characters
    # the arguments it passes that are evidently device loaders (`MpDeviceLoader(...)`): "0", "k:loader"
    device_loaders: tuple[str, ...] = ()
    # the arguments it passes that are evidently on the host, keyed alike with what they are: "0=cpu"
    # (a tensor on the host, `t.cpu()`), "k:x=py" (a Python or NumPy value, `loss.item()`)
    host_args: tuple[str, ...] = ()
    # the arguments that are batch elements of a loop over a loader: "0=ref#position" (`rows.row_args`)
    row_args: tuple[str, ...] = ()
    # per step only on guessed evidence in its own module (a loop not seen to train, in a module that
    # never trains; a caller that is a step by its name only): so is the function it calls
    guessed: bool = False


@dataclass(frozen=True)
class ProjectFacts:
    """What the rest of the project says about one module (part of its cache key)."""

    steps: frozenset[str] = frozenset()  # its functions other modules call every step (qualnames)
    # those of `steps` called every step only from code whose own evidence is guessed (`CallSite.guessed`)
    guessed_steps: frozenset[str] = frozenset()
    called: frozenset[str] = frozenset()  # its functions other modules call at all
    training_calls: frozenset[tuple[int, int]] = frozenset()  # its calls (line, column) of trainers elsewhere
    # its calls of functions that read an argument to the host on every call: (line, column) ->
    # (the function as called, the file defining it, what it reads)
    helper_reads: tuple[tuple[tuple[int, int], str, str, tuple[ParamRead, ...]], ...] = ()
    # methods of the project compiled with Equinox's filter_jit, by a name no other method has:
    # (name, parameters without self, the static ones) - a call `x.name(...)` runs one of them
    static_methods: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()
    # its functions torch.compile traces because of other modules (a compiled caller, a compiled
    # model of its class): (qualname, the options' key, see `compiled.CompileOptions`)
    compiled: tuple[tuple[str, str], ...] = ()

    def reads_at(self, at: tuple[int, int]) -> tuple[str, str, tuple[ParamRead, ...]] | None:
        """(the function as called, its file, its reads) of the helper called at `at` (line, column)."""
        return self._reads_by_call.get(at)

    @cached_property
    def _reads_by_call(self) -> dict:
        return {at: (helper, path, reads) for at, helper, path, reads in self.helper_reads}

    # its calls of project functions with a fact that matters where they are called: (line, column),
    # the kind of fact, the function as called, the file defining it, a detail; kinds:
    # "trains_on": a training loop there iterates the argument at "position:name";
    # "ragged_loader": it returns a training DataLoader without drop_last ("line:index" in the result);
    # "steps_optimizer": it steps an optimizer with no step barrier (the step's line);
    # "reads_state": it reads a device tensor it is not given to the host ("line:read", see reads.state_reads)
    # "sizes_by_rows": it sizes a tensor by the row count of an argument ("key@line", see rows.count_sized_params)
    # "shards_data": its module shards data across replicas, or may (see `sharding`);
    # "xla_trained" (at a `DataLoader(...)` of this module, no XLA of its own): a loop that trains in
    # XLA code iterates it, returned through project functions (detail "loop line:function called";
    # the path is the XLA module's)
    helper_calls: tuple[tuple[tuple[int, int], str, str, str, str], ...] = ()
    xla_device: bool = False  # it calls a project function that returns an XLA device: it runs on XLA
    # a module that launches data-parallel replicas (no wrapper reducing their gradients) calls it
    replicas: bool = False
    # its functions' parameters that a call elsewhere passes a device loader: (qualname, "0" / "k:name")
    device_loader_params: frozenset[tuple[str, str]] = frozenset()
    # hook-like method names some module of the project calls (`steps.uncalled_hook`)
    hook_calls: frozenset[str] = frozenset()
    # its functions' parameters that every call in the project passes a host value: (qualname, "0" /
    # "k:name", "cpu" when one of them is a host tensor, else "py"); and, with "dev", those that some
    # call passes a device value whose origin is seen (`evidence.value_evidence`); and, with "inv",
    # those that every call passes a value the same at every call of the caller (`uploads.invariant`)
    host_params: frozenset[tuple[str, str, str]] = frozenset()
    # row tables of a batch's objects (see `rows`): (collate reference as its loops write it,
    # position in the batch, "file:line" of the concatenation), and its functions' parameters that a
    # call passes one: (qualname, "0" / "k:name", "file:line", whether the caller imports torch_xla)
    row_refs: frozenset[tuple[str, int, str]] = frozenset()
    row_params: frozenset[tuple[str, str, str, bool]] = frozenset()
    # its functions other modules import by name (`from losses import ce_loss`): used there, called or not
    imported: frozenset[str] = frozenset()
    project_uses_xla: bool = False  # some module of the project imports torch_xla / torchax
    called_from_xla: bool = False  # a module that imports torch_xla calls one of its functions
    # its top-level classes (CapWords names) that no other module mentions, in code or in a string, in
    # a project that trains somewhere (its own code builds the models it runs)
    unmentioned_classes: frozenset[str] = frozenset()
    # it calls a project function that returns a device, in a module placed on another backend
    # (`placement.off_xla_placement`): `device = setup()` of a `common.py` that picks CUDA
    off_xla_device: bool = False
    # hook-like method names (`update`) some module calls where they may run every step: on a
    # per-step path, in a function run every step, or handed on where no caller is seen
    stepped_hooks: frozenset[str] = frozenset()
    # identifiers and (quoted) strings naming a loss that some module mentions (`loss_names`)
    loss_names: frozenset[str] = frozenset()

    def key(self) -> str:
        return repr(
            (
                sorted(self.steps),
                sorted(self.guessed_steps),
                sorted(self.called),
                sorted(self.training_calls),
                self.helper_reads,
                self.static_methods,
                self.compiled,
                self.helper_calls,
                self.xla_device,
                self.replicas,
                sorted(self.device_loader_params),
                sorted(self.hook_calls),
                sorted(self.host_params),
                sorted(self.row_refs),
                sorted(self.row_params),
                sorted(self.imported),
                self.project_uses_xla,
                self.called_from_xla,
                sorted(self.unmentioned_classes),
                self.off_xla_device,
                sorted(self.stepped_hooks),
                sorted(self.loss_names),
            )
        )

    def moved(self, before: str, after: str) -> ProjectFacts:
        """These facts for the module's text `after` a fix edited `before`: the calls they name by
        line and column follow their unchanged lines; those on edited lines are dropped (a miss,
        never a fact about another call)."""
        if not (self.training_calls or self.helper_reads or self.helper_calls) or before == after:
            return self
        lines = _line_map(before.splitlines(), after.splitlines())
        return ProjectFacts(
            self.steps,
            self.guessed_steps,
            self.called,
            frozenset((lines[line], column) for line, column in self.training_calls if line in lines),
            tuple(
                ((lines[at[0]], at[1]), helper, path, reads)
                for at, helper, path, reads in self.helper_reads
                if at[0] in lines
            ),
            self.static_methods,
            self.compiled,
            tuple(
                ((lines[at[0]], at[1]), kind, helper, path, detail)
                for at, kind, helper, path, detail in self.helper_calls
                if at[0] in lines
            ),
            self.xla_device,
            self.replicas,
            self.device_loader_params,
            self.hook_calls,
            self.host_params,
            self.row_refs,
            self.row_params,
            self.imported,
            self.project_uses_xla,
            self.called_from_xla,
            self.unmentioned_classes,
            self.off_xla_device,
            self.stepped_hooks,
            self.loss_names,
        )


NO_PROJECT = ProjectFacts()


def _line_map(before: list[str], after: list[str]) -> dict[int, int]:
    """1-based line numbers of `before` -> those of `after`, for the lines an edit left as they were."""
    from difflib import SequenceMatcher

    found: dict[int, int] = {}
    for tag, i1, i2, j1, _ in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            found.update((i1 + k + 1, j1 + k + 1) for k in range(i2 - i1))
    return found


@dataclass
class ModuleSummary:
    path: str
    name: str  # dotted module name from its source root
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    classes: dict[str, list[str]] = field(default_factory=dict)  # class qualname -> bases as written
    functions: dict[str, int] = field(default_factory=dict)  # qualname -> line
    step_functions: set[str] = field(default_factory=set)  # per step by the module's own analysis
    trains: set[str] = field(default_factory=set)  # run a backward or optimizer step every call
    calls: list[CallSite] = field(default_factory=list)
    reads: dict[str, list[ParamRead]] = field(default_factory=dict)  # qualname -> its arguments' host reads
    # methods compiled with filter_jit: qualname -> [parameters without self, the static ones]
    static_jitted: dict[str, list[list[str]]] = field(default_factory=dict)
    # torch.compile: its compiled functions (qualname -> options key), the imported classes it
    # compiles (name as written -> options key), its `torch.compiler.disable` functions
    compiled: dict[str, str] = field(default_factory=dict)
    compiled_imports: dict[str, str] = field(default_factory=dict)
    compile_disabled: list[str] = field(default_factory=list)
    imports_xla: bool = False
    xla_devices: list[str] = field(default_factory=list)  # functions that return an XLA device
    # functions that return a device in a module placed on another backend (`returns_device`)
    off_xla_devices: list[str] = field(default_factory=list)
    # qualname -> [position without self, name] of the parameters a training loop iterates
    loader_params: dict[str, list[list]] = field(default_factory=dict)
    # qualname -> [line of the DataLoader(...), index in the returned tuple or -1] (see loaders)
    ragged_loaders: dict[str, list[list[int]]] = field(default_factory=dict)
    optimizer_steps: dict[str, int] = field(default_factory=dict)  # qualname -> line of an unbarriered step
    state_reads: dict[str, list[list]] = field(default_factory=dict)  # qualname -> [line, read] (reads.state_reads)
    launches_replicas: bool = False  # see `launches_replicas`
    shards_data: bool = False  # some call shards data across replicas, or may (`sharding.shards_data`)
    # in a module with no XLA of its own: qualname -> [index in the returned tuple or -1, line, column,
    # 1 for a ragged DataLoader(...) else 0 (a call whose value it returns), the callee as written]
    returned_sources: dict[str, list[list]] = field(default_factory=dict)
    # in XLA code: [line, column, index or -1, the loop's line] of calls whose result a loop that
    # trains iterates (`loaders.trained_results`)
    trained_results: list[list[int]] = field(default_factory=list)
    # hook-like method names (`update`, `on_batch_end`) it calls or hands on (`steps.HOOK_NAME`)
    hook_calls: list[str] = field(default_factory=list)
    # where it calls them: [name, the calling function's qualname], the caller "!" when the call runs
    # every step by this module's analysis, "*" when handed on or in code whose callers are not seen
    hook_sites: list[list[str]] = field(default_factory=list)
    loss_names: list[str] = field(default_factory=list)  # see `loss_names`
    # row tables of a batch's objects (see `rows`): qualname -> [[position returned, line]] of its
    # collates; qualname -> [[index returned, collate reference]] of the loaders it returns; the
    # collate references of the loaders its loops iterate
    row_collates: dict[str, list[list]] = field(default_factory=dict)
    row_sized: dict[str, dict[str, int]] = field(default_factory=dict)  # qualname -> {param key: line}
    returned_collates: dict[str, list[list]] = field(default_factory=dict)
    loader_refs: list[str] = field(default_factory=list)
    guessed_steps: set[str] = field(default_factory=set)  # its step functions whose evidence is guessed
    # CapWords identifiers it mentions (names, attributes, a string's last dotted part): class names
    mentions: set[str] = field(default_factory=set)
    trains_here: bool = False  # some statement runs a backward, an optimizer step or a train step
    # what the project could not ask of it when it was summarised (`ProjectNames`): imported names
    # (`torch.zeros`) and `.methods` its calls name, whose calls were not judged, and `~functions`
    # named nowhere else, whose facts for callers were not told. The summary is valid while the
    # project still asks none of them (`ProjectNames.names_any`).
    outside: list[str] = field(default_factory=list)


# -- where a file belongs ----------------------------------------------------------------------------


def source_root(path: Path) -> Path:
    """The folder above the top of the `__init__.py` chain (the file's own folder for a script)."""
    folder = path.parent
    while is_file(folder / "__init__.py") and folder.parent != folder:
        folder = folder.parent
    return folder


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_root(path: Path, *, follow: bool = True, within: Path | None = None) -> Path:
    """The nearest folder above `path` with a pyproject.toml, setup.py, setup.cfg or .git; else
    `within` (a run's root, resolved) when `path` is below it, else the file's source root.
    `follow=False`: the project where `path` is, if a symbolic link, not its target's."""
    start = path.resolve() if follow else path.parent.resolve() / path.name
    for folder in start.parents:
        if any(stat_or_none(folder / marker) is not None for marker in PROJECT_MARKERS):
            return folder
    if within is not None and within in start.parents:  # a tree with no marker: one project per run
        return within
    return source_root(start)


# -- summarising one module --------------------------------------------------------------------------


def summarize(ctx, name: str, names: ProjectNames | None = None) -> ModuleSummary:
    """The summary of one analysed file (`ctx` is its `FileContext`). `names`: what the project
    could name (None: anything), to spare the judgement of calls no project function can answer."""
    index = ctx.index
    package = name if Path(str(ctx.path)).name == "__init__.py" else name.rpartition(".")[0]
    summary = ModuleSummary(str(ctx.path), name)
    has_reads = any(host_read(c, given=True)[0] or method_name(c) in REDUCTIONS for c in index.calls)
    for binding in index.import_bindings:
        summary.imports.setdefault(binding.name, binding.qualified)
    for node in index.by_type.get(ast.ImportFrom, ()):
        if node.level:  # relative imports, resolved against this module's package
            base = package.split(".") if package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                if alias.name != "*":
                    summary.imports.setdefault(alias.asname or alias.name, f"{module}.{alias.name}".lstrip("."))
    for cls in index.by_type.get(ast.ClassDef, ()):
        summary.classes[qualname(index, cls)] = [b for b in map(dotted_name, cls.bases) if b]
    outside: set[str] = set()
    # the functions some call of the project may resolve to: what they tell callers is asked
    asked = {func for defs in index.functions.values() for func in defs if _asked_of(func, names, outside)}
    for defs in index.functions.values():
        for func in defs:
            qualified = qualname(index, func)
            summary.functions[qualified] = func.lineno
            if ctx.is_step_function(func):
                summary.step_functions.add(qualified)
                if ctx.step_confidence(func) != HIGH:
                    summary.guessed_steps.add(qualified)
            if func not in asked:
                continue  # what it tells its callers: it has none
            if trains(ctx, func):
                summary.trains.add(qualified)
            if has_reads:
                reads = parameter_reads(ctx, func)
                if reads:
                    summary.reads[qualified] = reads
    _summarize_rows(ctx, summary)
    for call in index.calls:
        _summarize_call(ctx, summary, call, names, outside)
    _summarize_helpers(ctx, summary, asked)
    summary.outside = sorted(outside)
    summary.hook_calls = sorted(hook_names_used(ctx))
    summary.hook_sites = hook_sites(ctx)
    summary.loss_names = loss_names(ctx)
    summary.mentions = mentioned_class_names(ctx)
    summary.trains_here = ctx.module_trains
    if ctx.imports_jax:
        for key, target in ctx.jax_jitted.items():
            if key.startswith("self.") and target.filtered:
                summary.static_jitted[qualname(index, target.func)] = [list(target.params), sorted(target.static)]
    if ctx.compiled.roots or ctx.compiled.disabled or ctx.compiled.compile_calls or ctx.project.compiled:
        summary.compiled, summary.compiled_imports, summary.compile_disabled = summary_entries(ctx)
    return summary


def _summarize_rows(ctx, summary: ModuleSummary) -> None:
    """Collates that concatenate the samples' rows, the loaders with a collate that functions
    return, and those the loops iterate (see `rows`)."""
    from .rows import count_sized_params, loader_refs, returned_collates, row_collates

    index = ctx.index
    for func, tables in row_collates(ctx).items():
        summary.row_collates[qualname(index, func)] = [list(t) for t in tables]
    if any(kw.arg == "collate_fn" for call in index.calls for kw in call.keywords):
        for defs in index.functions.values():
            for func in defs:
                returned = returned_collates(ctx, func)
                if returned:
                    summary.returned_collates[qualname(index, func)] = [list(r) for r in returned]
    if index.loops:
        summary.loader_refs = loader_refs(ctx)
    for func, sized in count_sized_params(ctx).items():
        summary.row_sized[qualname(index, func)] = sized


def _asked_of(func, names: ProjectNames | None, outside: set[str]) -> bool:
    """Some call of the project may resolve to `func` (`ProjectNames.may_call`): what it tells its
    callers is asked. Else the summary records that it did not tell it."""
    if names is None or names.may_call(func.name):
        return True
    outside.add(f"~{func.name}")
    return False


def _summarize_helpers(ctx, summary: ModuleSummary, asked: set) -> None:
    """What a function's callers need to know about it: it returns an XLA device, trains over a
    loader it is given, returns a ragged training loader, or steps an optimizer with no barrier
    (of the functions `asked`: those some call of the project may resolve to)."""
    index = ctx.index
    summary.imports_xla = ctx.imports_xla
    summary.launches_replicas = launches_replicas(ctx)
    summary.shards_data = module_shards_data(ctx)
    if ctx.imports_xla:
        summary.trained_results = [
            [call.lineno, ctx.text.column(call.lineno, call.col_offset), index, getattr(loop, "lineno", 1)]
            for call, index, loop in trained_results(ctx)
            if not ctx.in_non_xla_code(loop)
        ]
    for func, params in training_sources(ctx).params.items():
        summary.loader_params[qualname(index, func)] = [list(p) for p in params]
    has_loaders = "DataLoader" in index.all_names
    has_reads = any(host_read(c)[0] for c in index.calls)
    off_xla: bool | None = None  # asked once, of a module with a function that returns a device
    for defs in index.functions.values():
        for func in defs:
            if func not in asked:
                continue
            qualified = qualname(index, func)
            if returns_xla_device(ctx, func):
                summary.xla_devices.append(qualified)
            elif returns_device(ctx, func):
                if off_xla is None:
                    off_xla = not ctx.imports_xla and off_xla_placement(ctx) is not None
                if off_xla:
                    summary.off_xla_devices.append(qualified)
            if not ctx.imports_xla:
                sources = returned_sources(ctx, func)
                if sources:
                    summary.returned_sources[qualified] = [
                        [i, c.lineno, ctx.text.column(c.lineno, c.col_offset), int(loader), written_callee(c) or ""]
                        for i, c, loader in sources
                    ]
            if has_loaders and not ctx.imports_xla:  # in XLA code, XLA311 reports the loader itself
                found = returned_ragged_loaders(ctx, func)
                if found:
                    summary.ragged_loaders[qualified] = [list(f) for f in found]
            line = unbarriered_optimizer_step(ctx, func)
            if line is not None:
                summary.optimizer_steps[qualified] = line
            if has_reads:
                reads = state_reads(ctx, func)
                if reads:
                    summary.state_reads[qualified] = [list(r) for r in reads]


XLA_DEVICE = {"torch_xla.core.xla_model.xla_device", "torch_xla.device", "torch_xla.torch_xla.device"}


def launches_replicas(ctx) -> bool:
    """The module launches data-parallel replicas on XLA (`torch_xla.launch(_mp_fn)`, `xmp.spawn`)
    and no wrapper in its XLA code reduces their gradients: what it runs reduces them by hand."""
    launched = owned = False
    for call in ctx.index.calls:
        qualified = ctx.qualified_name(call.func) or ""
        if (qualified in REPLICA_LAUNCH or last_part(qualified) in GRADIENT_REDUCERS) and not ctx.in_non_xla_code(call):
            launched = launched or qualified in REPLICA_LAUNCH
            owned = owned or last_part(qualified) in GRADIENT_REDUCERS
    return launched and not owned


CAP_WORD = re.compile(r"^_*[A-Z]\w*$")


def mentioned_class_names(ctx) -> set[str]:
    """The CapWords identifiers the module mentions, as names, attributes or the last part of a
    dotted string (`"models.Head"` in a configuration): the classes it may use."""
    found = {name for name in ctx.index.all_names if CAP_WORD.match(name)}
    for node in ctx.index.by_type.get(ast.Constant, ()):
        if isinstance(node.value, str) and len(node.value) < 200:
            last = node.value.rpartition(".")[2].strip()
            if CAP_WORD.match(last):
                found.add(last)
    return found


def hook_names_used(ctx) -> set[str]:
    """Hook-like method names (`steps.HOOK_NAME`) this module calls or hands on as attributes
    (`meter.update(loss)`, `callbacks=[self.on_batch_end]`), not counting dicts' and progress
    bars' own `update`."""
    found = set()
    for node in ctx.index.by_type.get(ast.Attribute, ()):
        if HOOK_NAME.match(node.attr):
            call = ctx.parent(node)
            if not (isinstance(call, ast.Call) and call.func is node and other_update(ctx, call)):
                found.add(node.attr)
    return found


def hook_sites(ctx) -> list[list[str]]:
    """Where this module calls or hands on hook-like method names (see `ModuleSummary.hook_sites`);
    a call that runs less often than its function (`if step % 100 == 0:`), or once at module
    level, is no site: it runs at no step."""
    found: set[tuple[str, str]] = set()
    index = ctx.index
    for node in index.by_type.get(ast.Attribute, ()):
        if not isinstance(node, ast.Attribute) or not HOOK_NAME.match(node.attr):
            continue
        call = ctx.parent(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            found.add((node.attr, "*"))  # `callbacks=[m.update]`: called where it is handed, unseen
            continue
        if other_update(ctx, call):
            continue
        func = index.enclosing_function(call)
        if ctx.is_per_step(call):
            found.add((node.attr, "!"))
        elif func is None:
            continue
        elif not _seen_function(index, func) or any(isinstance(a, ast.Lambda) for a in _until(index, call, func)):
            found.add((node.attr, "*"))
        elif not runs_less_often(ctx, call, func):
            found.add((node.attr, qualname(index, func)))
    return [list(site) for site in sorted(found)]


# A word-like string or identifier naming a loss: a call, an attribute, `getattr(self, "loss_" + k)`.
LOSS_WORD = re.compile(r"^\w*loss\w*$", re.IGNORECASE)


def loss_names(ctx) -> list[str]:
    """The names and word-like strings containing "loss" this module mentions (`x.loss_fn(...)`,
    `compute_loss`; a string quoted, `'"loss_"'`): what may call a loss-named method, by its name
    or by one built from a string (`getattr(self, "loss_" + kind)`)."""
    found: set[str] = set()
    index = ctx.index
    for node in index.by_type.get(ast.Attribute, ()):
        if isinstance(node, ast.Attribute) and LOSS_WORD.match(node.attr) and not _delegates_to_base(index, node):
            found.add(node.attr)
    for name, uses in index.name_uses.items():
        if LOSS_WORD.match(name) and uses:
            found.add(name)
    for node in index.by_type.get(ast.Constant, ()):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and LOSS_WORD.match(node.value):
            found.add(f'"{node.value}"')  # a string, marked: a part a name may be built from
    return sorted(found)


def _delegates_to_base(index, node: ast.Attribute) -> bool:
    """`super().name` inside a method `name`: an override handing on to its base, which calls the
    method only when something calls the override (no caller of `name` by itself)."""
    if not (isinstance(node.value, ast.Call) and dotted_name(node.value.func) == "super"):
        return False
    func = index.enclosing_function(node)
    return func is not None and func.name == node.attr


def _seen_function(index, func: ast.AST) -> bool:
    """`func` is a module-level function or a method of a top-level class: the project index sees
    its callers (not a closure handed out)."""
    holder = index.parent(func)
    return isinstance(holder, ast.Module) or (
        isinstance(holder, ast.ClassDef) and isinstance(index.parent(holder), ast.Module)
    )


def _returns(ctx, func: ast.AST) -> list[ast.Return]:
    """`func`'s own `return`s of a value, found once per module (not a walk per function)."""
    returns = ctx.analysis_cache.get("returns")
    if returns is None:
        returns = ctx.analysis_cache["returns"] = defaultdict(list)
        for node in ctx.index.by_type.get(ast.Return, ()):
            if node.value is not None:
                returns[ctx.index.enclosing_function(node)].append(node)
    return returns.get(func, [])


def returns_xla_device(ctx, func: ast.AST) -> bool:
    """`def get_device(): return xm.xla_device()`: code that takes its device from here runs on XLA."""
    for node in _returns(ctx, func):
        values = ctx.reaching_values(node.value) if isinstance(node.value, ast.Name) else [node.value]
        if any(isinstance(v, ast.Call) and ctx.qualified_name(v.func) in XLA_DEVICE for v in values):
            return True
    return False


def returns_device(ctx, func: ast.AST) -> bool:
    """`func` returns a device, alone or in a tuple (`return rank, device`): a `torch.device(...)`
    or a device string (`return "cuda"`), directly or through the name it is assigned to."""
    for node in _returns(ctx, func):
        if node.value is not None:
            returned = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for item in returned:
                values = ctx.reaching_values(item) if isinstance(item, ast.Name) else [item]
                if any(_is_device(ctx, v) for v in values):
                    return True
    return False


def _is_device(ctx, value: ast.expr) -> bool:
    if isinstance(value, ast.Call):
        return ctx.qualified_name(value.func) == "torch.device"
    text = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return text is not None and text.split(":")[0] in OTHER_DEVICES


def _summarize_call(ctx, summary: ModuleSummary, call: ast.Call, names: ProjectNames | None, outside: set[str]) -> None:
    from .rows import row_args

    index = ctx.index
    callee, receiver_class = _callee(ctx, call)
    # callbacks: hooks run on every forward, per-iteration events every step
    method = last_part(dotted_name(call.func))
    registers = method in HOOK_REGISTRATION or (
        method == "add_event_handler"
        and any(e in (dotted_name(a) or "") for a in call.args[:1] for e in PER_ITERATION_EVENT)
    )
    targets = [t for t in map(dotted_name, call.args) if t and (registers or _names_function(ctx, t))]
    dispatched = dispatch_targets(ctx, call) if callee is None or isinstance(call.func, ast.Name) else []
    resolves = callee is not None and _may_resolve(summary, callee, receiver_class, names, outside)
    if not targets and not dispatched and not resolves:
        return  # `loss.backward()`, `len(x)`: no project function can be meant; spare the judgement
    func = index.enclosing_function(call)
    caller = qualname(index, func) if func is not None else ""
    in_lambda = any(isinstance(a, ast.Lambda) for a in _until(index, call, func))
    excluded = (
        in_lambda
        or ctx.in_non_xla_code(call)
        or in_raise(ctx, call)
        or (func is not None and ctx.is_step_closure(func))
    )
    hot = not excluded and not (func is not None and runs_less_often(ctx, call, func))
    per_step = not excluded and ctx.is_per_step(call)
    # a call per step on guessed evidence (an offline script's loop, a step by its name only) makes
    # its callee no surer a step than itself
    guessed = per_step and ctx.step_evidence(call).confidence != HIGH
    column = ctx.text.column(call.lineno, call.col_offset)
    looped = in_loop_within(ctx, call, func if func is not None else ctx.tree)
    if resolves and callee is not None:
        summary.calls.append(
            CallSite(
                caller,
                callee,
                receiver_class,
                hot,
                per_step,
                looped,
                call.lineno,
                column,
                _device_loaders(ctx, call),
                _host_args(ctx, call),
                row_args(ctx, call) if summary.loader_refs else (),
                guessed,
            )
        )
    for target in targets:
        if registers or hot:
            summary.calls.append(
                CallSite(
                    caller,
                    target,
                    None,
                    hot or registers,
                    per_step or registers,
                    looped,
                    call.lineno,
                    column,
                    guessed=guessed and not registers,
                )
            )
    for target in dispatched:  # each function the table may hand out runs where the call runs
        summary.calls.append(
            CallSite(caller, target, None, hot, per_step, looped, call.lineno, column, guessed=guessed)
        )


def dispatch_targets(ctx, call: ast.Call) -> list[str]:
    """The functions a call through a dispatch table of this module may run: `TABLE[key](...)`,
    `fn = TABLE.get(key); fn(...)`, where `TABLE` is a dict literal of function names, or an
    instance of a class of this module whose body holds one (a registry class)."""
    funcs = ctx.assigned_values(call.func) if isinstance(call.func, ast.Name) else [call.func]
    tables: list[ast.expr | None] = [f.value for f in funcs if isinstance(f, ast.Subscript)]
    tables += [receiver(f) for f in funcs if isinstance(f, ast.Call) and method_name(f) == "get"]
    found: list[str] = []
    for table in tables:
        for mapping in _dispatch_dicts(ctx, table):
            for key, value in zip(mapping.keys, mapping.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and names_non_xla_feature(key.value):
                    continue  # `"flash_attention_2": flash_attention_mask` never runs on XLA
                name = dotted_name(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
                if name and (name.split(".")[0] in ctx.index.functions or name.split(".")[0] in ctx.index.imports):
                    found.append(name)
    return list(dict.fromkeys(found))


def _dispatch_dicts(ctx, table: ast.expr | None) -> list[ast.Dict]:
    if not isinstance(table, ast.Name):
        return []
    found: list[ast.Dict] = []
    for value in ctx.assigned_values(table):
        if isinstance(value, ast.Dict):
            found.append(value)
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            for cls in ctx.index.by_type.get(ast.ClassDef, ()):
                if cls.name == value.func.id and isinstance(ctx.index.parent(cls), ast.Module):
                    found += [
                        s.value
                        for s in cls.body
                        if isinstance(s, (ast.Assign, ast.AnnAssign)) and isinstance(s.value, ast.Dict)
                    ]
    return found


def _device_loaders(ctx, call: ast.Call) -> tuple[str, ...]:
    """The arguments of `call` that are device loaders, built there or assigned to the name passed:
    "2" for the third positional one, "k:loader" for `loader=...`."""
    if not ctx.cached(_builds_device_loaders):
        return ()  # what a name is assigned is a call of this module: none builds a device loader
    found = []
    for position, arg in enumerate(call.args):
        if _device_loader(ctx, arg):
            found.append(str(position))
    for kw in call.keywords:
        if kw.arg and _device_loader(ctx, kw.value):
            found.append(f"k:{kw.arg}")
    return tuple(found)


def _host_args(ctx, call: ast.Call) -> tuple[str, ...]:
    """The arguments of `call` evidently on the host (a `.cpu()` tensor, a Python number), keyed as
    in `_device_loaders`."""
    from .tensors import Kind
    from .uploads import invariant

    host = {Kind.CPU: "cpu", Kind.NOT_TENSOR: "py"}
    passed = [(str(i), arg) for i, arg in enumerate(call.args) if not isinstance(arg, ast.Starred)]
    passed += [(f"k:{kw.arg}", kw.value) for kw in call.keywords if kw.arg]
    kinds = [(key, host.get(ctx.tensor_kind(value))) for key, value in passed]
    found = [f"{key}={kind}" for key, kind in kinds if kind]
    # "0=dev": a device value whose origin is seen (`evidence.value_evidence`): the callee's
    # parameter is then a device value by evidence, not by its name
    found += [
        f"{key}=dev"
        for key, value in passed
        if ctx.tensor_kind(value).on_device and ctx.value_evidence(value).confidence == HIGH
    ]
    # "0=inv": a value the same at every call of the caller (`uploads.invariant`: a literal, a
    # size, an attribute set once; not the caller's own parameters, which would ask its callers),
    # what a host-built constant is built from
    found += [f"{key}=inv" for key, value in passed if invariant(ctx, value, hops=0) is True]
    # "k:**": every keyword it passes is on the host (what a `**kwargs` parameter collects), none
    # unpacked from a mapping (`update(**losses)`)
    words = [kind for key, kind in kinds if key.startswith("k:")]  # (host kinds only)
    if all(kw.arg for kw in call.keywords) and all(words):
        found.append("k:**=" + ("cpu" if "cpu" in words else "py"))
    return tuple(found)


def _builds_device_loaders(ctx) -> bool:
    """Some call of the module builds a device loader (asked at each call the summary records)."""
    return any(DEVICE_LOADER.match(last_part(dotted_name(call.func))) for call in ctx.index.calls)


def _device_loader(ctx, value: ast.expr) -> bool:
    values = ctx.assigned_values(value) if isinstance(value, (ast.Name, ast.Attribute)) else [value]
    return any(isinstance(v, ast.Call) and DEVICE_LOADER.match(last_part(dotted_name(v.func))) for v in values)


def passed_device_loader(ctx, name: ast.Name) -> bool:
    """`name` is a parameter that a call in another module of the project passes a device loader."""
    facts = ctx.project.device_loader_params
    param = ctx.parameter(name) if facts else None
    func = ctx.index.parent(ctx.index.parent(param)) if param is not None else None
    if param is None or not isinstance(func, FUNCTIONS):
        return False
    position = ctx.call_position(func, param)
    names = [qualname(ctx.index, func)]
    if isinstance(ctx.index.parent(func), ast.ClassDef):
        names.append(f"*.{func.name}")  # a base class calls `self.name(device_loader)`: this override too
    return any((q, f"k:{param.arg}") in facts or (position is not None and (q, str(position)) in facts) for q in names)


def _may_resolve(
    summary: ModuleSummary, callee: str, receiver_class: str | None, names: ProjectNames | None, outside: set[str]
) -> bool:
    """Whether `ProjectIndex.resolve_call` could find a project function for this callee at all:
    a method of `self`/`cls`/`super()` or of a typed receiver that the project defines, a name this
    module defines, or a name it imports that the project could define (see `ProjectNames`; what
    it could not goes to `outside`)."""
    parts = callee.split(".")
    method = None
    if callee.startswith("super().") or receiver_class is not None:
        method = parts[-1] if len(parts) > 1 else "__call__"  # `model(x)`: its class's `__call__`
    elif parts[0] in ("self", "cls"):
        if len(parts) != 2:
            return False
        method = parts[1]
    if method is not None:
        if names is None or names.may_define_method(method):
            return True
        outside.add(f".{method}")
        return False
    if parts[0] in summary.functions or parts[0] in summary.classes:
        return True
    qualified = summary.imports.get(parts[0])
    if qualified is None:
        return False
    qualified = ".".join([qualified, *parts[1:]])
    if names is None or names.may_import(qualified):
        return True
    outside.add(qualified)
    return False


def _until(index, node: ast.AST, stop: ast.AST | None):
    for anc in index.ancestors(node):
        if anc is stop:
            return
        yield anc


def _names_function(ctx, target: str) -> bool:
    """`target` (passed as an argument) names a function of this module: `self.m` or a def."""
    parts = target.split(".")
    if len(parts) == 2 and parts[0] in ("self", "cls") or len(parts) == 1:
        return parts[-1] in ctx.index.functions
    return False


def _delegates_to_own_step(summary: ModuleSummary, call: CallSite, callee: ModuleSummary, name: str) -> bool:
    """`call` is `super().m(...)` in a method `m` of its own (an override delegating to the method
    it overrides), and that method runs every step in its own module: what it reads is reported
    there, where the code changes, and not again at each subclass that hands its step on."""
    method = call.callee.removeprefix("super().")
    return (
        method != call.callee
        and call.caller.rpartition(".")[2] == method
        and name.rpartition(".")[2] == method
        and name in callee.step_functions
    )


def written_callee(call: ast.Call) -> str | None:
    """The callee as written, as the project's call sites name it: "f", "self.m", "super().m"."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and dotted_name(func.value.func) == "super":
        return f"super().{func.attr}"
    return dotted_name(func)


def _callee(ctx, call: ast.Call) -> tuple[str | None, str | None]:
    func = call.func
    name = written_callee(call)
    wrapped = partial_target(ctx, func)
    if wrapped is not None:
        return wrapped, None  # `self.extract = partial(extract, device=d)`, then `self.extract(x)`
    if isinstance(func, ast.Name) and func.id not in ctx.index.functions and func.id not in ctx.index.imports:
        return name, _instance_class(ctx, func)  # `compute_loss(p, t)`, an instance: its `__call__`
    if not name or name.startswith("super().") or not isinstance(func, ast.Attribute):
        return name, None
    receiver = func.value
    if dotted_name(receiver) in ("self", "cls") or (
        isinstance(receiver, ast.Name) and receiver.id in ctx.index.imports
    ):
        return name, None
    return name, _instance_class(ctx, receiver)


def partial_target(ctx, func: ast.expr) -> str | None:
    """The function, as written, that a name or attribute bound only to `functools.partial(f, ...)`
    calls: calling it calls `f` (with the bound arguments first)."""
    if not isinstance(func, (ast.Name, ast.Attribute)) or not ctx.cached(_builds_partials):
        return None  # (what a name is assigned is a call of this module: none is a `partial`)
    values = ctx.assigned_values(func)
    partials = [v for v in values if isinstance(v, ast.Call) and ctx.qualified_name(v.func) == "functools.partial"]
    # only keywords bound: the call's positional arguments keep their places (`partial(f, a)` shifts them)
    wrapped = {dotted_name(v.args[0]) for v in partials if len(v.args) == 1}
    if not values or len(partials) != len(values) or len(wrapped) != 1:
        return None
    return wrapped.pop()


def _builds_partials(ctx) -> bool:
    return any(ctx.qualified_name(call.func) == "functools.partial" for call in ctx.index.calls)


def _instance_class(ctx, value: ast.expr) -> str | None:
    """The class, as written, that `value` is evidently an instance of (`loss_fn = Loss(...)`)."""
    for assigned in ctx.assigned_values(value):
        if isinstance(assigned, ast.Call):
            cls = dotted_name(assigned.func)
            if cls and last_part(cls)[:1].isupper():
                return cls
    return None


# -- the project -------------------------------------------------------------------------------------

FunctionRef = tuple[str, str]  # (module path, function qualname)


class ProjectIndex:
    def __init__(
        self, summaries: list[ModuleSummary], *, assume_compiled: bool = False, compiled_names: tuple[str, ...] = ()
    ) -> None:
        """`assume_compiled`, `compiled_names`: `--assume-compiled` and the `compiled` setting (see
        `assumed_roots`)."""
        self.summaries = {s.path: s for s in summaries}
        self.assume_compiled = assume_compiled
        self.compiled_names = compiled_names
        self._resolved: list | None = None
        self._defining: dict[str, list[ModuleSummary]] | None = None
        self._namespace: dict[tuple[str, str], list[ModuleSummary]] = {}  # see namespace_module
        self.by_name: dict[str, list[ModuleSummary]] = defaultdict(list)
        for s in summaries:
            self.by_name[s.name].append(s)

    # -- resolution -------------------------------------------------------------------------------
    def module(self, qualified: str, near: ModuleSummary) -> ModuleSummary | None:
        candidates = self.by_name.get(qualified)
        if not candidates:
            return self.namespace_module(qualified, near)
        if len(candidates) == 1:
            return candidates[0]
        here = Path(near.path).parent  # same name in two source roots: the importer's neighbour
        return min(candidates, key=lambda s: (Path(s.path).parent != here, s.path))

    def namespace_module(self, qualified: str, near: ModuleSummary) -> ModuleSummary | None:
        """`pkg.helpers` where `pkg` has no `__init__.py` (a namespace package, PEP 420): the file
        `pkg/helpers.py` (or `pkg/helpers/__init__.py`) in the nearest folder above the importer
        that has it, as when that folder is on `sys.path`."""
        folder = os.path.dirname(near.path)
        key = (qualified, folder)
        found = self._namespace.get(key)
        if found is None:  # asked for every call of every module: once per (name, folder)
            # strings, not `Path`s (the same paths: summaries' paths are absolute and resolved)
            relative = os.path.join(*qualified.split("."))
            found = self._namespace[key] = [
                summary
                for above in _folders_up(folder)
                for candidate in (os.path.join(above, relative + ".py"), os.path.join(above, relative, "__init__.py"))
                if (summary := self.summaries.get(candidate)) is not None
            ][:2]
        return next((s for s in found if s is not near), None)

    def symbol(self, qualified: str, near: ModuleSummary) -> tuple[ModuleSummary, str] | None:
        """`pkg.mod.f` -> (the summary of pkg.mod, "f"); also `pkg.mod.Cls.m`."""
        parts = qualified.split(".")
        for split in range(len(parts) - 1, 0, -1):
            module = self.module(".".join(parts[:split]), near)
            if module is not None:
                return module, ".".join(parts[split:])
        return None

    def unresolved_import(self, qualified: str, near: ModuleSummary) -> tuple[ModuleSummary, str] | None:
        """`utils.trainer.check` where the project has no module `utils.trainer`: a script run with
        another folder on `sys.path`, or a module copied or renamed (`kwt_utils_trainer.py`). Taken to
        be the project's only module whose name ends with the imported one and that defines the name."""
        parts = qualified.split(".")
        for split in range(len(parts) - 1, 0, -1):
            head = parts[split]
            defining = self.defining(head)
            if not defining:  # (most names: no pattern to build)
                continue
            ending = _module_ending(tuple(parts[:split]))
            found = [s for s in defining if s is not near and ending.search(s.name)]
            if len(found) == 1:
                return found[0], ".".join(parts[split:])
        return None

    def defining(self, name: str) -> list[ModuleSummary]:
        """The modules defining a top-level function or class `name`."""
        if self._defining is None:
            self._defining = defaultdict(list)
            for s in self.summaries.values():
                for top in {*s.functions, *s.classes}:
                    if "." not in top:
                        self._defining[top].append(s)
        return self._defining.get(name, [])

    def resolve_name(self, summary: ModuleSummary, dotted: str, depth: int = 0) -> tuple[ModuleSummary, str] | None:
        """What `dotted`, written in `summary`'s module, names: a (module, qualname) of a function
        or class defined in the project."""
        if depth > MAX_HIERARCHY:
            return None
        head, _, rest = dotted.partition(".")
        if head in summary.functions or head in summary.classes:
            return summary, dotted
        qualified = summary.imports.get(head)
        if qualified is None:
            return None
        found = self.symbol(f"{qualified}.{rest}" if rest else qualified, summary)
        if found is None:
            found = self.unresolved_import(f"{qualified}.{rest}" if rest else qualified, summary)
        if found is None:
            return None
        module, name = found
        if module is summary and name == dotted:
            return found
        # a re-export (`from .trainer import Trainer` in a package's __init__): follow it
        if name not in module.functions and name not in module.classes and name.partition(".")[0] in module.imports:
            return self.resolve_name(module, name, depth + 1)
        return found

    def method(self, summary: ModuleSummary, cls: str, name: str, depth: int = 0) -> FunctionRef | None:
        """`cls.name` in `summary`'s module, or inherited from a base class in the project."""
        if depth > MAX_HIERARCHY:
            return None
        if f"{cls}.{name}" in summary.functions:
            return summary.path, f"{cls}.{name}"
        for base in summary.classes.get(cls, ()):
            found = self.resolve_name(summary, base)
            if found is not None and found[1] in found[0].classes:
                result = self.method(found[0], found[1], name, depth + 1)
                if result is not None:
                    return result
        return None

    def resolve_call(self, summary: ModuleSummary, call: CallSite) -> FunctionRef | None:
        callee = call.callee
        caller_class = _class_of(summary, call.caller)
        if callee.startswith("super()."):
            if caller_class is None:
                return None
            for base in summary.classes.get(caller_class, ()):
                found = self.resolve_name(summary, base)
                if found is not None and found[1] in found[0].classes:
                    result = self.method(found[0], found[1], callee[len("super().") :])
                    if result is not None:
                        return result
            return None
        parts = callee.split(".")
        if parts[0] in ("self", "cls") and len(parts) == 2:
            return self.method(summary, caller_class, parts[1]) if caller_class else None
        if call.receiver_class is not None:
            found = self.resolve_name(summary, call.receiver_class)
            if found is not None and found[1] in found[0].classes:
                # `x.m(...)` runs the method; `x(...)`, the instance called, its `__call__`
                return self.method(found[0], found[1], parts[-1] if len(parts) > 1 else "__call__")
            return None
        if parts[0] in ("self", "cls"):
            return None
        found = self.resolve_name(summary, callee)
        if found is None:
            return None
        module, name = found
        if name in module.functions:
            return module.path, name
        if name in module.classes:  # calling a class runs its __init__; an instance's call, forward
            return self.method(module, name, "__init__")
        owner, _, method = name.rpartition(".")
        if owner in module.classes:  # `Cls.static_method(...)`
            return self.method(module, owner, method)
        return None

    @property
    def resolved(self) -> list[tuple[ModuleSummary, CallSite, FunctionRef]]:
        """Every call of the project whose callee is a function of the project."""
        if self._resolved is None:
            found = [(s, c, self.resolve_call(s, c)) for s in self.summaries.values() for c in s.calls]
            self._resolved = [(s, c, t) for s, c, t in found if t is not None]
        return self._resolved

    # -- what the project says about each module ----------------------------------------------------
    def facts(self) -> dict[str, ProjectFacts]:
        """Module path -> the facts other modules establish about it: which of its functions run
        every step or are called at all from elsewhere, and which of its calls run a function
        (elsewhere) that trains."""
        resolved = self.resolved
        training = self._training(resolved)
        hot, seen = self._per_step(resolved)
        steps: dict[str, set[str]] = defaultdict(set)
        guessed_steps: dict[str, set[str]] = defaultdict(set)
        called: dict[str, set[str]] = defaultdict(set)
        training_calls: dict[str, set[tuple[int, int]]] = defaultdict(set)
        helper_reads: dict[str, set] = defaultdict(set)
        for path, name in hot:
            if name not in self.summaries[path].step_functions:
                steps[path].add(name)
                if (path, name) not in seen:
                    guessed_steps[path].add(name)
        for summary, call, (path, name) in resolved:
            if path != summary.path:
                called[path].add(name)
            if (path, name) in training:  # local ones too: receiver classes resolve only here
                training_calls[summary.path].add((call.line, call.column))
            reads = self.summaries[path].reads.get(name)
            if reads and path == summary.path:
                # a local helper is per step itself: its reads are reported where they are, and at
                # its calls only those it hands back (`sizes = grid_sizes(coords)` is a host read here)
                reads = [r for r in reads if r.returned]
            elif reads and _delegates_to_own_step(summary, call, self.summaries[path], name):
                reads = []  # `return super().forward(x)`: the parent's step, its reads reported there
            if reads and call.hot:
                helper_reads[summary.path].add(((call.line, call.column), call.callee, path, tuple(reads)))
        static = self._static_methods()
        compiled = self._compiled(resolved)
        helper_calls, xla_device, off_xla_device = self._helper_calls(resolved)
        replicas = {path for summary, _, (path, _) in resolved if summary.launches_replicas and path != summary.path}
        device_loaders: dict[str, set[tuple[str, str]]] = defaultdict(set)
        overridden: set[tuple[str, str]] = set()  # `self.m(loader)`: any override of `m` gets it too
        for _summary, call, (path, name) in resolved:
            device_loaders[path].update((name, arg) for arg in call.device_loaders)
        for summary in self.summaries.values():  # resolved or not: the method may be a subclass's only
            for call in summary.calls:
                if call.device_loaders and call.callee.startswith("self.") and call.callee.count(".") == 1:
                    overridden.update((f"*.{call.callee[5:]}", arg) for arg in call.device_loaders)
        for path in self.summaries:
            device_loaders[path] |= overridden
        hooks = frozenset(name for summary in self.summaries.values() for name in summary.hook_calls)
        loss_mentions = frozenset(name for summary in self.summaries.values() for name in summary.loss_names)
        stepped_hooks = frozenset(
            name
            for summary in self.summaries.values()
            for name, caller in summary.hook_sites
            if caller in ("!", "*") or (summary.path, caller) in hot
        )
        host_params = self._host_params(resolved)
        row_refs, row_params = self._row_facts(resolved)
        imported = self._imported()
        uses_xla = any(summary.imports_xla for summary in self.summaries.values())
        from_xla = {path for summary, _, (path, _) in resolved if summary.imports_xla and path != summary.path}
        unmentioned = self._unmentioned_classes()
        return {
            path: ProjectFacts(
                frozenset(steps[path]),
                frozenset(guessed_steps[path]),
                frozenset(called[path]),
                frozenset(training_calls[path]),
                tuple(sorted(helper_reads[path])),
                static,
                tuple(sorted(compiled[path].items())),
                tuple(sorted(helper_calls[path])),
                path in xla_device,
                path in replicas,
                frozenset(device_loaders[path]),
                hooks,
                frozenset(host_params[path]),
                frozenset(row_refs[path]),
                frozenset(row_params[path]),
                frozenset(imported[path]),
                uses_xla,
                path in from_xla,
                unmentioned.get(path, frozenset()),
                path in off_xla_device,
                stepped_hooks,
                loss_mentions,
            )
            for path in self.summaries
        }

    def _unmentioned_classes(self) -> dict[str, frozenset[str]]:
        """Module path -> its top-level classes no other module mentions; only in a project that
        trains somewhere (an application whose own code builds and runs its models)."""
        if not any(summary.trains_here for summary in self.summaries.values()):
            return {}
        mentioned: dict[str, int] = defaultdict(int)  # name -> how many modules mention it
        for summary in self.summaries.values():
            for name in summary.mentions:
                mentioned[name] += 1
        return {
            path: frozenset(
                cls
                for cls in summary.classes
                if "." not in cls and CAP_WORD.match(cls) and mentioned[cls] <= (cls in summary.mentions)
            )
            for path, summary in self.summaries.items()
        }

    def _imported(self) -> dict[str, set[str]]:
        """Module path -> its functions that other modules import by name."""
        found: dict[str, set[str]] = defaultdict(set)
        for summary in self.summaries.values():
            for local in summary.imports:
                target = self.resolve_name(summary, local)
                if target is not None and target[0] is not summary and target[1] in target[0].functions:
                    found[target[0].path].add(target[1])
        return found

    def _row_facts(self, resolved) -> tuple[dict[str, set], dict[str, set]]:
        """Module path -> the collate references its loops iterate that name a collate of row
        tables, and its functions' parameters some call passes a row table (see `rows`)."""
        refs: dict[str, set[tuple[str, int, str]]] = defaultdict(set)
        params: dict[str, set[tuple[str, str, str, bool]]] = defaultdict(set)
        for summary in self.summaries.values():
            for ref in summary.loader_refs:
                refs[summary.path].update((ref, position, where) for position, where in self._row_tables(summary, ref))
        for summary, call, (path, name) in resolved:
            for entry in call.row_args:
                key, _, rest = entry.partition("=")
                ref, _, position = rest.rpartition("#")
                for at, where in self._row_tables(summary, ref):
                    if str(at) == position:
                        params[path].add((name, key, where, summary.imports_xla))
        return refs, params

    def _row_tables(self, summary: ModuleSummary, ref: str, depth: int = 0) -> list[tuple[int, str]]:
        """(position in the batch, "file:line") of each row table the collate `ref` (written in
        `summary`'s module, see `rows.collate_refs`) concatenates."""
        if depth > MAX_HIERARCHY:
            return []
        if ref.startswith("call:"):
            callee, _, index = ref.removeprefix("call:").rpartition(":")
            found = self.resolve_name(summary, callee)
            if found is None:
                return []
            module, name = found
            return [
                table
                for at, inner in module.returned_collates.get(name, ())
                if str(at) == index
                for table in self._row_tables(module, inner, depth + 1)
            ]
        target: FunctionRef | None = None
        found = self.resolve_name(summary, ref)
        if found is not None and found[1] in found[0].functions:
            target = (found[0].path, found[1])
        elif "." in ref:  # `Dataset.collate_fn`, defined in a base class
            owner, _, method = ref.rpartition(".")
            cls = self.resolve_name(summary, owner)
            if cls is not None and cls[1] in cls[0].classes:
                target = self.method(cls[0], cls[1], method)
        if target is None:
            return []
        tables = self.summaries[target[0]].row_collates.get(target[1], ())
        return [(int(position), f"{target[0]}:{line}") for position, line in tables]

    def _host_params(self, resolved) -> dict[str, set[tuple[str, str, str]]]:
        """Module path -> (qualname, argument key, "cpu"/"py") of its functions' parameters that
        every call the project makes of them passes a value evidently on the host."""
        passed: dict[FunctionRef, dict[str, str]] = {}
        device: dict[FunctionRef, set[str]] = defaultdict(set)
        fixed: dict[FunctionRef, set[str]] = {}
        for _summary, call, target in resolved:
            entries = [entry.rpartition("=")[::2] for entry in call.host_args]
            device[target].update(key for key, kind in entries if kind == "dev")
            invariant = {key for key, kind in entries if kind == "inv"}
            fixed[target] = fixed.get(target, invariant) & invariant
            here = {key: kind for key, kind in entries if kind not in ("dev", "inv")}
            before = passed.get(target, here)
            passed[target] = {k: "cpu" if "cpu" in (before[k], here[k]) else "py" for k in before.keys() & here.keys()}
        found: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
        for (path, name), same in fixed.items():  # every call passes the same value at every step
            found[path].update((name, key, "inv") for key in same)
        for (path, name), keys in passed.items():
            found[path].update((name, key, kind) for key, kind in keys.items())
        for (path, name), device_keys in device.items():  # some call passes a device value of seen origin
            found[path].update((name, key, "dev") for key in device_keys)
        return found

    def _compiled(self, resolved) -> dict[str, dict[str, str]]:
        """Module path -> its functions torch.compile traces because of other modules (qualname ->
        options key): the `forward` of a class compiled elsewhere, and what compiled functions call."""

        seeds: dict[FunctionRef, CompileOptions] = {}
        if self.assume_compiled or self.compiled_names:
            seeds.update(assumed_roots(self, self.compiled_names, self.assume_compiled))
        for s in self.summaries.values():
            for name, key in s.compiled.items():
                seeds[(s.path, name)] = CompileOptions.from_key(key)
            for entry, key in s.compiled_imports.items():
                # `Model`, `Model:generate` (a bound method), or `learn()` (a function compiled itself)
                itself = entry.endswith("()")
                written, _, method = entry.removesuffix("()").partition(":")
                found = self.resolve_name(s, written)
                if itself:
                    forward = (found[0].path, found[1]) if found and found[1] in found[0].functions else None
                else:
                    forward = (
                        self.method(found[0], found[1], method or "forward")
                        if found and found[1] in found[0].classes
                        else None
                    )
                if forward is not None:
                    seeds[forward] = (
                        seeds[forward].merge(CompileOptions.from_key(key))
                        if forward in seeds
                        else CompileOptions.from_key(key)
                    )
        if not seeds:
            return defaultdict(dict)
        disabled = {(s.path, name) for s in self.summaries.values() for name in s.compile_disabled}
        edges: dict[FunctionRef, list[FunctionRef]] = defaultdict(list)
        for summary, call, target in resolved:
            if call.caller and target not in disabled:
                edges[(summary.path, call.caller)].append(target)
        reached = dict(seeds)
        work = list(reached)
        while work:
            ref = work.pop()
            for following in edges.get(ref, ()):
                merged = reached[following].merge(reached[ref]) if following in reached else reached[ref]
                if reached.get(following) != merged:
                    reached[following] = merged
                    work.append(following)
        spread: dict[str, dict[str, str]] = defaultdict(dict)
        for (path, name), options in reached.items():
            own = self.summaries[path].compiled.get(name)
            if own != options.key():
                spread[path][name] = options.key()
        return spread

    def _helper_calls(self, resolved) -> tuple[dict[str, set], set[str], set[str]]:
        """Per module, its calls of functions with a fact for their call sites (see
        `ProjectFacts.helper_calls`), and whether it calls one returning an XLA device, or one
        returning a device of another backend's module."""
        found: dict[str, set] = defaultdict(set)
        xla_device: set[str] = set()
        off_xla_device: set[str] = set()
        trained = self._xla_trained_loaders(resolved)
        for (path, line, column, callee), (consumer, loop) in trained.items():
            found[path].add(((line, column), "xla_trained", callee, consumer, loop))
        trained_lines = {(path, line) for path, line, _, _ in trained}
        for summary, call, (path, name) in resolved:
            target = self.summaries[path]
            at = (call.line, call.column)
            if name in target.xla_devices:
                xla_device.add(summary.path)
            if name in target.off_xla_devices and path != summary.path:
                off_xla_device.add(summary.path)
            for position, param in target.loader_params.get(name, ()):
                found[summary.path].add(
                    (at, "trains_on", call.callee, path, f"{'' if position is None else position}:{param}")
                )
            if path == summary.path:
                continue  # a helper of the same module: its own findings are where they are
            for line, index in target.ragged_loaders.get(name, ()):
                if (path, line) not in trained_lines:  # else reported where it is built, with its loop
                    found[summary.path].add((at, "ragged_loader", call.callee, path, f"{line}:{index}"))
            if target.shards_data:
                found[summary.path].add((at, "shards_data", call.callee, path, ""))
            if name in target.optimizer_steps and call.hot:
                found[summary.path].add((at, "steps_optimizer", call.callee, path, str(target.optimizer_steps[name])))
            for key, line in target.row_sized.get(name, {}).items():
                if call.hot:
                    found[summary.path].add((at, "sizes_by_rows", call.callee, path, f"{key}@{line}"))
            if name in target.state_reads and call.hot and not _delegates_to_own_step(summary, call, target, name):
                line, what = target.state_reads[name][0]
                found[summary.path].add((at, "reads_state", call.callee, path, f"{line}:{what}"))
        return found, xla_device, off_xla_device

    def _xla_trained_loaders(self, resolved) -> dict[tuple[str, int, int, str], tuple[str, str]]:
        """Ragged `DataLoader(...)`s built in modules with no XLA of their own whose value reaches,
        through project functions' returns, a loop that trains in XLA code: (path, line, column,
        callee as written) -> (the XLA module, "the loop's line:the function it calls for the loader")."""
        targets = {(s.path, c.line, c.column): t for s, c, t in resolved}
        callees = {(s.path, c.line, c.column): c.callee for s, c, _ in resolved}
        found: dict[tuple[str, int, int, str], tuple[str, str]] = {}
        for summary in self.summaries.values():
            for line, column, index, loop in summary.trained_results:
                target = targets.get((summary.path, line, column))
                work = [(target, index, 0)] if target is not None else []
                seen: set = set()
                while work:
                    (path, name), wanted, depth = work.pop()
                    module = self.summaries[path]
                    if (path, name, wanted) in seen or depth > 4 or module.imports_xla:
                        continue
                    seen.add((path, name, wanted))
                    for element, at_line, at_column, loader, callee in module.returned_sources.get(name, ()):
                        if element != wanted and element != -1:
                            continue
                        if loader:
                            if wanted == -1 or element == wanted:
                                via = callees.get((summary.path, line, column), "")
                                found.setdefault((path, at_line, at_column, callee), (summary.path, f"{loop}:{via}"))
                            continue
                        inner = targets.get((path, at_line, at_column))
                        if inner is not None:
                            work.append((inner, -1 if element == wanted else wanted, depth + 1))
        return found

    def _static_methods(self) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
        """filter_jit methods whose name no other method or function of the project has: a call of
        that name on any receiver runs it."""
        names: dict[str, int] = defaultdict(int)
        for s in self.summaries.values():
            for qualified in s.functions:
                names[qualified.rpartition(".")[2]] += 1
        found = []
        for s in self.summaries.values():
            for qualified, (params, static) in s.static_jitted.items():
                name = qualified.rpartition(".")[2]
                if names[name] == 1 and static:
                    found.append((name, tuple(params), tuple(static)))
        return tuple(sorted(found))

    def _training(self, resolved) -> set[FunctionRef]:
        """Functions that run a backward or optimizer step every call, through any module."""
        training = {(s.path, name) for s in self.summaries.values() for name in s.trains}
        callers: dict[FunctionRef, list[FunctionRef]] = defaultdict(list)
        for summary, call, target in resolved:
            if call.hot and call.caller and not call.looped:
                callers[target].append((summary.path, call.caller))
        return _reachable(training, callers)

    def _per_step(self, resolved) -> tuple[set[FunctionRef], set[FunctionRef]]:
        """Functions run every step, through any module; and those of them reached from a root
        whose evidence is seen (not only from a step by its name, or an offline script's loop)."""
        edges: dict[FunctionRef, list[FunctionRef]] = defaultdict(list)
        hot: set[FunctionRef] = {(s.path, name) for s in self.summaries.values() for name in s.step_functions}
        seen = {(s.path, name) for s in self.summaries.values() for name in s.step_functions - s.guessed_steps}
        for summary, call, target in resolved:
            if call.per_step:
                hot.add(target)
                if not call.guessed:
                    seen.add(target)
            elif call.hot and call.caller:
                edges[(summary.path, call.caller)].append(target)
        return _reachable(hot, edges), _reachable(seen, edges)


def _folders_up(folder: str):
    """`folder` and each folder above it, as `(Path(folder), *Path(folder).parents)` gives them."""
    while True:
        yield folder
        above = os.path.dirname(folder)
        if not folder or above == folder:
            return
        folder = above


def _reachable(seeds: set[FunctionRef], edges: dict[FunctionRef, list[FunctionRef]]) -> set[FunctionRef]:
    """`seeds` and every function reachable from them along `edges`."""
    found = set(seeds)
    work = list(found)
    while work:
        for following in edges.get(work.pop(), ()):
            if following not in found:
                found.add(following)
                work.append(following)
    return found


@lru_cache(maxsize=4096)
def _module_ending(parts: tuple[str, ...]) -> re.Pattern:
    """Matches a module name ending with the dotted `parts`, whether as packages (`src.utils.trainer`)
    or joined into one file name (`kwt_utils_trainer`)."""
    return re.compile(r"(^|[._])" + r"[._]+".join(map(re.escape, parts)) + "$")


def _class_of(summary: ModuleSummary, caller: str) -> str | None:
    """The class a method belongs to: `Trainer` for `Trainer.step` (nested classes included)."""
    owner = caller.rpartition(".")[0]
    while owner:
        if owner in summary.classes:
            return owner
        owner = owner.rpartition(".")[0]
    return None


# -- cache form (plain JSON) -------------------------------------------------------------------------


def summary_to_json(s: ModuleSummary) -> dict:
    return {
        "path": s.path,
        "name": s.name,
        "outside": s.outside,
        "imports": s.imports,
        "classes": s.classes,
        "functions": s.functions,
        "step_functions": sorted(s.step_functions),
        "trains": sorted(s.trains),
        "calls": [
            [
                c.caller,
                c.callee,
                c.receiver_class,
                c.hot,
                c.per_step,
                c.looped,
                c.line,
                c.column,
                list(c.device_loaders),
                list(c.host_args),
                list(c.row_args),
                c.guessed,
            ]
            for c in s.calls
        ],
        "reads": {name: [list(r) for r in reads] for name, reads in s.reads.items()},
        "static_jitted": s.static_jitted,
        "compiled": s.compiled,
        "compiled_imports": s.compiled_imports,
        "compile_disabled": s.compile_disabled,
        "imports_xla": s.imports_xla,
        "xla_devices": s.xla_devices,
        "off_xla_devices": s.off_xla_devices,
        "loader_params": s.loader_params,
        "ragged_loaders": s.ragged_loaders,
        "optimizer_steps": s.optimizer_steps,
        "launches_replicas": s.launches_replicas,
        "shards_data": s.shards_data,
        "returned_sources": s.returned_sources,
        "trained_results": s.trained_results,
        "state_reads": s.state_reads,
        "hook_calls": s.hook_calls,
        "hook_sites": s.hook_sites,
        "loss_names": s.loss_names,
        "row_collates": s.row_collates,
        "row_sized": s.row_sized,
        "returned_collates": s.returned_collates,
        "loader_refs": s.loader_refs,
        "guessed_steps": sorted(s.guessed_steps),
        "mentions": sorted(s.mentions),
        "trains_here": s.trains_here,
    }


def summary_from_json(data: dict) -> ModuleSummary:
    return ModuleSummary(
        data["path"],
        data["name"],
        dict(data["imports"]),
        {k: list(v) for k, v in data["classes"].items()},
        dict(data["functions"]),
        set(data["step_functions"]),
        set(data["trains"]),
        [CallSite(*c[:8], *(tuple(extra) for extra in c[8:11]), *c[11:12]) for c in data["calls"]],
        {name: [ParamRead(*r) for r in reads] for name, reads in data.get("reads", {}).items()},
        {name: [list(p), list(st)] for name, (p, st) in data.get("static_jitted", {}).items()},
        dict(data.get("compiled", {})),
        dict(data.get("compiled_imports", {})),
        list(data.get("compile_disabled", [])),
        imports_xla=bool(data.get("imports_xla")),
        xla_devices=list(data.get("xla_devices", [])),
        off_xla_devices=list(data.get("off_xla_devices", [])),
        loader_params={k: [list(p) for p in v] for k, v in data.get("loader_params", {}).items()},
        ragged_loaders={k: [list(p) for p in v] for k, v in data.get("ragged_loaders", {}).items()},
        optimizer_steps=dict(data.get("optimizer_steps", {})),
        launches_replicas=bool(data.get("launches_replicas")),
        shards_data=bool(data.get("shards_data")),
        returned_sources={k: [list(r) for r in v] for k, v in data.get("returned_sources", {}).items()},
        trained_results=[list(r) for r in data.get("trained_results", [])],
        state_reads={k: [list(r) for r in v] for k, v in data.get("state_reads", {}).items()},
        hook_calls=list(data.get("hook_calls", [])),
        hook_sites=[list(site) for site in data.get("hook_sites", [])],
        loss_names=list(data.get("loss_names", [])),
        row_collates={k: [list(t) for t in v] for k, v in data.get("row_collates", {}).items()},
        row_sized={k: dict(v) for k, v in data.get("row_sized", {}).items()},
        returned_collates={k: [list(r) for r in v] for k, v in data.get("returned_collates", {}).items()},
        loader_refs=list(data.get("loader_refs", [])),
        guessed_steps=set(data.get("guessed_steps", [])),
        mentions=set(data.get("mentions", [])),
        trains_here=bool(data.get("trains_here")),
        outside=list(data.get("outside", [])),
    )


# --- `--assume-compiled`: model code compiled by its users -----------------------------------------


def nn_module_class(index: ProjectIndex, summary: ModuleSummary, cls: str, depth: int = 0) -> bool:
    """`cls` (a qualname in `summary`'s module) derives from a `torch.nn` class (`nn.Module`,
    `nn.Sequential`, ...), directly or through bases defined in the project."""
    if depth > 6:
        return False
    for base in summary.classes.get(cls, ()):
        found = index.resolve_name(summary, base)
        if found is not None and found[1] in found[0].classes:
            if nn_module_class(index, found[0], found[1], depth + 1):
                return True
            continue
        head, _, rest = base.partition(".")
        qualified = summary.imports.get(head)
        if qualified is not None:
            full = f"{qualified}.{rest}" if rest else qualified
            if full.startswith("torch.nn.") and full.rpartition(".")[2][:1].isupper():
                return True
    return False


def assumed_roots(
    index: ProjectIndex, names: tuple[str, ...] = (), every_forward: bool = True
) -> dict[tuple[str, str], CompileOptions]:
    """What `--assume-compiled` takes as compiled: every `forward` of a class deriving from an
    `nn.Module` (its own or inherited from a project base), and the functions `compiled` names
    (`pkg.module:function`, `pkg.module:Class.method`; a class stands for its `forward`).
    (module path, qualname) -> options that carry the reason."""
    found: dict[tuple[str, str], CompileOptions] = {}
    if every_forward:
        for summary in index.summaries.values():
            for cls in summary.classes:
                if not nn_module_class(index, summary, cls):
                    continue
                forward = index.method(summary, cls, "forward")
                if forward is not None and forward not in found:
                    found[forward] = CompileOptions(assumed=f"forward of nn.Module `{cls}`")
    for name in names:
        module, _, qualified = name.partition(":")
        for summary in index.by_name.get(module, ()):
            if qualified in summary.functions:
                found[(summary.path, qualified)] = CompileOptions(assumed=f"`{name}`, named in `compiled`")
            elif qualified in summary.classes:
                forward = index.method(summary, qualified, "forward")
                if forward is not None:
                    found[forward] = CompileOptions(assumed=f"forward of `{name}`, named in `compiled`")
    return found
