"""The run-time audit's parsing, attribution and cross-reference, on torch_xla's analysis log of a
real run: the bundled classifier example, 4 steps on torch_xla 2.9 (PJRT CPU), before and after
`xlalint fix --unsafe-fixes` (data/audit/README.md says how it was recorded)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xlalint.runtime.audit import Event, Frame, audit, by_line, parse_debug_output

DATA = Path(__file__).parent / "data" / "audit"
RECORDED = "/RECORDED/xla_project"  # the example's folder in the recorded files
STEPS = 4
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "xla_project" / "train_classifier.py"


def recorded(name: str, tmp_path: Path) -> tuple[Path, list[dict], Path]:
    """The log and findings of run `name`, with the example's folder moved under `tmp_path`."""
    root = tmp_path / "xla_project"
    log = tmp_path / f"{name}.log"
    log.write_text((DATA / f"{name}.log").read_text().replace(RECORDED, str(root)))
    (tmp_path / f"{name}.log.metrics.json").write_text((DATA / f"{name}.log.metrics.json").read_text())
    findings = json.loads((DATA / f"{name}.findings.json").read_text().replace(RECORDED, str(root)))
    # the script itself, for the loops structural findings sit in (the recording's lines are today's)
    root.mkdir(exist_ok=True)
    shutil.copy(EXAMPLE, root / EXAMPLE.name)
    return log, findings, root


@pytest.mark.parametrize("name", ["classifier_before", "classifier_after"])
def test_every_analysis_block_is_parsed_with_its_frames(name, tmp_path):
    log, _, root = recorded(name, tmp_path)
    text = log.read_text()
    events = parse_debug_output(text)
    assert sum(e.kind == "compile" for e in events) == text.count("Compilation Analysis: Compilation Cause")
    assert sum(e.kind == "execute" for e in events) == text.count("Execution Analysis: Execution Cause")
    assert all(re.fullmatch(r"[0-9a-f]{16,32}", e.graph_hash) and e.frames for e in events)
    lines, unattributed = by_line(events, [root])
    assert unattributed == 0  # every graph the example ran comes from one of its lines
    assert {Path(file).name for file, _ in lines} == {"train_classifier.py"}


def test_before_the_fix_each_host_sync_rule_is_confirmed_at_every_step(tmp_path):
    log, findings, root = recorded("classifier_before", tmp_path)
    report = audit(parse_debug_output(log.read_text()), [root], findings, STEPS)
    confirmed = {code.split()[0]: row for row in report["confirmed"] for code in row["findings"]}
    per_step_rules = {f["code"] for f in findings if f["category"] in ("item_sync", "control_flow_on_tensor", "clip_grad_norm")}
    assert per_step_rules <= set(confirmed), per_step_rules - set(confirmed)
    for code in per_step_rules:
        assert confirmed[code]["host_reads"] >= STEPS and confirmed[code]["per_step"] >= 1, code
    # what no rule predicts is occasional: a read at step 0 of a log-every-N block, one after training
    assert all(row["per_step"] < 1 for row in report["unpredicted"])
    # the unsynced loop (XLA401) has no line of its own: its cost is the graph every read of its loop
    # recompiles, so it is seen there, as a structural finding
    assert "XLA401" in {f["code"] for f in report["structural"]}
    assert "XLA401" not in {f["code"] for f in report["not_seen"]}
    assert report["totals"]["compiles"] > 4 * STEPS


def test_after_the_fix_a_barrier_per_step_and_far_fewer_compiles_and_reads(tmp_path):
    before_log, before_findings, root = recorded("classifier_before", tmp_path)
    before = audit(parse_debug_output(before_log.read_text()), [root], before_findings, STEPS)["totals"]
    log, findings, root = recorded("classifier_after", tmp_path)
    report = audit(parse_debug_output(log.read_text()), [root], findings, STEPS)
    after = report["totals"]
    assert after["barriers"] == STEPS  # optimizer_step(barrier=True) ends every step
    assert after["compiles"] * 4 <= before["compiles"] and after["host_reads"] * 2 < before["host_reads"]
    # `.item()` of a loss the barrier already computed needs no execution: not seen by the analysis
    assert "XLA101" in {f["code"] for f in report["not_seen"]}
    # the reads left are the ones without an automatic fix (a branch on the loss, a `.cpu()`)
    assert {code.split()[0] for row in report["confirmed"] for code in row["findings"]} <= {"XLA201", "XLA102"}


def run_audit(*args):
    return subprocess.run([sys.executable, "-m", "xlalint.runtime.audit", *map(str, args)], capture_output=True, text=True)


def test_the_command_reports_a_kept_log_with_the_run_metrics(tmp_path):
    log, findings, root = recorded("classifier_before", tmp_path)
    (tmp_path / "findings.json").write_text(json.dumps(findings))
    out = tmp_path / "report.json"
    proc = run_audit("--from-log", log, "--root", root, "--findings", tmp_path / "findings.json",
                     "--steps", STEPS, "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"xlalint audit: {STEPS} steps")
    assert "Confirmed by the run" in proc.stderr and "train_classifier.py:" in proc.stderr
    totals = json.loads(out.read_text())["totals"]
    metrics = json.loads((DATA / "classifier_before.log.metrics.json").read_text())
    assert totals["transfers"] == metrics["transfers"] and totals["transfers_per_step"] == metrics["transfers"] / STEPS


@pytest.mark.parametrize("args, message", [
    (["--from-log", "missing.log", "--root", "."], "missing.log: no such file"),
    (["--from-log", __file__], "--from-log needs --root"),
    (["missing_script.py"], "missing_script.py: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_audit(*args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"xlalint audit: error: {message}")


def test_a_script_that_never_uses_torch_xla_is_an_error(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('no xla here')\n")
    proc = run_audit(script)
    assert proc.returncode == 2 and proc.stdout == "no xla here\n"
    assert proc.stderr.strip().splitlines() == [
        "xlalint audit: error: the script never imported torch_xla: nothing ran on an XLA device"]


def test_without_steps_a_run_whose_only_barrier_ends_the_epoch_has_no_per_step_rates(tmp_path):
    log, findings, root = recorded("classifier_before", tmp_path)
    report = audit(parse_debug_output(log.read_text()), [root], findings)
    assert report["totals"]["barriers"] == 1 and report["totals"]["steps"] is None
    assert "host_reads_per_step" not in report["totals"]
    assert all(row["per_step"] is None for row in report["lines"])
    proc = run_audit("--from-log", log, "--root", root, "--findings", _dump(findings, tmp_path))
    assert "no per-step rates" in proc.stderr and "pass --steps N" in proc.stderr


def test_a_barrier_every_step_counts_the_steps(tmp_path):
    log, findings, root = recorded("classifier_after", tmp_path)
    report = audit(parse_debug_output(log.read_text()), [root], findings)
    assert report["totals"]["steps"] == STEPS and report["totals"]["steps_from"] == "barriers"


LOOP = """\
import torch
def train(loader, model, xm):
    for x, m in loader:
        y = model(x)[m]
        loss = y.sum()
        xm.mark_step()
def evaluate(x, xm):
    xm.mark_step()
"""


def _event(path, line, function, graph, kind="compile", cause="barrier"):
    return Event(kind, cause, graph, (Frame(function, str(path), line),))


def _finding(path, line, code, category):
    return {"filename": str(path), "location": {"row": line, "column": 1}, "end_location": {"row": line, "column": 9},
            "code": code, "name": code.lower(), "message": code, "category": category}


def _dump(findings, tmp_path):
    out = tmp_path / "findings.json"
    out.write_text(json.dumps(findings))
    return out


def test_recompiles_at_the_barrier_are_attributed_to_the_mask_in_its_loop(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    events = [_event(script, 6, "train", f"g{i}") for i in range(5)]  # 5 masks, 5 shapes, 5 graphs
    events += [_event(script, 8, "evaluate", f"e{i}") for i in range(3)]  # another function's recompiles
    findings = [_finding(script, 4, "XLA301", "dynamic_shape")]
    report = audit(events, [tmp_path], findings, steps_hint=5)
    assert [f["code"] for f in report["structural"]] == ["XLA301"] and report["not_seen"] == []
    assert [(r["line"], r["explained_by"]) for r in report["explained"]] == [(6, ["XLA301 xla301 (line 4)"])]
    # the other function's recompiles stay unpredicted: no structural finding in their scope
    assert [r["line"] for r in report["unpredicted"]] == [8]


def test_a_mask_whose_loop_compiled_once_is_not_seen(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    events = [_event(script, 6, "train", "g0")] + [_event(script, 6, "train", "g0", kind="execute")] * 4
    report = audit(events, [tmp_path], [_finding(script, 4, "XLA301", "dynamic_shape")], steps_hint=5)
    assert [f["code"] for f in report["not_seen"]] == ["XLA301"] and report["structural"] == []


def test_reads_without_an_execution_are_counted_at_their_line(tmp_path):
    log, findings, root = recorded("classifier_after", tmp_path)
    script = root / "train_classifier.py"
    item = next(f for f in findings if f["code"] == "XLA101")
    row = item["location"]["row"]
    reads = [{"file": str(script), "line": row, "function": "train", "kind": "item", "count": STEPS}]
    report = audit(parse_debug_output(log.read_text()), [root], findings, STEPS, reads)
    confirmed = {code.split()[0]: r for r in report["confirmed"] for code in r["findings"]}
    assert confirmed["XLA101"]["reads"] == STEPS and confirmed["XLA101"]["per_step"] == 1
    assert "XLA101" not in {f["code"] for f in report["not_seen"]}
    assert report["totals"]["python_reads"] == STEPS
