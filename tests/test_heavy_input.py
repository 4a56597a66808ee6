"""Heavy input: nesting as deep as Python compiles is checked (and only deeper is refused), the work
of a check grows with the file, not faster, and a generated module too large for its fixes to be
built is checked without them, with one line saying so. Work is counted, never timed
(benchmarks/heavy_input.py prints the seconds and the memory)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from xlalint import engine, workspace
from xlalint.analysis.index import ModuleIndex

TRAIN = """\
import torch
import torch_xla.core.xla_model as xm


def train(model, loader, optimizer, c):
    for batch in loader:
        t = model(batch)
        y = {expr}
        loss = y.sum()
        loss.backward()
        optimizer.step()
        print(loss.item())
"""

# (shape, terms): each a tree as deep as its terms (a call chain: two levels a term), near what
# Python 3.11 compiles in a module (about 3,000 levels); boolean and comparison chains are flat
NESTED = {
    "sum": lambda n: " + ".join(["t"] * n),
    "concatenation": lambda n: " + ".join(['"s"'] * n),
    "subscripts": lambda n: "t" + "[0]" * n,
    "attributes": lambda n: "t" + ".a" * n,
    "calls": lambda n: "t" + ".f()" * n,
    "conditionals": lambda n: " if c else ".join(["t"] * n),
    "boolean": lambda n: " and ".join(["t"] * n),
    "comparison": lambda n: " < ".join(["t"] * n),
}
TERMS = {"sum": 2800, "concatenation": 2800, "subscripts": 2800, "attributes": 2800, "calls": 1400,
         "conditionals": 2800, "boolean": 20_000, "comparison": 20_000}


def python_compiles(source: str) -> bool:
    """What Python itself says of the module: compiled by a fresh interpreter, as `python file.py`."""
    run = subprocess.run([sys.executable, "-c", "import sys; compile(sys.stdin.read(), 'm.py', 'exec')"],
                         input=source, capture_output=True, text=True)
    return run.returncode == 0


@pytest.mark.parametrize("shape", NESTED)
def test_nesting_python_compiles_is_checked(run_cli, project, shape):
    source = TRAIN.format(expr=NESTED[shape](TERMS[shape]))
    assert python_compiles(source)
    project.write("train.py", source)
    # (no fixes: libcst's own parser is slow on such trees; the test below builds them)
    # (`--confidence possible`: the value analysis follows a few levels, so `loss` of a 2,800-level
    # expression has no origin it can show; what is tested here is that the file is checked at all)
    code, out, err = run_cli("check", "--no-cache", "--jobs", "1", "--unfixable", "ALL", "--confidence", "possible",
                             "--output-format", "json", project / "train.py")
    assert (code, err) == (1, ""), err
    assert {"XLA101", "XLA401"} <= {d["code"] for d in json.loads(out)}


@pytest.mark.parametrize("shape,terms", [("sum", 2800), ("boolean", 5000)])
def test_fixes_are_built_on_deep_trees(run_cli, project, shape, terms):
    project.write("train.py", TRAIN.format(expr=NESTED[shape](terms)))
    code, out, err = run_cli("check", "--no-cache", "--jobs", "1", "--output-format", "json", project / "train.py")
    assert (code, err) == (1, ""), err
    fixes = {d["code"]: d["fix"] for d in json.loads(out)}
    assert fixes["XLA401"] is not None and fixes["XLA401"]["edits"]


@pytest.mark.parametrize("shape,terms", [("sum", 4000), ("calls", 2500)])
def test_nesting_python_refuses_is_refused(run_cli, project, shape, terms):
    source = TRAIN.format(expr=NESTED[shape](terms))
    if python_compiles(source):
        pytest.skip("this Python compiles it")
    project.write("train.py", source)
    code, out, err = run_cli("check", "--no-cache", "--jobs", "1", project / "train.py")
    assert code == 2 and "train.py: error: cannot parse: nesting too deep" in err


def generated(functions: int) -> str:
    """A generated module: many small torch functions, each with a branch and a loop, a model
    calling each, and its training loop."""
    body = "".join(
        f"def layer_{i}(x, w, cfg):\n    y = torch.matmul(x, w[{i % 31}])\n    if cfg.flag_{i % 13}:\n"
        f"        y = y + {i}\n    for k in range(cfg.depth):\n        y = torch.relu(y) * k\n    return y\n\n\n"
        for i in range(functions)
    )
    calls = "".join(f"        x = layer_{i}(x, self.w, self.cfg)\n" for i in range(functions))
    model = f"class Model(torch.nn.Module):\n    def forward(self, x):\n{calls}        return x\n"
    train = ("\n\ndef train(model, loader, optimizer):\n    for batch in loader:\n        loss = model(batch).sum()\n"
             "        loss.backward()\n        optimizer.step()\n")
    return "import torch\n\n\n" + body + model + train


def test_the_work_of_a_check_grows_with_the_file(run_cli, project, monkeypatch):
    """Asking each function's scope of every branch of the module made a module of 40,000 functions
    cost 40,000 x 40,000: twice the functions must cost about twice the lookups, not four times."""
    counted: Counter = Counter()
    real = ModuleIndex.scope_of

    def scope_of(self, node):
        counted["scope_of"] += 1
        return real(self, node)

    monkeypatch.setattr(ModuleIndex, "scope_of", scope_of)
    work = []
    for functions in (200, 400):
        counted.clear()
        project.write(f"{functions}/gen.py", generated(functions))  # (a folder each: a project each)
        code, _, err = run_cli("check", "--no-cache", "--jobs", "1", project / f"{functions}/gen.py")
        assert code in (0, 1) and "error" not in err, err
        work.append(counted["scope_of"])
    assert work[1] < 2.5 * work[0], work


def test_a_module_too_large_for_its_fixes_is_checked_without_them(run_cli, project, monkeypatch):
    source = TRAIN.format(expr="t + 1")
    project.write("train.py", source)
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert code == 1 and {d["code"]: d["fix"] for d in json.loads(out)}["XLA401"] is not None
    parsed = []
    monkeypatch.setattr(engine, "parse_cst", lambda source: parsed.append(source))
    budget = len(source.encode()) - 1  # (the real budget is 512 KiB: a test would analyse megabytes)
    monkeypatch.setattr(engine, "MAX_FIX_BYTES", budget)
    monkeypatch.setattr(workspace, "MAX_FIX_BYTES", budget)
    for _ in range(2):  # cold, then from the cache: the same findings, the same notice
        code, out, err = run_cli("check", "--output-format", "json", project / "train.py")
        assert code == 1 and parsed == []
        found = json.loads(out)
        assert {"XLA101", "XLA401"} <= {d["code"] for d in found} and all(d["fix"] is None for d in found)
        assert err.count("\n") == 1 and "train.py: warning: " in err and "findings without fixes" in err, err
