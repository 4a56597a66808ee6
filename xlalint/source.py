"""Reading and writing source files without losing anything: encoding, BOM, newlines, mode."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

# Python's parser needs ~150x a file's size in memory: a generated 50 MB module would take gigabytes
# and minutes. The largest hand-written modules of torch, transformers and diffusers are under 1 MiB.
MAX_FILE_BYTES = 8 << 20


class SourceError(Exception):
    """A file that cannot be read, decoded or parsed: reported as one line, never a traceback."""

    def __init__(self, path: Path, message: str, *, where: str | None = None) -> None:
        # `path:ROW:COL: error: ...` when there is a place: editors and problem matchers jump to it
        super().__init__(f"{path}:{where}: error: {message}" if where else f"{path}: error: {message}")
        self.path = path


class NewerSyntax(SourceError):
    """Valid Python of a newer version than the interpreter running xlalint (PEP 695, PEP 701 on 3.11):
    not an error in the user's code; a one-line notice, and the file is not analysed."""

    def __init__(self, path: Path, where: str, running: tuple[int, int]) -> None:
        version = ".".join(map(str, running))
        Exception.__init__(
            self,
            f"{path}:{where}: warning: syntax newer than Python {version} (parsed by libcst, "
            f"but the rules need Python's own `ast`): not checked; run xlalint under a newer Python",
        )
        self.path = path


@dataclass(frozen=True)
class SourceFile:
    path: Path
    raw: bytes
    text: str
    encoding: str  # as PEP 263 / the BOM says, e.g. "utf-8", "utf-8-sig", "latin-1"


def too_big(size: int) -> str:
    return (
        f"not checked: {size / 2**20:.1f} MiB is over the {MAX_FILE_BYTES >> 20} MiB limit for one file "
        "(generated code? exclude it)"
    )


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES, *, follow: bool = True) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its stat at the time, never more than `limit` of them: a
    FIFO, a device (`x.py -> /dev/zero`) or a socket is refused before a byte is read (opened
    non-blocking: a FIFO never waits for a writer), a larger file is refused by its size.
    `follow=False`: a symbolic link is refused too."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a file")
            raise OSError(errno.EINVAL, f"not a regular file ({kind}); not read", str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, too_big(info.st_size), str(path))
        chunks, left = [], limit + 1  # a file growing while read still stops at the limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), info
    finally:
        os.close(fd)


def stat_or_none(path: Path) -> os.stat_result | None:
    """`path`'s stat, or None when there is none to have: missing, or under a folder that may not be
    searched (where Path.exists() and is_file() raise PermissionError)."""
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def is_file(path: Path) -> bool:
    info = stat_or_none(path)
    return info is not None and stat.S_ISREG(info.st_mode)


def is_dir(path: Path) -> bool:
    info = stat_or_none(path)
    return info is not None and stat.S_ISDIR(info.st_mode)


def read_source(path: Path) -> SourceFile:
    try:
        raw, _ = read_bounded(path)
    except OSError as exc:
        raise SourceError(path, exc.strerror or str(exc)) from None
    return decode_source(path, raw)


def decode_source(path: Path, raw: bytes) -> SourceFile:
    if len(raw) > MAX_FILE_BYTES:
        raise SourceError(path, too_big(len(raw)))
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


@dataclass(frozen=True)
class Stamp:
    """What a file held when it was read (size, mtime, content digest): a fix is written over it
    only while it still holds that, so edits saved during a run are never overwritten."""

    size: int
    mtime_ns: int
    digest: str

    @classmethod
    def of(cls, raw: bytes, info: os.stat_result) -> Stamp:
        return cls(info.st_size, info.st_mtime_ns, hashlib.blake2b(raw, digest_size=16).hexdigest())

    def holds(self, path: Path) -> bool:
        try:
            raw, info = read_bounded(path)
        except OSError:
            return False
        return self == Stamp.of(raw, info)


def write_fixed(path: Path, data: bytes, read: Stamp, root: Path) -> Path:
    """Write a fixed file: through a symbolic link to its target when that is inside `root` (the
    project), never outside it; never over a file with other hard links (the rename would split
    them); only if the file still holds what was `read`. Returns the file written."""
    target = path.resolve()
    if target != path.absolute() and not target.is_relative_to(root.resolve()):
        raise OSError(errno.EPERM, f"a symbolic link to {target}, outside the project; not written", str(path))
    links = target.stat().st_nlink
    if links > 1:
        raise OSError(
            errno.EMLINK, f"the file has {links} hard links; not written (a rewrite would split them)", str(path)
        )
    write_atomic(target, data, unchanged=read)
    return target


# `write_atomic`'s temporary files: `.NAME.PID-RANDOM.xlalint-tmp` beside the file NAME, written by
# process PID (`.NAME.RANDOM.xlalint-tmp` before 0.8). A run killed mid-write (`kill -9`) leaves one;
# `xlalint clean` removes those that are stale.
TEMPORARY_SUFFIX = ".xlalint-tmp"
_TEMPORARY = re.compile(r"\..+\.(?:(?P<pid>[0-9]+)-)?[a-z0-9_]{8}" + re.escape(TEMPORARY_SUFFIX))
STALE_AFTER_S = 3600  # a write takes a second: older than this, the file is a leftover whatever its pid


def stale_temporary(path: Path) -> bool:
    """`path` is a temporary file `write_atomic` left (its name says so) and no running process is
    writing it: the process that made it is gone, or it is older than an hour (a process id may be
    reused; one without an id is from an older version)."""
    match = _TEMPORARY.fullmatch(path.name)
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if match is None or not stat.S_ISREG(info.st_mode):
        return False
    if time.time() - info.st_mtime > STALE_AFTER_S:
        return True
    pid = match.group("pid")
    return pid is not None and not _running(int(pid))


def _running(pid: int) -> bool:
    if pid <= 0:
        return False  # (never ours: 0 and -1 would signal process groups)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's
        return True
    return True


def write_atomic(path: Path, data: bytes, *, unchanged: Stamp | None = None) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written file.
    A file without its owner's write bit is refused (the rename would replace it regardless), so
    is a symbolic link, and with `unchanged`, a file that no longer holds what was read (checked last, before the rename)."""
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):  # callers write links through (write_fixed) or not at all
        raise OSError(errno.ELOOP, "a symbolic link; not written", str(path))
    mode = stat.S_IMODE(info.st_mode) if info is not None else None
    if mode is not None and not mode & stat.S_IWUSR:
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if unchanged is not None and not unchanged.holds(path):
            raise OSError(errno.ESTALE, "the file changed since xlalint read it; not written (run again)", str(path))
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
