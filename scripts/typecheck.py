"""mypy on xlalint/, rules/ and runtime/ as the one package they install as (`xlalint`, `xlalint.rules`,
`xlalint.runtime`). Run by .ci/run and .pre-commit-config.yaml; settings in pyproject.toml [tool.mypy].

mypy cannot follow the editable install's import hook that maps rules/ to `xlalint.rules`, and given
`rules/` it would name the modules `rules.*`, a second copy of what `xlalint.*` imports. So this builds the
installed layout from symbolic links under build/typecheck/ (source edits are seen at once), runs mypy there
and reports the source paths (`rules/x.py`, not `xlalint/rules/x.py`).

    python scripts/typecheck.py [extra mypy arguments]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"rules": "rules", "runtime": "runtime"}  # installed as xlalint/<name>: the source folder
LAYOUT = ROOT / "build" / "typecheck"
REPORTED = re.compile(r"^xlalint/(rules|runtime)/", re.M)


def build_layout() -> Path:
    """build/typecheck/xlalint: a link to each entry of xlalint/, and xlalint/rules, xlalint/runtime
    linked to the source folders. Built anew each run, so a new or removed module is seen."""
    package = LAYOUT / "xlalint"
    shutil.rmtree(LAYOUT, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (ROOT / "xlalint").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in FOLDERS.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    return LAYOUT


def main(argv: list[str]) -> int:
    try:
        import mypy  # noqa: F401
    except ImportError:
        print("typecheck: mypy is not installed in this Python: pip install -c constraints.txt -e '.[test]'",
              file=sys.stderr)
        return 2
    layout = build_layout()
    argv = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"),
            *argv, "-p", "xlalint"]
    proc = subprocess.run([sys.executable, "-m", "mypy", *argv], cwd=layout, capture_output=True, text=True,
                          env={**os.environ, "MYPY_FORCE_COLOR": "0"})
    sys.stdout.write(REPORTED.sub(r"\1/", proc.stdout))
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
