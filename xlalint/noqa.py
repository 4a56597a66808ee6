"""`# noqa` suppression, as Ruff reads it: per line (`# noqa`, `# noqa: XLA101`), and file-wide with
xlalint's own `# xlalint: noqa[: CODES]` only. Other tools' file-level exemptions (`# ruff: noqa`,
`# flake8: noqa`) are theirs: a file silenced for a style checker is not silenced for xlalint."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.I)
FILE_NOQA = re.compile(r"#\s*xlalint\s*:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.I)
OTHER_FILE_NOQA = re.compile(r"#\s*[a-z][\w-]*\s*:\s*noqa\b", re.I)  # `# ruff: noqa`, `# flake8: noqa`
ALL = frozenset({"*"})


def _codes(text: str | None) -> frozenset[str]:
    return frozenset(c.upper() for c in re.findall(r"[A-Za-z]+[0-9]+", text)) if text else ALL


@dataclass
class NoqaMap:
    lines: dict[int, frozenset[str]] = field(default_factory=dict)
    file: frozenset[str] = frozenset()

    def suppresses(self, code: str, first_row: int, last_row: int) -> bool:
        if "*" in self.file or code in self.file:
            return True
        for row in range(first_row, last_row + 1):
            codes = self.lines.get(row)
            if codes is not None and ("*" in codes or code in codes):
                return True
        return False


def parse_noqa(text: str) -> NoqaMap:
    result = NoqaMap()
    if "noqa" not in text.lower():
        return result
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return result
    file_codes: set[str] = set()
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        file_match = FILE_NOQA.match(token.string)
        if file_match:
            file_codes |= _codes(file_match.group("codes"))
            continue
        if OTHER_FILE_NOQA.match(token.string):
            continue  # not a line exemption either
        match = LINE_NOQA.search(token.string)
        if match:
            result.lines[token.start[0]] = _codes(match.group("codes"))
    result.file = frozenset(file_codes)
    return result
