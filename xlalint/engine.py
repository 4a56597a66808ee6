"""The pipeline for one file: decode -> parse (`ast`) -> context -> every rule in one pass over the
index's nodes -> diagnostics -> fixes built on libcst where a finding has one -> (fix: apply
non-overlapping fixes, prove the output parses, repeat until nothing changes)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from .analysis.context import FileContext
from .analysis.project import NO_PROJECT, ProjectFacts, ProjectIndex, summarize
from .deep import deep_stack, python_parse
from .diagnostics import HIGH, Applicability, Diagnostic, Fix, Location, Step, shown_at
from .noqa import NoqaComment, parse_noqa
from .rule import FixBuilder, Rule
from .source import NewerSyntax, SourceError, SourceFile, SourceText, decode_source

if TYPE_CHECKING:  # libcst is imported only where a fix is built (its import alone costs ~0.5 s)
    import libcst as cst

    from .fixing.apply import FixEdits
    from .fixing.context import CstContext

# Files mentioning none of these cannot hold a finding; they are not even parsed (TorchFix does the same).
MARKERS = re.compile(rb"torch|xla|jax|tpu|tensor|backward|optimi[sz]er|\.item\(", re.I)
MAX_FIX_PASSES = 10
# Fixes are built on libcst's lossless tree, which costs about 10x the analysis in time and 6x in
# memory (a generated 1 MB module: 7 s and 270 MiB checked, 70 s and 1.5 GiB with its fixes built).
# Above this size (generated code, never a hand-written module) findings come without fixes.
MAX_FIX_BYTES = 512 << 10


@dataclass
class FileResult:
    path: Path
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: SourceFile | None = None
    fixed: bytes | None = None  # new file bytes when fixes changed something
    fixed_count: int = 0
    fixed_codes: list[str] = field(default_factory=list)  # the code of each fix applied (--show-fixes)
    display: tuple[str, str] | None = None  # the code before and after, for a diff, when not the file's text
    # `fix`: the findings in the file as read, at its own positions (what remains if the fix is not written)
    found: list[Diagnostic] = field(default_factory=list)

    def diff_texts(self) -> tuple[str, str]:
        """The code before and after the fixes, as a diff shows them (a notebook's cells, else the file)."""
        if self.display is not None:
            return self.display
        assert self.source is not None and self.fixed is not None  # asked of a fixed file's result only
        return self.source.text, self.fixed.decode(self.source.encoding).lstrip("\ufeff")


def parse(source: SourceFile) -> ast.Module:
    """Python's own parser: its verdict and message on what is valid Python."""
    try:
        return python_parse(source.raw, str(source.path))
    except SyntaxError as exc:
        if newer_syntax(source, exc):
            raise NewerSyntax(source.path, f"{exc.lineno or 1}:{exc.offset or 1}", sys.version_info[:2]) from None
        where = f"{exc.lineno}:{exc.offset or 1}" if exc.lineno else None
        raise SourceError(source.path, f"syntax error: {exc.msg}", where=where) from None
    except ValueError as exc:  # null bytes (Python 3.11)
        row = source.raw[: source.raw.find(b"\0")].count(b"\n") + 1 if b"\0" in source.raw else None
        raise SourceError(source.path, f"syntax error: {exc}", where=f"{row}:1" if row else None) from None
    except (RecursionError, MemoryError):
        raise SourceError(source.path, "cannot parse: nesting too deep") from None


# what only a newer grammar accepts: `type X = ...`, `def f[T](...)`, `class C[T]:`, f-strings (PEP 701)
NEWER_SYNTAX = re.compile(rb"^[ \t]*type[ \t]+\w|(?:def|class)[ \t]+\w+[ \t]*\[|\b[fFrRbB]{0,2}[fF][rR]?['\"]", re.M)


def newer_syntax(source: SourceFile, error: SyntaxError) -> bool:
    """Python's `ast` rejected the file, libcst's grammar (up to Python 3.13's: PEP 695 `type X = ...`
    and generics, PEP 701 f-strings) accepts it: valid Python, newer than the running interpreter's.
    Never asked for nesting past Python's limits (libcst's native parser would overflow its stack)."""
    if sys.version_info >= (3, 13) or "nested" in (error.msg or "") or not NEWER_SYNTAX.search(source.raw):
        return False
    import libcst as cst

    try:
        cst.parse_module(source.raw)
    except Exception:  # noqa: BLE001 - any failure: it is the syntax error Python says it is
        return False
    return True


def parse_cst(source: SourceFile) -> cst.Module | None:
    """The lossless tree fixes are built on; None when libcst cannot parse what Python accepts."""
    import libcst as cst

    try:
        return cst.parse_module(source.raw)
    except (cst.ParserSyntaxError, SyntaxError, UnicodeDecodeError, RecursionError, ValueError):
        return None


class _NoqaJudge(Protocol):
    """A rule that `judges_noqa` (XLA901): it words the finding for codes of a comment that suppress nothing."""

    code: str

    def stale(self, comment: NoqaComment, codes: list[str]) -> tuple[str, FixBuilder | None]: ...


@dataclass
class _Found:
    rule: type[Rule]
    node: ast.AST | None  # None: a finding on a comment (a `noqa` that suppresses nothing)
    message: str
    builder: FixBuilder | None
    start: Location
    end: Location
    fix: Fix | None = None
    fix_spans: tuple[tuple[Location, Location], ...] = ()
    hint: str | None = None
    cause: tuple[str, int] | None = None  # see `Report.cause`
    related: list[_Found] = field(default_factory=list)  # findings of the same cause merged into this one
    confidence: str = HIGH
    chain: tuple[Step, ...] = ()


def _location(ctx: FileContext, node: ast.AST) -> tuple[Location, Location]:
    located: Any = node  # a node with a position (ast.AST itself declares none)
    while not hasattr(located, "lineno"):  # `comprehension`, `withitem`: report their parent's span
        located = ctx.parent(located)
    text = ctx.text
    return (
        Location(located.lineno, text.column(located.lineno, located.col_offset) + 1),
        Location(located.end_lineno, text.column(located.end_lineno, located.end_col_offset) + 1),
    )


def _run_rules(ctx: FileContext, rules: list[type[Rule]]) -> list[_Found]:
    active = [rule(ctx) for rule in rules if rule.applies(ctx)]
    by_type = ctx.index.by_type
    for rule in active:
        for node_type, method in rule.visited_types().items():
            nodes = by_type.get(node_type)
            if nodes:
                visit = getattr(rule, method)
                for node in nodes:
                    visit(node)
        rule.finish()
    found = []
    for rule in active:
        for report in rule.reports:
            start, end = _location(ctx, report.node)
            found.append(
                _Found(
                    type(rule),
                    report.node,
                    report.message,
                    report.fix,
                    start,
                    end,
                    cause=report.cause,
                    confidence=report.confidence,
                    chain=report.chain,
                )
            )
    found.sort(key=lambda f: (f.start, f.rule.code))
    return _one_per_cause(ctx, _in_compiled_regions(ctx, found))


# codes whose finding at a host read is the read itself (the cause other findings point to)
_READ_CATEGORIES = ("item_sync", "control_flow_on_tensor")
_MAX_NAMED = 4  # places named in a merged finding's message


def _one_per_cause(ctx: FileContext, found: list[_Found]) -> list[_Found]:
    """One finding per root cause, where the code changes. A finding at a call that is there
    because the helper it calls (in this module) reads a device tensor and returns what it read
    (`Report.cause`: `sizes = grid_sizes(coords)`) is where the host value enters the step: the
    finding at the read itself then gives way to it, as a related location, unless the helper runs
    every step by its own name (a loss), where the read is reported and names the calls. Two
    findings of one call for one read (an `.item()` inside an `if`) are one. Findings with a fix
    are never merged away."""
    if not any(item.cause for item in found):
        return found
    from .analysis.steps import is_named_step

    absorbed: set[int] = set()
    seen: dict[tuple[Location, tuple[str, int]], _Found] = {}
    for item in found:
        if item.cause is None or item.builder is not None:
            continue
        twin = seen.get((item.start, item.cause))
        if twin is not None:
            twin.related.append(item)  # the same call, the same read: one finding
            absorbed.add(id(item))
            continue
        seen[(item.start, item.cause)] = item
        path, line = item.cause
        if path:
            continue
        for read in found:
            if (
                read.cause is None
                and read.builder is None
                and read.rule.category in _READ_CATEGORIES
                and read.start.row <= line <= read.end.row
            ):
                func = ctx.index.enclosing_function(read.node) if read.node is not None else None
                if func is not None and is_named_step(ctx, func):
                    read.related.append(item)  # per step by itself: the read names its calls
                    absorbed.add(id(item))
                    break
                item.related.append(read)
                absorbed.add(id(read))
    return [item for item in found if id(item) not in absorbed]


def _name_related(item: _Found) -> None:
    """Name the calls merged into a finding at a read (see `_one_per_cause`) in its message."""
    if item.cause is not None:
        return  # a call: its message names the read already
    rows = sorted({r.start.row for r in item.related if r.start.row != item.start.row})
    if not rows:
        return
    named = ", ".join(map(str, rows[:_MAX_NAMED])) + (", ..." if len(rows) > _MAX_NAMED else "")
    plural = "s" if len(rows) > 1 else ""
    item.message += f" (per step through the call{plural} at line{plural} {named})"


def _in_compiled_regions(ctx: FileContext, found: list[_Found]) -> list[_Found]:
    """Inside a `torch.compile` region of a file that does not use torch_xla, a hazard is a
    Dynamo graph break, not an XLA sync: a finding the compile family also reports on the same
    code is reported once (by the compile rule), and one it does not gets the compile rule's hint
    instead of torch_xla advice (`xm.add_step_closure` does not exist there). What Dynamo traces
    without a break (`.cpu()`, an `assert`, a mask assignment) is no finding there at all."""
    if not found or not ctx.compiled.functions or ctx.uses_xla:
        return found
    from .analysis.compiled import traced_without_break
    from .rules import ALL_RULES

    covering = {code: rule for rule in ALL_RULES for code in rule.covers}
    kept = []
    for item in found:
        foreign = item.rule.code[:3] != "DYN"
        if not foreign or item.node is None or ctx.compiled.region(item.node) is None:
            kept.append(item)
            continue
        if traced_without_break(ctx, item.node):
            continue  # `.cpu()`, `assert`, `x[m] = v`, `f"{t}"`: no hazard under compile
        better = covering.get(item.rule.code)
        if better is None:
            kept.append(item)
            continue
        if any(other.rule is better and other.start <= item.end and item.start <= other.end for other in found):
            continue  # the compile rule reports this hazard here
        item.hint = better.hint
        kept.append(item)
    return kept


def _keep(
    source: SourceFile, found: list[_Found], ctx: FileContext | None = None, rules: Sequence[type[Rule]] = ()
) -> list[_Found]:
    """Drop what `# noqa` suppresses and exact duplicates (same code and range); then, when a rule
    that judges the comments is selected (XLA901), report the `noqa` codes that suppressed nothing."""
    noqa = parse_noqa(source.text)
    kept, seen = [], set()
    for item in found:
        key = (item.rule.code, item.start, item.end)
        if key in seen or noqa.suppresses(item.rule.code, item.start.row, item.end.row):
            for other in item.related:  # a suppressed cause: its calls go with it (their noqa counts)
                noqa.suppresses(other.rule.code, other.start.row, other.end.row)
            continue
        seen.add(key)
        # a call whose own `noqa` suppresses it is not named (as before the merge, it is not reported)
        item.related = [r for r in item.related if not noqa.suppresses(r.rule.code, r.start.row, r.end.row)]
        _name_related(item)
        kept.append(item)
    judge = next((r for r in rules if getattr(r, "judges_noqa", False)), None)
    if judge is not None and noqa.comments and ctx is not None:
        ran = frozenset(r.code for r in rules if r.applies(ctx))
        for comment, codes in noqa.unused(ran):
            message, builder = cast(_NoqaJudge, judge).stale(comment, codes)  # (it `judges_noqa`)
            start = Location(comment.row, comment.start + comment.directive[0] + 1)
            end = Location(comment.row, comment.start + comment.directive[1] + 1)
            if not noqa.suppresses(judge.code, comment.row, comment.row):
                kept.append(_Found(judge, None, message, builder, start, end))
        kept.sort(key=lambda f: (f.start, f.rule.code))
    return kept


def _build_fixes(
    source: SourceFile,
    ctx: FileContext,
    found: list[_Found],
    *,
    with_edits: bool,
    fixable: frozenset[str] | None = None,
    confidence: str = HIGH,
    partial: bool = False,
) -> CstContext | None:
    """Run the fix builders of `found` on the file's libcst tree (parsed here, and only here);
    `fixable`: the codes whose fixes may be built (None: all; `--fixable`/`--unfixable`).
    `partial`: only each fix's title, applicability and span are wanted (no edits, nothing applied):
    the tree may be of the statements around the findings alone (`fixing.partial`)."""
    for item in found:
        if (fixable is not None and item.rule.code not in fixable) or not shown_at(item.confidence, confidence):
            item.builder = None  # a hidden (possible) finding's fix is not applied either
    if not any(item.builder for item in found) or len(source.raw) > MAX_FIX_BYTES:
        return None
    from .fixing.apply import FixEdits
    from .fixing.context import CstContext
    from .fixing.partial import WholeFileNeeded

    if partial and not with_edits:
        cst_ctx = _partial_context(source, ctx, found)
        if cst_ctx is not None:
            try:
                return _run_builders(cst_ctx, found, None)
            except WholeFileNeeded:  # a builder looked beyond the part parsed: build on the whole file
                for item in found:
                    item.fix, item.fix_spans = None, ()
    module = parse_cst(source)
    if module is None:
        return None  # findings stay, without fixes
    cst_ctx = CstContext(module, ctx.text, ctx.tree)
    return _run_builders(cst_ctx, found, FixEdits(cst_ctx) if with_edits else None)


def _partial_context(source: SourceFile, ctx: FileContext, found: list[_Found]) -> CstContext | None:
    """A `CstContext` of the statements holding the findings with a fix to build (and the file's
    imports); None where that is the whole file, or libcst does not take the part."""
    from .fixing.context import CstContext
    from .fixing.partial import cst_bare_names, partial_source

    rows = [row for item in found if item.builder is not None for row in _first_and_last_rows(item)]
    by_type = ctx.index.by_type
    part = partial_source(source.raw, ctx.tree, rows, [*by_type.get(ast.Import, ()), *by_type.get(ast.ImportFrom, ())])
    if part is None:
        return None
    raw, kept = part
    module = parse_cst(replace(source, raw=raw))
    if module is None:
        return None
    return CstContext(module, ctx.text, kept=kept, bare_names=cst_bare_names(ctx.tree))


def _first_and_last_rows(item: _Found) -> tuple[int, int]:
    """The rows a finding's node and location start and end on: a node lies in one statement of each
    block around it, so these two find the statements the part must keep (and a builder that looks
    at a node beyond them gets the whole file: `WholeFileNeeded`)."""
    node: Any = item.node
    first = getattr(node, "lineno", item.start.row)
    last = getattr(node, "end_lineno", None) or item.end.row
    return (min(first, item.start.row), max(last, item.end.row))


def _run_builders(cst_ctx: CstContext, found: list[_Found], edits: FixEdits | None) -> CstContext | None:
    from .fixing.apply import imports_the_linter

    try:
        for item in found:
            if item.builder is None:
                continue
            item.fix = item.builder(cst_ctx)
            if item.fix is None:
                continue
            if imports_the_linter(cst_ctx, item.fix):
                # the training environment may not have xlalint (pre-commit installs it on its own)
                item.fix.applicability = Applicability.UNSAFE
            item.fix_spans = tuple(_cst_span(cst_ctx, node) for node, _ in item.fix.replacements.values())
            if edits is not None:
                item.fix.edits = edits.of(item.fix)
    except RecursionError:  # libcst nests what Python keeps flat (`a and b and ...`, 100,000 terms)
        for item in found:
            item.fix, item.fix_spans = None, ()
        return None
    return cst_ctx


def _cst_span(cst_ctx: CstContext, node: cst.CSTNode) -> tuple[Location, Location]:
    where = cst_ctx.position(node)
    return Location(where.start.line, where.start.column + 1), Location(where.end.line, where.end.column + 1)


def _diagnostic(source: SourceFile, item: _Found) -> Diagnostic:
    return Diagnostic(
        item.rule.code,
        item.rule.name,
        item.message,
        item.rule.category,
        source.path,
        item.start,
        item.end,
        item.fix,
        noqa_row=item.start.row,
        hint=item.hint,
        related=item.chain
        + tuple(
            Step(place, "another place of the same cause")
            for place in sorted({r.start for r in item.related if r.start.row != item.start.row})
        ),
        confidence=item.confidence,
    )


def analyse(
    source: SourceFile,
    *,
    assume_xla: bool = False,
    project: ProjectFacts = NO_PROJECT,
    target_version: tuple[int, ...] | None = None,
) -> FileContext:
    return FileContext(
        source.path,
        parse(source),
        SourceText(source.text),
        assume_xla=assume_xla,
        project=project,
        target_version=target_version,
    )


def example_facts(source: SourceFile, others: Sequence[SourceFile] = ()) -> ProjectFacts:
    """The project facts of a file whose project is itself and `others` (a rule's example and its
    other modules, named by their paths)."""
    summaries = [summarize(analyse(s), s.path.with_suffix("").as_posix().replace("/", ".")) for s in (source, *others)]
    return ProjectIndex(summaries).facts().get(summaries[0].path, NO_PROJECT)


@deep_stack
def lint_source(
    source: SourceFile,
    rules: list[type[Rule]],
    *,
    with_edits: bool = False,
    prefilter: bool = True,
    assume_xla: bool = False,
    with_fixes: bool = True,
    project: ProjectFacts = NO_PROJECT,
    target_version: tuple[int, ...] | None = None,
    fixable: frozenset[str] | None = None,
) -> list[Diagnostic]:
    if prefilter and not MARKERS.search(source.raw):
        parse(source)  # no rule can fire, but invalid Python is still reported
        return []
    ctx = analyse(source, assume_xla=assume_xla, project=project, target_version=target_version)
    try:
        found = _keep(source, _run_rules(ctx, rules), ctx, rules)
        if with_fixes:
            _build_fixes(source, ctx, found, with_edits=with_edits, fixable=fixable, partial=True)
        return [_diagnostic(source, item) for item in found]
    finally:
        ctx.close()


def _choose_fixes(found: list[_Found], unsafe: bool) -> list[_Found]:
    """Findings whose fixes are allowed at this applicability, skipping any fix that overlaps one
    already chosen."""
    chosen: list[_Found] = []
    taken: list[tuple[Location, Location]] = []
    for item in found:
        if item.fix is None or not item.fix.applicability.allowed(unsafe):
            continue
        if any(a < end and start < b for a, b in item.fix_spans for start, end in taken):
            continue
        taken.extend(item.fix_spans)
        chosen.append(item)
    return chosen


@deep_stack
def fix_source(
    source: SourceFile,
    rules: list[type[Rule]],
    *,
    unsafe: bool,
    prefilter: bool = True,
    assume_xla: bool = False,
    project: ProjectFacts = NO_PROJECT,
    target_version: tuple[int, ...] | None = None,
    fixable: frozenset[str] | None = None,
    confidence: str = HIGH,
) -> FileResult:
    """Apply fixes until none applies; the result is re-parsed each pass, so it is valid Python."""
    result = FileResult(source.path, source=source)
    if prefilter and not MARKERS.search(source.raw):
        parse(source)
        return result
    current = source
    for _ in range(MAX_FIX_PASSES):
        ctx = analyse(current, assume_xla=assume_xla, project=project, target_version=target_version)
        try:
            found = _keep(current, _run_rules(ctx, rules), ctx, rules)
            cst_ctx = _build_fixes(current, ctx, found, with_edits=False, fixable=fixable, confidence=confidence)
        finally:
            ctx.close()
        diagnostics = [_diagnostic(current, item) for item in found]
        if current is source:
            result.found = diagnostics
        chosen = _choose_fixes(found, unsafe)
        fixes = [item.fix for item in chosen if item.fix is not None]  # (all: _choose_fixes keeps fixes)
        if not fixes or cst_ctx is None:
            result.diagnostics = diagnostics
            break
        from .fixing.apply import apply_fixes

        new_code = apply_fixes(cst_ctx, fixes)
        new_bytes = new_code.bytes
        try:
            compile(new_code.code, str(current.path), "exec", dont_inherit=True, flags=ast.PyCF_ONLY_AST)
            next_source = decode_source(current.path, new_bytes)
        except (SyntaxError, SourceError, ValueError) as exc:  # a bug in a fix: keep the file as it was
            raise SourceError(source.path, f"a fix produced invalid code ({exc}); file left unchanged") from None
        if new_bytes == current.raw:
            result.diagnostics = diagnostics
            break
        result.fixed_count += len(fixes)
        result.fixed_codes += [item.rule.code for item in chosen]
        project = project.moved(current.text, next_source.text)  # what other modules say, at the new lines
        current = next_source
    else:
        result.diagnostics = lint_source(
            current,
            rules,
            prefilter=False,
            assume_xla=assume_xla,
            project=project,
            target_version=target_version,
            fixable=fixable,
        )
    if current.raw != source.raw:
        result.fixed = current.raw
    return result
