"""Notebooks: code cells checked and fixed as one module, reported at (cell, row), JSON kept byte for byte."""

import json

import nbformat
import pytest

CELLS = [
    {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Fine-tuning on a TPU\n", "Ünïcödé stays as it is"]},
    {"cell_type": "code", "execution_count": 1, "id": "setup", "metadata": {}, "outputs": [],
     "source": ["%pip install -q torch_xla\n", "import torch\n", "import torch_xla.core.xla_model as xm\n",
                "device = xm.xla_device()"]},
    {"cell_type": "code", "execution_count": 2, "id": "shell", "metadata": {}, "outputs": [],
     "source": ["%%bash\n", "  nproc\n"]},
    {"cell_type": "code", "execution_count": 3, "id": "train", "metadata": {"tags": ["train"]},
     "outputs": [{"name": "stdout", "output_type": "stream", "text": ["0.25\n"]}],
     "source": ["for x, y in loader:\n", "    loss = model(x.to(device), y.to(device))\n", "    loss.backward()\n",
                "    xm.optimizer_step(optimizer, barrier=True)\n", "    !date\n", "    print(loss.item())\n"]},
]


def notebook(cells=CELLS, **dump):
    data = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                         "name": "python3"}, "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}
    dump = {"indent": 1, "sort_keys": True, "ensure_ascii": False, **dump}
    return json.dumps(data, **dump) + "\n"


def findings(run_cli, project, name="train.ipynb"):
    code, out, err = run_cli("check", "--output-format", "json", name, cwd=project)
    assert code in (0, 1), err
    return sorted((d["cell"], d["location"]["row"], d["location"]["column"], d["code"]) for d in json.loads(out))


def test_findings_are_reported_at_their_cell_and_row(run_cli, project):
    project.write("train.ipynb", notebook())
    # cell numbers count every cell (the markdown one is cell 1); IPython lines are no syntax errors
    assert findings(run_cli, project) == [(2, 4, 10, "XLA602"), (4, 6, 11, "XLA101")]
    code, out, _ = run_cli("check", "train.ipynb", cwd=project)
    assert code == 1 and "train.ipynb:cell 4:6:11: XLA101" in out


def test_folders_include_notebooks_and_noqa_works_in_a_cell(run_cli, project):
    cells = json.loads(json.dumps(CELLS))
    cells[3]["source"][-1] = "    print(loss.item())  # noqa: XLA101\n"
    project.write("nbs/train.ipynb", notebook(cells))
    code, out, _ = run_cli("check", "--output-format", "json", ".", cwd=project)
    assert code == 1 and [(d["cell"], d["code"]) for d in json.loads(out)] == [(2, "XLA602")]


@pytest.mark.parametrize("dump", [{}, {"indent": 2, "sort_keys": False}, {"ensure_ascii": True}])
def test_fix_rewrites_only_the_edited_cell_and_keeps_the_layout(run_cli, project, dump):
    original = notebook(**dump)
    path = project.write("train.ipynb", original)
    code, _, err = run_cli("fix", "--write", "train.ipynb", cwd=project)
    assert code == 1, err  # the .item() has no fix and remains
    fixed = path.read_text(encoding="utf-8")
    expected = json.loads(original)
    expected["cells"][1]["source"] = ["%pip install -q torch_xla\n", "import torch\n",
                                      "import torch_xla.core.xla_model as xm\n", "import torch_xla\n",
                                      "device = torch_xla.device()"]
    assert fixed == json.dumps(expected, **{"indent": 1, "sort_keys": True, "ensure_ascii": False, **dump}) + "\n"
    nbformat.validate(nbformat.reads(fixed, as_version=4))  # a valid nbformat 4 notebook
    # valid: the cells run as Python once the IPython lines are left out
    for cell in json.loads(fixed)["cells"][1:2]:
        compile("".join(l for l in cell["source"] if not l.startswith("%")), "cell", "exec")
    assert findings(run_cli, project) == [(4, 6, 11, "XLA101")]
    code, out, _ = run_cli("fix", "train.ipynb", cwd=project)  # idempotent: nothing left to fix
    assert out == "" and path.read_text(encoding="utf-8") == fixed


def test_the_diff_shows_cells_with_their_ipython_lines(run_cli, project):
    path = project.write("train.ipynb", notebook())
    code, out, _ = run_cli("fix", "train.ipynb", cwd=project)
    assert code == 1 and "\n %pip install -q torch_xla\n" in out and "+device = torch_xla.device()" in out
    assert "\n # %% cell 3\n %%bash\n" in out
    assert path.read_text(encoding="utf-8") == notebook()  # a diff changes nothing


def test_a_layout_that_cannot_be_reproduced_is_checked_but_never_rewritten(run_cli, project):
    odd = notebook().replace('"cells": [', '"cells":  [', 1)  # two spaces: no json.dumps writes that
    path = project.write("train.ipynb", odd)
    assert findings(run_cli, project) == [(2, 4, 10, "XLA602"), (4, 6, 11, "XLA101")]
    code, _, err = run_cli("fix", "--write", "train.ipynb", cwd=project)
    assert code == 2 and "its own layout" in err and err.count("error:") == 1
    assert path.read_text(encoding="utf-8") == odd


def test_broken_notebooks_are_one_line_errors(run_cli, project):
    project.write("bad.ipynb", "{not json")
    code, _, err = run_cli("check", "bad.ipynb", cwd=project)
    assert code == 2 and "bad.ipynb: error: not a notebook" in err and "Traceback" not in err
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "x"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": "import torch_xla\nfor x in loader:\n    y = (\n"}]
    project.write("syntax.ipynb", notebook(cells))
    code, _, err = run_cli("check", "syntax.ipynb", cwd=project)
    assert code == 2 and "syntax.ipynb:cell 2:3:" in err


def test_standard_input_named_as_a_notebook_is_one(run_cli, project):
    code, out, _ = run_cli("fix", "-", "--stdin-filename", "train.ipynb", cwd=project, input=notebook())
    assert code == 1 and json.loads(out)["cells"][1]["source"][-1] == "device = torch_xla.device()"


def test_a_shell_escape_continued_on_indented_lines_is_no_syntax_error(run_cli, project):
    cells = [{"cell_type": "code", "execution_count": 1, "id": "pip", "metadata": {}, "outputs": [],
              "source": ["!pip install a \\\n", "    b \\\n", "        c\n", "import torch\n",
                         "for x in loader:\n", "    %time f(x)  \\\n", "  more\n", "    print(x.item())\n"]}]
    project.write("train.ipynb", notebook(cells))
    code, out, err = run_cli("check", "--select", "XLA", "train.ipynb", cwd=project)
    assert "syntax error" not in err and code in (0, 1), err


def test_an_added_runtime_import_lands_after_the_pip_cell_in_the_cell_importing_torch(run_cli, project):
    """The fix's `from xlalint.runtime import ...` must run after `%pip install` (issue 31): it goes
    below the imports of the first cell that imports torch, not at the top of the first cell."""
    def code(source):
        return {"cell_type": "code", "execution_count": None, "id": f"c{len(source)}", "metadata": {}, "outputs": [],
                "source": source}

    cells = [code("%pip install -q torch_xla xlalint\n"),
             {"cell_type": "markdown", "id": "md", "metadata": {}, "source": "Setup"},
             code("import os\nimport torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n"),
             code("for x, y in loader:\n    loss = model(x.to(device), y.to(device))\n    loss.backward()\n"
                  "    optimizer.step()\n")]
    path = project.write("train.ipynb", notebook(cells))
    code_, _, err = run_cli("fix", "--write", "--unsafe-fixes", "train.ipynb", cwd=project)
    data = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    nbformat.validate(data)
    sources = [c.source for c in data.cells]
    assert sources[0] == "%pip install -q torch_xla xlalint\n", err
    setup = sources[2].splitlines()
    runtime = next(i for i, line in enumerate(setup) if line.startswith("from xlalint.runtime import"))
    assert setup[:2] == ["import os", "import torch"] and runtime > setup.index("import torch")
    assert "optimizer_step(optimizer, barrier=True)" in sources[3]
