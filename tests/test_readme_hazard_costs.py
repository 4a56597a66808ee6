"""The README's "What each hazard costs on a GPU" table carries the measured figures over exactly, with
the machine and versions they were measured on (from the shared facts file, where it is present)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### What each hazard costs on a GPU"


def _facts() -> Path | None:
    """`shared/gpu/HAZARD_COSTS.md` in the nearest folder above the project that has one."""
    for folder in ROOT.parents:
        candidate = folder / "shared" / "gpu" / "HAZARD_COSTS.md"
        if candidate.is_file():
            return candidate
    return None


def _rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `text`, as cells."""
    lines = text[text.index("\n|") + 1 :].splitlines()
    table = [line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table[2:]]


def _readme_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index(SECTION)
    return readme[start : readme.index("\n### ", start + len(SECTION))]


def test_the_readme_section_sits_beside_the_fix_effect_tables():
    readme = (ROOT / "README.md").read_text()
    assert readme.index("### What the fixes do on a real XLA device") < readme.index(SECTION)
    assert readme.index(SECTION) < readme.index("### Run-time audit")
    rows = _rows(_readme_section())
    assert len(rows) >= 5 and all(len(row) == 4 and row[3].endswith("x") for row in rows)


@pytest.mark.skipif(_facts() is None, reason="the shared facts (shared/gpu/HAZARD_COSTS.md) are not here")
def test_the_figures_machine_and_versions_are_those_measured():
    facts_text = _facts().read_text()  # type: ignore[union-attr]
    facts, section = _rows(facts_text), _readme_section()
    shown = _rows(section)
    assert len(shown) == len(facts)
    for ours, theirs in zip(shown, facts):
        assert ours[1:] == theirs[1:], (ours, theirs)  # the figures, exactly
        assert ours[0] == theirs[0] or ours[0].startswith(theirs[0] + " ("), (ours[0], theirs[0])  # + the rule
    for fact in ("2026-11-28", "NVIDIA H200", "Python 3.12.3", "torch 2.11.0+cu130", "jax 0.11.2"):
        assert fact in facts_text and fact in " ".join(section.split()), fact
