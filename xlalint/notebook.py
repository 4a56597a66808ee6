"""Jupyter notebooks (`.ipynb`): their code cells checked and fixed as one module, as Ruff does.

The code cells are joined in order, each followed by a boundary comment, into one Python source
that the engine checks like any file (a later cell sees the names an earlier one defined, and one
import added by a fix serves every cell). IPython syntax, which is no Python, is masked by a
`pass` placeholder of the same indentation: line magics (`%time ...`), shell escapes (`!pip ...`,
`files = !ls`), help (`obj?`), and cells run by a cell magic (`%%bash`) as a whole. Findings are
mapped back to (cell, line in the cell); the cell number counts every cell of the notebook, from 1,
as a notebook's outline shows them.

A fixed source is split back at the boundaries and its placeholders are given their magics back;
only the cells whose code changed get a new `source`, and the JSON is written back in the layout
the file had (indentation, key order, escaping, final newline), so every byte outside those cells
is unchanged. A notebook whose layout cannot be reproduced is checked but never rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .source import SourceError, SourceFile

SUFFIX = ".ipynb"
# outputs (plots) make notebooks large; their code is still checked against the limit for one file
MAX_NOTEBOOK_BYTES = 128 << 20
BOUNDARY = "# xlalint: cell boundary"
PLACEHOLDER = "pass  # xlalint: IPython syntax"
# `%time f()`, `!pip install x`, `files = !ls`, `x = %who_ls`, `obj?`, `??obj`
_MAGIC = re.compile(r"^\s*(?:[%!]|\?\?|[\w.\[\]]+\s*=\s*[%!])|^[^#'\"]*\?\??\s*$")
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def is_notebook(path: Path) -> bool:
    return path.suffix == SUFFIX


@dataclass
class _Cell:
    index: int  # position among all the notebook's cells, from 1
    lines: list[str]  # its source, line by line, each with its newline (the last may lack one)
    as_list: bool  # `source` was a list of lines (nbformat's way) rather than one string
    masked: dict[int, str]  # line number in the cell (from 0) -> the IPython line a placeholder stands for

    @property
    def whole(self) -> bool:
        """Every line masked (a `%%bash` cell): placeholders at no indentation."""
        return bool(self.lines) and len(self.masked) == len(self.lines)


class Notebook:
    def __init__(self, path: Path, raw: bytes, data: dict, cells: list[_Cell]) -> None:
        self.path = path
        self.raw = raw
        self.data = data
        self.cells = cells
        self.text, self.rows = self._join()

    @classmethod
    def parse(cls, path: Path, raw: bytes) -> Notebook:
        try:
            data = json.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise SourceError(path, f"not a notebook: invalid JSON ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise SourceError(path, "not a notebook: no list of cells (nbformat 4 is supported)")
        language = (data.get("metadata") or {}).get("language_info", {}).get("name", "python")
        if isinstance(language, str) and language.lower() != "python":
            raise SourceError(path, f"not a Python notebook (its language is {language})")
        cells = []
        for position, cell in enumerate(data["cells"], start=1):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(s, str) for s in source):
                lines, as_list = _LINE.findall("".join(source)), True
            elif isinstance(source, str):
                lines, as_list = _LINE.findall(source), False
            else:
                raise SourceError(path, f"cell {position}: `source` is neither text nor a list of lines")
            cells.append(_Cell(position, lines, as_list, _masks(lines)))
        return cls(path, raw, data, cells)

    # -- to Python and back ---------------------------------------------------------------------------
    def _join(self) -> tuple[str, list[tuple[int, int]]]:
        """The joined source, and for each of its lines (from 1) the (cell, row in the cell)."""
        parts: list[str] = []
        rows: list[tuple[int, int]] = []
        for cell in self.cells:
            indent = ""
            for number, line in enumerate(cell.lines):
                if number in cell.masked:
                    # a line continuing an escape (`!pip install a \`) keeps the escape's indent
                    if not (number - 1 in cell.masked and _continues(cell.lines[number - 1])):
                        indent = "" if cell.whole else line[: len(line) - len(line.lstrip())]
                    line = f"{indent}{PLACEHOLDER}\n"
                parts.append(line if line.endswith("\n") else line + "\n")
                rows.append((cell.index, number + 1))
            parts.append(BOUNDARY + "\n")
            rows.append((cell.index, len(cell.lines) + 1))
        return "".join(parts), rows

    def readable(self) -> str:
        """The code cells as a person reads them (IPython syntax included), under `# %% cell N`."""
        parts = []
        for cell in self.cells:
            code = "".join(cell.lines)
            if code and not code.endswith("\n"):
                code += "\n"
            parts.append(f"# %% cell {cell.index}\n{code}")
        return "".join(parts)

    def source_file(self) -> SourceFile:
        return SourceFile(self.path, self.text.encode("utf-8"), self.text, "utf-8")

    def where(self, row: int) -> tuple[int, int]:
        """(cell, row in the cell) of a row of the joined source."""
        return self.rows[min(max(row, 1), len(self.rows)) - 1] if self.rows else (1, row)

    def in_cells(self, diagnostic):
        """`diagnostic` at its cell and the row in that cell (its fix's edits, in joined rows, dropped)."""
        from dataclasses import replace

        from .diagnostics import Location

        cell, row = self.where(diagnostic.location.row)
        end_cell, end_row = self.where(diagnostic.end_location.row)
        end = Location(end_row, diagnostic.end_location.column) if end_cell == cell else Location(row + 1, 1)
        fix = diagnostic.fix
        if fix is not None and fix.edits:
            fix = replace(fix, edits=())
        return replace(
            diagnostic,
            cell=cell,
            location=Location(row, diagnostic.location.column),
            end_location=end,
            fix=fix,
            noqa_row=None,
        )

    def error_in_cells(self, message: str) -> str:
        """A parse error's `path:ROW:COL:` as `path:cell N:ROW:COL:`."""

        def cell_of(match):
            cell, row = self.where(int(match.group(1)))
            return f":cell {cell}:{row}:{match.group(2)}"

        return re.sub(r":(\d+):(\d+)(?=: (?:error|warning): )", cell_of, message, count=1)

    def cell_sources(self, text: str) -> list[str]:
        """Each code cell's new source, from a fixed joined `text`; SourceError when the fix moved
        code across a boundary or touched a masked line."""
        chunks = text.split(BOUNDARY + "\n")
        if len(chunks) != len(self.cells) + 1 or chunks[-1].strip():
            raise SourceError(self.path, "a fix moved code across cells; notebook left unchanged")
        sources = []
        for cell, chunk in zip(self.cells, chunks):
            lines = _LINE.findall(chunk)
            magics = iter(cell.masked[n] for n in sorted(cell.masked))
            restored = []
            for line in lines:
                if line.strip() == PLACEHOLDER:
                    line = next(magics, None)
                    if line is None:
                        raise SourceError(
                            self.path, f"cell {cell.index}: a fix changed IPython syntax; notebook left unchanged"
                        )
                restored.append(line)
            if next(magics, None) is not None:
                raise SourceError(
                    self.path, f"cell {cell.index}: a fix removed IPython syntax; notebook left unchanged"
                )
            source = "".join(restored)
            if cell.lines and not cell.lines[-1].endswith("\n") and source.endswith("\n"):
                source = source[:-1]  # the cell's last line had no newline: the joining added it
            sources.append(source)
        return sources

    def rewritten(self, text: str) -> bytes | None:
        """The notebook's bytes with the cells of the fixed joined `text`; None when nothing changed.
        SourceError when its JSON layout cannot be written back unchanged."""
        sources = self.cell_sources(text)
        changed = False
        for cell, source in zip(self.cells, sources):
            if source == "".join(cell.lines):
                continue
            changed = True
            self.data["cells"][cell.index - 1]["source"] = _LINE.findall(source) if cell.as_list else source
        if not changed:
            return None
        layout = self._layout()
        if layout is None:
            raise SourceError(
                self.path, "cannot write this notebook's JSON back in its own layout; notebook left unchanged"
            )
        return _dump(self.data, *layout)

    def _layout(self):
        """The json.dumps settings (indent, sort_keys, ensure_ascii, final newline, BOM) that give
        back the original bytes exactly, if any do."""
        original = json.loads(self.raw.decode("utf-8-sig"))
        bom = self.raw.startswith(b"\xef\xbb\xbf")
        for indent in (1, 2, 4, None):
            for sort_keys in (True, False):
                for ensure_ascii in (False, True):
                    for newline in (True, False):
                        layout = (indent, sort_keys, ensure_ascii, newline, bom)
                        if _dump(original, *layout) == self.raw:
                            return layout
        return None


def _dump(data, indent, sort_keys, ensure_ascii, newline, bom) -> bytes:
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return (b"\xef\xbb\xbf" if bom else b"") + (text + ("\n" if newline else "")).encode("utf-8")


def _masks(lines: list[str]) -> dict[int, str]:
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("%%"):  # a cell magic runs the whole cell as something else
        return {n: line for n, line in enumerate(lines)}
    masked: dict[int, str] = {}
    continued = False
    for n, line in enumerate(lines):
        if continued or _MAGIC.match(line.rstrip("\n")):
            masked[n] = line
            continued = _continues(line)
    return masked


def _continues(line: str) -> bool:
    """An IPython line ending in a backslash (`!pip install a \\`) goes on on the next line."""
    return line.rstrip("\r\n").endswith("\\")
