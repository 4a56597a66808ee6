"""Every rule documents itself in Ruff's shape, and the generated docs are current."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from xlalint.diagnostics import CATEGORIES
from xlalint.rule import DOC_SECTIONS as REQUIRED
from xlalint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_documentation_shape(rule):
    doc = rule.documentation()
    positions = [doc.find(section) for section in REQUIRED]
    assert all(p >= 0 for p in positions), f"{rule.code} misses one of {REQUIRED}"
    assert positions == sorted(positions), f"{rule.code}: sections out of order"
    assert doc.count("```python") >= 2, f"{rule.code}: needs a bad and a good example"
    assert "## Fix Safety" not in doc  # one spelling
    if rule.fix_availability != "none":
        assert "## Fix safety" in doc, f"{rule.code} has a fix but no '## Fix safety' section"
    assert rule.category in CATEGORIES
    assert rule.summary and "\n" not in rule.summary
    assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"


def test_fix_availability_matches_examples():
    for rule in ALL_RULES:
        has_fix_example = any(case.expected_replacement is not None for case in rule.INVALID)
        assert (rule.fix_availability != "none") == has_fix_example, rule.code


def test_codes_and_names_are_unique():
    assert len({r.code for r in ALL_RULES}) == len(ALL_RULES)
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)
    assert all(re.fullmatch(r"(XLA|JAX|DYN|TPU)[1-9]\d\d", r.code) for r in ALL_RULES)


def test_generated_docs_are_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rule_authoring_guide_names_what_exists():
    """docs/rule-authoring.md stays true: its paths exist, its `xlalint.` names resolve, and its
    family table is the registry's."""
    import importlib
    import pkgutil

    import xlalint.rules

    guide = (ROOT / "docs" / "rule-authoring.md").read_text(encoding="utf-8")
    quoted = re.findall(r"`([^`\n]+)`", guide)
    paths = [q for q in quoted if "/" in q and " " not in q and "<" not in q and not q.startswith("from ")]
    assert "rules/host_sync/item_in_step.py" in paths
    assert [p for p in paths if not (ROOT / p).exists()] == []
    for dotted in {re.match(r"[\w.]+", q).group() for q in quoted if q.startswith("xlalint.")}:
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)  # AttributeError: the guide names something gone
            break
        else:
            raise AssertionError(dotted)
    table = dict((family, codes) for codes, family in re.findall(r"`((?:XLA|JAX|TPU)\d*|DYN)`\s[^`]*`rules/(\w+)/`", guide))
    families = [m.name for m in pkgutil.iter_modules(xlalint.rules.__path__) if m.ispkg and not m.name.startswith("_")]
    assert table == {f: importlib.import_module(f"xlalint.rules.{f}").CODES for f in families}
