"""Fix a copy of a real code base and prove the result: it compiles, and a second run is a no-op.

Usage: python scripts/fix_roundtrip.py SOURCE_DIR [--unsafe-fixes] [--limit N]

Copies the Python files of SOURCE_DIR (e.g. the dev corpus, ~/.cache/xlalint-corpus/src) into a
temporary folder, runs `xlalint fix --write` there, compiles every file, runs it again, and prints
what changed; exits 1 if anything fails to compile or the second run changes a file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*.py"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--unsafe-fixes", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="copy at most N files (0: all)")
    args = parser.parse_args()
    fix = [sys.executable, "-m", "xlalint", "fix", "--write", *(["--unsafe-fixes"] if args.unsafe_fixes else [])]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "tree"
        files = sorted(args.source.rglob("*.py"))[: args.limit or None]
        for path in files:
            target = work / path.relative_to(args.source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        before = snapshot(work)
        start = time.perf_counter()
        first = subprocess.run([*fix, str(work)], capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        after = snapshot(work)
        changed = [p for p in after if after[p] != before[p]]
        broken = []
        for path in changed:
            try:
                compile(after[path], str(path), "exec", dont_inherit=True)
            except SyntaxError as exc:
                broken.append(f"{path.relative_to(work)}: {exc}")
        second = subprocess.run([*fix, str(work)], capture_output=True, text=True)
        unstable = [p.relative_to(work) for p, data in snapshot(work).items() if data != after[p]]
        print(f"{len(files)} files, first run {elapsed:.1f} s: {first.stderr.strip().splitlines()[-1:]}")
        print(f"changed files: {len(changed)}; not compiling: {len(broken)}; changed again by a second run: "
              f"{len(unstable)}")
        for line in broken + [str(p) for p in unstable]:
            print("  " + line)
        return 1 if broken or unstable or first.returncode not in (0, 1) else 0


if __name__ == "__main__":
    sys.exit(main())
