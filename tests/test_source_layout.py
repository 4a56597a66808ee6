"""The checkout's layout (xlalint/, rules/, runtime/, tests/ at the top, rules/ and runtime/ installed as
xlalint.rules and xlalint.runtime) has no symptoms: the tool runs from the checkout root, each rule
class loads once, and plain `pytest` collects every test."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def test_python_m_xlalint_runs_from_the_checkout_root():
    # The root is sys.path[0] here: `xlalint` comes from ./xlalint, its rules through the install's mapping.
    proc = subprocess.run([sys.executable, "-m", "xlalint", "check", "--no-cache", "--select", "XLA101",
                           "examples/xla_project/train_classifier.py"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "XLA101" in proc.stdout, proc.stdout + proc.stderr


def test_the_rules_folder_does_not_load_as_a_second_top_level_package():
    # From the root, `import rules` would find the source folder and load every rule class again.
    proc = subprocess.run([sys.executable, "-c", "import rules"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "import the rules as xlalint.rules" in proc.stderr, proc.stderr


def _imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or ""


def test_tests_import_rules_and_the_runtime_by_their_one_name():
    # `from rules.x import Rule` works only with the root on sys.path (`python -m pytest`), not under
    # plain `pytest`, and loads a second copy of the rule, a different class from the one the engine runs.
    wrong = [(path.relative_to(ROOT).as_posix(), module) for path in sorted(TESTS.rglob("*.py"))
             for module in _imported_modules(path) if module.partition(".")[0] in ("rules", "runtime")]
    assert not wrong


def test_test_modules_have_distinct_names():
    # Test folders are not packages (pytest's default import mode): two test modules with one name
    # in two folders stop the collection.
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
