"""How fast is `xlalint check`, next to the floor of parsing every file with libcst once? Prints
figures side by side; not a test.

Usage:
    python benchmarks/lint_speed.py [--others BIN] [--largest N] CORPUS [CORPUS ...]

CORPUS: any folders of Python code, e.g. a checkout of pytorch/xla or diffusers, or the dev corpus
that ../shared/eval/fetch_corpus.sh extracts into ~/.cache/xlalint-corpus/src (the default). Each is
copied to a temporary folder first (a file is edited there for the "one file changed" run).
--others BIN: a bin/ folder holding `torchfix` and `fixit` (say, a venv with `pip install torchfix
fixit`), timed on the same files; looked up on PATH when not given, skipped when absent.

Per corpus it prints, for each run: wall and CPU seconds (the process and its workers), lines/s of
wall time, the peak RSS of the largest process, and CPU / floor, where the floor is the CPU time of
`libcst.parse_module` over every file once (and Python's own `ast.parse`, for scale). Runs:
cold (`--no-cache`, default jobs = every core, then `--jobs 1`), warm (the cache filled, nothing
changed), warm after one file changed; TorchFix and Fixit. Then the N largest files, each linted
alone in-process, to show the cost stays linear in lines.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import libcst as cst

from xlalint.config import Settings
from xlalint.discovery import discover
from xlalint.engine import lint_source
from xlalint.rules import ALL_RULES
from xlalint.source import SourceError, read_source

DEV_CORPUS = Path.home() / ".cache/xlalint-corpus/src"


def timed(command: list[str], cwd: Path) -> tuple[float, float, float, int]:
    """(wall s, CPU s of the process and the workers it waited for, peak RSS MiB, exit code)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def floor(files: list[Path]) -> tuple[float, float, int, int]:
    """CPU seconds of libcst and of ast parsing every file once; lines; files parsed."""
    texts = []
    for path in files:
        try:
            texts.append(read_source(path).raw)
        except SourceError:
            pass
    start = time.process_time()
    for raw in texts:
        try:
            cst.parse_module(raw)
        except Exception:  # noqa: BLE001 - what libcst cannot parse costs what it cost
            pass
    libcst_s = time.process_time() - start
    start = time.process_time()
    for raw in texts:
        try:
            ast.parse(raw)
        except (SyntaxError, ValueError, RecursionError):
            pass
    ast_s = time.process_time() - start
    return libcst_s, ast_s, sum(raw.count(b"\n") for raw in texts), len(texts)


def row(label: str, wall: float, cpu: float, rss: float, lines: int, base: float, note: str = "") -> None:
    print(f"  {label:<34} {wall:8.2f} {cpu:8.2f} {lines / wall if wall else 0:10.0f} {rss:8.0f} "
          f"{cpu / base if base else 0:8.2f}  {note}")


def find_tool(name: str, others: Path | None) -> str | None:
    if others is not None and (others / name).exists():
        return str(others / name)
    return shutil.which(name)


def bench(corpus: Path, others: Path | None, largest: int) -> None:
    with tempfile.TemporaryDirectory(prefix="xlalint-bench-") as tmp:
        copy = Path(tmp) / corpus.name
        shutil.copytree(corpus, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", ".xlalint_cache"))
        files = discover([copy], Settings(root=copy))
        libcst_s, ast_s, lines, parsed = floor(files)
        print(f"\n{corpus}: {parsed} files, {lines} lines, {os.cpu_count()} cores")
        print(f"  {'run':<34} {'wall s':>8} {'CPU s':>8} {'lines/s':>10} {'RSS MiB':>8} {'CPU/floor':>8}")
        print(f"  {'floor: libcst parse, every file':<34} {libcst_s:8.2f} {libcst_s:8.2f} {lines / libcst_s:10.0f} "
              f"{'':>8} {1:8.2f}")
        print(f"  {'ast.parse, every file (for scale)':<34} {ast_s:8.2f} {ast_s:8.2f} {lines / ast_s:10.0f} "
              f"{'':>8} {ast_s / libcst_s:8.2f}")
        xlalint = [sys.executable, "-m", "xlalint", "check", "--exit-zero", "--quiet"]
        cache = Path(tmp) / "cache"
        for label, extra in (("xlalint cold (--no-cache)", ["--no-cache"]),
                             ("xlalint cold, --jobs 1", ["--no-cache", "--jobs", "1"])):
            wall, cpu, rss, code = timed(xlalint + extra + [str(copy)], copy)
            row(label, wall, cpu, rss, lines, libcst_s, "" if code in (0, 2) else f"exit {code}")
        timed(xlalint + ["--cache-dir", str(cache), str(copy)], copy)  # fill the cache
        wall, cpu, rss, _ = timed(xlalint + ["--cache-dir", str(cache), str(copy)], copy)
        row("xlalint warm (nothing changed)", wall, cpu, rss, lines, libcst_s)
        touched = max(files, key=lambda p: p.stat().st_size)
        with open(touched, "a", encoding="utf-8") as handle:
            handle.write("\n# changed\n")
        wall, cpu, rss, _ = timed(xlalint + ["--cache-dir", str(cache), str(copy)], copy)
        row("xlalint warm, one file changed", wall, cpu, rss, lines, libcst_s, f"({touched.name})")
        for name, command in (("torchfix", ["{}", "--select", "ALL", "."]), ("fixit", ["{}", "lint", "."])):
            tool = find_tool(name, others)
            if tool is None:
                print(f"  {name:<34} not installed (pass --others BIN)")
                continue
            wall, cpu, rss, _ = timed([tool if part == "{}" else part for part in command], copy)
            row(name, wall, cpu, rss, lines, libcst_s)
        print(f"  the {largest} largest files, each linted alone in-process (every rule, no project index):")
        for path in sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:largest]:
            try:
                source = read_source(path)
            except SourceError:
                continue
            start = time.process_time()
            try:
                lint_source(source, ALL_RULES, assume_xla=True)
            except SourceError:
                pass
            spent = time.process_time() - start
            count = source.raw.count(b"\n")
            print(f"    {str(path.relative_to(copy)):<60} {count:7d} lines {spent:6.2f} s "
                  f"{count / spent if spent else 0:8.0f} lines/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="*", type=Path)
    parser.add_argument("--others", type=Path, help="bin/ folder with torchfix and fixit")
    parser.add_argument("--largest", type=int, default=5)
    args = parser.parse_args()
    corpora = args.corpora or [DEV_CORPUS]
    for corpus in corpora:
        if not corpus.is_dir():
            sys.exit(f"lint_speed.py: error: {corpus} is not a folder (fetch it first)")
    for corpus in corpora:
        bench(corpus, args.others, args.largest)


if __name__ == "__main__":
    main()
