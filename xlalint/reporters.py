"""Output formats: text (path:row:col: CODE message + hint), json (Ruff's shape + category), github
(workflow annotations), sarif (SARIF 2.1.0, see `sarif`)."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import click

from .diagnostics import Applicability, Diagnostic
from .rules import RULES_BY_CODE
from .sarif import render_sarif

FORMATS = ("text", "concise", "json", "github", "sarif")
# formats that carry each fix's edits
WITH_EDITS = ("json", "sarif")
# C0 and C1 control characters (ESC, BEL, CR, ...) from file contents or names: a crafted file must
# not be able to move the cursor, retitle or clear the terminal of whoever reads the report
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with control characters shown as escapes (`\x1b`); newlines and tabs kept."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


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


def render(diagnostics: list[Diagnostic], fmt: str, *, quiet: bool = False, unsafe_fixes: bool = False,
           failed_files: int = 0) -> str:
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n"
    if fmt == "sarif":
        return render_sarif(diagnostics)
    if fmt == "github":
        return "".join(
            f"::error title=xlalint ({d.code}),file={_github_property(str(d.path))},line={d.location.row},"
            f"col={d.location.column},endLine={d.end_location.row},endColumn={d.end_location.column}::"
            + _github_data(f"{_relative(d.path)}:{d.where}: {d.code} {d.message}") + "\n"
            for d in diagnostics
        )
    lines = []
    for d in diagnostics:
        where = click.style(printable(f"{_relative(d.path)}:{d.where}:"), bold=True)
        fixable = ""
        if d.fix is not None and d.fix.applicability.allowed(unsafe_fixes):
            fixable = click.style(" [*]", fg="cyan")
        elif d.fix is not None and d.fix.applicability is Applicability.UNSAFE:
            fixable = click.style(" [unsafe fix]", fg="cyan")
        lines.append(f"{where} {click.style(d.code, fg='red', bold=True)}{fixable} {printable(d.message)}")
        hint = RULES_BY_CODE[d.code].hint if d.code in RULES_BY_CODE else ""
        if fmt == "text" and not quiet:
            if d.fix is not None and d.fix.title:
                lines.append(f"  {click.style('fix:', fg='cyan')} {printable(d.fix.title)} ({d.fix.applicability.value})")
            if hint:
                lines.append(f"  {click.style('hint:', fg='blue')} {hint}")
    if not quiet:
        lines.append(summary(diagnostics, unsafe_fixes, failed_files))
    return "\n".join(lines) + ("\n" if lines else "")


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
    fixable = Counter((d.code, d.name) for d in diagnostics
                      if d.fix is not None and d.fix.applicability.allowed(unsafe_fixes))
    rows = [{"code": code, "name": name, "count": n, "fixable": fixable[(code, name)],
             "category": RULES_BY_CODE[code].category if code in RULES_BY_CODE else "other"}
            for (code, name), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    if fmt in WITH_EDITS:
        return json.dumps(rows, indent=2) + "\n"
    return "".join(_statistics_line(r) for r in rows)


def _statistics_line(row: dict) -> str:
    marker = "[*] " if row["fixable"] else "    "
    partly = f" ({row['fixable']} fixable)" if 0 < row["fixable"] < row["count"] else ""
    return f"{row['count']:>5}  {row['code']}  {marker}{row['name']}{partly}\n"
