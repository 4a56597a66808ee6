"""Reading and writing source files without losing anything: encoding, BOM, newlines, mode."""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


# Python's parser needs ~150x a file's size in memory: a generated 50 MB module would take gigabytes
# and minutes. The largest hand-written modules of torch, transformers and diffusers are under 1 MiB.
MAX_FILE_BYTES = 8 << 20


class SourceError(Exception):
    """A file that cannot be read, decoded or parsed: reported as one line, never a traceback."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: error: {message}")
        self.path = path


@dataclass(frozen=True)
class SourceFile:
    path: Path
    raw: bytes
    text: str
    encoding: str  # as PEP 263 / the BOM says, e.g. "utf-8", "utf-8-sig", "latin-1"


def read_source(path: Path) -> SourceFile:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceError(path, exc.strerror or str(exc)) from None
    return decode_source(path, raw)


def decode_source(path: Path, raw: bytes) -> SourceFile:
    if len(raw) > MAX_FILE_BYTES:
        raise SourceError(path, f"not checked: {len(raw) / 2**20:.1f} MiB is over the {MAX_FILE_BYTES >> 20} MiB "
                                "limit for one file (generated code? exclude it)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise SourceError(path, f"cannot decode: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise SourceError(path, f"cannot decode as {encoding}{where}: {getattr(exc, 'reason', exc)}") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return SourceFile(path, raw, text, encoding)


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written file.
    A file without its owner's write bit is refused (the rename would replace it regardless)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = None
    if mode is not None and not mode & stat.S_IWUSR:
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".xlalint-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class SourceText:
    """Lines of decoded source, for `ast` positions: `ast` counts columns in UTF-8 bytes, users
    (and Ruff's JSON) in characters."""

    def __init__(self, text: str) -> None:
        self.text = text
        # only \r\n, \r and \n end a line for Python's tokenizer (not \f or \u2028, as for splitlines)
        self.lines = _LINE.findall(text)

    def _line(self, row: int) -> str:
        return self.lines[row - 1] if 0 < row <= len(self.lines) else ""

    def column(self, row: int, byte_offset: int) -> int:
        """0-based character column of a UTF-8 byte offset on 1-based `row`."""
        line = self._line(row)
        if line.isascii():
            return byte_offset
        return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def segment(self, node) -> str:
        """The source text of an `ast` node, as written (without surrounding parentheses)."""
        first, last = node.lineno, node.end_lineno
        start = self.column(first, node.col_offset)
        end = self.column(last, node.end_col_offset)
        if first == last:
            return self._line(first)[start:end]
        parts = [self._line(first)[start:], *(self._line(r) for r in range(first + 1, last)), self._line(last)[:end]]
        return "".join(parts)
