"""The cache (Ruff's model): per project, module summaries and check results keyed by content hash.

One cache folder per run (default `.xlalint_cache/` in the run's root, see `workspace.run_root`),
marked by a `CACHEDIR.TAG` (backup tools skip it) and a `.gitignore` of `*` (git ignores it), with
one JSON file per project root, holding only entries for files that still exist, so it stays the
size of the project. JSON,
never pickle: a cache folder can arrive with a cloned repository, and loading it must not run
code. Writes go to a temporary file renamed over the old one, so concurrent runs never see a torn
file (the last writer wins; a lost entry is only recomputed). Any unreadable cache is ignored.
A cloned repository may also commit the cache folder, its `.gitignore` or its file as symbolic
links (to make a run write anywhere, or read `/dev/zero`): then the cache is not used at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
from functools import lru_cache
from pathlib import Path

from . import __version__
from .source import read_bounded, write_atomic

CACHE_DIR_NAME = ".xlalint_cache"
FORMAT = 1
MAX_CACHE_BYTES = 512 << 20  # a project of 20,000 files stays far below
IGNORE_FILE = ".gitignore"
TAG_FILE = "CACHEDIR.TAG"  # https://bford.info/cachedir/
TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by xlalint.\n"
IGNORE = b"# Automatically created by xlalint.\n*\n"


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The version plus the content of every source and data file under the folders of the xlalint
    packages loaded (the rules included: they decide the findings): a cache written by other code
    (an edited checkout, another install) is never read. Folders of loaded packages, not a list of
    them: the same code in a wheel and in a source checkout, whatever its layout. Contents, not
    modification times: a CI job installs the same code afresh each run, and its restored cache
    must still be read (~1 MB hashed, a few ms)."""
    import xlalint.rules  # noqa: F401  (the rules decide the findings: make sure their packages count)

    folders = {
        Path(file).resolve().parent
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] == "xlalint"
        and hasattr(module, "__path__")
        and (file := getattr(module, "__file__", None))
    }
    roots = sorted(f for f in folders if not any(parent in folders for parent in f.parents))
    hashed = hashlib.blake2b(repr((__version__, FORMAT)).encode(), digest_size=16)
    for package in roots:
        for path in sorted(package.rglob("*.py")) + sorted(package.rglob("*.toml")):
            try:
                content = path.read_bytes()
            except OSError:
                continue
            hashed.update(f"{path.relative_to(package).as_posix()} {len(content)}\n".encode())
            hashed.update(content)
    return hashed.hexdigest()


class ProjectCache:
    """Entries of one project: `summaries[relpath] = [content digest, summary]`,
    `results[relpath] = [result key, payload]`."""

    def __init__(self, folder: Path | None, root: Path) -> None:
        self.file = folder / f"{digest(os.fsencode(root))}.json" if folder is not None else None
        self.folder = folder
        self._summaries: dict[str, list] | None = {}
        self.results: dict[str, list] = {}
        self.dirty = False  # the results changed
        self.summaries_dirty = False
        # the summaries as written (JSON text), parsed only when one is asked for: a warm run reads
        # the results and the project's facts alone, and the summaries are most of the file
        self._summaries_text: str | None = None
        self._present: set[str] | None = None  # `keep_only` of this run, applied to them when parsed
        self.warning: str | None = None  # why the cache is not used, in one line
        if folder is not None and self.file is not None:
            link = next((p for p in (folder, folder / IGNORE_FILE, folder / TAG_FILE, self.file) if _is_link(p)), None)
            if link is not None:
                self.warning = f"{link}: a symbolic link in the cache; running without a cache"
                self.file = None
            else:
                self._load()

    def _load(self) -> None:
        if self.file is None:
            return
        try:
            text = read_bounded(self.file, MAX_CACHE_BYTES, follow=False)[0].decode("utf-8")
            layout = _LAYOUT.match(text)
            if layout is not None and layout["code"] == code_fingerprint():
                # as `save` writes it: the code, the results, then the summaries (parsed when needed)
                results, end = _DECODER.raw_decode(text, layout.end())
                rest = _SUMMARIES.match(text, end)
                if isinstance(results, dict) and rest is not None and text.endswith("}"):
                    self.results, self._summaries, self._summaries_text = results, None, text[rest.end() : -1]
                return
            data = json.loads(text)
        except (OSError, ValueError, RecursionError):  # `[[[[...]]]]` nested past the parser's depth
            return
        if not isinstance(data, dict) or data.get("code") != code_fingerprint():
            return
        summaries, results = data.get("summaries"), data.get("results")
        if isinstance(summaries, dict) and isinstance(results, dict):
            self._summaries, self.results = summaries, results

    @property
    def summaries(self) -> dict[str, list]:
        if self._summaries is None:
            try:
                parsed = json.loads(self._summaries_text or "")
            except (ValueError, RecursionError):
                parsed = None
            self._summaries, self._summaries_text = parsed if isinstance(parsed, dict) else {}, None
            if self._present is not None:
                self._forget(self._summaries, self._present)
        return self._summaries

    def summary(self, relpath: str, content: str):
        entry = self.summaries.get(relpath)
        return entry[1] if isinstance(entry, list) and len(entry) == 2 and entry[0] == content else None

    def put_summary(self, relpath: str, content: str, summary) -> None:
        self.summaries[relpath] = [content, summary]
        self.summaries_dirty = True

    def result(self, relpath: str, key: str):
        entry = self.results.get(relpath)
        return entry[1] if isinstance(entry, list) and len(entry) == 2 and entry[0] == key else None

    def put_result(self, relpath: str, key: str, payload) -> None:
        self.results[relpath] = [key, payload]
        self.dirty = True

    def keep_only(self, present: set[str]) -> None:
        """Forget files that no longer exist (bounds the cache by the project's size). A key is a
        relative path, optionally followed by `#` and the name of a second slot; keys starting
        with `#` are the project's own slots. Summaries not parsed yet are pruned when they are."""
        self._forget(self.results, present)
        if self._summaries is None:
            self._present = present
        else:
            self._forget(self._summaries, present)

    def _forget(self, table: dict[str, list], present: set[str]) -> None:
        for stale in [k for k in table if k.partition("#")[0] not in present and not k.startswith("#")]:
            del table[stale]
            self.dirty = True
            if table is self._summaries:
                self.summaries_dirty = True

    def save(self) -> None:
        if self.file is None or self.folder is None or not (self.dirty or self.summaries_dirty):
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if _is_link(self.folder):
                return
            for name, content in ((IGNORE_FILE, IGNORE), (TAG_FILE, TAG)):
                if not os.path.lexists(self.folder / name):  # written to a new file, then renamed: no link followed
                    write_atomic(self.folder / name, content)
            # the layout `_load` reads lazily; summaries never parsed are written back as they were read
            summaries = self._summaries_text if self._summaries is None else None
            payload = "".join(
                (
                    f'{{"code":{json.dumps(code_fingerprint())},"results":',
                    json.dumps(self.results, separators=(",", ":")),
                    ',"summaries":',
                    summaries if summaries is not None else json.dumps(self._summaries, separators=(",", ":")),
                    "}",
                )
            )
            write_atomic(self.file, payload.encode("utf-8"))  # concurrent runs: the last complete write wins
        except (OSError, ValueError, RecursionError):
            pass  # a read-only tree (or entries too deep to write back): run without a cache


# the start of a cache file as `ProjectCache.save` writes it, and the key between its two tables
_LAYOUT = re.compile(r'\{"code":"(?P<code>[0-9a-f]*)","results":')
_SUMMARIES = re.compile(r',"summaries":')
_DECODER = json.JSONDecoder()


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


# what `ProjectCache` writes, and the temporary files `write_atomic` may leave if killed mid-write
_OURS = re.compile(r"[0-9a-f]{32}\.json|\.(?:[0-9a-f]{32}\.json|\.gitignore|CACHEDIR\.TAG)\..*\.xlalint-tmp")


def clean(folders: list[Path]) -> list[Path]:
    """Remove the caches in `folders` (cache folders): the files xlalint wrote there, then each
    folder if nothing else is left in it (a `--cache-dir` may be shared). A folder that is a
    symbolic link is unlinked, never followed. The folders removed, or emptied of the cache."""
    removed = []
    for folder in folders:
        if _is_link(folder):
            folder.unlink()
            removed.append(folder)
            continue
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        found = False
        for entry in entries:
            if entry.name in (IGNORE_FILE, TAG_FILE) or _OURS.fullmatch(entry.name):
                if entry.is_dir(follow_symlinks=False):
                    continue
                os.unlink(entry.path)
                found = True
        try:
            folder.rmdir()
            found = True
        except OSError:  # something else lives there: it stays
            pass
        if found:
            removed.append(folder)
    return removed
