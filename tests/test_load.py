"""Load and limits (issue 27): worker counts, crashes and Ctrl-C."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from samples import TRAIN_LOOP
from xlalint import workspace
from xlalint.workspace import worker_count


def test_workers_are_capped_by_files_and_cores():
    cores = os.cpu_count() or 1
    assert worker_count(5000, 3) == min(3, cores)
    assert worker_count(5000, 10_000) == cores
    assert worker_count(None, 10_000) == cores
    assert worker_count(2, 10_000) == min(2, cores)
    assert worker_count(8, 0) == 1


def test_jobs_5000_on_a_few_files_starts_no_more_processes_than_files_and_cores(run_cli, project, monkeypatch):
    started = []
    real = workspace.ProcessPoolExecutor

    def recording(max_workers, **kwargs):
        started.append(max_workers)
        return real(max_workers, **kwargs)

    monkeypatch.setattr(workspace, "ProcessPoolExecutor", recording)
    for i in range(3):
        project.write(f"t{i}.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", "--no-cache", "--jobs", "5000", project)
    assert code == 1 and out.count("XLA101") == 3
    assert started == []  # three files: checked in-process
    for i in range(3, workspace.PARALLEL_MIN + 2):
        project.write(f"t{i}.py", TRAIN_LOOP)
    code, out, _ = run_cli("check", "--no-cache", "--jobs", "5000", project)
    assert code == 1 and out.count("XLA101") == workspace.PARALLEL_MIN + 2
    assert started and max(started) <= min(workspace.PARALLEL_MIN + 2, os.cpu_count() or 1)


def test_a_crash_in_a_rule_is_one_line_with_a_report_file(run_cli, project, monkeypatch):
    from xlalint.rules import RULES_BY_CODE

    def finish(self):
        raise ValueError("rule bug")

    monkeypatch.setattr(RULES_BY_CODE["XLA101"], "finish", finish)
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", "--no-cache", project)
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{project / 'train.py'}: error: internal error in xlalint (ValueError: rule bug); ")
    report = re.search(r"traceback in (\S+)$", line).group(1)
    assert "ValueError: rule bug" in open(report).read()
    os.unlink(report)


def test_a_crash_outside_any_file_is_one_line_and_exit_2(run_cli, project, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("index bug")

    monkeypatch.setattr(workspace.ProjectIndex, "facts", boom)
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", "--no-cache", project)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("xlalint: error: internal error (RuntimeError: index bug); please report it with the "
                           "traceback in ")
    report = line.rpartition(" ")[2]
    assert "RuntimeError: index bug" in open(report).read() and "Traceback" in open(report).read()
    os.unlink(report)


def test_ctrl_c_in_process_exits_130_quietly(run_cli, project, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(workspace, "lint_source", interrupted)
    project.write("train.py", TRAIN_LOOP)
    code, out, err = run_cli("check", "--no-cache", project)
    assert (code, out, err) == (130, "", "")


def test_ctrl_c_stops_the_workers_and_exits_130_without_tracebacks(project):
    body = "".join(f"    y{i} = x * {i} + torch.zeros({i % 7})\n" for i in range(3000))
    for i in range(40):
        project.write(f"m{i:02}.py", TRAIN_LOOP + f"\ndef f(x):\n{body}")
    # as from a terminal: Ctrl-C not ignored, whatever this test process inherited or an earlier test
    # left (a process started with SIGINT ignored keeps it ignored, and Python then installs no handler)
    proc = subprocess.Popen([sys.executable, "-m", "xlalint", "check", "--no-cache", "--jobs", "2", str(project)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(3)  # importing, indexing: the workers are busy by now
    if proc.poll() is not None:
        pytest.fail("the run ended before Ctrl-C; make the input slower")
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
