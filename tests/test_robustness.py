"""Hostile input through the console script, as a separate process (a crash must not take pytest
with it): each bad file gets one line naming it and exit 2 (or a warning where Ruff only warns),
never a traceback, never a partial write, and the other files are still checked."""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from samples import TRAIN_LOOP

XLA_LOOP = "import torch_xla.core.xla_model as xm\n" + TRAIN_LOOP  # XLA101 + the XLA401 fix
HANG_GUARD = 120  # seconds: generous, only to turn a hang into a failure (speed lives in benchmarks/)


def xlalint(*args, cwd=None, timeout=HANG_GUARD):
    proc = subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    return proc


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if ": error:" in line]


@pytest.fixture
def tree(project):
    project.write("z_train.py", TRAIN_LOOP)  # the file that must still be checked
    return project


@pytest.mark.parametrize("name, content, why", [
    ("syntax.py", "def f(:\n    pass\n", "syntax error"),  # no torch in it: still parsed
    ("nul.py", b"import torch\nx = 1\x00\n", "null bytes"),
    ("binary.py", bytes(range(256)) * 4, "cannot decode"),
    ("latin1.py", b"import torch\nname = '\xe9'\n", "cannot decode as utf-8"),
    ("cookie.py", b"# -*- coding: klingon -*-\nimport torch\n", "cannot decode"),
])
def test_a_bad_file_is_one_line_and_the_others_are_checked(tree, name, content, why):
    tree.write(name, content)
    proc = xlalint("check", "--no-cache", tree)
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert line.startswith(str(tree / name)) and why in line
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_readable_oddities_are_checked(tree):
    tree.write("empty.py", "")
    tree.write("cookie.py", "# -*- coding: latin-1 -*-\n".encode() + TRAIN_LOOP.replace("0.0", "0.0  # \xe9").encode("latin-1"))
    tree.write("bom.py", b"\xef\xbb\xbf" + TRAIN_LOOP.encode())
    tree.write("crlf.py", TRAIN_LOOP.replace("\n", "\r\n"))
    tree.write("mixed.py", TRAIN_LOOP.replace("\n", "\r\n", 4))
    proc = xlalint("check", "--no-cache", tree)
    assert proc.returncode == 1 and proc.stderr == ""
    for name in ("bom", "crlf", "mixed", "z_train"):
        assert f"{name}.py:10:18: XLA101" in proc.stdout, name
    assert "cookie.py:11:18: XLA101" in proc.stdout  # one line more: the cookie
    assert "empty.py" not in proc.stdout


@pytest.mark.parametrize("expression", [
    "+".join(["a"] * 5000),  # a long flat chain: a deep tree
    "(" * 3000 + "1" + ")" * 3000,
    "f(" * 2000 + "1" + ")" * 2000,
    "a" + ".b" * 5000,
    "a" + "[0]" * 5000,
    "not " * 5000 + "a",
    "a if b else " * 2000 + "c",
    "lambda: " * 1000 + "a",
])
@pytest.mark.parametrize("command", [["check"], ["fix", "--write", "--unsafe-fixes"]])
def test_deeply_nested_code_ends_quickly_in_a_verdict(tree, expression, command):
    path = tree.write("deep.py", f"import torch\nimport torch_xla.core.xla_model as xm\nxm.mark_step()\nx = {expression}\n")
    before = path.read_bytes()
    proc = xlalint(*command, "--no-cache", tree)
    assert proc.returncode in (0, 1, 2)
    errors = error_lines(proc)
    assert all(line.startswith(str(path)) for line in errors) and len(errors) <= 1
    if errors:  # not analysed: untouched
        assert path.read_bytes() == before
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_a_huge_generated_file_is_refused_fast(tree):
    big = tree / "generated.py"
    line = b"x_0 = torch.zeros(3) + 1  # padding padding padding padding\n"
    with open(big, "wb") as handle:
        handle.write(b"import torch\n" + line * (50 * 2**20 // len(line)))
    proc = xlalint("check", "--no-cache", tree)
    assert proc.returncode == 2
    (message,) = error_lines(proc)
    assert message.startswith(str(big)) and "MiB" in message
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_one_long_generated_function_is_linear_enough_to_finish(tree):
    body = "".join(f"    y{i % 97} = x * {i} + torch.zeros({i % 7})\n" for i in range(30_000))
    tree.write("long.py", "import torch\n\ndef f(x):\n" + body)
    proc = xlalint("check", "--no-cache", tree)
    assert proc.returncode == 1 and proc.stderr == ""


def test_missing_paths_and_symlink_loops_are_reported_and_the_rest_checked(tree):
    os.symlink(tree / "loop_b", tree / "loop_a")
    os.symlink(tree / "loop_a", tree / "loop_b")
    os.symlink(tree / "nowhere.py", tree / "dangling.py")
    proc = xlalint("check", "--no-cache", tree / "nope.py", tree / "loop_a", tree / "dangling.py", tree / "z_train.py")
    assert proc.returncode == 2
    assert error_lines(proc) == [f"{tree / 'nope.py'}: error: No such file or directory",
                                 f"{tree / 'loop_a'}: error: symbolic link loop",
                                 f"{tree / 'dangling.py'}: error: broken symbolic link (to {tree / 'nowhere.py'})"]
    assert "z_train.py:10:18: XLA101" in proc.stdout
    # a symlink loop inside a walked folder is not followed
    assert xlalint("check", "--no-cache", tree).returncode == 2  # dangling.py is found and reported


def test_a_directory_without_python_warns_and_passes(project):
    (project / "docs").mkdir()
    project.write("docs/readme.txt", "torch\n")
    proc = xlalint("check", project / "docs")
    assert proc.returncode == 0
    assert proc.stderr.strip() == "warning: no Python files found under the given paths"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_one_line(tree):
    path = tree.write("secret.py", TRAIN_LOOP)
    path.chmod(0)
    try:
        proc = xlalint("check", "--no-cache", tree)
    finally:
        path.chmod(0o644)
    assert proc.returncode == 2
    assert error_lines(proc) == [f"{path}: error: Permission denied"]
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_a_read_only_file_is_not_written_and_the_others_are(project):
    locked = project.write("a_locked.py", XLA_LOOP)
    locked.chmod(0o444)
    open_file = project.write("b_open.py", XLA_LOOP)
    proc = xlalint("fix", "--write", "--unsafe-fixes", "--no-cache", project)
    assert proc.returncode == 2
    assert error_lines(proc) == [f"{locked}: error: cannot write: the file is read-only"]
    assert locked.read_text() == XLA_LOOP and stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert "optimizer_step(optimizer, barrier=True)" in open_file.read_text()
    assert "; 3 remaining." in proc.stderr  # the locked file: XLA101 and the unwritten XLA401; the open one: XLA101


def test_invalid_config_is_one_line(project):
    project.write("z_train.py", TRAIN_LOOP)
    for config in ('[tool.xlalint\n', '[tool.xlalint]\nselect = 3\n', '[tool.xlalint]\nselect = ["XLA99"]\n'):
        project.write("pyproject.toml", config)
        proc = xlalint("check", project, cwd=project)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "pyproject.toml" in proc.stderr or "selector" in proc.stderr


def test_config_values_are_never_run(project):
    marker = project / "pwned"
    project.write("pyproject.toml", f'[tool.xlalint]\nexclude = ["$(touch {marker})", "`touch {marker}`"]\n'
                                    f'per-file-ignores = {{ "$(touch {marker})" = ["XLA1"] }}\n')
    project.write("z_train.py", TRAIN_LOOP)
    proc = xlalint("check", project, cwd=project)
    assert proc.returncode == 1 and not marker.exists()


def test_control_characters_from_the_file_are_escaped(project):
    name = "evil\x1b[2J.py"
    project.write(name, TRAIN_LOOP + "\nimport nothing\x07\n")  # a name and a syntax error with raw controls
    proc = xlalint("check", "--no-cache", project)
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "evil\\x1b[2J.py" in proc.stderr
    github = xlalint("check", "--output-format", "github", "--no-cache", project / "z.py", project)
    assert "\x1b" not in github.stdout


def _tree_of(project, count):
    for i in range(count):
        project.write(f"pkg/m{i:03}.py", XLA_LOOP + f"\nVERSION = {i}\n")
    return sorted((project / "pkg").glob("*.py"))


def _expected_after_fix(project, tmp_path_factory, files):
    """What each file holds once fixed (computed on a copy)."""
    copy = tmp_path_factory.mktemp("copy")
    for path in files:
        (copy / path.name).write_bytes(path.read_bytes())
    assert xlalint("fix", "--write", "--unsafe-fixes", "--no-cache", copy).returncode == 1
    return {path.name: (copy / path.name).read_bytes() for path in files}


def test_killing_a_write_run_leaves_each_file_old_or_new(project, tmp_path_factory):
    files = _tree_of(project, 150)
    old = {p.name: p.read_bytes() for p in files}
    new = _expected_after_fix(project, tmp_path_factory, files)
    proc = subprocess.Popen([sys.executable, "-m", "xlalint", "fix", "--write", "--unsafe-fixes", "--no-cache",
                             str(project)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline and all(p.read_bytes() == old[p.name] for p in files):
        time.sleep(0.01)  # kill once writing has begun
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for path in files:
        assert path.read_bytes() in (old[path.name], new[path.name]), path
    # a temporary file being written when killed may stay behind, but never as a module of the tree
    assert sorted((project / "pkg").glob("*.py")) == files
    # a second run finishes the job
    xlalint("fix", "--write", "--unsafe-fixes", "--no-cache", project)
    assert all(p.read_bytes() == new[p.name] for p in files)


def test_two_concurrent_write_runs_corrupt_nothing(project, tmp_path_factory):
    files = _tree_of(project, 120)
    new = _expected_after_fix(project, tmp_path_factory, files)
    command = [sys.executable, "-m", "xlalint", "fix", "--write", "--unsafe-fixes", str(project)]
    runs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=HANG_GUARD)
        assert run.returncode in (0, 1, 2) and "Traceback" not in err, err
        # a file the other run fixed after this one read it is left to it, with one line
        errors = [line for line in err.splitlines() if ": error:" in line]
        assert all(line.endswith("cannot write: the file changed since xlalint read it; not written (run again)")
                   for line in errors), err
        assert (run.returncode == 2) == bool(errors)
    for path in files:
        assert path.read_bytes() == new[path.name], path
        compile(path.read_bytes(), str(path), "exec")
