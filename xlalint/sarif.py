"""SARIF 2.1.0 output (`--output-format sarif`), the format GitHub code scanning and other viewers read.

One run: the tool with every rule's documentation (help text, URL, category), and one result per
finding, with its fix as a SARIF fix when the fix's edits are known. Paths under the current
directory are relative to `%SRCROOT%` (the repository root for code scanning); others are `file:`
URIs. Columns count Unicode code points, as the text and JSON outputs do.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import __version__
from .diagnostics import DOCS_URL, Diagnostic, Edit, Fix
from .rules import RULES_BY_CODE

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT = "%SRCROOT%"
INFORMATION_URI = "https://github.com/xlalint/xlalint"


def render_sarif(diagnostics: list[Diagnostic], encodable=lambda data: data) -> str:
    """`encodable`: the log's text made valid Unicode (see `reporters.encodable`)."""
    return json.dumps(encodable(sarif_log(diagnostics)), indent=2) + "\n"


def sarif_log(diagnostics: list[Diagnostic], root: Path | None = None) -> dict:
    root = Path(os.getcwd() if root is None else root).resolve()
    rules = sorted(RULES_BY_CODE.values(), key=lambda r: r.code)
    index = {rule.code: i for i, rule in enumerate(rules)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "xlalint",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": [_descriptor(rule) for rule in rules],
                    }
                },
                "originalUriBaseIds": {ROOT: {"uri": root.as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, index, root) for d in diagnostics],
            }
        ],
    }


def _descriptor(rule) -> dict:
    documentation = rule.documentation()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": _what_it_does(documentation) or rule.name},
        "fullDescription": {"text": documentation},
        "help": {"text": documentation, "markdown": documentation},
        "helpUri": DOCS_URL.format(name=rule.name),
        "defaultConfiguration": {"level": "error"},
        "properties": {"category": rule.category, "tags": [rule.category]},
    }


def _what_it_does(documentation: str) -> str:
    """The first sentence of the "What it does" section, on one line."""
    match = re.search(r"## What it does\s*\n(.*?)(?:\n\s*\n|\Z)", documentation, re.S)
    text = " ".join(match.group(1).split()) if match else ""
    sentence = re.match(r"(.+?\.)(\s|$)", text)
    return sentence.group(1) if sentence else text


def _result(d: Diagnostic, index: dict[str, int], root: Path) -> dict:
    artifact = _artifact(d.path, root)
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": "error",
        "message": {"text": d.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": artifact,
                    "region": _region(d.location, d.end_location),
                }
            }
        ],
        "properties": {"category": d.category, **({"cell": d.cell} if d.cell is not None else {})},
    }
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    result["properties"]["confidence"] = d.confidence
    if d.related:  # the evidence chain, and other places of the same cause (SARIF 2.1.0, 3.27.22)
        result["relatedLocations"] = [
            {
                "id": i,
                "physicalLocation": {
                    "artifactLocation": _artifact(Path(r.path), root) if r.path else artifact,
                    "region": {"startLine": r.location.row, "startColumn": r.location.column},
                },
                "message": {"text": r.message},
            }
            for i, r in enumerate(d.related)
        ]
    if d.fix is not None and d.fix.edits:
        result["fixes"] = [_fix(d.fix, artifact)]
    return result


def _artifact(path: Path, root: Path) -> dict:
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        return {"uri": absolute.as_uri()}  # (percent-encodes the name's bytes)
    # the name's bytes percent-encoded: one that is not UTF-8 too, exactly (`%FF`)
    return {"uri": quote(os.fsencode(relative.as_posix())), "uriBaseId": ROOT}


def _region(start, end) -> dict:
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}


def _fix(fix: Fix, artifact: dict) -> dict:
    return {
        "description": {"text": f"{fix.title} ({fix.applicability.value})"},
        "artifactChanges": [{"artifactLocation": artifact, "replacements": [_replacement(e) for e in fix.edits]}],
        "properties": {"applicability": fix.applicability.value},
    }


def _replacement(edit: Edit) -> dict:
    return {"deletedRegion": _region(edit.location, edit.end_location), "insertedContent": {"text": edit.content}}
