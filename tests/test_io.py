"""Nothing lost, nothing wrong (issue 27): writes that respect the user's edits and links."""

import os
import stat

from samples import TRAIN_LOOP

XLA_LOOP = "import torch_xla.core.xla_model as xm\n" + TRAIN_LOOP  # XLA101 + the XLA401 fix
FIXED = "optimizer_step(optimizer, barrier=True)"


def test_an_edit_saved_while_fix_runs_is_kept(run_cli, project, monkeypatch):
    path = project.write("train.py", XLA_LOOP)
    edited = XLA_LOOP + "\nEDITED_BY_THE_USER = 1\n"
    real_fsync = os.fsync

    def save_meanwhile(fd):  # the write path flushes its temporary file: the user saves just then
        path.write_text(edited)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", save_meanwhile)
    code, _, err = run_cli("fix", "--write", "--unsafe-fixes", "--no-cache", project)
    assert path.read_text() == edited
    assert err.splitlines()[0] == (f"{path}: error: cannot write: the file changed since xlalint read it; "
                                   "not written (run again)")
    assert "Fixed 0 errors in 0 files; 2 remaining." in err  # XLA101 and the unwritten XLA401
    assert code == 2
    assert not [p for p in project.iterdir() if p.name.endswith(".xlalint-tmp")]


def test_a_symbolic_link_is_written_through_to_its_target_in_the_project(run_cli, project):
    target = project.write("pkg/real.py", XLA_LOOP)
    target.chmod(0o750)
    link = project / "link.py"
    link.symlink_to("pkg/real.py")
    code, _, err = run_cli("fix", "--write", "--unsafe-fixes", "--no-cache", link)
    assert code == 1, err  # XLA101 remains
    assert link.is_symlink() and os.readlink(link) == "pkg/real.py"
    assert FIXED in target.read_text() and stat.S_IMODE(target.stat().st_mode) == 0o750
    # the link and its target both checked: written once, no error
    target.write_text(XLA_LOOP)
    code, _, err = run_cli("fix", "--write", "--unsafe-fixes", "--no-cache", project)
    assert code == 1 and ": error:" not in err, err
    assert link.is_symlink() and FIXED in target.read_text()


def test_a_symbolic_link_out_of_the_project_is_not_written(run_cli, project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "theirs.py"
    outside.write_text(XLA_LOOP)
    project.write("pyproject.toml", "")
    link = project / "link.py"
    link.symlink_to(outside)
    code, _, err = run_cli("fix", "--write", "--unsafe-fixes", "--no-cache", project)
    assert code == 2
    assert [line for line in err.splitlines() if ": error:" in line] == [
        f"{link}: error: cannot write: a symbolic link to {outside}, outside the project; not written"]
    assert outside.read_text() == XLA_LOOP and link.is_symlink()


def test_a_hard_linked_file_is_not_split(run_cli, project):
    path = project.write("train.py", XLA_LOOP)
    os.link(path, project / "twin.txt")
    code, _, err = run_cli("fix", "--write", "--unsafe-fixes", "--no-cache", path)
    assert code == 2
    assert f"{path}: error: cannot write: the file has 2 hard links; not written" in err
    assert path.read_text() == XLA_LOOP and os.stat(path).st_ino == os.stat(project / "twin.txt").st_ino


# -- a cloned repository must not hurt the user ------------------------------------------------------

def _cache_file(project):
    from xlalint.cache import CACHE_DIR_NAME, digest

    return project / CACHE_DIR_NAME / f"{digest(str(project.resolve()).encode())}.json"


def test_a_symlinked_cache_gitignore_writes_nothing_outside(run_cli, project, tmp_path_factory):
    victim = tmp_path_factory.mktemp("home") / ".bashrc"
    project.write("train.py", TRAIN_LOOP)
    (project / ".xlalint_cache").mkdir()
    (project / ".xlalint_cache" / ".gitignore").symlink_to(victim)
    code, out, err = run_cli("check", project)
    assert code == 1 and "train.py:10:18: XLA101" in out
    assert not victim.exists() and not os.path.exists(victim)
    assert err == f"warning: {project / '.xlalint_cache' / '.gitignore'}: a symbolic link in the cache; " \
                  "running without a cache\n"
    assert not _cache_file(project).exists()


def test_a_symlinked_cache_folder_receives_nothing(run_cli, project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    project.write("train.py", TRAIN_LOOP)
    (project / ".xlalint_cache").symlink_to(elsewhere, target_is_directory=True)
    code, out, err = run_cli("check", project)
    assert code == 1 and "XLA101" in out
    assert list(elsewhere.iterdir()) == [] and "a symbolic link in the cache" in err




def test_a_deeply_nested_cache_file_is_a_corrupt_cache(run_cli, project):
    project.write("train.py", TRAIN_LOOP)
    assert run_cli("check", project)[0] == 1  # writes the cache
    _cache_file(project).write_text("[" * 100_000 + "]" * 100_000)
    for _ in range(2):  # ignored and rebuilt, then read
        code, out, err = run_cli("check", project)
        assert (code, err) == (1, "") and "train.py:10:18: XLA101" in out
    assert _cache_file(project).read_text().startswith('{"code":')
    # nested inside a valid cache (a forged entry): ignored too
    data = _cache_file(project).read_text()
    _cache_file(project).write_text(data.replace('"results":{', '"results":{"#x":' + "[" * 100_000 + "]" * 100_000 + ",", 1))
    code, out, err = run_cli("check", project)
    assert (code, err) == (1, "") and "XLA101" in out


def _xlalint_bounded(*args, cwd=None):
    """The console script with 2 GiB of address space and a time limit: reading `/dev/zero` or
    waiting on a FIFO fails the test instead of taking the machine."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = subprocess.run([sys.executable, "-m", "xlalint", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120, preexec_fn=limit)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_a_fifo_module_is_one_line_not_a_hang(project):
    project.write("z_train.py", TRAIN_LOOP)
    os.mkfifo(project / "x.py")
    proc = _xlalint_bounded("check", "--no-cache", project)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if ": error:" in line] == [
        f"{project / 'x.py'}: error: not a regular file (a FIFO); not read"]
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_files_linked_to_dev_zero_are_never_read(project):
    project.write("z_train.py", TRAIN_LOOP)
    for name in ("x.py", "setup.py", "pyproject.toml", "requirements.txt"):
        (project / name).symlink_to("/dev/zero")
    # one other file: the project index skips them
    proc = _xlalint_bounded("check", project / "z_train.py")
    assert (proc.returncode, proc.stderr) == (1, "") and "z_train.py:10:18: XLA101" in proc.stdout
    # the whole tree: each module is one line
    proc = _xlalint_bounded("check", project)
    assert proc.returncode == 2
    assert sorted(line for line in proc.stderr.splitlines() if ": error:" in line) == [
        f"{project / name}: error: not a regular file (a character device); not read" for name in ("setup.py", "x.py")]
    assert "z_train.py:10:18: XLA101" in proc.stdout


def test_a_cache_file_linked_to_dev_zero_is_not_read(project):
    project.write("train.py", TRAIN_LOOP)
    _cache_file(project).parent.mkdir()
    _cache_file(project).symlink_to("/dev/zero")
    proc = _xlalint_bounded("check", project)
    assert proc.returncode == 1 and "XLA101" in proc.stdout
    assert proc.stderr == f"warning: {_cache_file(project)}: a symbolic link in the cache; running without a cache\n"


# -- folders that cannot be read (simulated: the tests run as root, whom permission bits never stop) ---

def _deny(monkeypatch, folder, *, listing):
    """Act as a user who may not search `folder` (stat or open what is in it) and, unless `listing`,
    not list it either: the calls raise PermissionError as the kernel would."""
    import errno

    inside = str(folder) + os.sep

    def guard(real, under_only=True):
        def call(path, *args, **kwargs):
            text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if text.startswith(inside) or (not under_only and text == str(folder)):
                raise PermissionError(errno.EACCES, "Permission denied", text)
            return real(path, *args, **kwargs)
        return call

    for name in ("stat", "lstat", "open"):
        monkeypatch.setattr(os, name, guard(getattr(os, name)))
    if not listing:
        monkeypatch.setattr(os, "scandir", guard(os.scandir, under_only=False))


def _errors(err):
    return [line for line in err.splitlines() if ": error:" in line]


def test_an_unreadable_folder_in_the_tree_is_one_line_and_not_checked(run_cli, project, monkeypatch):
    project.write("z_train.py", TRAIN_LOOP)
    project.write("secret/train.py", TRAIN_LOOP)
    _deny(monkeypatch, project / "secret", listing=False)
    code, out, err = run_cli("check", "--no-cache", project)
    assert _errors(err) == [f"{project / 'secret'}: error: cannot read folder: Permission denied"]
    assert code == 2 and "z_train.py:10:18: XLA101" in out and "1 file could not be checked." in out


def test_a_folder_readable_but_not_searchable_is_one_line_per_file(run_cli, project, monkeypatch):
    project.write("z_train.py", TRAIN_LOOP)
    project.write("locked/train.py", TRAIN_LOOP)
    _deny(monkeypatch, project / "locked", listing=True)
    code, out, err = run_cli("check", "--no-cache", project)
    assert _errors(err) == [f"{project / 'locked' / 'train.py'}: error: Permission denied"]
    assert code == 2 and "z_train.py:10:18: XLA101" in out


def test_a_named_file_under_an_unsearchable_folder_is_one_line(run_cli, project, monkeypatch):
    project.write("z_train.py", TRAIN_LOOP)
    path = project.write("locked/train.py", TRAIN_LOOP)
    _deny(monkeypatch, project / "locked", listing=False)
    code, out, err = run_cli("check", "--no-cache", path, project / "z_train.py")
    assert _errors(err) == [f"{path}: error: Permission denied"]
    assert code == 2 and "z_train.py:10:18: XLA101" in out
