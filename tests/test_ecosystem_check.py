"""The ecosystem check (benchmarks/ecosystem/check.py): keys, diffs, the ledger and its arithmetic.

Everything here runs on small synthetic reports, checkouts and ledgers written by the tests; the
real corpus is only read by the last test, which skips where no checkout of it is present.
"""

import csv
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ECOSYSTEM = os.path.join(HERE, os.pardir, "benchmarks", "ecosystem")
sys.path.insert(0, os.path.abspath(ECOSYSTEM))

import check  # noqa: E402

SOURCE = {
    ("o/a", "train.py"): [
        "import torch",
        "for batch in loader:",
        "    loss = model(batch)",
        "    total += loss.item()",
        "    if loss > 0:",
        "        pass",
    ],
}


def lines_of(repo, path):
    return SOURCE.get((repo, path), [])


def item(path, row, code, message="m"):
    return {"filename": path, "location": {"row": row, "column": 1}, "code": code, "message": message}


def finding(line, code="XLA101", text="total += loss.item()", repo="o/a", path="train.py", message="m"):
    return check.Finding(repo, path, line, code, message, text)


def test_families_follow_the_code_prefixes():
    assert check.family("XLA101") == "XLA"
    assert check.family("XLA503") == "XLA"
    assert check.family("XLA901") == "XLA"
    assert check.family("XLA602") == "XLA-migration"
    assert check.family("XLA701") == "XLA-migration"
    assert check.family("XLA703") == "XLA"  # a per-step cost, judged as the performance rules are
    assert check.family("XLA704") == "XLA"  # a synchronous upload per step
    assert check.family("XLA706") == "XLA"  # replicas repeating each other's input work: a run-time cost
    assert check.family("XLA705") == check.family("XLA708") == "XLA"  # redundant collectives per step
    assert check.family("XLA707") == "XLA"  # a per-step upload: a performance finding too
    assert check.family("DYN201") == "DYN"
    assert check.family("TPU103") == "TPU"
    assert check.family("JAX110") == "JAX"


def test_a_report_becomes_findings_keyed_by_their_stripped_source_line():
    raw = json.dumps([item("./train.py", 4, "XLA101", "`.item()`  on a\tper-step path"), item("train.py", 5, "XLA201")])
    found = check.parse_report("o/a", raw, lines_of)
    assert [(f.path, f.line, f.code, f.text) for f in found] == [
        ("train.py", 4, "XLA101", "total += loss.item()"),
        ("train.py", 5, "XLA201", "if loss > 0:"),
    ]
    assert found[0].message == "`.item()` on a per-step path"
    assert found[0].anchor == ("o/a", "train.py", "XLA101", "total += loss.item()")


def test_a_report_that_is_not_json_is_a_one_line_error():
    with pytest.raises(check.CheckError, match="o/a: the report is not JSON"):
        check.parse_report("o/a", "{not json", lines_of)


def test_a_finding_whose_line_moved_is_unchanged_not_appeared_and_disappeared():
    d = check.diff([finding(4)], [finding(9)])
    assert (len(d.appeared), len(d.disappeared), d.unchanged) == (0, 0, 1)


def test_new_and_gone_findings_are_reported_per_side():
    base = [finding(4), finding(5, "XLA201", "if loss > 0:")]
    head = [finding(4), finding(2, "XLA102", "for batch in loader:")]
    d = check.diff(base, head)
    assert [f.code for f in d.appeared] == ["XLA102"]
    assert [f.code for f in d.disappeared] == ["XLA201"]
    assert (d.unchanged, d.base_total, d.head_total) == (1, 2, 2)


def test_repeated_findings_on_identical_lines_match_one_to_one_nearest_first():
    # Two copies of the same line (a duplicated helper); the head lost the second one.
    base = [finding(10), finding(40)]
    head = [finding(41)]
    pairs, gone, new = check.match(base, head)
    assert [(o.line, n.line) for o, n in pairs] == [(40, 41)]
    assert [f.line for f in gone] == [10]
    assert new == []


def test_the_same_code_on_another_source_line_does_not_match():
    d = check.diff([finding(4)], [finding(4, text="total += loss.detach().item()")])
    assert (len(d.appeared), len(d.disappeared)) == (1, 1)


def write_ledger(path, rows):
    entries = [check.Entry(*row) for row in rows]
    check.write_ledger(str(path), entries)
    return entries


def test_the_ledger_round_trips_and_keeps_tabs_out_of_cells(tmp_path):
    path = tmp_path / "ledger.tsv"
    write_ledger(path, [("o/a", "train.py", 4, "XLA101", "no", "right", "a\tsync per step", "x", "m")])
    back = check.read_ledger(str(path))
    assert back == [check.Entry("o/a", "train.py", 4, "XLA101", "no", "right", "a sync per step", "x", "m")]
    with open(path, encoding="utf-8") as f:
        assert f.readline().rstrip("\n").split("\t") == list(check.LEDGER_COLUMNS)


def test_a_ledger_with_an_unknown_verdict_is_rejected_with_its_line(tmp_path):
    path = tmp_path / "ledger.tsv"
    path.write_text("\t".join(check.LEDGER_COLUMNS) + "\n" + "o/a\ttrain.py\t4\tXLA101\tno\tmaybe\tr\tx\tm\n")
    with pytest.raises(check.CheckError, match=r"ledger.tsv:2: verdict 'maybe'"):
        check.read_ledger(str(path))


def test_precision_counts_right_over_right_and_wrong_and_keeps_the_rest_apart():
    findings = [
        finding(1, "XLA101", "a"),
        finding(2, "XLA101", "b"),
        finding(3, "XLA102", "c"),
        finding(4, "XLA102", "d"),
        finding(5, "XLA602", "e"),
        finding(6, "JAX110", "f"),
        finding(7, "JAX110", "g"),
    ]
    verdicts = {"a": "right", "b": "right", "c": "wrong", "d": "debatable", "e": "right", "f": "wrong"}
    ledger = [
        check.Entry(f.repo, f.path, f.line + 3, f.code, "no", verdicts[f.text], "why", f.text, f.message)
        for f in findings
        if f.text in verdicts
    ]
    tallies = check.precision_by_family(check.judge(findings, ledger))
    xla = tallies["XLA"]
    assert (xla.right, xla.wrong, xla.debatable, xla.unjudged) == (2, 1, 1, 0)
    assert xla.precision == pytest.approx(2 / 3)
    assert tallies["XLA-migration"].precision == 1.0
    jax = tallies["JAX"]
    assert (jax.right, jax.wrong, jax.unjudged, jax.precision) == (0, 1, 1, 0.0)
    everything = tallies["all"]
    assert (everything.right, everything.wrong, everything.debatable, everything.unjudged) == (3, 2, 1, 1)
    assert check.Tally(debatable=2).precision is None


def test_unjudged_findings_become_new_ledger_rows():
    found = [finding(4), finding(5, "XLA201", "if loss > 0:")]
    ledger = [check.Entry("o/a", "train.py", 4, "XLA101", "no", "right", "why", "total += loss.item()", "m")]
    rows = check.new_entries(check.judge(found, ledger), preview=True)
    assert [(r.code, r.verdict, r.preview, r.text) for r in rows] == [("XLA201", "unjudged", "yes", "if loss > 0:")]


def make_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    checkout = corpus / "o+a"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "train.py").write_text("\n".join(SOURCE[("o/a", "train.py")]) + "\n")
    repos = tmp_path / "REPOS.tsv"
    repos.write_text("repo\tcommit\tkind\no/a\t" + "0" * 40 + "\ttorch_xla\n")
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    (base / "o+a.json").write_text(json.dumps([item("train.py", 4, "XLA101"), item("train.py", 5, "XLA201")]))
    (head / "o+a.json").write_text(json.dumps([item("train.py", 4, "XLA101"), item("train.py", 2, "XLA102")]))
    return corpus, repos, base, head


def test_the_check_reads_saved_reports_and_prints_json(tmp_path, capsys):
    corpus, repos, base, head = make_corpus(tmp_path)
    ledger = tmp_path / "ledger.tsv"
    write_ledger(ledger, [("o/a", "train.py", 4, "XLA101", "no", "right", "sync", "total += loss.item()", "m")])
    argv = ["--repos", str(repos), "--corpus", str(corpus), "--ledger", str(ledger)]
    argv += ["--base-reports", str(base), "--head-reports", str(head), "--json", "--update-ledger"]
    assert check.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["totals"] == {"base": 2, "head": 2, "appeared": 1, "disappeared": 1, "unchanged": 1}
    assert [f["line"] for f in out["rules"]["XLA102"]["appeared"]] == [2]
    assert [f["text"] for f in out["rules"]["XLA201"]["disappeared"]] == ["if loss > 0:"]
    assert out["ledger"]["XLA"] == {
        "right": 1,
        "wrong": 0,
        "debatable": 0,
        "unjudged": 1,
        "precision": 1.0,
    }
    rows = check.read_ledger(str(ledger))
    assert sorted((r.code, r.verdict) for r in rows) == [("XLA101", "right"), ("XLA102", "unjudged")]


def test_the_text_report_lists_changes_per_rule_and_the_totals(tmp_path, capsys):
    corpus, repos, base, head = make_corpus(tmp_path)
    argv = ["--repos", str(repos), "--corpus", str(corpus), "--ledger", str(tmp_path / "none.tsv")]
    assert check.main([*argv, "--base-reports", str(base), "--head-reports", str(head)]) == 0
    out = capsys.readouterr().out
    assert "## XLA102: +1 -0\n+ o/a:train.py:2: XLA102 m" in out
    assert "## XLA201: +0 -1\n- o/a:train.py:5: XLA201 m" in out
    assert "base: 2 findings; head: 2 findings; +1 -1 (1 unchanged)" in out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert check.main(["--repos", str(tmp_path / "missing.tsv"), "--base", "x", "--head", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no repository list at") and err.count("\n") == 1
    corpus, repos, base, _ = make_corpus(tmp_path)
    assert check.main(["--repos", str(repos), "--corpus", str(corpus), "--base-reports", str(base)]) == 2
    assert "exactly one of --head" in capsys.readouterr().err


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_checkout_is_extracted_from_a_mirror_with_only_what_a_linter_reads(tmp_path):
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "train.py").write_text("x = 1\n")
    (work / "pyproject.toml").write_text("[project]\n")
    (work / "requirements-tpu.txt").write_text("torch\n")
    (work / "weights.bin").write_bytes(b"\0\1")
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c", cwd=work)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True, capture_output=True, text=True).stdout
    mirrors = tmp_path / "mirrors"
    (mirrors / "o+a").mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "o+a" / "repo")], check=True)
    where = check.ensure_checkouts([{"repo": "o/a", "commit": commit.strip()}], str(tmp_path / "corpus"), str(mirrors))
    dest = where["o/a"]
    kept = sorted(os.path.relpath(os.path.join(d, f), dest) for d, _, fs in os.walk(dest) for f in fs)
    assert kept == [".ecosystem-commit", "pkg/train.py", "pyproject.toml", "requirements-tpu.txt"]
    assert os.path.isdir(os.path.join(dest, ".git"))
    with pytest.raises(check.CheckError, match="no mirror of o/b"):
        check.ensure_checkouts([{"repo": "o/b", "commit": "1" * 40}], str(tmp_path / "corpus"), str(mirrors))


def test_a_revision_is_laid_out_the_way_setup_py_maps_its_folders(tmp_path):
    setup = tmp_path / "setup.py"
    setup.write_text(
        'ROOTS = {"xlalint": "xlalint", "xlalint.rules": "rules"}\nDATA = {"xlalint.docs": "docs", "xlalint.docs.rules": "docs/rules"}\n'
    )
    assert check.package_layout(str(setup)) == {"xlalint": "xlalint", "xlalint.rules": "rules", "xlalint.docs": "docs"}
    setup.write_text("setup()\n")
    assert check.package_layout(str(setup)) == check.DEFAULT_LAYOUT


def test_every_ledger_row_has_a_verdict_and_judged_rows_a_reason():
    rows = check.read_ledger(check.DEFAULT_LEDGER)
    assert rows, "the ledger is empty"
    for r in rows:
        assert r.verdict in check.VERDICTS
        assert r.preview in ("yes", "no")
        if r.verdict != "unjudged":
            assert r.reason.strip(), f"{r.repo}:{r.path}:{r.line} {r.code} has a verdict but no reason"


def corpus_dir():
    for cand in (os.environ.get("XLALINT_ECOSYSTEM_CORPUS"), check.DEFAULT_CORPUS, "/work/eco/src"):
        if cand and os.path.isdir(cand) and any(os.scandir(cand)):
            return cand
    return None


def test_ledger_rows_point_at_their_source_lines_in_the_corpus():
    corpus = corpus_dir()
    if corpus is None or not os.path.isfile(check.DEFAULT_REPOS):
        pytest.skip("no ecosystem corpus checkout here")
    with open(check.DEFAULT_REPOS, newline="", encoding="utf-8") as f:
        repos = {row["repo"] for row in csv.DictReader(f, delimiter="\t")}
    lines = check.Lines({r: os.path.join(corpus, check.local_name(r)) for r in repos})
    rows = [r for r in check.read_ledger(check.DEFAULT_LEDGER) if os.path.isdir(lines.where.get(r.repo, ""))]
    if not rows:
        pytest.skip("the corpus here has none of the ledger's repositories")
    stale = [r for r in rows if check._source_line(lines, r.repo, r.path, r.line) != r.text]
    assert not stale, f"{len(stale)} ledger rows no longer match their source line, e.g. {stale[0]}"


def test_possible_findings_have_a_precision_of_their_own():
    high, guessed = finding(1, "XLA101", "a"), check.Finding("o/a", "train.py", 2, "XLA101", "m", "b", "possible")
    ledger = [
        check.Entry(f.repo, f.path, f.line, f.code, "no", verdict, "why", f.text, f.message)
        for f, verdict in ((high, "right"), (guessed, "wrong"))
    ]
    tallies = check.precision_by_family(check.judge([high, guessed], ledger))
    assert (tallies["XLA"].right, tallies["XLA"].wrong) == (1, 0)
    assert (tallies["possible:XLA"].right, tallies["possible:XLA"].wrong) == (0, 1)


def test_loop_hazards_count_as_found_possible_or_missed():
    loops = [
        {"repo": "o/a", "path": "train.py", "line": "4", "category": "host-sync"},
        {"repo": "o/a", "path": "train.py", "line": "5", "category": "host-sync"},
        {"repo": "o/a", "path": "train.py", "line": "6", "category": "host-sync"},
        {"repo": "o/a", "path": "train.py", "line": "-", "category": "none"},  # a clean loop: not counted
        {"repo": "o/a", "path": "train.py", "line": "9", "category": "none"},  # nor when it names the loop's line
    ]
    head = [finding(4, "XLA101", "x"), check.Finding("o/a", "train.py", 5, "XLA201", "m", "y", "possible")]
    counts = check.loop_recall(loops, head)
    assert counts["all"] == {"found": 1, "possible": 1, "missed": 1}
