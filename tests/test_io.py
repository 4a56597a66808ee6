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
