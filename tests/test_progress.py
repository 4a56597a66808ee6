"""The progress line: only on a terminal, only for runs longer than its delay, erased afterwards."""

import io

from xlalint.config import Settings
from xlalint.progress import Progress
from xlalint.rules import ALL_RULES
from xlalint.workspace import Workspace


def test_a_short_run_prints_nothing():
    stream = io.StringIO()
    bar = Progress(stream, delay=60).step("checking", 3)
    for _ in range(3):
        bar.update()
    bar.close()
    assert stream.getvalue() == ""


def test_a_long_run_draws_its_count_and_erases_the_line(project):
    for n in range(3):
        project.write(f"m{n}.py", "import torch_xla\nx = 1\n")
    stream = io.StringIO()
    workspace = Workspace(Settings(root=project), ALL_RULES, jobs=1, cache=False, progress=Progress(stream, delay=0))
    outcomes = workspace.check(sorted(project.glob("*.py")))
    workspace.close()
    assert len(outcomes) == 3
    out = stream.getvalue()
    assert "] 3/3 checking" in out and out.endswith("\r") and out.rstrip("\r").split("\r")[-1].strip() == ""


def test_piped_output_gets_no_progress_line(run_cli, project):
    for n in range(3):
        project.write(f"m{n}.py", "import torch_xla\nx = 1\n")
    code, _, err = run_cli("check", ".", cwd=project)  # the test runner's stderr is no terminal
    assert code == 0 and "\r" not in err
