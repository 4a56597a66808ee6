"""A run over many files: the projects they belong to, the project-wide index, the cache, the jobs.

For each project (see `analysis.project.project_root`), every Python file that could matter is
summarised (cached by content hash), per-step reachability is propagated across modules, and each
file asked for is linted knowing which of its functions other modules call every step. Results
are cached by content, settings, rules, version and those cross-module facts, so an unchanged
project costs a hash of each file. Files are processed in parallel across `jobs` processes.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import tempfile
import traceback
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

from . import __version__
from .analysis.project import (
    NO_PROJECT,
    PROJECT_MARKERS,
    ModuleSummary,
    ProjectFacts,
    ProjectIndex,
    module_name,
    project_root,
    source_root,
    summarize,
    summary_from_json,
    summary_to_json,
)
from .analysis.project_names import ProjectNames
from .analysis.reads import ParamRead
from .cache import CACHE_DIR_NAME, ProjectCache, digest
from .config import Settings
from .deep import deep_stack
from .diagnostics import Diagnostic
from .discovery import discover
from .engine import MARKERS, MAX_FIX_BYTES, FileResult, analyse, fix_source, lint_source
from .notebook import MAX_NOTEBOOK_BYTES, Notebook, is_notebook
from .progress import Progress
from .rules import RULES_BY_CODE
from .source import SourceError, SourceFile, Stamp, decode_source, is_dir, read_bounded, stat_or_none

MAX_PROJECT_FILES = 20_000
PARALLEL_MIN = 8  # fewer tasks than this run in-process: starting workers would cost more
FACTS_SLOT = "#facts"  # the cache slot of a project's facts (no file has this relative path)


@dataclass
class FileOutcome:
    path: Path
    diagnostics: list[Diagnostic]
    error: str | None = None  # one line: why the file could not be checked
    result: FileResult | None = None  # `fix`: the new bytes
    stamp: Stamp | None = None  # `fix`: what the file held when read (written only while it still does)


def internal_error(path: Path, exc: BaseException) -> str:
    """A bug in xlalint on one file: one line, the other files still checked (XLALINT_DEBUG=1 raises)."""
    if os.environ.get("XLALINT_DEBUG"):
        raise exc
    if isinstance(exc, RecursionError):
        return f"{path}: error: cannot analyse: nesting too deep"
    return f"{path}: error: internal error in xlalint ({type(exc).__name__}: {exc}); {crash_report(exc)}"


def crash_report(exc: BaseException) -> str:
    """Write `exc`'s traceback to a new file in the temporary folder; the sentence that names it."""
    try:
        fd, name = tempfile.mkstemp(prefix="xlalint-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"xlalint {__version__}\n" + "".join(traceback.format_exception(exc)))
    except OSError:
        return "please report it (XLALINT_DEBUG=1 shows the traceback)"
    return f"please report it with the traceback in {name}"


def worker_count(jobs: int | None, tasks: int) -> int:
    """Processes worth starting: never more than asked, than tasks, or than cores (`--jobs 5000`
    on three files starts no thousands of processes)."""
    cores = os.cpu_count() or 1
    return max(1, min(jobs or cores, tasks, cores))


# allocations between collections of the youngest generation (see `cli._Guarded.main`)
GC_THRESHOLD = 50_000


def _worker_init() -> None:
    """Workers leave Ctrl-C to the parent, which stops them: no traceback from each. A spawned
    worker starts with the collector's default threshold: set it as the parent has."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.set_threshold(GC_THRESHOLD)


# -- work done in worker processes (module-level functions: they are pickled by reference) ------------


def _preload_fixing() -> None:
    """Import what building fixes needs (libcst's nodes and parser, the fix engine: 0.13 s) before
    the workers fork, which would each import it for their first fix."""
    from .fixing import apply, context  # noqa: F401


class CheckTask(NamedTuple):
    path: str
    raw: bytes
    codes: tuple[str, ...]  # the rules that apply to this file
    assume_xla: bool
    target: tuple[int, ...] | None  # the oldest torch_xla the code must run on
    fixable: tuple[str, ...] | None  # the codes whose fixes may be built (None: all)
    facts: ProjectFacts
    with_edits: bool


class FixTask(NamedTuple):
    path: str
    raw: bytes
    codes: tuple[str, ...]
    assume_xla: bool
    target: tuple[int, ...] | None
    fixable: tuple[str, ...] | None
    facts: ProjectFacts
    unsafe: bool
    confidence: str = "high"  # possible findings' fixes apply only at `possible`


class SummaryTask(NamedTuple):
    path: str
    name: str  # the module's dotted name
    facts: ProjectFacts  # what the project says about it so far (NO_PROJECT on the first pass)
    project_names: ProjectNames  # what the project could ask of it (see `ProjectNames`)


# The summary's analysis is not reused to check the file: its facts are the first pass's, and the
# final facts answered otherwise for most files of a real project (255 of 319 in pytorch/xla), so
# the rules ran twice. Checking after the facts are known cost less on every project measured
# (pytorch/xla 21.4 -> 17.3 CPU-s cold, accelerate 7.7 -> 5.7) and the same on one file.
@deep_stack
def _summarize_task(task: SummaryTask) -> dict | None:
    """The JSON summary of a module; None when the index lacks it (it is reported when it is checked)."""
    try:
        source = decode_source(Path(task.path), read_bounded(Path(task.path))[0])
        ctx = analyse(source, project=task.facts)
        try:
            summary = summarize(ctx, task.name, task.project_names)
        finally:
            ctx.close()
        summary.path = task.path
    except (SourceError, OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    except Exception:  # a bug in xlalint: the index lacks the file rather than the run failing
        if os.environ.get("XLALINT_DEBUG"):
            raise
        return None
    return summary_to_json(summary)


def _text(path: Path, raw: bytes) -> str | None:
    try:
        return decode_source(path, raw).text
    except SourceError:
        return None  # no summary either: the index lacks the module


def _source(path: str, raw: bytes) -> tuple[SourceFile, Notebook | None]:
    """The source to check for a file's bytes: the joined code cells of a notebook (and the
    notebook, to map findings back), else the decoded file."""
    if is_notebook(Path(path)):
        notebook = Notebook.parse(Path(path), raw)
        return notebook.source_file(), notebook
    return decode_source(Path(path), raw), None


@deep_stack
def _check_task(task: CheckTask) -> tuple[list[dict], str | None]:
    notebook = None
    try:
        source, notebook = _source(task.path, task.raw)
        found = lint_source(
            source, [RULES_BY_CODE[c] for c in task.codes], with_edits=task.with_edits, **_engine_options(task)
        )
        if notebook is not None:
            found = [notebook.in_cells(d) for d in found]
        return [d.to_json() for d in found], _without_fixes(task.path, len(task.raw)) if found else None
    except SourceError as exc:
        return [], notebook.error_in_cells(str(exc)) if notebook is not None else str(exc)
    except Exception as exc:  # noqa: BLE001 - one broken file must not hide the others' results
        return [], internal_error(Path(task.path), exc)


def _without_fixes(path: str, size: int) -> str | None:
    """The one-line notice of a file too large for its fixes to be built (see `MAX_FIX_BYTES`)."""
    if size <= MAX_FIX_BYTES:
        return None
    size_mib, budget_kib = size / (1 << 20), MAX_FIX_BYTES >> 10
    return f"{path}: warning: {size_mib:.1f} MiB, over the {budget_kib} KiB up to which fixes are built: findings without fixes"


def _engine_options(task: CheckTask | FixTask) -> dict[str, Any]:
    """What a check and a fix pass the engine alike."""
    return {
        "assume_xla": task.assume_xla,
        "project": task.facts,
        "target_version": task.target,
        "fixable": _frozen(task.fixable),
    }


def _frozen(codes: tuple[str, ...] | None) -> frozenset[str] | None:
    return None if codes is None else frozenset(codes)


@deep_stack
def _fix_task(task: FixTask):
    notebook = None
    try:
        source, notebook = _source(task.path, task.raw)
        result = fix_source(
            source,
            [RULES_BY_CODE[c] for c in task.codes],
            unsafe=task.unsafe,
            confidence=task.confidence,
            **_engine_options(task),
        )
        for diagnostic in [*result.diagnostics, *result.found]:  # what is reported; the libcst nodes stay here
            if diagnostic.fix is not None:
                diagnostic.fix.replacements = {}
        if notebook is not None:
            _back_to_notebook(notebook, result)
        return result, None
    except SourceError as exc:
        return None, notebook.error_in_cells(str(exc)) if notebook is not None else str(exc)
    except Exception as exc:  # noqa: BLE001
        return None, internal_error(Path(task.path), exc)


STEP_LABELS = {"_summarize_task": "indexing the project", "_check_task": "checking", "_fix_task": "fixing"}


def _back_to_notebook(notebook: Notebook, result) -> None:
    """A notebook's fix result: its new JSON bytes, the diff shown over its code cells, and the
    findings left at their cells (rows of the fixed notebook)."""
    after = notebook
    if result.fixed is not None:
        result.fixed = notebook.rewritten(result.fixed.decode("utf-8"))
    if result.fixed is not None:
        after = Notebook.parse(notebook.path, result.fixed)
    result.diagnostics = [after.in_cells(d) for d in result.diagnostics]
    result.found = [notebook.in_cells(d) for d in result.found]
    result.display = (notebook.readable(), after.readable())


def _real(path: Path) -> Path:
    """`path` resolved, or only made absolute where it cannot be (a symbolic-link loop, reported as
    an unreadable path when the run reaches it)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def run_root(paths: list[Path]) -> Path:
    """The one root of a run (Ruff's): the common folder of the paths it was given (a file's
    folder), or the project above it (the nearest folder with a pyproject.toml, setup.py,
    setup.cfg or .git). The cache lives there, and files under it in no project are one project."""
    folders = [_real(p) if is_dir(p) else _real(p).parent for p in paths] or [Path.cwd()]
    common = Path(os.path.commonpath(folders))
    for folder in (common, *common.parents):
        if any(stat_or_none(folder / marker) is not None for marker in PROJECT_MARKERS):
            return folder
    return common


class Workspace:
    def __init__(
        self,
        settings: Settings,
        rules,
        *,
        jobs: int | None = None,
        cache: bool = True,
        cache_dir: Path | None = None,
        with_edits: bool = True,
        progress: Progress | None = None,
        root: Path | None = None,
        caches: dict[Path, ProjectCache] | None = None,
        discovered: dict[Path, list[Path]] | None = None,
    ) -> None:
        self.settings = settings
        self.root = root.resolve() if root is not None else None  # see `run_root`; None: the files' own
        self.progress = progress  # a progress line for long runs (a terminal's), else None
        # the text edits of each fix (JSON output); without them a fix is only built, never applied
        self.with_edits = with_edits
        self.rules = rules
        self.jobs = jobs  # None: one process per core
        self.use_cache = cache
        self.cache_dir = cache_dir
        self._pool: ProcessPoolExecutor | None = None
        self._pool_size = 0
        # by project root; `caches`: those of a long-lived caller (the language server), kept across runs
        self._caches: dict[Path, ProjectCache] = caches if caches is not None else {}
        self._roots: dict[Path, Path] = {}  # a folder (resolved) -> the root of its files' project
        self.warnings: list[str] = []  # one line each, for the user (a cache that is not used)
        # a folder (resolved) -> the files discovery found under it with these settings (the run's own
        # listing: a project index of that folder needs no second walk)
        self.discovered = discovered or {}
        self._resolved: dict[Path, Path] = {}  # path -> path.resolve(), once per run (see `real`)

    # -- plumbing ---------------------------------------------------------------------------------
    def _map(self, func, tasks: list):
        workers = worker_count(self.jobs, len(tasks))
        results: Iterable[Any]
        if workers == 1 or len(tasks) < PARALLEL_MIN:
            results = (func(t) for t in tasks)
        else:
            if self._pool_size < workers:
                self._stop_pool()
                method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
                if method == "fork":
                    _preload_fixing()
                self._pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context(method), initializer=_worker_init
                )
                self._pool_size = workers
            assert self._pool is not None  # a size of one or more: the pool runs (see `_stop_pool`)
            results = self._pool.map(func, tasks, chunksize=max(1, len(tasks) // (workers * 8)))
        try:
            if self.progress is None:
                return list(results)
            label = STEP_LABELS.get(func.__name__, "")
            bar = self.progress.step(label, len(tasks))
            found = []
            try:
                for result in results:
                    found.append(result)
                    bar.update()
            finally:
                bar.close()
            return found
        except BaseException:  # Ctrl-C, or a worker that died: stop the others now, not after their tasks
            self._stop_pool(terminate=True)
            raise

    def _stop_pool(self, *, terminate: bool = False) -> None:
        pool, self._pool, self._pool_size = self._pool, None, 0
        if pool is None:
            return
        if terminate:
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join()
        else:
            pool.shutdown()

    def close(self) -> None:
        self._stop_pool()
        for cache in self._caches.values():
            cache.save()

    def project_of(self, path: Path) -> Path:
        """The root of the project `path` belongs to (see `project_root`), looked up once per folder."""
        real = self.real(path)
        root = self._roots.get(real.parent)
        if root is None:
            root = self._roots[real.parent] = project_root(real, within=self.root)
        return root

    def real(self, path: Path) -> Path:
        """`path.resolve()`, looked up once per run: a run asks it of each file several times (its
        project, its cache entries, its facts), and each costs a system call per folder above it."""
        real = self._resolved.get(path)
        if real is None:
            real = self._resolved[path] = path.resolve()
        return real

    def _cache(self, root: Path) -> ProjectCache:
        """The cache of a project: a file of the run's one cache folder (each project its own file)."""
        if root not in self._caches:
            folder = None
            if self.use_cache:
                folder = self.cache_dir if self.cache_dir is not None else (self.root or root) / CACHE_DIR_NAME
            self._caches[root] = ProjectCache(folder, root)
            warning = self._caches[root].warning
            if warning:
                self.warnings.append(warning)
        return self._caches[root]

    @property
    def _options(self) -> tuple[bool, tuple[int, ...] | None, tuple[str, ...] | None]:
        """What every file is checked with besides its rules: --assume-xla, the target torch_xla and
        the codes whose fixes may be built (--fixable/--unfixable)."""
        fixable = self.settings.fixable_codes(self.rules)
        return self.settings.assume_xla, self.settings.target, None if fixable is None else tuple(sorted(fixable))

    def _codes(self, path: Path) -> tuple[str, ...]:
        return tuple(r.code for r in self.settings.rules_for(path, self.rules))

    # -- the project-wide index ---------------------------------------------------------------------
    def _members(self, root: Path, targets: list[Path]) -> list[Path]:
        """The project's Python files, as discovery sees them (excludes and .gitignore apply)."""
        # a folder that cannot be read is reported where it is checked; the index just lacks it
        members = self.discovered.get(root)
        if members is None:
            members = discover([root], self.settings, missing=[])
        if len(members) > MAX_PROJECT_FILES:  # a huge tree: the folders of the files asked for
            roots = sorted({source_root(t.resolve()) for t in targets})
            members = discover(roots, self.settings, missing=[])[:MAX_PROJECT_FILES]
        return members

    def facts(self, files: list[Path]) -> dict[Path, ProjectFacts]:
        """For each file, what the rest of its project says about it (see `ProjectFacts`)."""
        by_root: dict[Path, list[Path]] = {}
        for path in files:
            by_root.setdefault(self.project_of(path), []).append(path)
        result: dict[Path, ProjectFacts] = {}
        for root, targets in by_root.items():
            if not is_dir(root):  # a `--stdin-filename` in a folder that does not exist: no project
                result.update((path, NO_PROJECT) for path in targets)
                continue
            facts = self._project_facts(root, targets)
            for path in targets:
                result[path] = facts.get(str(self.real(path)), NO_PROJECT)
        return result

    def _project_facts(self, root: Path, targets: list[Path]) -> dict[str, ProjectFacts]:
        """Summarise the project, then summarise again the modules whose loops call a function
        elsewhere that trains (those loops are step loops: what runs in them changes)."""
        cache = self._cache(root)
        members = {self.real(p) for p in self._members(root, targets)} | {self.real(t) for t in targets}
        contents: dict[Path, str] = {}
        raws: dict[Path, bytes] = {}
        for path in sorted(members):
            if is_notebook(path):
                continue  # no module to import from; its cells are checked on their own
            try:
                raw, _ = read_bounded(path)
            except OSError:
                continue  # the file is reported when it is linted; the index just lacks it
            if MARKERS.search(raw):
                contents[path] = digest(raw)
                raws[path] = raw
        # entries of files gone (notebooks and files naming no torch, XLA or JAX stay: their results
        # are cached too, else a warm run checks them again, and a pool of workers starts for them)
        cache.keep_only({_relative(p, root) for p in members})
        # what module resolution reads besides contents: each member's name, which the `__init__.py`
        # files above it decide (an empty one has no marker, so it is no member)
        dotted = {p: module_name(p, source_root(p)) for p in contents}
        contents = {p: digest(_bytes(f"{c} {dotted[p]}")) for p, c in contents.items()}
        # an unchanged project has unchanged facts: one entry keyed by every member's content and name
        # (and by what `--assume-compiled` and `compiled` take as compiled)
        assume, names = self.settings.assume_compiled, tuple(self.settings.compiled)
        members_key = sorted((_relative(p, root), c) for p, c in contents.items())
        key = digest(
            repr(
                (members_key, [("assume_compiled", assume), ("compiled_names", names)])
                if assume or names
                else members_key
            ).encode()
        )
        cached = _read(_facts_from_json, cache.result(FACTS_SLOT, key))
        if cached is not None:
            return cached
        project_names = ProjectNames.of(
            (dotted[p], text) for p, raw in raws.items() if (text := _text(p, raw)) is not None
        )
        summaries = self._summaries(cache, root, {p: NO_PROJECT for p in contents}, contents, dotted, project_names)
        facts = ProjectIndex(list(summaries.values()), assume_compiled=assume, compiled_names=names).facts()
        again = {Path(path): f for path, f in facts.items() if f.training_calls}
        if again:
            summaries.update(self._summaries(cache, root, again, contents, dotted, project_names))
            facts = ProjectIndex(list(summaries.values()), assume_compiled=assume, compiled_names=names).facts()
        cache.put_result(FACTS_SLOT, key, _facts_to_json(facts))
        return facts

    def _summaries(
        self,
        cache: ProjectCache,
        root: Path,
        wanted: dict[Path, ProjectFacts],
        contents: dict[Path, str],
        dotted: dict[Path, str],
        project_names: ProjectNames,
    ) -> dict[str, ModuleSummary]:
        """The summaries of the modules `wanted` (at the facts given), from the cache where valid;
        `contents`: each member's content key, `dotted`: its module name."""
        found, todo = {}, []
        for path, facts in wanted.items():
            relpath = _relative(path, root)
            if facts is not NO_PROJECT:  # a second slot: the first pass needs its own entry too
                relpath, key = f"{relpath}#project", digest(_bytes(f"{contents[path]}{facts.key()}"))
            else:
                key = contents[path]
            cached = _read(summary_from_json, cache.summary(relpath, key))
            if cached is not None and project_names.names_any(cached.outside):
                cached = None  # a module added since could hold what one of its calls names
            if cached is not None:
                found[str(path)] = cached
            else:
                task = SummaryTask(str(path), dotted[path], facts, project_names)
                todo.append((task, relpath, key))
        for (task, relpath, key), computed in zip(todo, self._map(_summarize_task, [t[0] for t in todo])):
            if computed is not None:
                cache.put_summary(relpath, key, computed)
                found[task.path] = summary_from_json(computed)
        return found

    # -- check and fix --------------------------------------------------------------------------------
    def check(self, files: list[Path], *, given: dict[Path, bytes] | None = None) -> list[FileOutcome]:
        """`given`: contents to check instead of what the files hold (standard input)."""
        self._default_root(files)
        outcomes: dict[Path, FileOutcome] = {}
        readable = list(_readable(files, outcomes, given))
        real = {path: self.real(path) for path, _ in readable}
        facts = self.facts(files)
        _given_facts(facts, given)
        tasks, keys = [], []
        for path, raw in readable:
            codes = self._codes(path)
            root = self.project_of(path)
            key = digest(
                repr((digest(raw), codes, self._options, facts[path].key(), self.with_edits, __version__)).encode()
            )
            relpath = _relative(real[path], root)
            # (_read calls the lambda at once, in this iteration)
            cached = _read(lambda entry: _outcome(path, *entry), self._cache(root).result(relpath, key))  # noqa: B023
            if cached is not None:
                outcomes[path] = cached
                continue
            tasks.append(self._check(path, raw, facts[path]))
            keys.append((path, root, key))
        for (path, root, key), (found, error) in zip(keys, self._map(_check_task, tasks)):
            outcomes[path] = _outcome(path, found, error)
            if error is None or ": warning: " in error and found:  # a notice comes with the findings
                self._cache(root).put_result(_relative(self.real(path), root), key, [found, error])
        return [outcomes[p] for p in files]

    def _default_root(self, files: list[Path]) -> None:
        if self.root is None and files:  # not given: the root of a run given these files
            self.root = run_root(files)

    def _check(self, path: Path, raw: bytes, facts: ProjectFacts) -> CheckTask:
        return CheckTask(str(path), raw, self._codes(path), *self._options, facts, self.with_edits)

    def fix(self, files: list[Path], *, unsafe: bool, given: dict[Path, bytes] | None = None) -> list[FileOutcome]:
        self._default_root(files)
        facts = self.facts(files)
        _given_facts(facts, given)
        outcomes: dict[Path, FileOutcome] = {}
        tasks, paths = [], []
        stamps: dict[Path, Stamp] = {}
        for path, raw in _readable(files, outcomes, given, stamps):
            tasks.append(
                FixTask(
                    str(path),
                    raw,
                    self._codes(path),
                    *self._options,
                    facts[path],
                    unsafe,
                    self.settings.confidence,
                )
            )
            paths.append(path)
        for path, (result, error) in zip(paths, self._map(_fix_task, tasks)):
            if result is not None:
                result.path = path
                for d in [*result.diagnostics, *result.found]:
                    d.path = path
            outcomes[path] = FileOutcome(path, result.diagnostics if result else [], error, result, stamps.get(path))
        return [outcomes[p] for p in files]


def _given_facts(facts: dict[Path, ProjectFacts], given: dict[Path, bytes] | None) -> None:
    """The project's facts about a file whose text is `given` (standard input, an editor's unsaved
    buffer) were read from the file as saved: the calls they name by line are moved to the lines
    they hold in the given text (those on edited lines are dropped), else a line added above a call
    would lose its finding."""
    for path, raw in (given or {}).items():
        found = facts.get(path, NO_PROJECT)
        if found is NO_PROJECT:
            continue
        try:
            saved = decode_source(path, read_bounded(path)[0]).text
            text = decode_source(path, raw).text
        except (OSError, SourceError):
            continue  # no saved file (its facts are nobody's), or text reported when checked
        facts[path] = found.moved(saved, text)


def _readable(
    files: list[Path],
    outcomes: dict[Path, FileOutcome],
    given: dict[Path, bytes] | None = None,
    stamps: dict[Path, Stamp] | None = None,
):
    """(path, bytes) of each file that can be read (or whose contents are `given`); an unreadable
    one (a FIFO, a device, too large) gets its one-line error. `stamps`: what each file held."""
    for path in files:
        if given is not None and path in given:
            yield path, given[path]
            continue
        try:
            raw, info = read_bounded(path, MAX_NOTEBOOK_BYTES) if is_notebook(path) else read_bounded(path)
        except OSError as exc:
            outcomes[path] = FileOutcome(path, [], f"{path}: error: {exc.strerror or exc}")
            continue
        if stamps is not None:
            stamps[path] = Stamp.of(raw, info)
        yield path, raw


def _read(convert, entry):
    """A cache entry converted back, or None when absent or not of the expected shape."""
    if entry is None:
        return None
    try:
        return convert(entry)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None


def _facts_to_json(facts: dict[str, ProjectFacts]) -> dict:
    """Every field of each module's facts, by name (a field left out would come back as its default:
    the facts read from the cache would differ from those computed, and so would every result's key)."""
    return {
        path: {f.name: _jsonable(getattr(value, f.name)) for f in FACT_FIELDS if getattr(value, f.name) != f.default}
        for path, value in facts.items()
        if value != NO_PROJECT
    }


def _jsonable(value):
    if isinstance(value, (frozenset, set)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _facts_from_json(data: dict) -> dict[str, ProjectFacts]:
    result = {}
    for path, entry in data.items():
        if not isinstance(entry, dict) or not entry.keys() <= FACT_TYPES.keys():
            raise ValueError("not the facts of this version")
        values = {}
        for name, value in entry.items():
            value = _tuples(value)
            if FACT_TYPES[name] is frozenset:
                value = frozenset(value)
            elif name == "helper_reads":
                value = tuple(
                    (at, helper, where, tuple(ParamRead(*r) for r in reads)) for at, helper, where, reads in value
                )
            elif not isinstance(value, FACT_TYPES[name]):
                raise ValueError(f"{name}: not a {FACT_TYPES[name].__name__}")
            values[name] = value
        result[path] = ProjectFacts(**values)
    return result


FACT_FIELDS = fields(ProjectFacts)
FACT_TYPES = {f.name: type(f.default) for f in FACT_FIELDS}


def _outcome(path: Path, found: list[dict], error: str | None) -> FileOutcome:
    diagnostics = [Diagnostic.from_json(d) for d in found]
    for d in diagnostics:
        d.path = path
    return FileOutcome(path, diagnostics, error)


def _bytes(text: str) -> bytes:
    """`text` to hash, file names in it included: a name's bytes that are not UTF-8 are carried by
    Python as lone surrogates (os.fsdecode), and go back to those bytes, never an error."""
    return text.encode("utf-8", "surrogateescape")


def _relative(path: Path, root: Path) -> str:
    """`path` (resolved) from `root` (a project root: resolved, see `project_root`), else whole."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
