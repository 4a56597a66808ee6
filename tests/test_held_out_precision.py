"""Wrong findings seen on held-out PyTorch/XLA training repositories (issue 30, a precision sample),
each written here as a general minimal example."""

import ast
import json
import textwrap
from pathlib import Path

from xlalint.analysis.context import FileContext
from xlalint.source import SourceText


def findings(run_cli, project, files, *args, package=False):
    """(file, row, code) of `xlalint check` over a checkout of `files` (name -> code): an application
    (a `.git` folder only), or an installable package (`package=True`: a pyproject.toml)."""
    (project / ".git").mkdir(exist_ok=True)
    if package:
        project.write("pyproject.toml", "[project]\nname = 'p'\n")
    for name, code in files.items():
        project.write(name, textwrap.dedent(code))
    out = run_cli("check", "--no-cache", "--output-format", "json", *args, cwd=project)[1]
    return sorted((d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out))


# -- a file of JAX arrays has no torch tensors ------------------------------------------------------

EVALUATE = """\
import {framework}


def evaluate(model, loader):
    correct = 0.0
    for x, y in loader:
        logits = model(x)
        correct += float((logits.argmax(-1) == y).sum())
        print(logits.max().item())
    return correct
"""


def test_torch_rules_leave_a_jax_file_to_the_jax_rules(run_cli, project):
    assert findings(run_cli, project, {"eval_jax.py": EVALUATE.format(framework="jax.numpy as jnp")}) == []
    # the same loop over torch tensors: two host reads every step
    assert findings(run_cli, project, {"eval_torch.py": EVALUATE.format(framework="torch")}) == [
        ("eval_torch.py", 8, "XLA103"),
        ("eval_torch.py", 9, "XLA101"),
    ]


def test_a_file_importing_both_keeps_its_torch_tensors():
    code = EVALUATE.format(framework="jax\nimport torch")
    ctx = FileContext(Path("t.py"), ast.parse(code), SourceText(code))
    assert not ctx.jax_only
    assert FileContext(Path("t.py"), ast.parse(EVALUATE.format(framework="jax")), SourceText("")).jax_only
