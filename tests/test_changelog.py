"""CHANGELOG.md keeps a section for every release (Keep a Changelog), newest first."""

from __future__ import annotations

import re
from pathlib import Path

from xlalint import __version__

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$", re.M)


def _sections() -> list[re.Match[str]]:
    return list(HEADING.finditer(CHANGELOG.read_text(encoding="utf-8")))


def test_the_current_version_and_unreleased_have_sections():
    versions = [m["version"] for m in _sections()]
    assert versions[0] == "Unreleased"
    assert __version__ in versions, f"CHANGELOG.md has no section for {__version__}"


def test_releases_are_dated_and_newest_first():
    released = [m for m in _sections() if m["version"] != "Unreleased"]
    assert released and all(m["date"] for m in released), "every release heading needs its date"
    keys = [tuple(int(p) for p in m["version"].split(".")) for m in released]
    assert keys == sorted(keys, reverse=True)
    dates = [m["date"] for m in released]
    assert dates == sorted(dates, reverse=True)
