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
OTHER_FILE_NOQA = re.compile(r"#\s*[a-z][\w-]*\s*:\s*noqa\b", re.I)  # Ruff's and flake8's file-level form
ALL = frozenset({"*"})


def _codes(text: str | None) -> frozenset[str]:
    return frozenset(c.upper() for c in re.findall(r"[A-Za-z]+[0-9]+", text)) if text else ALL


@dataclass(frozen=True)
class NoqaComment:
    """A `# noqa: CODES` comment: its row, the columns (0-based, characters) of the comment token
    and of the `noqa` directive in it, and its codes as written."""

    row: int
    start: int
    end: int
    directive: tuple[int, int]
    codes: tuple[str, ...]


@dataclass
class NoqaMap:
    lines: dict[int, frozenset[str]] = field(default_factory=dict)
    file: frozenset[str] = frozenset()
    comments: dict[int, NoqaComment] = field(default_factory=dict)  # by row, those with codes
    origin: dict[int, int] = field(default_factory=dict)  # a row inside a string -> the comment's row
    used: set[tuple[int, str]] = field(default_factory=set)  # (comment row, code) that suppressed a finding

    def suppresses(self, code: str, first_row: int, last_row: int) -> bool:
        if "*" in self.file or code in self.file:
            return True
        for row in range(first_row, last_row + 1):
            codes = self.lines.get(row)
            if codes is not None and ("*" in codes or code in codes):
                self.used.add((self.origin.get(row, row), code))
                return True
        return False

    def unused(self, judged: frozenset[str]) -> list[tuple[NoqaComment, list[str]]]:
        """Comments naming codes of `judged` (rules that ran on the file) that suppressed nothing,
        with those codes (Ruff's RUF100). A bare `# noqa` and other tools' codes are never judged."""
        found = []
        for row, comment in sorted(self.comments.items()):
            stale = [c for c in comment.codes if c.upper() in judged and (row, c.upper()) not in self.used]
            if stale:
                found.append((comment, stale))
        return found


def without_codes(comment: str, directive: tuple[int, int], codes: list[str]) -> str:
    """The comment `comment` with `codes` dropped from its `noqa` directive (at `directive`, columns in
    the comment); "" when nothing of the comment is left."""
    start, end = directive
    match = LINE_NOQA.match(comment, start)
    written = match.group("codes") if match is not None else None  # (there is one: `directive` is its span)
    kept = [c for c in re.findall(r"[A-Za-z]+[0-9]+", written or "") if c.upper() not in {x.upper() for x in codes}]
    rest_before, rest_after = comment[:start].rstrip(), comment[end:].strip()
    if kept:
        return f"{comment[:start]}# noqa: {', '.join(kept)}{comment[end:]}"
    if rest_before.strip("# \t") == "":  # the directive opened the comment: what follows it stays
        return f"# {rest_after.lstrip('#').strip()}" if rest_after.strip("# \t") else ""
    return f"{rest_before}  {rest_after}".rstrip() if rest_after else rest_before


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
            row = token.start[0]
            result.lines[row] = _codes(match.group("codes"))
            if match.group("codes"):
                result.comments[row] = NoqaComment(
                    row,
                    token.start[1],
                    token.end[1],
                    match.span(),
                    tuple(re.findall(r"[A-Za-z]+[0-9]+", match.group("codes"))),
                )
    # a line inside a multi-line string cannot hold a comment: the one where the string ends speaks for it
    for first, last in _string_spans(tokens):
        if last > first and last in result.lines:
            for row in range(first, last):
                if row not in result.lines:
                    result.lines[row] = result.lines[last]
                    result.origin[row] = last
    result.file = frozenset(file_codes)
    return result


_FSTRING_START, _FSTRING_END = getattr(tokenize, "FSTRING_START", -1), getattr(tokenize, "FSTRING_END", -1)


def _string_spans(tokens):
    """(first row, last row) of each string literal (f-strings are several tokens from Python 3.12)."""
    opened = []
    for token in tokens:
        if token.type == tokenize.STRING:
            yield token.start[0], token.end[0]
        elif token.type == _FSTRING_START:
            opened.append(token.start[0])
        elif token.type == _FSTRING_END and opened:
            yield opened.pop(), token.end[0]


def add_noqa(text: str, findings: list[tuple[int, int, str]]) -> tuple[str, int]:
    """`text` with `# noqa: CODES` on the lines of `findings` ((first row, last row, code) each),
    merged into a `# noqa: ...` already there (a bare `# noqa` already covers everything), and how
    many lines got a new or wider comment (`--add-noqa`, to baseline a code base). A finding is
    marked on the first of its rows that ends in code, not inside a string, else where its string ends."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text, 0
    code_ends = {t.start[0] for t in tokens if t.type in (tokenize.NEWLINE, tokenize.NL)}
    comments = {t.start[0]: t for t in tokens if t.type == tokenize.COMMENT}
    wanted: dict[int, set[str]] = {}
    for first, last, code in findings:
        # else the row where the multi-line string holding the finding ends (see `parse_noqa`)
        row = next((r for r in range(first, last + 1) if r in code_ends), None) or next(
            (r for r in sorted(code_ends) if r > last), None
        )
        if row is not None:
            wanted.setdefault(row, set()).add(code)
    lines = text.splitlines(keepends=True)
    changed = 0
    for row, codes in sorted(wanted.items()):
        line = lines[row - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        comment = comments.get(row)
        match = LINE_NOQA.search(comment.string) if comment is not None else None
        if comment is not None and match is not None:
            present = _codes(match.group("codes"))
            if "*" in present or codes <= present:
                continue
            merged = ", ".join(sorted(present | codes))
            start = comment.start[1] + match.start()
            end = comment.start[1] + match.end()
            body = f"{body[:start]}# noqa: {merged}{body[end:]}"
        else:
            body = f"{body}  # noqa: {', '.join(sorted(codes))}"
        lines[row - 1] = body + ending
        changed += 1
    return "".join(lines), changed
