"""The command line as users drive it: exit codes, formats, selection, config, errors."""

import json
import os
import subprocess
import sys

from samples import TRAIN_LOOP


def test_check_reports_and_exits_1(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", project)
    assert code == 1
    assert "train.py:10:18: XLA101" in out
    assert "hint:" in out
    assert "Found 1 error." in out
    assert err == ""


def test_clean_code_exits_0(run_cli, project):
    project.write("ok.py", "import torch\nx = torch.ones(3)\n")
    code, out, _ = run_cli("check", project)
    assert code == 0
    assert "All checks passed!" in out


def test_exit_zero_and_quiet(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", "--exit-zero", "--quiet", project)
    assert code == 0
    assert out.count("\n") == 1 and "XLA101" in out and "hint" not in out


def test_json_shape_is_ruffs_plus_category(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", "--output-format", "json", project)
    assert code == 1
    (item,) = json.loads(out)
    assert set(item) >= {"code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row",
                         "category"}
    assert item["code"] == "XLA101" and item["category"] == "item_sync"
    assert item["location"] == {"row": 10, "column": 18}
    assert item["end_location"] == {"row": 10, "column": 29}
    assert item["url"].endswith("/item-in-step.md")
    assert item["noqa_row"] == 10


def test_select_and_ignore(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    assert run_cli("check", "--select", "XLA2", project)[0] == 0
    assert run_cli("check", "--select", "XLA1", project)[0] == 1
    assert run_cli("check", "--ignore", "XLA101", project)[0] == 0
    assert run_cli("check", "--select", "XLA1", "--ignore", "XLA10", project)[0] == 0


def test_unknown_selector_is_usage_error(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", "--select", "XLA999", project)
    assert code == 2
    assert "unknown rule selector `XLA999`" in err
    assert len(err.strip().splitlines()) == 1


def test_noqa_suppresses(run_cli, project):
    project.write("train.py", TRAIN_LOOP.replace("loss.item()", "loss.item()  # noqa: XLA101"))
    assert run_cli("check", project)[0] == 0
    project.write("train.py", TRAIN_LOOP.replace("loss.item()", "loss.item()  # noqa"))
    assert run_cli("check", project)[0] == 0
    project.write("train.py", TRAIN_LOOP.replace("loss.item()", "loss.item()  # noqa: XLA102"))
    assert run_cli("check", project)[0] == 1
    project.write("train.py", "# xlalint: noqa: XLA101\n" + TRAIN_LOOP)
    assert run_cli("check", project)[0] == 0


def test_missing_path(run_cli, project):
    code, out, err = run_cli("check", project / "nope.py")
    assert code == 2
    assert err.strip().endswith("nope.py: error: No such file or directory")


def test_syntax_error_and_bad_bytes_exit_2_and_others_still_checked(run_cli, project):
    project.write("a_broken.py", "import torch\ndef f(:\n    pass\n")
    project.write("b_latin.py", b"import torch\nname = '\xe9\xff'\n")
    project.write("c_train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", project)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert "a_broken.py:2:7: error: syntax error" in lines[0]  # path:row:col: editors jump to it
    assert "b_latin.py: error: cannot decode as utf-8" in lines[1]
    assert "Traceback" not in err
    assert "c_train.py:10:18: XLA101" in out


def test_pep263_latin1_is_read(run_cli, project):
    source = "# -*- coding: latin-1 -*-\n" + TRAIN_LOOP.replace("total = 0.0", "total = 0.0  # é")
    project.write("train.py", source.encode("latin-1"))
    code, out, err = run_cli("check", project)
    assert code == 1, err
    assert "XLA101" in out


def test_config_pyproject_select_and_per_file_ignores(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\nper-file-ignores = { "legacy_*.py" = ["XLA1"] }\n')
    project.write("legacy_train.py", TRAIN_LOOP)
    project.write("train.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", ".", cwd=project)
    assert code == 1
    assert "train.py" in out and "legacy_train.py" not in out


def test_config_unknown_key_and_code(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    project.write("xlalint.toml", 'selct = ["XLA1"]\n')
    code, _, err = run_cli("check", ".", cwd=project)
    assert code == 2 and "unknown option(s) selct" in err
    project.write("xlalint.toml", 'ignore = ["XLA777"]\n')
    code, _, err = run_cli("check", ".", cwd=project)
    assert code == 2 and "unknown rule selector `XLA777`" in err
    project.write("xlalint.toml", 'ignore = [\n')
    code, _, err = run_cli("check", ".", cwd=project)
    assert code == 2 and "invalid TOML" in err and len(err.strip().splitlines()) == 1


def test_explicit_config_file(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    config = project.write("ci/lint.toml", 'ignore = ["XLA101"]\n')
    assert run_cli("check", "--config", config, project / "train.py")[0] == 0
    code, _, err = run_cli("check", "--config", project / "missing.toml", project)
    assert code == 2 and "config file not found" in err


def test_excludes_gitignore_and_default_dirs(run_cli, project):
    (project / ".git").mkdir()
    project.write(".gitignore", "generated/\n")
    project.write("generated/train.py", TRAIN_LOOP)
    project.write(".venv/lib/train.py", TRAIN_LOOP)
    project.write("build/train.py", TRAIN_LOOP)
    project.write("xlalint.toml", 'extend-exclude = ["legacy"]\n')
    project.write("legacy/train.py", TRAIN_LOOP)
    project.write("src/train.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", ".", cwd=project)
    assert code == 1
    assert "src/train.py" in out
    for hidden in ("generated", ".venv", "build", "legacy"):
        assert f"{hidden}/" not in out
    # a file named explicitly is linted unless --force-exclude (pre-commit passes names)
    assert run_cli("check", "legacy/train.py", cwd=project)[0] == 1
    assert run_cli("check", "--force-exclude", "legacy/train.py", cwd=project)[0] == 0


def test_explain_and_rules(run_cli):
    code, out, _ = run_cli("explain", "XLA101")
    assert code == 0
    assert out.startswith("# item-in-step (XLA101)")
    for section in ("## What it does", "## Why is this bad?", "## Example", "Use instead:"):
        assert section in out
    assert run_cli("explain", "item-in-step")[1] == out
    code, _, err = run_cli("explain", "XLA000")
    assert code == 2 and "unknown rule" in err
    code, out, _ = run_cli("rules")
    assert code == 0 and "XLA101" in out and "item-in-step" in out
    rules = json.loads(run_cli("rules", "--output-format", "json")[1])
    assert {"code", "name", "category", "summary", "explanation"} <= set(rules[0])


def test_console_script_runs_as_a_process(project):
    project.write("train.py", TRAIN_LOOP)
    proc = subprocess.run([sys.executable, "-m", "xlalint", "check", str(project)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "XLA101" in proc.stdout


def test_never_imports_linted_code(run_cli, project):
    marker = project / "imported.txt"
    project.write("train.py", f"import torch\nopen({str(marker)!r}, 'w').write('ran')\n" + TRAIN_LOOP)
    run_cli("check", project)
    run_cli("fix", "--write", "--unsafe-fixes", project)
    assert not marker.exists()
    assert "xlalint_linted" not in sys.modules


def test_internal_error_is_one_line_and_other_files_still_checked(run_cli, project, monkeypatch):
    import xlalint.workspace

    def flaky(real):
        def lint(source, *args, **kwargs):
            if source.path.name == "a_boom.py":
                raise ValueError("boom")
            return real(source, *args, **kwargs)
        return lint

    monkeypatch.setattr(xlalint.workspace, "lint_source", flaky(xlalint.workspace.lint_source))
    project.write("a_boom.py", TRAIN_LOOP)
    project.write("b_train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", project)
    assert code == 2
    assert "a_boom.py: error: internal error in xlalint (ValueError: boom); please report it with the traceback in " \
        in err
    assert len(err.strip().splitlines()) == 1
    assert "b_train.py:10:18: XLA101" in out


def test_text_output_shows_fixes_and_fix_applies(run_cli, project):
    script = project.write("train.py", "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n")
    code, out, _ = run_cli("check", project)
    assert code == 1
    assert "XLA602 [*]" in out and "fix:" in out and "(safe)" in out
    assert "[*] 1 fixable with `xlalint fix --write`." in out
    code, out, err = run_cli("fix", project)  # a diff, nothing written
    assert code == 1 and "+torch_xla.sync()" in out and "xm.mark_step()" in script.read_text()
    code, out, err = run_cli("fix", "--write", project)
    assert code == 0, out + err
    assert script.read_text() == "import torch_xla\n\ntorch_xla.sync()\n"
    assert run_cli("check", project)[0] == 0


def test_a_check_with_nothing_to_fix_never_loads_libcst(project):
    """libcst costs more to import than a warm run's whole work: it loads only to build a fix."""
    project.write("train.py", TRAIN_LOOP)  # an XLA101 finding, which has no fix
    script = ("import sys\nfrom xlalint.cli import main\n"
              "try:\n    main(['check', '--no-cache', sys.argv[1]])\nexcept SystemExit as exit:\n    code = exit.code\n"
              "print(code, 'libcst._nodes.module' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script, str(project)], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "1 False", proc.stdout + proc.stderr
    project.write("old.py", "import torch_xla.core.xla_model as xm\nxm.mark_step()\n")  # XLA602 has a fix
    proc = subprocess.run([sys.executable, "-c", script, str(project)], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "1 True", proc.stdout + proc.stderr


def test_json_has_the_fix_edits_even_after_a_text_run_filled_the_cache(run_cli, project):
    """Text output builds fixes without their edits (cheaper); the cache keeps the two apart."""
    project.write("old.py", "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n")
    code, out, _ = run_cli("check", project)
    assert code == 1 and "[*]" in out and "fix:" in out
    code, out, _ = run_cli("check", "--output-format", "json", project)
    (item,) = json.loads(out)
    assert item["fix"]["edits"] and "torch_xla.sync" in "".join(e["content"] for e in item["fix"]["edits"])


def test_show_files_lists_what_would_be_checked(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\nextend-exclude = ["vendored"]\n')
    project.write("src/train.py", "x = 1\n")
    project.write("src/nb.ipynb", "{}")
    project.write("vendored/lib.py", "x = 1\n")
    code, out, _ = run_cli("check", "--show-files", ".", cwd=project)
    assert code == 0 and out.splitlines() == ["src/nb.ipynb", "src/train.py"]


def test_show_settings_names_the_config_file_and_the_rules_in_force(run_cli, project):
    config = project.write("pyproject.toml", '[tool.xlalint]\nper-file-ignores = { "legacy/*.py" = ["XLA1"] }\n')
    project.write("legacy/old.py", "x = 1\n")
    code, out, _ = run_cli("check", "--show-settings", "--ignore", "XLA6", "legacy/old.py", cwd=project)
    assert code == 0
    assert f"Settings path: {config.resolve()}" in out and 'ignore = ["XLA6"]' in out
    assert 'per-file-ignores = {"legacy/*.py": ["XLA1"]}' in out
    rules_line = next(line for line in out.splitlines() if line.startswith("rules in force"))
    assert "XLA201" in rules_line and "XLA101" not in rules_line and "XLA602" not in rules_line


ADD_NOQA = (
    "import torch_xla.core.xla_model as xm\r\n"
    "for x in loader:\r\n"
    "    loss = model(x)\r\n"
    "    loss.backward()\r\n"
    "    xm.optimizer_step(opt, barrier=True)\r\n"
    "    print(loss.item())  # keep this\r\n"
    '    text = f"""{loss.item()}\r\n'
    '"""\r\n'
    "    v = loss.item()  # noqa: XLA999\r\n"
    "d = xm.xla_device()  # noqa\r\n"
)


def test_add_noqa_baselines_every_finding_and_merges_existing_comments(run_cli, project):
    path = project.write("t.py", ADD_NOQA)
    code, _, err = run_cli("check", "--add-noqa", "t.py", cwd=project)
    assert code == 0 and "Added 3 noqa directives." in err
    data = path.read_bytes()
    assert data.count(b"\r\n") == ADD_NOQA.count("\r\n") and b"\n" not in data.replace(b"\r\n", b"")
    lines = data.decode().splitlines()
    assert lines[5] == "    print(loss.item())  # keep this  # noqa: XLA101"
    assert lines[7] == '"""  # noqa: XLA101'  # a multi-line string: its last line
    assert lines[8] == "    v = loss.item()  # noqa: XLA101, XLA999"
    assert lines[9] == "d = xm.xla_device()  # noqa"  # a bare noqa covers everything already
    code, out, _ = run_cli("check", "t.py", cwd=project)
    assert code == 0, out
    code, _, err = run_cli("check", "--add-noqa", "t.py", cwd=project)  # idempotent
    assert "Added 0 noqa directives." in err and path.read_bytes() == data
