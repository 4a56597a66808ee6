"""What users expect from Ruff's command line (issue 31), each through `xlalint`: the report to a file,
what was fixed, fixable/unfixable, per-file ignores, watching, the formats tools read, unused
`noqa` codes, source frames, one-line errors at `path:row:col`, and `check`/`fix` sharing one set
of options (issue 28)."""

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest

from samples import TRAIN_LOOP
from xlalint.cli import Options, check, fix
from xlalint.rules import ALL_RULES
from xlalint.testing import lint_code

HEADER = "import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\n"
# XLA602 (safe fix) twice, XLA101 (no fix) once
SOURCE = HEADER + "xm.mark_step()\n" + TRAIN_LOOP.replace("import torch\n", "").replace(
    "optimizer.step()", "xm.optimizer_step(optimizer, barrier=True)") + "xm.mark_step()\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def xlalint(*args, cwd=None, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=120, **kwargs)


# -- one options object ---------------------------------------------------------------------------

def test_check_and_fix_take_their_options_from_one_object():
    """Every parameter of both commands is a field of Options (nothing parsed twice), and the options
    they share are declared once: same names, same help."""
    names = {f.name for f in fields(Options)}
    for command in (check, fix):
        assert {p.name for p in command.params} - {"apply_fixes"} <= names, command.name
    shared = {p.name: p.help for p in check.params} .items() & {p.name: p.help for p in fix.params}.items()
    assert {"select", "per_file_ignores", "fixable", "output_file", "show_fixes", "exit_non_zero_on_fix"} <= dict(shared).keys()


def test_check_fix_and_fix_write_do_the_same(run_cli, project):
    a = project.write("a/train.py", SOURCE)
    b = project.write("b/train.py", SOURCE)
    code_a, _, err_a = run_cli("check", "--fix", "--unfixable", "XLA101", a)
    code_b, _, err_b = run_cli("fix", "--write", "--unfixable", "XLA101", b)
    assert (code_a, err_a.replace(str(a), "X")) == (code_b, err_b.replace(str(b), "X"))
    assert a.read_text() == b.read_text() != SOURCE


# -- flags -----------------------------------------------------------------------------------------

def test_output_file_gets_the_report_and_stdout_stays_empty(run_cli, project):
    project.write("train.py", SOURCE)
    report = project / "out" / "report.json"
    code, out, _ = run_cli("check", "--output-format", "json", "-o", report, project / "train.py")
    assert code == 1 and out == ""
    assert sorted(d["code"] for d in json.loads(report.read_text())) == ["XLA101", "XLA602", "XLA602"]
    code, out, _ = run_cli("fix", "--output-file", project / "fix.diff", project / "train.py")
    assert code == 1 and out == "" and "+torch_xla.sync()" in (project / "fix.diff").read_text()


def test_output_file_that_cannot_be_written_is_one_line(run_cli, project):
    project.write("train.py", SOURCE)
    project.write("blocker", "a file, not a folder")
    code, _, err = run_cli("check", "-o", project / "blocker" / "report.txt", project / "train.py")
    assert code == 2 and err.count("\n") == 1 and "cannot write the report" in err


def test_show_fixes_lists_what_was_fixed_per_file_and_code(run_cli, project):
    path = project.write("train.py", SOURCE)
    code, _, err = run_cli("fix", "--write", "--show-fixes", path)
    assert code == 1  # XLA101 remains
    assert f"Fixed 2 errors:\n- {path}:\n    2 \u00d7 XLA602 (deprecated-xla-api)\n" in err


def test_exit_non_zero_on_fix(run_cli, project):
    source = HEADER + "xm.mark_step()\n"
    path = project.write("train.py", source)
    assert run_cli("fix", "--write", path)[0] == 0  # everything fixed: 0, as Ruff
    path.write_text(source)
    assert run_cli("check", "--fix", "--exit-non-zero-on-fix", path)[0] == 1
    assert run_cli("check", "--fix", "--exit-non-zero-on-fix", path)[0] == 0  # nothing left to fix


@pytest.mark.parametrize("args", [("--unfixable", "XLA602"), ("--fixable", "XLA1"), ("--fixable", "XLA6", "--unfixable", "XLA602")])
def test_unfixable_findings_are_reported_without_a_fix_and_never_fixed(run_cli, project, args):
    path = project.write("train.py", SOURCE)
    code, out, _ = run_cli("check", "--output-format", "json", *args, path)
    assert code == 1 and all(d["fix"] is None for d in json.loads(out))
    code, _, err = run_cli("fix", "--write", *args, path)
    assert path.read_text() == SOURCE and "Fixed 0 errors" in err


def test_fixable_and_unfixable_in_the_configuration(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\nunfixable = ["XLA602"]\n')
    path = project.write("train.py", SOURCE)
    code, out, _ = run_cli("check", "--output-format", "json", path, cwd=project)
    assert all(d["fix"] is None for d in json.loads(out))
    code, out, _ = run_cli("check", "--show-settings", path, cwd=project)
    assert 'unfixable = ["XLA602"]' in out


def test_extend_select_adds_to_the_selection(run_cli, project):
    path = project.write("train.py", SOURCE)
    code, out, _ = run_cli("check", "--select", "XLA1", "--extend-select", "XLA6", "--output-format", "json", path)
    assert sorted({d["code"] for d in json.loads(out)}) == ["XLA101", "XLA602"]


def test_per_file_ignores_on_the_command_line_replace_the_configuration(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\nper-file-ignores = { "legacy/*" = ["XLA6"] }\n')
    project.write("legacy/train.py", SOURCE)
    project.write("new/train.py", SOURCE)
    code, out, _ = run_cli("check", "--output-format", "json", "--per-file-ignores", "new/*:XLA101,XLA602", ".",
                           cwd=project)
    found = sorted((d["filename"], d["code"]) for d in json.loads(out))
    assert found == [("legacy/train.py", "XLA101"), ("legacy/train.py", "XLA602"), ("legacy/train.py", "XLA602")]
    for bad in ("new/*", "new/*:XLA999", ":XLA1"):
        code, _, err = run_cli("check", "--per-file-ignores", bad, ".", cwd=project)
        assert code == 2 and err.count("\n") == 1 and "--per-file-ignores" in err, err


def test_watch_checks_again_when_a_file_changes(project):
    path = project.write("train.py", SOURCE)
    proc = subprocess.Popen([sys.executable, "-m", "xlalint", "check", "--watch", "--no-cache", "--quiet", path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "XLALINT_WATCH_CYCLES": "2", "XLALINT_WATCH_INTERVAL": "0.05"})
    try:
        assert "XLA602" in proc.stdout.readline()
        deadline = time.time() + 60
        err = ""
        while "Watching" not in err and time.time() < deadline:
            err += proc.stderr.readline()
        path.write_text(HEADER + "x = torch.ones(3)\n")  # the findings are gone
        out, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "File change detected" in rest
    assert proc.returncode == 0 and "XLA" not in out


# -- formats ---------------------------------------------------------------------------------------

def test_json_lines_is_one_json_object_per_finding(run_cli, project):
    path = project.write("train.py", SOURCE)
    code, out, _ = run_cli("check", "--output-format", "json-lines", path)
    lines = out.splitlines()
    _, full, _ = run_cli("check", "--output-format", "json", path)
    assert code == 1 and [json.loads(line) for line in lines] == json.loads(full)


def test_gitlab_code_quality_report(run_cli, project):
    project.write("src/train.py", SOURCE)
    code, out, _ = run_cli("check", "--output-format", "gitlab", "src", cwd=project)
    items = json.loads(out)
    assert code == 1 and len(items) == 3
    for item in items:
        assert set(item) == {"check_name", "description", "severity", "fingerprint", "location"}
        assert item["location"]["path"] == "src/train.py" and item["severity"] in ("info", "minor", "major")
        assert item["location"]["lines"]["begin"] >= 1
    assert len({item["fingerprint"] for item in items}) == 3  # the two XLA602 findings differ
    project.write("src/train.py", "\n\n" + SOURCE)  # moved lines: same fingerprints (GitLab tracks them)
    moved = json.loads(run_cli("check", "--output-format", "gitlab", "src", cwd=project)[1])
    assert {i["fingerprint"] for i in moved} == {i["fingerprint"] for i in items}


def test_junit_report_parses_and_counts_failures(run_cli, project):
    project.write("train.py", SOURCE)
    project.write("ok.py", HEADER + "x = torch.ones(3)\n")
    code, out, _ = run_cli("check", "--output-format", "junit", ".", cwd=project)
    root = ElementTree.fromstring(out.encode())
    assert code == 1 and root.tag == "testsuites" and root.get("failures") == "3"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "train.py" and len(suite.findall("testcase/failure")) == 3
    assert {c.get("name") for c in suite.findall("testcase")} == {"org.xlalint.XLA101", "org.xlalint.XLA602"}
    code, out, _ = run_cli("check", "--output-format", "junit", "ok.py", cwd=project)
    root = ElementTree.fromstring(out.encode())
    assert code == 0 and root.get("failures") == "0" and root.find("testsuite/testcase") is not None


# reviewdog's Diagnostic Format as its documentation (proto/rdf) describes it; written here from the
# description, not copied: the fields xlalint emits, with their types
POSITION = {"type": "object", "properties": {"line": {"type": "integer", "minimum": 1},
                                             "column": {"type": "integer", "minimum": 1}},
            "required": ["line", "column"]}
RANGE = {"type": "object", "properties": {"start": POSITION, "end": POSITION}, "required": ["start"]}
RDJSON = {
    "type": "object",
    "required": ["diagnostics"],
    "properties": {
        "source": {"type": "object", "properties": {"name": {"type": "string"}, "url": {"type": "string"}}},
        "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
        "diagnostics": {"type": "array", "items": {
            "type": "object",
            "required": ["message", "location"],
            "properties": {
                "message": {"type": "string"},
                "location": {"type": "object", "required": ["path", "range"],
                             "properties": {"path": {"type": "string"}, "range": RANGE}},
                "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
                "code": {"type": "object", "required": ["value"],
                         "properties": {"value": {"type": "string"}, "url": {"type": "string"}}},
                "suggestions": {"type": "array", "items": {
                    "type": "object", "required": ["range", "text"],
                    "properties": {"range": RANGE, "text": {"type": "string"}}}},
            },
        }},
    },
}


def test_rdjson_for_reviewdog(run_cli, project):
    # a non-ASCII name before the finding: rdjson counts columns in UTF-8 bytes
    path = project.write("train.py", SOURCE + "é = 1; xm.mark_step()\n")
    code, out, _ = run_cli("check", "--output-format", "rdjson", "train.py", cwd=project)
    report = json.loads(out)
    jsonschema.validate(report, RDJSON)
    assert code == 1 and len(report["diagnostics"]) == 4
    last = report["diagnostics"][-1]
    assert last["code"]["value"] == "XLA602" and last["location"]["path"] == "train.py"
    line = path.read_text().splitlines()[last["location"]["range"]["start"]["line"] - 1]
    start = last["location"]["range"]["start"]["column"]
    assert line.encode()[start - 1:].startswith(b"xm.mark_step")
    (suggestion,) = last["suggestions"]
    assert suggestion["text"] == "torch_xla.sync" and suggestion["range"]["start"]["column"] == start


# -- text output -------------------------------------------------------------------------------------

def test_text_output_shows_the_line_with_carets_and_concise_stays_one_line(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", "train.py", cwd=project)
    lines = out.splitlines()
    at = lines.index("train.py:10:18: XLA101 `.item()` on a per-step path forces a device-to-host sync every step")
    assert lines[at + 1:at + 4] == ["   |", "10 |         total += loss.item()", "   |                  ^^^^^^^^^^^"]
    code, out, _ = run_cli("check", "--output-format", "concise", "train.py", cwd=project)
    assert out.splitlines()[0].startswith("train.py:10:18: XLA101") and "|" not in out and "hint" not in out


def test_the_frame_of_a_notebook_finding_shows_the_cells_line(run_cli, project):
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "%pip install x\n"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": TRAIN_LOOP}]
    project.write("nb.ipynb", json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    code, out, _ = run_cli("check", "nb.ipynb", cwd=project)
    assert "nb.ipynb:cell 2:10:18: XLA101" in out and "10 |         total += loss.item()" in out


def test_fix_diff_is_coloured_on_a_terminal_only(project):
    path = project.write("train.py", HEADER + "xm.mark_step()\n")
    plain = xlalint("fix", "--no-cache", path)
    assert plain.returncode == 1 and "+torch_xla.sync()" in plain.stdout and not ANSI.search(plain.stdout)
    coloured = xlalint("fix", "--no-cache", "--color", "always", path)
    assert "\x1b[32m+torch_xla.sync()" in coloured.stdout and "\x1b[31m-xm.mark_step()" in coloured.stdout
    assert not ANSI.search(xlalint("fix", "--no-cache", path, env={"NO_COLOR": "1", "FORCE_COLOR": ""}).stdout)


def test_check_diff_does_not_end_with_a_fix_flag(run_cli, project):
    path = project.write("train.py", HEADER + "xm.mark_step()\n")
    for command in (("check", "--diff"), ("fix",)):
        code, _, err = run_cli(*command, path)
        assert code == 1 and err.strip().splitlines()[-1] == "Would fix 1 error in 1 file.", err


# -- errors and newer syntax ---------------------------------------------------------------------------

def test_syntax_error_is_path_row_col(run_cli, project):
    project.write("bad.py", "import torch\nx = (1,\n")
    code, _, err = run_cli("check", "bad.py", cwd=project)
    assert code == 2 and re.fullmatch(r"bad\.py:2:5: error: syntax error: .*\n", err), err


NEWER = {
    "pep695_alias.py": "import torch\ntype Batch = list[torch.Tensor]\n",
    "pep695_generic.py": "import torch\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n",
    "pep701_fstring.py": "import torch\nname = 'x'\nprint(f\"{'a' + f\"{name}\"}\")\n",
}


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the interpreter parses this syntax itself")
@pytest.mark.parametrize("name", sorted(NEWER))
def test_newer_python_syntax_is_a_notice_not_a_syntax_error(run_cli, project, name):
    project.write(name, NEWER[name])
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", ".", cwd=project)
    assert code == 1 and "train.py:10:18: XLA101" in out  # the other files are still checked
    (line,) = err.splitlines()
    assert line.startswith(f"{name}:") and ": warning: syntax newer than Python 3." in line
    assert "syntax error" not in err and "Traceback" not in err
    code, _, err = run_cli("fix", "--write", name, cwd=project)
    assert code == 0 and "syntax error" not in err and (project / name).read_text() == NEWER[name]


def test_real_syntax_errors_stay_errors_whatever_the_grammar(run_cli, project):
    project.write("bad.py", "import torch\ntype = 1\ndef f[T(x):\n    pass\n")
    code, _, err = run_cli("check", "bad.py", cwd=project)
    assert code == 2 and "error: syntax error" in err


# -- messages ------------------------------------------------------------------------------------------

MAX_MESSAGE = 160


def test_messages_are_one_short_sentence_and_hints_do_not_repeat_them():
    for rule in ALL_RULES:
        hint_words = set(re.findall(r"\w+", rule.hint.lower()))
        for case in rule.INVALID:
            for d in lint_code(case.code, [rule], modules=case.modules):
                assert len(d.message) <= MAX_MESSAGE, (rule.code, len(d.message), d.message)
                assert "\n" not in d.message
                if hint_words:
                    shared = hint_words & set(re.findall(r"\w+", d.message.lower()))
                    assert len(shared) < 0.8 * len(hint_words), (rule.code, rule.hint)
        assert "named in the message" not in rule.hint, rule.code


# -- configuration -------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["select", "extend-select", "ignore", "exclude", "extend-exclude", "fixable"])
def test_a_string_where_a_list_belongs_is_an_error(run_cli, project, key):
    project.write("pyproject.toml", f'[tool.xlalint]\n{key} = "XLA101"\n')
    project.write("train.py", TRAIN_LOOP)
    code, _, err = run_cli("check", ".", cwd=project)
    assert code == 2 and err.count("\n") == 1
    assert f"pyproject.toml: error: `{key}` must be a list of strings, not a string: write {key} = [\"XLA101\"]" in err


def test_every_configuration_error_has_the_same_prefix(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    for config in ('[tool.xlalint\n', '[tool.xlalint]\nselect = 3\n', '[tool.xlalint]\nnope = 1\n',
                   '[tool.xlalint]\nselect = ["XLA99"]\n', '[tool.xlalint]\npreview = "yes"\n'):
        project.write("pyproject.toml", config)
        code, _, err = run_cli("check", ".", cwd=project)
        assert code == 2 and err.startswith(f"{project / 'pyproject.toml'}: error: "), (config, err)


# -- unused noqa (XLA901) ------------------------------------------------------------------------------

def test_unused_noqa_codes_are_found_and_fixed_so_baselines_do_not_rot(run_cli, project):
    path = project.write("train.py", TRAIN_LOOP)
    assert run_cli("check", "--add-noqa", path)[0] == 0
    assert "# noqa: XLA101" in path.read_text() and run_cli("check", path)[0] == 0
    # the hazard is fixed by hand: the baseline's comment now suppresses nothing
    path.write_text(path.read_text().replace("total += loss.item()", "total += loss.detach()"))
    code, out, _ = run_cli("check", "--output-format", "concise", path)
    assert code == 1 and "XLA901 [*] unused `noqa` code: `XLA101`" in out
    code, _, _ = run_cli("fix", "--write", path)
    assert code == 0 and "noqa" not in path.read_text()
    assert "total += loss.detach()\n" in path.read_text()


def test_unused_noqa_leaves_codes_of_rules_that_did_not_run_alone(run_cli, project):
    path = project.write("train.py", TRAIN_LOOP.replace("total += loss.item()", "total += loss.item()  # noqa: XLA101, XLA401"))
    assert run_cli("check", "--select", "XLA1,XLA901", "--assume-xla", path)[0] == 0  # XLA401 not selected
    assert run_cli("check", path)[0] == 0  # XLA401 runs only on XLA code: this is none, not judged
    code, out, _ = run_cli("check", "--output-format", "json", "--assume-xla", path)
    found = [d for d in json.loads(out) if d["code"] == "XLA901"]
    assert [d["message"] for d in found] == ["unused `noqa` code: `XLA401`"]
    assert run_cli("check", "--ignore", "XLA901", path)[0] == 0


# -- rule documentation ---------------------------------------------------------------------------------

def test_every_rule_url_names_a_page_that_exists_and_explain_names_it(run_cli):
    root = Path(__file__).resolve().parent.parent
    for rule in ALL_RULES:
        (d,) = [d for d in lint_code(rule.INVALID[0].code, [rule], modules=rule.INVALID[0].modules)][:1] or [None]
        if d is None:
            continue
        assert (root / "docs" / "rules" / d.url.rsplit("/", 1)[1]).is_file(), d.url
    code, out, _ = run_cli("explain", "XLA101")
    page = Path(out.strip().splitlines()[-1].removeprefix("This page: "))
    assert code == 0 and page.is_file() and page.name == "item-in-step.md"
    assert json.loads(run_cli("explain", "--output-format", "json", "XLA101")[1])["page"] == str(page)


def test_watch_refuses_standard_input(run_cli, project):
    code, _, err = run_cli("check", "--watch", "-", cwd=project, input="import torch\n")
    assert code == 2 and err == "xlalint: error: --watch checks files: it cannot be used with standard input\n"
