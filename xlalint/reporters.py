"""Output formats: text (path:row:col: CODE message, the source line with carets, fix and hint: Ruff's
`full`), concise (one line each), json (Ruff's shape + category), json-lines (one such object a line),
github (workflow annotations), gitlab (Code Quality), junit (XML), rdjson (reviewdog's Diagnostic
Format), sarif (SARIF 2.1.0, see `sarif`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import click

from .diagnostics import POSSIBLE, Applicability, Diagnostic
from .rules import RULES_BY_CODE
from .sarif import render_sarif

FORMATS = ("text", "concise", "json", "json-lines", "github", "gitlab", "junit", "rdjson", "sarif")
# formats that carry each fix's edits
WITH_EDITS = ("json", "json-lines", "rdjson", "sarif")
# C0 and C1 control characters (ESC, BEL, CR, ...) from file contents or names: a crafted file must
# not be able to move the cursor, retitle or clear the terminal of whoever reads the report; and the
# bytes of a file name that are not UTF-8, which Python carries as lone surrogates (surrogateescape)
# and no output can encode
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")  # newlines and tabs too
_NOT_UNICODE = re.compile(r"[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    char = match.group()
    if "\udc80" <= char <= "\udcff":  # a byte that is not UTF-8 (os.fsdecode's surrogateescape): the byte
        return f"\\x{ord(char) - 0xDC00:02x}"
    return repr(char)[1:-1]  # \x1b, \n, \t; \ud800 for a lone surrogate of another origin


def printable(text: str, *, line: bool = False) -> str:
    r"""`text` with control characters and the bytes of names that are not UTF-8 shown as escapes
    (`\x1b`, `\xff`); newlines and tabs kept, unless `line` (a name, or a one-line message)."""
    return (_CONTROL_IN_LINE if line else _CONTROL).sub(_escape, text)


def shown(path) -> str:
    r"""A file name as every human-facing output shows it: one line, control characters (newline and
    tab included) as Python writes them in a string (`\n`, `\t`, `\x1b`) and each byte that is not
    UTF-8 as `\xNN`."""
    return printable(str(path), line=True)


def encodable(data):
    r"""`data` (JSON-like) with each byte of a name that is not UTF-8 written `\xNN`: the one thing a
    JSON or XML document cannot hold (JSON escapes control characters itself)."""
    if isinstance(data, str):
        return _NOT_UNICODE.sub(_escape, data) if _NOT_UNICODE.search(data) else data
    if isinstance(data, dict):
        return {encodable(key): encodable(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [encodable(item) for item in data]
    return data


def _github_data(text: str) -> str:
    """A GitHub workflow command's message: `%`, CR and LF are escaped (the message ends the line)."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_property(text: str) -> str:
    return _github_data(text).replace(":", "%3A").replace(",", "%2C")


def _relative(path) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else str(path)
    except ValueError:
        return str(path)


class SourceLines:
    """The lines of the files findings are in, read when the text output shows them (a notebook's
    by cell); `given`: contents instead of the files' (standard input)."""

    def __init__(self, given: dict[Path, bytes] | None = None) -> None:
        self.given = given or {}
        self.files: dict[Path, dict | None] = {}

    def line(self, path: Path, cell: int | None, row: int) -> str | None:
        if path not in self.files:
            self.files[path] = self._read(path)
        lines = self.files[path]
        return None if lines is None else lines.get((cell, row))

    def _read(self, path: Path) -> dict | None:
        from .notebook import Notebook, is_notebook
        from .source import SourceError, decode_source, read_bounded

        try:
            raw = self.given[path] if path in self.given else read_bounded(path)[0]
            if is_notebook(path):
                return {
                    (cell.index, n): line
                    for cell in Notebook.parse(path, raw).cells
                    for n, line in enumerate(cell.lines, start=1)
                }
            text = decode_source(path, raw).text
        except (OSError, SourceError, ValueError):
            return None  # the report stays one line a finding
        return {(None, n): line for n, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1)}


def _frame(d: Diagnostic, sources: SourceLines) -> list[str]:
    """The finding's first line under a gutter, carets under its span (to the line's end when the
    span goes on), as Ruff's `full` output shows it."""
    line = sources.line(d.path, d.cell, d.location.row)
    if line is None:
        return []
    line = line.rstrip("\r\n")
    start = max(d.location.column - 1, 0)
    end = d.end_location.column - 1 if d.end_location.row == d.location.row else len(line.rstrip())
    end = max(min(end, len(line)), start + 1)
    shown = printable(line.expandtabs(4))
    pad = len(printable(line[:start].expandtabs(4)))
    width = len(printable(line[:end].expandtabs(4))) - pad
    gutter = " " * len(str(d.location.row))
    more = "..." if d.end_location.row > d.location.row else ""
    return [
        f"{gutter} |",
        f"{d.location.row} | {shown}",
        f"{gutter} | {' ' * pad}{click.style('^' * max(width, 1) + more, fg='red', bold=True)}",
        f"{gutter} |",
    ]


def colour_diff(diff: str) -> str:
    """A unified diff coloured as git shows it (click drops the styles when the output is no terminal)."""
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            out.append(click.style(line, bold=True))
        elif line.startswith("@@"):
            out.append(click.style(line, fg="cyan"))
        elif line.startswith("+"):
            out.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(click.style(line, fg="red"))
        else:
            out.append(line)
    return "".join(out)


def render(
    diagnostics: list[Diagnostic],
    fmt: str,
    *,
    quiet: bool = False,
    unsafe_fixes: bool = False,
    failed_files: int = 0,
    sources: SourceLines | None = None,
    hidden: int = 0,
) -> str:
    """`hidden`: possible findings left out at the confidence asked for (named in the summary)."""
    if fmt == "json":
        return json.dumps([encodable(d.to_json()) for d in diagnostics], indent=2) + "\n"
    if fmt == "json-lines":
        return "".join(json.dumps(encodable(d.to_json())) + "\n" for d in diagnostics)
    if fmt == "gitlab":
        return render_gitlab(diagnostics)
    if fmt == "junit":
        return render_junit(diagnostics)
    if fmt == "rdjson":
        return render_rdjson(diagnostics, sources or SourceLines())
    if fmt == "sarif":
        return render_sarif(diagnostics, encodable)
    if fmt == "github":
        return "".join(
            f"::error title=xlalint ({d.code}),file={_github_property(str(d.path))},line={d.location.row},"
            f"col={d.location.column},endLine={d.end_location.row},endColumn={d.end_location.column}::"
            + _github_data(f"{_relative(d.path)}:{d.where}: {d.code} {d.message}")
            + "\n"
            for d in diagnostics
        )
    lines = []
    for d in diagnostics:
        where = click.style(f"{shown(_relative(d.path))}:{d.where}:", bold=True)
        fixable = ""
        if d.fix is not None and d.fix.applicability.allowed(unsafe_fixes):
            fixable = click.style(" [*]", fg="cyan")
        elif d.fix is not None and d.fix.applicability is Applicability.UNSAFE:
            fixable = click.style(" [unsafe fix]", fg="cyan")
        possible = click.style(" [possible]", fg="yellow") if d.confidence == POSSIBLE else ""
        lines.append(f"{where} {click.style(d.code, fg='red', bold=True)}{fixable}{possible} {printable(d.message)}")
        hint = d.hint or (RULES_BY_CODE[d.code].hint if d.code in RULES_BY_CODE else "")
        if fmt == "text" and not quiet:
            lines += _frame(d, sources or SourceLines())
            if d.related:
                lines.append(f"  {click.style('via:', fg='magenta')} {printable(via(d))}")
            if d.fix is not None and d.fix.title:
                lines.append(
                    f"  {click.style('fix:', fg='cyan')} {printable(d.fix.title)} ({d.fix.applicability.value})"
                )
            if hint:
                lines.append(f"  {click.style('hint:', fg='blue')} {hint}")
    if not quiet:
        lines.append(summary(diagnostics, unsafe_fixes, failed_files))
        if hidden:
            lines.append(
                f"{hidden} possible finding{'s' if hidden != 1 else ''} hidden (--confidence possible shows them)."
            )
    return "\n".join(lines) + ("\n" if lines else "")


MAX_VIA = 4  # links of a chain shown on the `via` line


def via(d: Diagnostic) -> str:
    """The evidence chain on one line: `training loop (backward at 12) -> calls `log` (line 14)`."""
    steps = [step.short() for step in d.related[:MAX_VIA]]
    more = len(d.related) - MAX_VIA
    return " -> ".join(steps) + (f" (+{more} more)" if more > 0 else "")


def summary(diagnostics: list[Diagnostic], unsafe_fixes: bool, failed_files: int = 0) -> str:
    failed = f" {failed_files} file{'s' if failed_files != 1 else ''} could not be checked." if failed_files else ""
    if not diagnostics:
        return f"No findings;{failed}" if failed else "All checks passed!"
    count = len(diagnostics)
    text = f"Found {count} error{'s' if count != 1 else ''}.{failed}"
    safe = sum(1 for d in diagnostics if d.fix and d.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for d in diagnostics if d.fix and d.fix.applicability is Applicability.UNSAFE)
    if unsafe_fixes and safe + unsafe:
        text += f"\n[*] {safe + unsafe} fixable with `xlalint fix --write --unsafe-fixes`."
    elif safe:
        text += f"\n[*] {safe} fixable with `xlalint fix --write`."
    if unsafe and not unsafe_fixes:
        text += f"\n{unsafe} more fix{'es' if unsafe != 1 else ''} available with `--unsafe-fixes`."
    return text


def statistics(diagnostics: list[Diagnostic], fmt: str = "text", *, unsafe_fixes: bool = False) -> str:
    """Findings per rule, most frequent first, with how many of them `xlalint fix` would fix (at the
    current applicability), as Ruff's `--statistics` (JSON for any machine-readable format)."""
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixable = Counter(
        (d.code, d.name) for d in diagnostics if d.fix is not None and d.fix.applicability.allowed(unsafe_fixes)
    )
    rows = [
        {
            "code": code,
            "name": name,
            "count": n,
            "fixable": fixable[(code, name)],
            "category": RULES_BY_CODE[code].category if code in RULES_BY_CODE else "other",
        }
        for (code, name), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    if fmt in WITH_EDITS:
        return json.dumps(rows, indent=2) + "\n"
    return "".join(_statistics_line(r) for r in rows)


def _statistics_line(row: dict) -> str:
    marker = "[*] " if row["fixable"] else "    "
    partly = f" ({row['fixable']} fixable)" if 0 < row["fixable"] < row["count"] else ""
    return f"{row['count']:>5}  {row['code']}  {marker}{row['name']}{partly}\n"


def _fingerprint(d: Diagnostic, rel: str, seen: Counter) -> str:
    """Stable across runs and line moves (path, code, message, and which such finding it is)."""
    key = (rel, d.code, d.message)
    seen[key] += 1
    return hashlib.sha256(repr((*key, seen[key])).encode()).hexdigest()[:32]


def render_gitlab(diagnostics: list[Diagnostic]) -> str:
    """GitLab's Code Quality report (a JSON array; paths relative to the project, CI_PROJECT_DIR)."""
    base = os.environ.get("CI_PROJECT_DIR") or os.getcwd()
    seen: Counter = Counter()
    items = []
    for d in diagnostics:
        try:
            rel = Path(os.path.relpath(Path(d.path).resolve(), base)).as_posix()
        except ValueError:
            rel = Path(d.path).as_posix()
        items.append(
            {
                "check_name": d.code,
                "description": f"{d.code} {d.message}",
                "severity": "major",
                "fingerprint": _fingerprint(d, rel, seen),
                "location": {"path": rel, "lines": {"begin": d.location.row, "end": d.end_location.row}},
            }
        )
    return json.dumps(encodable(items), indent=2) + "\n"


def render_junit(diagnostics: list[Diagnostic]) -> str:
    """JUnit XML: a test suite per file, a failed test case per finding (Ruff's layout)."""
    suites = ElementTree.Element(
        "testsuites", name="xlalint", tests=str(len(diagnostics) or 1), failures=str(len(diagnostics)), errors="0"
    )
    if not diagnostics:
        suite = ElementTree.SubElement(suites, "testsuite", name="xlalint", tests="1", failures="0", errors="0")
        ElementTree.SubElement(suite, "testcase", name="No errors found", classname="xlalint")
    by_file: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(_relative(d.path), []).append(d)
    for path, found in by_file.items():
        suite = ElementTree.SubElement(
            suites, "testsuite", name=_xml(path), tests=str(len(found)), failures=str(len(found)), errors="0"
        )
        for d in found:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                name=f"org.xlalint.{d.code}",
                classname=_xml(path.rsplit(".", 1)[0]),
                line=str(d.location.row),
                column=str(d.location.column),
            )
            failure = ElementTree.SubElement(case, "failure", message=_xml(d.message))
            failure.text = _xml(f"{d.where}: {d.code} {d.message}")
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


def _xml(text: str) -> str:
    """Text XML 1.0 can hold: control characters and bytes of names that are not UTF-8 shown as escapes."""
    return re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]", _escape, text)


def render_rdjson(diagnostics: list[Diagnostic], sources: SourceLines) -> str:
    """reviewdog's Diagnostic Format (rdjson): one DiagnosticResult, suggestions from the fixes' edits.
    Its columns count UTF-8 bytes from 1 (ours count characters)."""

    def position(d: Diagnostic, location) -> dict:
        line = sources.line(d.path, d.cell, location.row) or ""
        return {
            "line": location.row,
            "column": len(line[: location.column - 1].encode("utf-8", "replace"))
            + max(location.column - 1 - len(line), 0)
            + 1,
        }

    items = []
    for d in diagnostics:
        item: dict[str, object] = {
            "message": d.message,
            "location": {
                "path": _relative(d.path),
                "range": {"start": position(d, d.location), "end": position(d, d.end_location)},
            },
            "severity": "ERROR",
            "code": {"value": d.code, "url": d.url},
        }
        if d.fix is not None and d.fix.edits:
            item["suggestions"] = [
                {"range": {"start": position(d, e.location), "end": position(d, e.end_location)}, "text": e.content}
                for e in d.fix.edits
            ]
        items.append(item)
    result = {
        "source": {"name": "xlalint", "url": "https://github.com/xlalint/xlalint"},
        "severity": "ERROR",
        "diagnostics": items,
    }
    return json.dumps(encodable(result), indent=2) + "\n"
