"""Run-time audit: what a training script really compiles and reads on the host, by source line.

    python -m xlalint.runtime.audit [--json FILE] [--root DIR] [--steps N] script.py [script args...]
    python -m xlalint.runtime.audit --from-log LOG --root DIR [--findings JSON] [--steps N]

runs `script.py` in this process on an XLA device with torch_xla's own graph analysis turned on
(`PT_XLA_DEBUG_LEVEL=2`, written to a file), then reports each compilation and each graph
execution, attributed to the innermost frame of the user's code (files under `--root`, default the
script's folder). Executions are of two kinds: step barriers (`torch_xla.sync`, `MpDeviceLoader`,
`torch_xla.compile`), which are expected once per step, and executions forced by code reading a
tensor's value (`.item()`, `print(t)`, `if t:`), which are host syncs. The report then
cross-references `xlalint check` on the same files:

- confirmed: a finding on a line where the run compiled or synced;
- not seen at run time: a finding with no event (the code did not run, or did not hurt here);
- unpredicted: lines where the run compiled or synced and no rule reported anything (a to-do
  list for rules, or a hazard written in a form the rules do not know).

Reads of a value the last barrier already computed need a device-to-host transfer but no
execution, so torch_xla's analysis has no block for them: the audit also counts every read of an
XLA tensor's value through Python (`.item()`, `.tolist()`, `.cpu()`, `float(t)`, `if t:`, `print(t)`)
at its line, and gives the run's transfer count (torch_xla's metrics) beside the lines.

Structural hazards (a missing barrier, a boolean mask, a ragged last batch) cost compilations at
other lines: the barrier or the read that cuts the graph. A line that compiled more than one graph
with no finding of its own is attributed to the structural findings of the loop (else the
function) that holds it, and such a finding counts as seen when its loop recompiled.

Per-step rates need the number of steps: `--steps`, else the barriers of one line that ran at
least twice (a barrier per step). A run without such a barrier has no per-step rates, and says so.

It needs torch_xla (any PJRT device: `PJRT_DEVICE=CPU` works) and lets the script import it, after
setting the debug environment. The linter runs as a subprocess (`--xlalint`, default this
interpreter's `-m xlalint`, else `xlalint` on PATH): the runtime never imports libcst or click.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._hostreads import HostReadRecorder

# the prefixes torch_xla/csrc/debug_util.cpp writes before every line of an analysis block
PREFIXES = {
    "Compilation Analysis: ": "compile",
    "Execution Analysis: ": "execute",
    "Unexpected Execution Analysis: ": "execute",
}
# how debug_util.cpp words the cause of a graph run at a step boundary (anything else that names
# no barrier is user code accessing a value: "most likely user code trying to access tensor value")
BARRIER_CAUSES = ("torch_xla.sync", "mark_step", "parallel loader", "StepTrace", "torch_xla.compile", "dynamo")
HOST_READ_CAUSE = "access tensor value"
OWN_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int


@dataclass(frozen=True)
class Event:
    """One analysis block: a compilation or an execution of a graph, and why."""

    kind: str  # "compile" | "execute"
    cause: str  # "barrier" | "host_read"
    graph_hash: str
    frames: tuple[Frame, ...]  # innermost first, as torch_xla prints them


@dataclass
class LineReport:
    file: str
    line: int
    function: str
    compiles: int = 0
    host_reads: int = 0
    barriers: int = 0
    graphs: set[str] = field(default_factory=set)
    findings: list[dict] = field(default_factory=list)
    reads: int = 0  # reads of a tensor's value through Python, whether or not they ran a graph
    explained_by: list[dict] = field(default_factory=list)  # structural findings its recompiles come from


def parse_debug_output(text: str) -> list[Event]:
    """The compilation and execution analysis blocks of a `PT_XLA_DEBUG_LEVEL=2` log."""
    events: list[Event] = []
    kind = cause = graph = None
    frames: list[Frame] = []
    in_frames = False
    for raw in text.splitlines():
        prefix = next((p for p in PREFIXES if raw.startswith(p)), None)
        if prefix is None:
            continue
        body = raw[len(prefix) :]
        if body.startswith("=" * 10):
            if kind is not None and frames:  # the closing rule of a block
                events.append(Event(kind, cause or "host_read", graph or "", tuple(frames)))
                kind = None
            else:  # an opening one
                kind, cause, graph, frames, in_frames = PREFIXES[prefix], None, None, [], False
        elif kind is None or body.startswith("-" * 10):
            continue
        elif body in ("Compilation Cause", "Execution Cause"):
            continue
        elif cause is None and body.startswith("  "):
            text_ = body.strip()
            cause = (
                "host_read" if HOST_READ_CAUSE in text_ or not any(c in text_ for c in BARRIER_CAUSES) else "barrier"
            )
        elif body.startswith("  Graph Hash: "):
            graph = body.split(":", 1)[1].strip()
        elif body.startswith("Python Frame Triggered Execution"):
            in_frames = True
        elif in_frames and body.startswith("  ") and body.rstrip().endswith(")") and " (" in body:
            function, _, location = body.strip()[:-1].rpartition(" (")
            file, _, line = location.rpartition(":")
            if line.isdigit():
                frames.append(Frame(function, file, int(line)))
    return events


def user_frame(event: Event, roots: list[Path]) -> Frame | None:
    """The innermost frame of the user's code: under a root, not in an installed package or this
    runtime (a fixed script's `optimizer_step` is attributed to the line calling it)."""
    for frame in event.frames:
        path = Path(frame.file)
        if "site-packages" in path.parts or "dist-packages" in path.parts or not path.is_absolute():
            continue
        resolved = path.resolve()
        if OWN_PACKAGE in resolved.parents:
            continue
        if any(root == resolved or root in resolved.parents for root in roots):
            return frame
    return None


def by_line(
    events: list[Event], roots: list[Path], reads: Sequence[dict] = ()
) -> tuple[dict[tuple[str, int], LineReport], int]:
    """Events (and the recorder's host reads) grouped by the user line they are attributed to, and
    how many events had no user frame."""
    lines: dict[tuple[str, int], LineReport] = {}
    for read in reads:
        key = (str(Path(read["file"]).resolve()), int(read["line"]))
        lines.setdefault(key, LineReport(key[0], key[1], read["function"])).reads += int(read["count"])
    unattributed = 0
    for event in events:
        frame = user_frame(event, roots)
        if frame is None:
            unattributed += 1
            continue
        key = (str(Path(frame.file).resolve()), frame.line)
        report = lines.setdefault(key, LineReport(key[0], frame.line, frame.function))
        report.graphs.add(event.graph_hash)
        if event.kind == "compile":
            report.compiles += 1
        elif event.cause == "barrier":
            report.barriers += 1
        else:
            report.host_reads += 1
    return lines, unattributed


# the findings a run can confirm: deprecated APIs and the like have no run-time signature
RUNTIME_CATEGORIES = {
    "item_sync",
    "control_flow_on_tensor",
    "dynamic_shape",
    "varying_shape",
    "optimizer_step",
    "clip_grad_norm",
}


def is_hazard(report: LineReport) -> bool:
    """The line read a value on the host, or compiled more than once (a graph's first compilation
    is the normal cost; a second one at the same line is a recompilation)."""
    return report.host_reads > 0 or report.reads > 0 or report.compiles > 1


# findings whose cost shows at other lines: the graph they make is compiled where it is cut
STRUCTURAL_CATEGORIES = {"optimizer_step", "dynamic_shape", "varying_shape"}


def _scopes(file: str) -> list[tuple[int, int]]:
    """The (first, last) lines of the loops and functions of `file`, innermost last for nested ones."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    kinds = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef)
    return sorted(
        ((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, kinds)),
        key=lambda span: span[1] - span[0],
        reverse=True,
    )


def _scope_of(spans: list[tuple[int, int]], line: int) -> tuple[int, int] | None:
    """The innermost loop or function holding `line`."""
    inner = [s for s in spans if s[0] <= line <= s[1]]
    return inner[-1] if inner else None


def attribute_structural(lines: dict[tuple[str, int], LineReport], findings: list[dict]) -> list[dict]:
    """Give each structural finding the recompiles of the lines in its loop (else its function):
    a mask or an unsynced loop is compiled at the barrier or read that cuts the graph. Returns the
    findings that got some."""
    seen = []
    scopes: dict[str, list[tuple[int, int]]] = {}
    for finding in findings:
        if finding.get("category") not in STRUCTURAL_CATEGORIES:
            continue
        path = str(Path(finding["filename"]).resolve())
        spans = scopes.setdefault(path, _scopes(path))
        scope = _scope_of(spans, finding["location"]["row"])
        if scope is None:
            continue
        recompiling = [
            r for (file, line), r in lines.items() if file == path and scope[0] <= line <= scope[1] and r.compiles > 1
        ]
        for report in recompiling:
            report.explained_by.append(finding)
        if recompiling:
            seen.append(finding)
    return seen


def cross_reference(lines: dict[tuple[str, int], LineReport], findings: list[dict]) -> dict[str, list]:
    """Findings confirmed by run-time events on their lines, findings not seen, events unpredicted."""
    not_seen = []
    for finding in findings:
        if finding.get("category") not in RUNTIME_CATEGORIES:
            continue
        path = str(Path(finding["filename"]).resolve())
        first, last = finding["location"]["row"], finding["end_location"]["row"]
        hits = [r for (file, line), r in lines.items() if file == path and first <= line <= last and is_hazard(r)]
        for report in hits:
            report.findings.append(finding)
        if not hits:
            not_seen.append(finding)
    structural = attribute_structural(lines, not_seen)
    not_seen = [f for f in not_seen if not any(f is s for s in structural)]
    hazards = [r for r in lines.values() if is_hazard(r)]
    return {
        "confirmed": [r for r in hazards if r.findings],
        "explained": [r for r in hazards if not r.findings and r.explained_by],
        "structural": structural,
        "not_seen": not_seen,
        "unpredicted": [r for r in hazards if not r.findings and not r.explained_by],
    }


def run_xlalint(files: list[str], command: list[str] | None) -> tuple[list[dict], str | None]:
    """`xlalint check --output-format json` on `files`; (findings, why not) when it cannot run."""
    if command is None:
        command = [sys.executable, "-m", "xlalint"]
        probe = subprocess.run([*command, "--version"], capture_output=True, text=True)
        if probe.returncode != 0:
            found = shutil.which("xlalint")
            if found is None:
                return [], "xlalint is not installed here: no cross-reference (pass --xlalint or --findings)"
            command = [found]
    proc = subprocess.run(
        [*command, "check", "--no-cache", "--output-format", "json", *files], capture_output=True, text=True
    )
    if proc.returncode not in (0, 1):
        return [], f"xlalint check failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
    return json.loads(proc.stdout or "[]"), None


def steps_from_barriers(lines: dict[tuple[str, int], LineReport]) -> int | None:
    """The steps a run took, from its barriers: the most barriers one line ran, when it ran at least
    two (a barrier per step). One barrier (at the end of an epoch, of the run) counts no steps."""
    most = max((r.barriers for r in lines.values()), default=0)
    return most if most >= 2 else None


def audit(
    events: list[Event],
    roots: list[Path],
    findings: list[dict],
    steps_hint: int | None = None,
    reads: Sequence[dict] = (),
) -> dict:
    """The whole report as data: totals, per-step rates, and the cross-reference."""
    lines, unattributed = by_line(events, roots, reads)
    crossed = cross_reference(lines, findings)
    barriers = sum(1 for e in events if e.kind == "execute" and e.cause == "barrier")
    steps = steps_hint or steps_from_barriers(lines)
    totals: dict[str, Any] = {
        "compiles": sum(e.kind == "compile" for e in events),
        "host_reads": sum(e.kind == "execute" and e.cause == "host_read" for e in events),
        "barriers": barriers,
        "unattributed": unattributed,
        "steps": steps,
        "steps_from": "--steps" if steps_hint else ("barriers" if steps else None),
    }
    if reads:
        totals["python_reads"] = sum(int(r["count"]) for r in reads)
    if steps:
        totals["host_reads_per_step"] = round(totals["host_reads"] / steps, 3)

    def line(r: LineReport) -> dict:  # noqa: E306
        row = asdict(r)
        row["graphs"] = len(r.graphs)
        row["findings"] = [f"{f['code']} {f['name']}" for f in r.findings]
        row["explained_by"] = [f"{f['code']} {f['name']} (line {f['location']['row']})" for f in r.explained_by]
        # events per step: 1 or more is a per-step hazard; less, an occasional cost (logging, the end)
        row["per_step"] = round(max(r.host_reads, r.reads, r.compiles) / steps, 3) if steps else None
        return row

    def finding(f: dict) -> dict:
        return {"file": f["filename"], "row": f["location"]["row"], "code": f["code"], "message": f["message"]}

    return {
        "totals": totals,
        "lines": [line(r) for r in sorted(lines.values(), key=lambda r: (r.file, r.line))],
        "confirmed": [line(r) for r in crossed["confirmed"]],
        "structural": [finding(f) for f in crossed["structural"]],
        "explained": [line(r) for r in crossed["explained"]],
        "not_seen": [finding(f) for f in crossed["not_seen"]],
        "unpredicted": [
            line(r) for r in sorted(crossed["unpredicted"], key=lambda r: -(r.host_reads + r.reads + r.compiles))
        ],
    }


def render(report: dict, root: Path) -> str:
    """The report as text for a terminal."""

    def where(file: str, line: int) -> str:
        path = Path(file)
        return f"{path.relative_to(root) if root in path.parents else path}:{line}"

    t = report["totals"]
    per_step = f" ({t['host_reads_per_step']} per step)" if "host_reads_per_step" in t else ""
    python_reads = f", {t['python_reads']} reads of tensor values" if "python_reads" in t else ""
    out = [
        f"xlalint audit: {t['steps'] or 'unknown'} steps (barriers {t['barriers']}), "
        f"{t['compiles']} compilations, {t['host_reads']} host reads{per_step}{python_reads}"
    ]
    if not t["steps"]:
        out.append("no per-step rates: no line ran a barrier every step (pass --steps N)")
    if "transfers" in t:
        rate = f" ({t['transfers_per_step']} per step)" if "transfers_per_step" in t else ""
        lines_note = "each is counted at its line below" if "python_reads" in t else "they have no line below"
        out.append(
            f"device-to-host transfers: {t['transfers']}{rate}; reads of values a barrier already "
            f"computed cost a transfer but no execution: {lines_note}"
        )
    for title, rows in (
        ("Confirmed by the run (finding and run-time event on the same line)", report["confirmed"]),
        ("Recompiles caused by a structural finding in the same loop", report["explained"]),
        ("Run-time events no rule predicted", report["unpredicted"]),
    ):
        out.append(f"\n{title}:" if rows else f"\n{title}: none")
        for r in rows:
            codes = f"  [{', '.join(r['findings'] or r['explained_by'])}]" if r["findings"] or r["explained_by"] else ""
            rate = (
                ""
                if r["per_step"] is None
                else (" - every step" if r["per_step"] >= 1 else f" - {r['per_step']} per step")
            )
            reads = f", {r['reads']} reads of values" if r["reads"] else ""
            out.append(
                f"  {where(r['file'], r['line'])} in {r['function']}: {r['compiles']} compiles "
                f"({r['graphs']} graphs), {r['host_reads']} host reads{reads}{rate}{codes}"
            )
    if report["structural"]:
        out.append("\nStructural findings seen as recompiles in their loop:")
        for f in report["structural"]:
            out.append(f"  {where(f['file'], f['row'])} {f['code']} {f['message']}")
    out.append("\nFindings not seen at run time:" if report["not_seen"] else "\nFindings not seen at run time: none")
    for f in report["not_seen"]:
        out.append(f"  {where(f['file'], f['row'])} {f['code']} {f['message']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xlalint.runtime.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root", type=Path, help="the user's code: files under it get the events (default: the script's folder)"
    )
    parser.add_argument("--steps", type=int, help="steps the script runs, for per-step rates (default: its barriers)")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument(
        "--findings", type=Path, help="xlalint JSON findings to cross-reference (default: run xlalint check)"
    )
    parser.add_argument("--xlalint", help="the xlalint command to run (default: this interpreter's -m xlalint)")
    parser.add_argument("--keep-log", type=Path, help="keep torch_xla's raw analysis log here")
    parser.add_argument("--from-log", type=Path, help="report on a log kept earlier instead of running a script")
    parser.add_argument("script", type=Path, nargs="?")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    status: int | None
    if options.from_log is not None:
        if not options.from_log.is_file():
            return _fail(f"{options.from_log}: no such file")
        if options.root is None:
            return _fail("--from-log needs --root (the folder of the code that ran)")
        log, status = options.from_log, 0
    else:
        if options.script is None or not options.script.is_file():
            return _fail(f"{options.script or 'a script to run'}: no such file")
        if "torch_xla" in sys.modules:
            return _fail("torch_xla is already imported: run the audit as its own process")
        log = options.keep_log or Path(tempfile.mkstemp(prefix="xlalint-audit-", suffix=".log")[1])
        status = _run(options.script, options.args, log, (options.root or options.script.parent).resolve())
        if status is None:
            return _fail("the script never imported torch_xla: nothing ran on an XLA device")
    root = (options.root or options.script.parent).resolve()
    events = parse_debug_output(log.read_text(errors="replace"))
    files = {frame.file for e in events if (frame := user_frame(e, [root]))}
    if options.script is not None:
        files.add(str(options.script.resolve()))
    if options.findings:
        findings, why = json.loads(options.findings.read_text()), None
    else:
        findings, why = run_xlalint(sorted(files), options.xlalint.split() if options.xlalint else None)
    reads_file = Path(f"{log}.reads.json")
    reads = json.loads(reads_file.read_text()) if reads_file.is_file() else []
    report = audit(events, [root], findings, options.steps, reads)
    metrics = Path(f"{log}.metrics.json")
    if metrics.is_file():
        counts = json.loads(metrics.read_text())
        report["totals"].update(counts)
        if report["totals"]["steps"]:
            report["totals"]["transfers_per_step"] = round(counts["transfers"] / report["totals"]["steps"], 3)
    print(render(report, root), file=sys.stderr)
    if why:
        print(f"note: {why}", file=sys.stderr)
    if options.json:
        options.json.write_text(json.dumps(report, indent=2) + "\n")
    if options.from_log is None and options.keep_log is None:
        for path in (log, metrics, reads_file):
            path.unlink(missing_ok=True)
    return status


def _fail(message: str) -> int:
    print(f"xlalint audit: error: {message}", file=sys.stderr)
    return 2


def _run(script: Path, args: list[str], log: Path, root: Path) -> int | None:
    """Run `script` as `__main__` with torch_xla's analysis written to `log` and the host reads of
    XLA tensors' values under `root` to `<log>.reads.json`; its exit status, or None when it never
    imported torch_xla."""
    log.write_text("")
    # read by torch_xla once, at its first graph: set before the script imports it
    os.environ.update(PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=str(log))
    os.environ.setdefault("PT_XLA_DEBUG_MAX_FRAME", "64")  # deep enough to reach the user's frame
    script = script.resolve()  # absolute frames in the log, whatever the working directory
    saved_argv, sys.argv = sys.argv, [str(script), *args]
    status = 0
    recorder = HostReadRecorder([root], device_types=("xla",))
    try:
        with recorder:  # imports torch (not torch_xla: the debug environment is read at its first graph)
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = saved_argv
    Path(f"{log}.reads.json").write_text(json.dumps(recorder.rows()) + "\n")
    if "torch_xla" not in sys.modules:
        return None
    _save_metrics(log)
    return status


def _save_metrics(log: Path) -> None:
    """torch_xla's counters for the whole run, beside the log: device-to-host transfers include the
    reads of values a barrier already computed, which need no execution and so have no analysis."""
    import torch_xla.debug.metrics as met  # imported by the script already

    transfers = met.metric_data("TransferFromDeviceTime")
    counts = {
        "transfers": transfers[0] if transfers else 0,
        "uncached_compiles": met.counter_value("UncachedCompile") or 0,
        "local_scalar_dense": met.counter_value("aten::_local_scalar_dense") or 0,
    }
    Path(f"{log}.metrics.json").write_text(json.dumps(counts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
