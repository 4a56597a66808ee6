"""The real-code oracle harness (benchmarks/compile_oracle) on a tiny synthetic project.

The collector must find Dynamo's GB id and the user line of a known `.item()` break, the traced run
must see the executed lines, and the scorer must match findings of a stand-in xlalint by line.
"""

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

ORACLE = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "compile_oracle")
sys.path.insert(0, os.path.abspath(ORACLE))

import score  # noqa: E402
from capture import Paths, parse_break, parse_recompile, restore_stack  # noqa: E402

PROG = textwrap.dedent(
    """\
    import torch


    def scale(x):
        s = x.sum().item()
        return x * s


    def step(x, k):
        y = x + 1
        return scale(y) * k


    compiled = torch.compile(step, backend="eager")
    for k in range(3):
        compiled(torch.ones(3), k)
    """
)
ITEM_LINE = 5


def capture(tmp_path, mode):
    out = tmp_path / f"{mode}.json"
    subprocess.run(
        [sys.executable, os.path.join(ORACLE, "capture.py"), "--mode", mode, "--root", str(tmp_path),
         "--out", str(out), "prog.py"],
        cwd=tmp_path, check=True, capture_output=True, timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    root = tmp_path_factory.mktemp("proj")
    (root / "prog.py").write_text(PROG)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '0'\n")
    return root, {"corpus": "synthetic",
                  "cases": {"prog": {"compile": capture(root, "compile"), "trace": capture(root, "trace")}}}


def test_collector_finds_gb_id_and_line(oracle):
    _, rec = oracle
    comp = rec["cases"]["prog"]["compile"]
    assert comp["error"] is None
    sites = {(b["gb"], tuple(b["site"])) for b in comp["breaks"]}
    assert ("GB0124", ("prog.py", ITEM_LINE)) in sites
    first = next(b for b in comp["breaks"] if not b["duplicate"])
    assert [f[:2] for f in first["frames"]][-2:] == [["prog.py", 11], ["prog.py", ITEM_LINE]]
    assert first["gb_type"].startswith("Unsupported Tensor.item()") and not first["skip"]
    assert comp["compiled"][0]["target"] == "step" and comp["compiled"][0]["code"] == ["prog.py", 9]
    # the int k changes every call: Dynamo recompiles the code after the break, guarding on k
    assert any("k" in r["reason"] and not r["benign"] for r in comp["recompiles"])


def test_trace_records_executed_and_compiled_lines(oracle):
    _, rec = oracle
    trace = rec["cases"]["prog"]["trace"]
    assert ITEM_LINE in trace["executed_lines"]["prog.py"]
    assert {ITEM_LINE, 10, 11} <= set(trace["compiled_lines"]["prog.py"])
    assert 14 not in trace["compiled_lines"]["prog.py"]  # the torch.compile call itself is not compiled


def fake_xlalint(tmp_path, findings):
    """A stand-in `xlalint` that prints the given findings as `check --output-format json` does."""
    exe = tmp_path / "fake_xlalint"
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint({json.dumps(json.dumps(findings))})\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def finding(code, row, end=None):
    return {"code": code, "filename": "prog.py", "message": "m", "location": {"row": row, "column": 1},
            "end_location": {"row": end or row, "column": 9}}


def test_scorer_matches_findings_by_line(oracle, tmp_path):
    root, rec = oracle
    xl = fake_xlalint(tmp_path, [finding("DYN101", ITEM_LINE), finding("DYN150", 10), finding("DYN199", 2)])
    report = score.score_all([(rec, str(root))], xl, "DYN")
    s = report["scores"][0]
    assert report["lint_error"] is None
    assert (s["break_sites"], s["break_sites_found"]) == (1, 1)
    verdicts = {r["code"]: r["verdict"] for r in s["findings"]}
    assert verdicts == {"DYN101": "tp", "DYN150": "fp-traced", "DYN199": "unverified"}
    assert "| DYN101 | 1 | 1 | 0 | 0 | 1.00 | 0 / 0 / 0 | 1 |" in report["text"]


def library_xlalint(tmp_path, findings):
    """A stand-in `xlalint` that reports `findings` only when asked as library mode must ask: with
    `--assume-compiled`, in a tree without our driver (else nothing)."""
    exe = tmp_path / "library_xlalint"
    exe.write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        f"ok = '--assume-compiled' in sys.argv and not os.path.exists({score.DRIVER!r})\n"
        f"print({json.dumps(json.dumps(findings))} if ok else '[]')\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_library_mode_lints_without_the_driver_and_scores_traced_lines_only(oracle, tmp_path):
    root, rec = oracle
    (root / score.DRIVER).write_text("import torch\n")  # the entry library mode must leave out
    try:
        # the break; a line traced without a break; `for k in range(3):`, which ran eagerly
        found = [finding("DYN101", ITEM_LINE), finding("DYN150", 10), finding("DYN160", 15)]
        xl = library_xlalint(tmp_path, found)
        report = score.score_all([(rec, str(root))], xl, "DYN", library=True)
        verdicts = {r["code"]: r["verdict"] for r in report["scores"][0]["findings"]}
        assert verdicts == {"DYN101": "tp", "DYN150": "fp-traced", "DYN160": "unverified-uncompiled"}
        assert report["text"].startswith("# Library mode")
        assert "| DYN160 | 1 | 0 | 0 | 0 | n/a | 0 / 0 / 1 | 0 |" in report["text"]
        # the default mode keeps the driver and scores the eager line as wrong
        default = score.score_all([(rec, str(root))], fake_xlalint(tmp_path, found), "DYN")
        assert {r["code"]: r["verdict"] for r in default["scores"][0]["findings"]}["DYN160"] == "fp-outside"
        assert score.score_all([(rec, str(root))], xl, "DYN")["scores"][0]["findings"] == []
    finally:
        (root / score.DRIVER).unlink()


def test_scorer_reports_a_missed_break_and_a_lint_error(oracle, tmp_path):
    root, rec = oracle
    report = score.score_all([(rec, str(root))], fake_xlalint(tmp_path, []), "DYN")
    assert report["scores"][0]["fn_sites"][0]["line"] == ITEM_LINE
    assert "s = x.sum().item()" in report["text"]
    broken = tmp_path / "broken"
    broken.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('xlalint: error: unknown rule selector `DYN`')\n")
    broken.chmod(0o755)
    report = score.score_all([(rec, str(root))], str(broken), "DYN")
    assert "unknown rule selector" in report["lint_error"]["synthetic"]


def test_parsers_on_log_text():
    paths = Paths("/p")
    msg = ("Graph break in user code at /p/m.py:7\nGraph Break Reason: Encountered graph break when attempting "
           "to trace CALL:\n\nData-dependent branching\n  Explanation: x\n For more details about this graph "
           "break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html\n\n"
           'User code traceback:\n  File "/x/runpy.py", line 3, in run\n  File "/p/m.py", line 7, in f\n')
    b = parse_break(msg, paths)
    assert (b["gb"], b["type"], b["site"]) == ("GB0170", "Data-dependent branching", ["m.py", 7])
    r = parse_recompile("Recompiling function forward in /p/m.py:3\n    triggered by the following guard "
                        "failure(s):\n    - 0/0: self.training == True  # x\n", paths, [])
    assert (r["function"], r["code"], r["benign"]) == ("forward", ["m.py", 3], True)


REPEATED = textwrap.dedent(
    """\
    import torch
    from torch.autograd import Variable


    def init_states(x):
        h = Variable(x.new(2, 3).zero_())
        c = Variable(x.new(2, 4).zero_())
        w = Variable(x.new(2, 5).zero_())
        return h.sum() + c.sum() + w.sum() + x.sum()


    torch.compile(init_states, backend="eager")(torch.ones(3))
    """
)


def test_collector_places_breaks_dynamo_logs_as_duplicates(tmp_path):
    """Three `Variable(...)` calls break with the same GB type inside the same Dynamo polyfill frame: Dynamo
    logs the 2nd and 3rd with their user stack suppressed. The collector restores each stack from the
    `dynamo_graph_break_reason` artifact, so every call site is recorded."""
    (tmp_path / "prog.py").write_text(REPEATED)
    comp = capture(tmp_path, "compile")
    assert comp["error"] is None
    breaks = [b for b in comp["breaks"] if b["gb"] == "GB0007"]
    assert [b["duplicate"] for b in breaks] == [False, True, True]  # Dynamo did suppress two stacks
    assert [b["site"] for b in breaks] == [["prog.py", 6], ["prog.py", 7], ["prog.py", 8]]
    assert all(b["frames"][-2][:2] == b["site"] for b in breaks)  # innermost: Dynamo's polyfill
    assert comp["counters"]["stats"]["unique_graphs"] == 4


def test_duplicate_restored_only_from_its_own_artifact():
    paths = Paths("/p")
    dup = ("Graph break (user stack suppressed due to duplicate graph break) in user code at /t/poly.py:5\n"
           "Graph Break Reason: x\n For more details, please visit: "
           "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html\n")
    art = ("Graph break in user code at /t/poly.py:5\nGraph Break Reason: x gb/gb0007.html\n\nUser code traceback:\n"
           '  File "/p/m.py", line 9, in f\n  File "/t/poly.py", line 5, in g\n'
           'Traceback (most recent call last):\n  File "/p/other.py", line 1, in h\n')
    rec = parse_break(dup, paths)
    assert rec["duplicate"] and rec["site"] is None
    assert restore_stack(rec, art, paths)["site"] == ["m.py", 9]  # not Dynamo's own traceback below it
    assert restore_stack(rec, art.replace("gb0007", "gb0124"), paths)["site"] is None  # another break


def test_library_tree_leaves_out_the_driver_and_names_the_entries(tmp_path):
    root = tmp_path / "corpus"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text("def f(x):\n    return x\n")
    (root / score.DRIVER).write_text("import torch\n")
    (root / "pyproject.toml").write_text('[project]\nname = "c"\nversion = "0"\n')
    tree = score.library_tree(str(root), ["pkg.m:f"])
    assert os.path.exists(os.path.join(tree, "pkg", "m.py"))
    assert not os.path.exists(os.path.join(tree, score.DRIVER))
    import tomllib

    with open(os.path.join(tree, "pyproject.toml"), "rb") as fh:
        assert tomllib.load(fh)["tool"]["xlalint"]["compiled"] == ["pkg.m:f"]
    plain = score.library_tree(str(root))  # again, without entries: no configuration added
    with open(os.path.join(plain, "pyproject.toml"), "rb") as fh:
        assert "tool" not in tomllib.load(fh)
