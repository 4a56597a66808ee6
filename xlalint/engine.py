"""The pipeline for one file: decode -> parse once -> context -> all rules in one walk -> diagnostics
-> (fix: apply non-overlapping fixes, prove the output parses, repeat until nothing changes)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .analysis.context import FileContext
from .diagnostics import Diagnostic, Fix, Location
from .fixes import apply_fixes, text_edits
from .noqa import parse_noqa
from .rule import Rule
from .source import SourceError, SourceFile, decode_source

# Files mentioning none of these cannot hold a finding; they are not even parsed (TorchFix does the same).
MARKERS = re.compile(rb"torch|xla|jax|tpu|tensor|backward|optimi[sz]er|\.item\(", re.I)
MAX_FIX_PASSES = 10


@dataclass
class FileResult:
    path: Path
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: SourceFile | None = None
    fixed: bytes | None = None  # new file bytes when fixes changed something
    fixed_count: int = 0


def parse(source: SourceFile) -> cst.Module:
    try:
        return cst.parse_module(source.raw)
    except cst.ParserSyntaxError as exc:
        raise SourceError(source.path, _syntax_error(source, exc)) from None
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise SourceError(source.path, f"cannot parse: {exc}") from None
    except RecursionError:
        raise SourceError(source.path, "cannot parse: nesting too deep") from None


def _syntax_error(source: SourceFile, exc: cst.ParserSyntaxError) -> str:
    """Python's own message and position when it agrees the code is invalid (libcst's can lag a line)."""
    try:
        compile(source.text, str(source.path), "exec", dont_inherit=True, flags=0x400)  # PyCF_ONLY_AST
    except SyntaxError as py_exc:
        return f"{py_exc.lineno}:{py_exc.offset or 1}: syntax error: {py_exc.msg}"
    except ValueError as py_exc:  # e.g. null bytes
        return f"syntax error: {py_exc}"
    message = exc.message.splitlines()[0] if exc.message else "invalid syntax"
    return f"{exc.raw_line}:{exc.raw_column + 1}: unsupported syntax: {message}"


@dataclass
class _Found:
    rule: type[Rule]
    node: cst.CSTNode
    message: str
    fix: Fix | None
    start: Location
    end: Location
    fix_spans: tuple[tuple[Location, Location], ...] = ()


def _span(positions, node) -> tuple[Location, Location]:
    where = positions[node]
    return Location(where.start.line, where.start.column + 1), Location(where.end.line, where.end.column + 1)


def _run_rules(ctx: FileContext, rules: list[type[Rule]]) -> list[_Found]:
    active = [rule(ctx) for rule in rules if rule.applies(ctx)]
    if not active:
        return []
    wrapper = MetadataWrapper(ctx.module, unsafe_skip_copy=True)  # keep node identity for fixes
    wrapper.visit_batched(active)
    reports = [(type(rule), report) for rule in active for report in rule.reports]
    if not reports:
        return []
    positions = wrapper.resolve(PositionProvider)  # only paid for when something was found
    found = []
    for rule, report in reports:
        start, end = _span(positions, report.node)
        spans = tuple(_span(positions, node) for node, _ in report.fix.replacements.values()) if report.fix else ()
        found.append(_Found(rule, report.node, report.message, report.fix, start, end, spans))
    found.sort(key=lambda f: (f.start, f.rule.code))
    return found


def _diagnostics(source: SourceFile, found: list[_Found], ctx: FileContext, with_edits: bool) -> list[Diagnostic]:
    noqa = parse_noqa(source.text)
    diagnostics = []
    seen = set()
    for item in found:
        key = (item.rule.code, item.start, item.end)
        if key in seen or noqa.suppresses(item.rule.code, item.start.row, item.end.row):
            continue
        seen.add(key)
        fix = item.fix
        if fix is not None and with_edits:
            fix.edits = text_edits(ctx.module.code, apply_fixes(ctx, [fix]).code)
        diagnostics.append(
            Diagnostic(
                item.rule.code,
                item.rule.name,
                item.message,
                item.rule.category,
                source.path,
                item.start,
                item.end,
                fix,
                noqa_row=item.start.row,
            )
        )
    return diagnostics


def lint_source(
    source: SourceFile, rules: list[type[Rule]], *, with_edits: bool = False, prefilter: bool = True
) -> list[Diagnostic]:
    if prefilter and not MARKERS.search(source.raw):
        return []
    module = parse(source)
    ctx = FileContext(source.path, module)
    return _diagnostics(source, _run_rules(ctx, rules), ctx, with_edits)


def _choose_fixes(diagnostics: list[Diagnostic], found: list[_Found], unsafe: bool) -> list[Fix]:
    """Fixes allowed at this applicability, skipping any that overlaps one already chosen."""
    allowed = {id(d.fix) for d in diagnostics if d.fix is not None and d.fix.applicability.allowed(unsafe)}
    chosen: list[Fix] = []
    taken: list[tuple[Location, Location]] = []
    for item in found:
        if item.fix is None or id(item.fix) not in allowed:
            continue
        if any(a < end and start < b for a, b in item.fix_spans for start, end in taken):
            continue
        taken.extend(item.fix_spans)
        chosen.append(item.fix)
    return chosen


def fix_source(source: SourceFile, rules: list[type[Rule]], *, unsafe: bool, prefilter: bool = True) -> FileResult:
    """Apply fixes until none applies; the result is re-parsed each pass, so it is valid Python."""
    result = FileResult(source.path, source=source)
    if prefilter and not MARKERS.search(source.raw):
        return result
    current, module = source, parse(source)
    for _ in range(MAX_FIX_PASSES):
        ctx = FileContext(current.path, module)
        found = _run_rules(ctx, rules)
        diagnostics = _diagnostics(current, found, ctx, with_edits=False)
        fixes = _choose_fixes(diagnostics, found, unsafe)
        if not fixes:
            result.diagnostics = diagnostics
            break
        new_code = apply_fixes(ctx, fixes)
        new_bytes = new_code.bytes
        try:
            compile(new_code.code, str(current.path), "exec", dont_inherit=True, flags=0x400)  # PyCF_ONLY_AST
            next_source = decode_source(current.path, new_bytes)
            next_module = parse(next_source)  # proves the output parses; the next pass lints it
        except (SyntaxError, SourceError, ValueError) as exc:  # a bug in a fix: keep the file as it was
            raise SourceError(source.path, f"a fix produced invalid code ({exc}); file left unchanged") from None
        if new_bytes == current.raw:
            result.diagnostics = diagnostics
            break
        result.fixed_count += len(fixes)
        current, module = next_source, next_module
    else:
        result.diagnostics = lint_source(current, rules, prefilter=False)
    if current.raw != source.raw:
        result.fixed = current.raw
    return result
