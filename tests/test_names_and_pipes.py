"""What a hostile tree and a hostile pipeline do to the real `xlalint` process (its console script, run
as a subprocess: a crash there must not take pytest with it, and the streams are real file
descriptors): file names that are not UTF-8 or hold control characters, standard output closed
early, fixes that cannot be written, files named that are not Python, and the temporary files of a
run killed while writing (issue 40)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from samples import TRAIN_LOOP

XLALINT = Path(sys.executable).with_name("xlalint")  # the venv's console script
XLA_LOOP = "import torch_xla.core.xla_model as xm\n" + TRAIN_LOOP  # XLA101 at 11:18, XLA401 (a fix) at 10:9
HANG_GUARD = 120

pytestmark = pytest.mark.skipif(not XLALINT.exists(), reason="the console script is not installed beside Python")


def run(*args, cwd, tmp, stdout=subprocess.PIPE):
    """`xlalint ARGS` in `cwd`; its temporary folder (where a crash report would go) is `tmp`."""
    proc = subprocess.run(
        [str(XLALINT), *map(os.fsdecode, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp), "NO_COLOR": "1"},
        timeout=HANG_GUARD,
    )
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    err = proc.stderr.decode("utf-8")  # strict: whatever the names, the output is UTF-8
    assert "Traceback" not in err and "internal error" not in err and "Exception ignored" not in err, err
    assert not list(tmp.glob("xlalint-crash-*")), err
    out = proc.stdout.decode("utf-8") if proc.stdout is not None else ""
    return proc.returncode, out, err


@pytest.fixture
def tmp(tmp_path):
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


@pytest.fixture
def tree(tmp_path):
    folder = tmp_path / "tree"
    folder.mkdir()
    return folder


def _bad_name(tree: Path, stem: bytes = b"bad\xff", content: str = TRAIN_LOOP) -> Path:
    """A file whose name is not UTF-8 (bytes, as Linux allows), created through the bytes API."""
    name = os.path.join(os.fsencode(tree), stem + b".py")
    with open(name, "wb") as handle:
        handle.write(content.encode())
    return Path(os.fsdecode(name))


needs_byte_names = pytest.mark.skipif(sys.platform != "linux", reason="names are bytes on Linux")


# -- 1 and 4. names that are not UTF-8 or hold control characters ---------------------------------


@needs_byte_names
def test_a_name_that_is_not_utf8_breaks_no_run_of_the_project(tree, tmp):
    _bad_name(tree)
    (tree / "ok.py").write_text(TRAIN_LOOP)
    for _ in range(2):  # cold, then from the cache
        code, out, _ = run("check", "--output-format", "concise", "ok.py", cwd=tree, tmp=tmp)
        assert (code, out.splitlines()[0]) == (1, "ok.py:10:18: XLA101 `.item()` on a per-step path forces a "
                                                  "device-to-host sync every step")
        code, out, _ = run("check", "--output-format", "concise", ".", cwd=tree, tmp=tmp)
        assert code == 1
        assert [line.split(" ")[0] for line in out.splitlines()[:2]] == ["bad\\xff.py:10:18:", "ok.py:10:18:"]


@needs_byte_names
@pytest.mark.parametrize("fmt", ["text", "concise", "github", "json", "json-lines", "gitlab", "junit", "rdjson",
                                 "sarif"])
def test_every_output_format_shows_such_a_name_escaped(tree, tmp, fmt):
    _bad_name(tree)
    code, out, _ = run("check", "--no-cache", "--output-format", fmt, ".", cwd=tree, tmp=tmp)
    assert code == 1
    if fmt in ("json", "gitlab", "rdjson", "sarif"):
        strings = list(_strings(json.loads(out)))
        assert not any("\ud800" <= c <= "\udfff" for s in strings for c in s)  # valid Unicode: any parser reads it
        expected = "bad%FF.py" if fmt == "sarif" else "bad\\xff.py"  # SARIF's URI: the byte, percent-encoded
        assert expected in strings
    elif fmt == "json-lines":
        assert [json.loads(line)["filename"] for line in out.splitlines()] == ["bad\\xff.py"]
    elif fmt == "junit":
        assert ElementTree.fromstring(out).find("testsuite").get("name") == "bad\\xff.py"
    else:
        assert "bad\\xff.py:10:18: XLA101" in out


def _strings(data):
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield key
            yield from _strings(value)
    elif isinstance(data, list):
        for item in data:
            yield from _strings(item)


@needs_byte_names
def test_the_cache_keeps_such_names_apart_from_their_escapes(tree, tmp):
    """`bad\\xff.py` (the byte 0xff) and `bad\\\\xff.py` (a backslash, an x, two f's): two files, two
    cache entries, whatever the reports show."""
    _bad_name(tree, content=TRAIN_LOOP)
    (tree / "bad\\xff.py").write_text(TRAIN_LOOP.replace("total += loss.item()", "total += loss"))
    reports = [run("check", "--output-format", "json", ".", cwd=tree, tmp=tmp) for _ in range(2)]
    assert reports[0] == reports[1]  # the warm run reads each file's own entry
    code, out, _ = reports[0]
    assert code == 1 and len(json.loads(out)) == 1


@needs_byte_names
def test_fix_write_fixes_a_file_whose_name_is_not_utf8(tree, tmp):
    path = _bad_name(tree, content=XLA_LOOP)
    code, out, err = run("fix", "--unsafe-fixes", ".", cwd=tree, tmp=tmp)
    assert code == 1 and out.startswith("--- a/bad\\xff.py\n+++ b/bad\\xff.py\n")
    code, out, err = run("fix", "--write", "--unsafe-fixes", "--show-fixes", ".", cwd=tree, tmp=tmp)
    assert code == 1 and "- bad\\xff.py:" in err and "Fixed 1 error in 1 file; 1 remaining." in err
    assert "optimizer_step(optimizer, barrier=True)" in path.read_text()
    assert sorted(os.listdir(os.fsencode(tree))) == [b".xlalint_cache", b"bad\xff.py"]  # no temporary file left


@pytest.mark.parametrize("name, escaped", [("new\nline.py", "new\\nline.py"), ("tab\tx.py", "tab\\tx.py"),
                                           ("esc\x1b[2J.py", "esc\\x1b[2J.py")])
def test_a_name_with_control_characters_is_one_escaped_line_everywhere(tree, tmp, name, escaped):
    (tree / name).write_text(XLA_LOOP)
    code, out, _ = run("check", "--no-cache", "--output-format", "concise", ".", cwd=tree, tmp=tmp)
    assert code == 1 and out.splitlines()[:2] == [
        f"{escaped}:10:9: XLA401 [unsafe fix] `optimizer.step()` in an XLA training loop without a step barrier "
        "or gradient reduction",
        f"{escaped}:11:18: XLA101 `.item()` on a per-step path forces a device-to-host sync every step",
    ]
    code, out, _ = run("check", "--no-cache", ".", cwd=tree, tmp=tmp)  # the full text output
    assert any(line.startswith(f"{escaped}:11:18: XLA101") for line in out.splitlines())
    assert run("check", "--show-files", ".", cwd=tree, tmp=tmp)[1] == f"{escaped}\n"
    code, out, err = run("fix", "--no-cache", "--unsafe-fixes", "--show-fixes", ".", cwd=tree, tmp=tmp)
    assert out.startswith(f"--- a/{escaped}\n+++ b/{escaped}\n") and f"- {escaped}:" in err.splitlines()
    (tree / name).write_text("import torch\ndef f(:\n")
    code, _, err = run("check", "--no-cache", ".", cwd=tree, tmp=tmp)
    assert code == 2 and err.splitlines() == [f"{escaped}:2:7: error: syntax error: invalid syntax"]
    # JSON carries the name itself (its own escapes make it one line)
    (tree / name).write_text(XLA_LOOP)
    code, out, _ = run("check", "--no-cache", "--output-format", "json", ".", cwd=tree, tmp=tmp)
    assert {d["filename"] for d in json.loads(out)} == {name}


# -- 2. standard output closed early ------------------------------------------------------------------


def _closed_pipe():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: every write fails with EPIPE
    return write_end


@pytest.mark.parametrize("args, expected", [
    (("check", "."), 1),  # the run's own code: findings remain
    (("check", "--output-format", "json", "."), 1),
    (("check", "--exit-zero", "."), 0),
    (("fix", "--unsafe-fixes", "."), 1),  # a diff
    (("rules",), 0),
])
def test_a_closed_pipe_ends_the_run_quietly_with_its_own_exit_code(tree, tmp, args, expected):
    for n in range(30):  # output enough to fill a pipe's buffer
        (tree / f"m{n}.py").write_text(XLA_LOOP)
    write_end = _closed_pipe()
    try:
        code, _, err = run(*args, cwd=tree, tmp=tmp, stdout=write_end)
    finally:
        os.close(write_end)
    assert code == expected  # no crash report, no "Exception ignored" at exit (see `run`)
    assert err == ("Would fix 30 errors in 30 files.\n" if args[0] == "fix" else "")


def test_readers_that_stop_early_in_a_shell_pipeline(tree, tmp):
    """`xlalint check . | head -1` and `| true`, as users write them: the reader gets what it read,
    and the run ends quietly with its own exit code (1: findings remain)."""
    many = TRAIN_LOOP.replace("        total += loss.item()\n", "        total += loss.item()\n" * 100)
    for n in range(10):  # a report of ~300 kB, more than a pipe holds
        (tree / f"m{n}.py").write_text(many)
    for reader in ("head -1", "true"):  # `true` has gone before the first byte is written
        proc = subprocess.run(
            f"'{XLALINT}' check --no-cache . | {reader}; echo \"exit ${{PIPESTATUS[0]}}\"",
            shell=True, executable="/bin/bash", cwd=tree, capture_output=True, text=True, timeout=HANG_GUARD,
            env={**os.environ, "TMPDIR": str(tmp), "NO_COLOR": "1"},
        )
        first = ["m0.py:10:18: XLA101 `.item()` on a per-step path forces a device-to-host sync every step"]
        assert proc.stdout.splitlines() == (first if reader == "head -1" else []) + ["exit 1"]
        assert proc.stderr == "" and not list(tmp.glob("xlalint-crash-*"))


# -- 3. a fix that cannot be written ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["read-only", "hard link"])
def test_a_fix_not_written_reports_the_file_as_it_is(tree, tmp, how):
    path = tree / "ro.py"
    path.write_text(XLA_LOOP)
    if how == "read-only":  # (refused by its mode bits: as root too)
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        why = "ro.py: error: cannot write: the file is read-only"
    else:
        os.link(path, tree / "other.py")
        why = "ro.py: error: cannot write: the file has 2 hard links; not written (a rewrite would split them)"
    before = path.read_bytes()
    code, out, err = run("fix", "--write", "--unsafe-fixes", "--no-cache", "ro.py", cwd=tree, tmp=tmp)
    assert code == 2 and path.read_bytes() == before
    assert err.splitlines() == [why, "Fixed 0 errors in 0 files; 2 remaining."]
    # the findings of the text on disk, where they are on disk (line 10 is `optimizer.step()`)
    assert [line.split(" ")[:2] for line in out.splitlines()] == [["ro.py:10:9:", "XLA401"], ["ro.py:11:18:", "XLA101"]]
    _, checked, _ = run("check", "--no-cache", "--output-format", "concise", "-q", "ro.py", cwd=tree, tmp=tmp)
    assert [line.split(" ")[0] for line in checked.splitlines()] == [line.split(" ")[0] for line in out.splitlines()]


# -- 4. files named that are not Python -------------------------------------------------------------


def test_a_named_file_that_is_not_python_is_said_not_checked(tree, tmp):
    (tree / "notes.md").write_text("# Notes\n\nimport torch: `x.item()` in a loop\n")
    code, out, err = run("check", "notes.md", cwd=tree, tmp=tmp)
    assert code == 0  # a warning, as Ruff's for a file it does not lint; the exit code is the other files'
    assert err == "warning: notes.md: not checked: not a Python file (.py, .pyi, .ipynb, or a `#!` line naming python)\n"
    (tree / "train").write_text("#!/usr/bin/env python3\n" + TRAIN_LOOP)  # a script: checked
    (tree / "ok.py").write_text(TRAIN_LOOP)
    code, out, err = run("check", "--output-format", "concise", "notes.md", "train", "ok.py", cwd=tree, tmp=tmp)
    assert code == 1 and [line.split(":")[0] for line in out.splitlines()[:2]] == ["ok.py", "train"]
    assert err.startswith("warning: notes.md: not checked")
    code, out, err = run("fix", "--write", "notes.md", cwd=tree, tmp=tmp)
    assert code == 0 and err.startswith("warning: notes.md: not checked")


# -- 8. the temporary files of a run killed while writing ----------------------------------------------


def _killed_while_writing(target: Path) -> Path:
    """The temporary file a process killed in the middle of writing `target` leaves (the real writer,
    in a process that dies, as with `kill -9`, between writing it and renaming it over `target`)."""
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from xlalint import source\n"
        "source.os.replace = lambda *a: os._exit(9)\n"
        "source.write_atomic(Path(sys.argv[1]), b'half written')\n"
    )
    before = set(target.parent.iterdir())
    proc = subprocess.run([sys.executable, "-c", script, str(target)], timeout=HANG_GUARD)
    assert proc.returncode == 9
    (left,) = set(target.parent.iterdir()) - before
    return left


def test_leftovers_of_a_killed_write_are_named_for_their_process_and_cleaned_when_stale(tree, tmp):
    (tree / "ok.py").write_text(XLA_LOOP)
    left = _killed_while_writing(tree / "ok.py")
    assert left.name.startswith(".ok.py.") and left.name.endswith(".xlalint-tmp")
    assert left.read_bytes() == b"half written"
    # a live run's temporary file (this process's) is never touched
    live = tree / f".ok.py.{os.getpid()}-abcdefgh.xlalint-tmp"
    live.write_bytes(b"being written")
    # later runs neither check them nor choke on them, and say how to remove them
    code, out, err = run("check", "--output-format", "concise", "-q", ".", cwd=tree, tmp=tmp)
    assert code == 1 and {line.split(":")[0] for line in out.splitlines()} == {"ok.py"}
    assert err == (f"warning: 1 temporary file left by an interrupted xlalint run ({left.name}); "
                   "`xlalint clean` removes it\n")
    code, _, err = run("fix", "--write", "--unsafe-fixes", ".", cwd=tree, tmp=tmp)
    assert code == 1 and "Fixed 1 error in 1 file; 1 remaining." in err
    code, _, err = run("clean", cwd=tree, tmp=tmp)
    assert code == 0 and f"removed {left}" in err.splitlines()
    assert not left.exists() and live.exists()
    # older than an hour, a temporary file is stale whatever its process id says (ids are reused)
    an_hour_ago = time.time() - 3700
    os.utime(live, (an_hour_ago, an_hour_ago))
    assert run("clean", cwd=tree, tmp=tmp)[0] == 0 and not live.exists()
    assert sorted(p.name for p in tree.iterdir()) == ["ok.py"]


def test_clean_removes_only_temporary_files_of_ours(tree, tmp):
    names = ["notes.xlalint-tmp", ".ok.py.xlalint-tmp", "ok.py.123-abcdefgh.tmp", ".ok.py.123-ABCDEFGH.xlalint-tmp"]
    for name in names:
        (tree / name).write_bytes(b"someone else's")
        os.utime(tree / name, (0, 0))  # old: stale, were it ours
    assert run("clean", cwd=tree, tmp=tmp)[0] == 0
    assert sorted(p.name for p in tree.iterdir()) == sorted(names)
