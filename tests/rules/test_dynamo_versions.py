"""The DYN messages name the graph-break id the installed torch prints: the release is read from
package metadata (no torch import), and the untraceable table's per-release ids are checked at load.
These tests fake the installed release; they need no torch."""

import sys
import textwrap
from importlib import metadata

import pytest
from xlalint.rules import ALL_RULES
from xlalint.rules.dynamo import untraceable_call_in_compiled as dyn121

from xlalint import torch_version
from xlalint.testing import lint_code

DYN = [r for r in ALL_RULES if r.code.startswith("DYN")]
ROWS = """
[[untraceable]]
name = "copy.deepcopy"
gb = "GB4198"
what = "copies"
example = "z = copy.deepcopy(x)"
proven = ["2.11", "2.13"]
"""
# every differing row of the table, in one compiled function
CALLS = textwrap.dedent("""
    import copy
    import json

    import torch

    @torch.compile
    def step(x, packed):
        y = x * 2
        z = copy.deepcopy(y)
        s = json.dumps({"a": 1})
        same = y.data_ptr() == x.data_ptr()
        p = torch.nn.utils.rnn.pad_packed_sequence(packed)
        return z + 1
    """)


def _ids_only_on(release: str, rules=DYN) -> set[str]:
    """Ids some proven release prints for `rules`' hazards that `release` never does for them (an
    id is per hazard: torch 2.11 prints GB0156 for a comprehension (DYN123), 2.13 for `json.dumps`)."""
    by_torch: dict[str, set[str]] = {}
    for rule in rules:
        for v, ids in rule.gb_ids_by_torch().items():
            by_torch.setdefault(v, set()).update(ids)
    others = set().union(*(ids for v, ids in by_torch.items() if v != release))
    return others - by_torch.get(release, set())


def _found(monkeypatch, release):
    monkeypatch.setattr(torch_version, "installed_torch", lambda: release)
    found = lint_code(CALLS, DYN)
    for rule in DYN:
        for case in rule.INVALID:
            found += lint_code(case.code, [rule], modules=case.modules)
    return found


def _naming_another_release(found, release):
    """Messages naming an id their rule's hazards print only on another release than `release`."""
    by_code = {r.code: _ids_only_on(release, [r]) for r in DYN}
    return [d.message for d in found if any(gb in d.message for gb in by_code[d.code])]


def test_on_torch_2_11_no_message_names_an_id_2_13_alone_prints(monkeypatch):
    assert {"GB4198", "GB0156", "GB5976"} <= _ids_only_on("2.11", [dyn121.UntraceableCallInCompiled])
    found = _found(monkeypatch, "2.11")
    assert not _naming_another_release(found, "2.11")
    messages = [d.message for d in found]
    text = "\n".join(messages)
    assert "(GB0179)" in text and "(GB0023)" in text  # deepcopy and data_ptr, as 2.11 prints them
    assert "(no graph-break id on torch 2.11)" in text  # pad_packed_sequence fails to compile there
    if sys.version_info < (3, 12):  # DYN123's comprehension, as 2.11 prints it (its hazard ends with 3.12)
        assert "(GB0156)" in text and "(GB4347)" not in text


def test_on_torch_2_13_no_message_names_an_id_2_11_alone_prints(monkeypatch):
    assert {"GB0179", "GB0023"} <= _ids_only_on("2.13")
    found = _found(monkeypatch, "2.13")
    assert not _naming_another_release(found, "2.13")
    text = "\n".join(d.message for d in found)
    assert "(GB4198)" in text and "(GB0156)" in text and "(GB5976)" in text
    if sys.version_info < (3, 12):
        assert "(GB4347)" in text  # DYN123's comprehension on 2.13


@pytest.mark.parametrize("release", [None, "2.12", "2.15"])
def test_without_a_proven_torch_a_differing_id_is_qualified_by_its_release(monkeypatch, release):
    """No torch (or an unproven release): the newest proven id, with its release; an id every
    proven release prints stays plain."""
    monkeypatch.setattr(torch_version, "installed_torch", lambda: release)
    text = "\n".join(d.message for d in lint_code(CALLS, DYN))
    assert "(GB4198 on torch 2.13)" in text and "(GB0007 on torch 2.13)" in text  # deepcopy; pad_packed
    assert "(GB0179" not in text


def test_the_installed_release_is_read_from_metadata(monkeypatch):
    torch_version.installed_torch.cache_clear()
    monkeypatch.setattr(metadata, "version", lambda name: "2.11.0+cu130")
    assert torch_version.installed_torch() == "2.11"
    torch_version.installed_torch.cache_clear()

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    assert torch_version.installed_torch() is None
    torch_version.installed_torch.cache_clear()


@pytest.mark.parametrize(
    "extra, problem",
    [
        ('gb_by_torch = {"2.12" = "GB0179"}', "gb_by_torch"),  # a release it was not proven on
        ('gb_by_torch = {"2.11" = "179"}', "gb_by_torch"),  # not an id
        ('no_break_on = {"2.11" = ""}', "no_break_on"),  # no reason
        ('gb_by_torch = {"2.11" = "GB0179"}\nno_break_on = {"2.11" = "x"}', "both"),
    ],
)
def test_a_bad_per_release_entry_is_an_error_at_load(extra, problem):
    with pytest.raises(ValueError, match=problem):
        dyn121.load_table(ROWS + extra + "\n")


@pytest.mark.parametrize("proven", ['"2.13"', "[]", '["2.13.0"]', '["latest"]'])
def test_proven_is_a_list_of_releases(proven):
    with pytest.raises(ValueError, match="proven"):
        dyn121.load_table(ROWS.replace('["2.11", "2.13"]', proven))
    assert dyn121.load_table(ROWS)[0].ids_by_torch == {"2.11": "GB4198", "2.13": "GB4198"}
    assert dyn121.load_table(ROWS + 'gb_by_torch = {"2.11" = "GB0179"}\n')[0].ids_by_torch == {
        "2.11": "GB0179",
        "2.13": "GB4198",
    }


def test_explain_json_lists_each_rules_graph_break_ids_per_torch_release():
    import json

    from xlalint.explain import explain_text

    for rule in DYN:
        shown = json.loads(explain_text(rule, "json"))
        assert shown["torch_proven"] == list(rule.torch_proven)
        assert shown["gb_ids_by_torch"] == {v: list(ids) for v, ids in rule.gb_ids_by_torch().items()}
    shown = json.loads(explain_text(dyn121.UntraceableCallInCompiled, "json"))["gb_ids_by_torch"]
    # `copy.deepcopy` breaks with GB0179 on 2.11 and GB4198 on 2.13 (the table's per-release rows)
    assert "GB0179" in shown["2.11"] and "GB0179" not in shown["2.13"]
    assert "GB4198" in shown["2.13"] and "GB4198" not in shown["2.11"]
