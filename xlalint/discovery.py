"""Which files to lint: walk the given paths, skip excluded and .gitignored ones (pathspec)."""

from __future__ import annotations

import errno
import os
import re
import stat
from fnmatch import fnmatch, translate
from pathlib import Path

import pathspec

from .config import Settings
from .source import TEMPORARY_SUFFIX, is_dir, is_file, read_bounded, stale_temporary, stat_or_none

PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")
# a script's `#!` line naming a Python interpreter (`#!/usr/bin/env python3`), as pre-commit's
# `types: [python]` recognises one
_PYTHON_SHEBANG = re.compile(rb"#![^\n]*\b(?:python|pypy)[0-9.]*(?:\s|$)")


class MissingPath(Exception):
    def __init__(self, path: Path, why: str | None = None) -> None:
        super().__init__(f"{path}: error: {why}" if why else missing_message(path))


def missing_message(path: Path) -> str:
    """Why a named path cannot be checked, in one line."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:
            return f"{path}: error: symbolic link loop"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{path}: error: symbolic link loop"
        return f"{path}: error: broken symbolic link (to {os.readlink(path)})"
    return f"{path}: error: No such file or directory"


def glob_matches(pattern: str, path: Path, root: Path) -> bool:
    """Ruff-style: a pattern without a slash matches the basename, else the path from `root`."""
    if "/" not in pattern.rstrip("/"):
        return fnmatch(path.name, pattern.rstrip("/"))
    try:
        relative = path.resolve().relative_to(root).as_posix()
    except ValueError:
        relative = path.as_posix()
    return fnmatch(relative, pattern.strip("/")) or fnmatch(relative, pattern.strip("/") + "/*")


class _Excluder:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        patterns = [*settings.exclude, *settings.extend_exclude]
        # the patterns without a slash match a basename: one expression for them all (see `glob_matches`)
        names = [p.rstrip("/") for p in patterns if "/" not in p.rstrip("/")]
        self.names = re.compile("|".join(f"(?:{translate(p)})" for p in names)) if names else None
        self.patterns = [p for p in patterns if "/" in p.rstrip("/")]
        self.gitignores: dict[Path, pathspec.PathSpec | None] = {}
        self.repositories: dict[Path, bool] = {}
        self.folders: dict[Path, Path] = {}  # a folder walked -> the folder resolved

    def excluded(self, path: Path) -> bool:
        if self.names is not None and self.names.match(path.name):
            return True
        if any(glob_matches(p, path, self.settings.root) for p in self.patterns):
            return True
        return self.settings.respect_gitignore and self._gitignored(path)

    def _resolve(self, path: Path) -> Path:
        """`path.resolve()`, its folder resolved once for all its entries (a symbolic link, or a
        name such as `..`, is resolved on its own)."""
        if path.name in ("", ".", "..") or os.path.islink(path):
            return path.resolve()
        folder = self.folders.get(path.parent)
        if folder is None:
            folder = self.folders[path.parent] = path.parent.resolve()
        return folder / path.name

    def excluded_with_parents(self, path: Path) -> bool:
        """For files named explicitly (pre-commit): excluded if the file or a folder above it is."""
        resolved = path.resolve()
        root = self.settings.root
        candidates = [resolved, *(p for p in resolved.parents if p != root and root in p.parents)]
        return any(self.excluded(p) for p in candidates)

    def _gitignored(self, path: Path) -> bool:
        resolved = self._resolve(path)
        for folder in resolved.parents:
            spec = self._spec(folder)
            if spec is not None:
                relative = resolved.relative_to(folder).as_posix()
                if spec.match_file(relative + ("/" if is_dir(path) else "")):
                    return True
            if self._repository_root(folder):
                break  # .gitignore files above the repository root do not apply
        return False

    def _repository_root(self, folder: Path) -> bool:
        """`folder` holds a `.git` (looked up once per folder: asked for every file below it)."""
        found = self.repositories.get(folder)
        if found is None:
            found = self.repositories[folder] = stat_or_none(folder / ".git") is not None
        return found

    def _spec(self, folder: Path) -> pathspec.PathSpec | None:
        if folder not in self.gitignores:
            ignore = folder / ".gitignore"
            spec = None
            if is_file(ignore):
                try:
                    lines = read_bounded(ignore)[0].decode("utf-8", errors="replace").splitlines()
                    spec = pathspec.GitIgnoreSpec.from_lines(lines)
                except OSError:
                    spec = None
            self.gitignores[folder] = spec
        return self.gitignores[folder]


def is_python_file(path: Path) -> bool:
    """A file named on the command line is checked when it is Python: a `.py`, `.pyi` or `.ipynb`,
    or a script whose `#!` line names Python. Anything else (`README.md`) is not read as Python.
    A file that cannot be opened, or is no regular file, is let through: its check says why."""
    if path.name.endswith(PYTHON_SUFFIXES):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        first = os.read(fd, 256).partition(b"\n")[0]
    except OSError:
        return True
    finally:
        os.close(fd)
    return _PYTHON_SHEBANG.match(first) is not None


def is_excluded(path: Path, settings: Settings) -> bool:
    """`path` (which need not exist: a `--stdin-filename`) or a folder above it is excluded."""
    return _Excluder(settings).excluded_with_parents(path)


def discover(
    paths: list[Path],
    settings: Settings,
    *,
    force_exclude: bool = False,
    missing: list[str] | None = None,
    skipped: list[Path] | None = None,
    leftovers: list[Path] | None = None,
) -> list[Path]:
    """Python files and notebooks under `paths`, sorted. Files named explicitly are kept unless
    `force_exclude`, or unless they are no Python (see `is_python_file`; listed in `skipped`). A
    path that does not exist or cannot be read (a folder that may not be listed, a file under one
    that may not be searched) raises `MissingPath`, or with `missing` given, is described there and
    skipped (the other paths are still checked). `leftovers`: the temporary files of killed xlalint
    runs met on the way (see `source.stale_temporary`), never checked."""
    excluder = _Excluder(settings)
    found: set[Path] = set()
    problems: list[str] = []

    def unreadable(exc: OSError) -> None:  # a folder inside the tree that cannot be listed
        problems.append(f"{exc.filename}: error: cannot read folder: {exc.strerror or exc}")

    for path in paths:
        try:
            info = path.stat()
        except (OSError, ValueError) as exc:
            # PermissionError: a folder above it may not be searched
            problems.append(
                f"{path}: error: {exc.strerror}" if isinstance(exc, PermissionError) else missing_message(path)
            )
            continue
        if not stat.S_ISDIR(info.st_mode):
            if force_exclude and excluder.excluded_with_parents(path):
                continue
            if not is_python_file(path):
                if skipped is not None:
                    skipped.append(path)
                continue
            found.add(path)
            continue
        for folder, dirs, files in os.walk(path, onerror=unreadable):
            base = Path(folder)
            dirs[:] = sorted(d for d in dirs if not excluder.excluded(base / d))
            for name in files:
                if name.endswith(PYTHON_SUFFIXES) and not excluder.excluded(base / name):
                    found.add(base / name)
                elif leftovers is not None and name.endswith(TEMPORARY_SUFFIX) and stale_temporary(base / name):
                    leftovers.append(base / name)
    if problems:
        if missing is None:
            raise MissingPath(Path(problems[0].partition(": error: ")[0]), problems[0].partition(": error: ")[2])
        missing.extend(problems)
    return sorted(found)
