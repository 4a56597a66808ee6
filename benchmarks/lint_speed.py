"""How fast is `xlalint check`, against the floor of parsing alone? Prints figures; not a test.

Usage: python benchmarks/lint_speed.py [PATH ...]   (default: the dev corpus, if fetched, else examples/)

For each run: files, lines, seconds and lines/s for (a) libcst parse only, (b) the full lint with
every rule, and the peak resident memory of the process. The corpus is fetched by
../shared/eval/fetch_corpus.sh into ~/.cache/xlalint-corpus/src.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import libcst as cst

from xlalint.config import Settings
from xlalint.discovery import discover
from xlalint.engine import MARKERS, lint_source
from xlalint.rules import ALL_RULES
from xlalint.source import SourceError, read_source


def main(argv: list[str]) -> None:
    corpus = Path.home() / ".cache/xlalint-corpus/src"
    targets = [Path(a) for a in argv] or [corpus if corpus.is_dir() else Path(__file__).parent.parent / "examples"]
    files = discover(targets, Settings(root=Path.cwd()))
    sources = []
    for path in files:
        try:
            sources.append(read_source(path))
        except SourceError:
            pass
    lines = sum(s.text.count("\n") for s in sources)
    where = ", ".join(map(str, targets)) if len(targets) <= 3 else f"{len(targets)} paths"
    print(f"{len(sources)} files, {lines} lines under {where}")

    start = time.perf_counter()
    parsed = 0
    for source in sources:
        try:
            cst.parse_module(source.raw)
            parsed += 1
        except Exception:
            pass
    parse_s = time.perf_counter() - start
    print(f"parse only (every file)    : {parse_s:7.2f} s  {lines / parse_s:9.0f} lines/s")

    marked = sum(1 for s in sources if MARKERS.search(s.raw))
    start = time.perf_counter()
    findings = errors = 0
    for source in sources:
        try:
            findings += len(lint_source(source, ALL_RULES))
        except SourceError:
            errors += 1
    lint_s = time.perf_counter() - start
    print(f"xlalint check (all rules)  : {lint_s:7.2f} s  {lines / lint_s:9.0f} lines/s  "
          f"({marked} files past the prefilter, {findings} findings, {errors} errors)")
    print(f"lint / parse-only ratio    : {lint_s / parse_s:7.2f}")
    print(f"peak RSS                   : {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:7.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
