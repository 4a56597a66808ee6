"""`xlalint fix --unsafe-fixes --write` over whole code bases, checked file by file. Prints a summary;
not a test (minutes per corpus).

Usage: python benchmarks/fix_corpus.py CORPUS [CORPUS ...]   (default: the dev corpus)

Each CORPUS folder is copied to a temporary folder and fixed there twice. Reported per corpus:
files, files changed, crashes (a traceback or an exit other than 0/1/2), files that no longer
compile although they did before, files the second run changed again, files that `check` reported no
fix for but that changed (they must stay byte-identical), and files whose mode changed. The summary is clean when every one of those is 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xlalint.config import Settings
from xlalint.discovery import discover

DEV_CORPUS = Path.home() / ".cache/xlalint-corpus/src"


def snapshot(files: list[Path]) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in files}


def compiles(data: bytes) -> bool:
    try:
        compile(data, "<fixed>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def fix(folder: Path) -> tuple[int, str, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "xlalint", "fix", "--write", "--unsafe-fixes", "--no-cache", "-q",
                           str(folder)], capture_output=True, text=True)
    return proc.returncode, proc.stderr, time.perf_counter() - start


def run(corpus: Path) -> bool:
    with tempfile.TemporaryDirectory(prefix="xlalint-fixrun-") as tmp:
        copy = Path(tmp) / corpus.name
        shutil.copytree(corpus, copy, symlinks=True, ignore=shutil.ignore_patterns(".git", ".xlalint_cache"))
        files = discover([copy], Settings(root=copy))
        before = snapshot(files)
        report = subprocess.run([sys.executable, "-m", "xlalint", "check", "--output-format", "json", "--no-cache",
                                 str(copy)], capture_output=True, text=True)
        fixable = {Path(d["filename"]).resolve() for d in json.loads(report.stdout or "[]") if d["fix"]}
        code, err, first_s = fix(copy)
        after = snapshot(files)
        code2, err2, second_s = fix(copy)
        again = snapshot(files)
        crashes = [line for line in (err + err2).splitlines() if "Traceback" in line or "internal error" in line]
        if code not in (0, 1, 2) or code2 not in (0, 1, 2):
            crashes.append(f"exit codes {code}, {code2}")
        changed = [p for p in files if after[p][0] != before[p][0]]
        broken = [p for p in changed if compiles(before[p][0]) and not compiles(after[p][0])]
        unstable = [p for p in files if again[p][0] != after[p][0]]
        modes = [p for p in files if after[p][1] != before[p][1]]
        unreadable = [line for line in err.splitlines() if ": error:" in line and "internal error" not in line]
        print(f"\n{corpus}: {len(files)} files; fixed in {first_s:.1f} s, second run {second_s:.1f} s")
        print(f"  files changed                      {len(changed):6d}")
        print(f"  files not checked (one-line error)  {len(unreadable):6d}")
        for label, found in (("crashes", crashes), ("fixed files that no longer compile", broken),
                             ("files the second run changed", unstable), ("files whose mode changed", modes)):
            print(f"  {label:<35}{len(found):6d}")
            for item in found[:5]:
                print(f"      {item}")
        stray = [p for p in changed if p.resolve() not in fixable]
        print(f"  files with no fix that changed     {len(stray):6d}  (of {len(files) - len(fixable)} without a fix)")
        for item in stray[:5]:
            print(f"      {item}")
        return not (crashes or broken or unstable or modes or stray)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="*", type=Path)
    corpora = parser.parse_args().corpora or [DEV_CORPUS]
    for corpus in corpora:
        if not corpus.is_dir():
            sys.exit(f"fix_corpus.py: error: {corpus} is not a folder (fetch it first)")
    clean = [run(corpus) for corpus in corpora]
    print("\nsummary:", "clean" if all(clean) else "NOT clean")
    sys.exit(0 if all(clean) else 1)


if __name__ == "__main__":
    main()
