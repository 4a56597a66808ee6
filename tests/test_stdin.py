"""Standard input (`check -`, `fix -`, `--stdin-filename`), as editors and formatters' integrations use it."""

import json

STEP = """\
import torch_xla.core.xla_model as xm

for x, y in loader:
    loss = model(x)
    loss.backward()
    xm.optimizer_step(optimizer, barrier=True)
    print(loss.item())
device = xm.xla_device()
"""
FIXED = STEP.replace("import torch_xla.core.xla_model as xm\n", "import torch_xla.core.xla_model as xm\nimport torch_xla\n") \
    .replace("xm.xla_device()", "torch_xla.device()")


def test_check_reads_standard_input_and_names_findings_by_the_stdin_filename(run_cli, project):
    code, out, err = run_cli("check", "--output-format", "json", "-", "--stdin-filename", "src/train.py",
                             cwd=project, input=STEP)
    assert code == 1, err
    found = {(d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out)}
    assert found == {("src/train.py", 7, "XLA101"), ("src/train.py", 8, "XLA602")}
    code, out, _ = run_cli("check", "--output-format", "json", "-", cwd=project, input=STEP)
    assert code == 1 and {d["filename"] for d in json.loads(out)} == {"-"}


def test_configuration_per_file_ignores_and_noqa_apply_by_that_name(run_cli, project):
    project.write("pyproject.toml", '[tool.xlalint]\nper-file-ignores = { "legacy/*.py" = ["XLA1"] }\n'
                                    'extend-exclude = ["generated"]\n')
    project.write("legacy/.keep", "")
    code, out, _ = run_cli("check", "--output-format", "json", "-", "--stdin-filename", "legacy/train.py",
                           cwd=project, input=STEP)
    assert code == 1 and [d["code"] for d in json.loads(out)] == ["XLA602"]
    noqa = STEP.replace("xm.xla_device()", "xm.xla_device()  # noqa: XLA602")
    code, out, _ = run_cli("check", "-q", "-", "--stdin-filename", "legacy/train.py", cwd=project, input=noqa)
    assert code == 0 and out == ""
    # an excluded name: checked when asked for, skipped with --force-exclude (as Ruff)
    code, _, _ = run_cli("check", "-", "--stdin-filename", "generated/train.py", cwd=project, input=STEP)
    assert code == 1
    code, out, _ = run_cli("check", "--force-exclude", "-", "--stdin-filename", "generated/train.py", cwd=project,
                           input=STEP)
    assert code == 0


def test_fix_prints_the_fixed_source_and_what_remains_on_stderr(run_cli, project):
    code, out, err = run_cli("fix", "-", "--stdin-filename", "train.py", cwd=project, input=STEP)
    assert out == FIXED
    assert code == 1 and "train.py:8:11: XLA101" in err  # the .item() has no fix; rows of the fixed source
    compile(out, "train.py", "exec")
    code, again, _ = run_cli("fix", "-", cwd=project, input=out)
    assert again == FIXED  # idempotent
    code, out, _ = run_cli("fix", "--diff", "-", "--stdin-filename", "train.py", cwd=project, input=STEP)
    assert code == 1 and "+device = torch_xla.device()" in out and out.startswith("--- a/train.py")
    code, out, _ = run_cli("fix", "-", cwd=project, input="x = 1\n")
    assert code == 0 and out == "x = 1\n"


def test_bad_standard_input_is_a_one_line_error(run_cli, project):
    code, _, err = run_cli("check", "-", "--stdin-filename", "t.py", cwd=project, input="x = (\n")
    assert code == 2 and "t.py:1:5: error:" in err and "Traceback" not in err
    code, _, err = run_cli("fix", "-", cwd=project, input=b"\xff\xfe\x00bad")
    assert code == 2 and "Traceback" not in err
    code, _, err = run_cli("check", "-", "other.py", cwd=project, input="x = 1\n")
    assert code == 2 and err.count("\n") == 1 and "standard input" in err


HELPER = "def grid_sizes(coords):\n    return [int(n.item()) for n in coords.amax(dim=1) + 1]\n"
CALLER = """\
import torch.nn as nn

from helpers import grid_sizes


class PosEmbed(nn.Module):
    def forward(self, x, coords):
        sizes = grid_sizes(coords)
        return x + self.interpolate(sizes)
"""


def test_what_other_modules_say_follows_the_lines_of_the_text_given(run_cli, project):
    # the project's facts about model.py come from the file as saved (the call at line 8); the text on
    # standard input (an editor's unsaved buffer) has a line more above it: the finding moves with it
    project.write("helpers.py", HELPER)
    project.write("model.py", CALLER)
    edited = "# a line typed above\n" + CALLER
    code, out, err = run_cli("check", "--no-cache", "--output-format", "json", "-", "--stdin-filename", "model.py",
                             cwd=project, input=edited)
    assert code == 1, err
    assert [(d["code"], d["location"]["row"]) for d in json.loads(out)] == [("XLA109", 9)]
    # `fix -`: nothing to fix; what remains is the same finding, at its new line
    code, out, err = run_cli("fix", "--no-cache", "-", "--stdin-filename", "model.py", cwd=project, input=edited)
    assert out == edited and "model.py:9:17: XLA109" in err
