"""What torch.compile traces (analysis/compiled.py), and how the other families behave there."""

import ast
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.compiled import CompileOptions
from xlalint.engine import analyse
from xlalint.rules import ALL_RULES, RULES_BY_CODE
from xlalint.source import decode_source
from xlalint.testing import lint_code

DYN = [r for r in ALL_RULES if r.code.startswith("DYN")]
STABLE = [r for r in ALL_RULES if not r.preview]


def _regions(code: str):
    ctx = analyse(decode_source(Path("m.py"), textwrap.dedent(code).encode()))
    names = {getattr(f, "name", "<lambda>"): o for f, o in ctx.compiled.functions.items()}
    return ctx, names


def test_what_is_compiled_and_with_which_options():
    _, names = _regions("""
        import functools
        import torch
        import torch._dynamo

        class Block(torch.nn.Module):
            def forward(self, x):
                return helper(x)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
            def forward(self, x):
                return self.block(x)

        def helper(x):
            return x * 2

        @torch.compiler.disable
        def skipped(x):
            return x

        @torch.compile(fullgraph=True)
        def decorated(x):
            return skipped(x)

        @functools.partial(torch.compile, dynamic=False)
        def partial_one(x):
            return x

        def wrapped(x):
            return x

        def optimized(x):
            return x

        def plain(x):
            return x

        net = Net()
        net.compile(backend="tpu")
        step = torch.compile(wrapped, dynamic=False)
        fast = torch._dynamo.optimize("eager")(optimized)
        """)
    assert names["decorated"] == CompileOptions(fullgraph=True)
    assert names["partial_one"].static and names["wrapped"].static
    assert names["optimized"] == CompileOptions(backend="eager")
    assert names["forward"].tpu and names["forward"].static  # Net.forward and Block.forward
    assert names["helper"].tpu  # called from a compiled forward
    assert "skipped" not in names and "plain" not in names


def test_no_torch_no_analysis():
    ctx, names = _regions("def compile(f):\n    return f\n\n@compile\ndef g(x):\n    return x.item()\n")
    assert names == {}


def test_compiled_across_modules():
    main = """
        import torch
        from model import Net

        model = torch.compile(Net(), dynamic=False)
        """
    other = {"model.py": """
        import torch

        def scale(h):
            return h * h.sum().item()

        class Net(torch.nn.Module):
            def forward(self, x):
                return scale(x)
        """}
    from xlalint.engine import example_facts

    facts = example_facts(decode_source(Path("model.py"), textwrap.dedent(other["model.py"]).lstrip().encode()),
                          [decode_source(Path("main.py"), textwrap.dedent(main).lstrip().encode())])
    assert dict(facts.compiled) == {"Net.forward": "False||0", "scale": "False||0"}
    found = lint_code(textwrap.dedent(other["model.py"]).lstrip(), DYN, path="model.py",
                      modules={"main.py": textwrap.dedent(main).lstrip()})
    assert [(d.code, d.location.row) for d in found] == [("DYN101", 4)]


def test_an_imported_function_compiled_where_it_is_imported():
    """`torch.compile(learn)` and `torch.compile(steps.update)` with the function defined in another
    module: that function (and what it calls) is compiled; a compiled class stays a class."""
    main = """
        import torch
        import steps
        from steps import Net, learn

        fast_learn = torch.compile(learn)
        fast_update = torch.compile(steps.update, dynamic=False)
        model = Net.load()
        model = torch.compile(model)  # not the classmethod that built it
        """
    other = """
        import torch

        def learn(x, optimizer):
            loss = x.sum()
            optimizer.zero_grad()
            return loss

        def update(x):
            return x * x.sum().item()

        def eager(x):
            return x.sum().item()

        class Net(torch.nn.Module):
            @classmethod
            def load(cls):
                print("loading", eager(torch.ones(3)))
                return cls()

            def forward(self, x):
                return x * 2
        """
    from xlalint.engine import example_facts

    facts = example_facts(decode_source(Path("steps.py"), textwrap.dedent(other).lstrip().encode()),
                          [decode_source(Path("main.py"), textwrap.dedent(main).lstrip().encode())])
    assert dict(facts.compiled) == {"learn": "None||0", "update": "False||0"}  # not Net.load, nor eager
    found = lint_code(textwrap.dedent(other).lstrip(), DYN, path="steps.py",
                      modules={"main.py": textwrap.dedent(main).lstrip()})
    assert [(d.code, d.location.row) for d in found] == [("DYN121", 5), ("DYN101", 9)]


@pytest.mark.parametrize("code", [
    # Python ints, strings and config values are not tensors
    "import torch\n\n@torch.compile\ndef f(x, n, mode):\n    if n > 2 and mode == 'a':\n        print\n"
    "    return x[:n] * float(n)\n\nf(torch.ones(3), 2, 'a')\n",
    # metadata and non-breaking patterns
    "import torch\n\n@torch.compile\ndef f(x):\n    assert (x > 0).all()\n    x[x < 0] = 0\n    n = len(x)\n"
    "    s = f'{x}'\n    h = x.cpu()\n    return x[: x.shape[0]] * n + max(x)\n\nf(torch.ones(3))\n",
    # not compiled: the same hazards run eagerly
    "import torch\n\ndef f(x):\n    if x.sum() > 0:\n        print(x.item())\n    return x[x > 0]\n\nf(torch.ones(3))\n",
    # branches Dynamo folds away: torch.jit.is_scripting(), a module flag only ever False
    "import torch\nimport warnings\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.debug_print = False\n\n    def forward(self, x):\n        if torch.jit.is_scripting():\n"
    "            warnings.warn('scripted')\n        if self.debug_print:\n            print(x.sum().item())\n"
    "        return x\n\nmodel = torch.compile(Net())\nmodel(torch.ones(3))\n",
    # the branch torch.compiler.is_compiling() rules out
    "import torch\n\n@torch.compile\ndef f(x):\n    if torch.compiler.is_compiling():\n        return x\n"
    "    print(x.item())\n    return x\n\nf(torch.ones(3))\n",
])
def test_negative_fixtures_stay_silent(code):
    assert lint_code(code, ALL_RULES) == []



CLEAN = """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x, mask):
        h = self.proj(x)
        assert (h == h).all()
        h[mask] = 0
        n = h.shape[0]
        label = f"{h}"
        host = h.detach().cpu()
        return h[:n] * len(h), host


@torch.compile
def loss_fn(logits, labels):
    return F.cross_entropy(logits, labels)


model = torch.compile(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(list(zip(torch.randn(64, 8), torch.randint(0, 4, (64,)))), batch_size=8, drop_last=True)
for step, (x, y) in enumerate(loader):
    logits, _ = model(x, x[:, :4] > 1)
    loss = loss_fn(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step % 10 == 0:
        print(step, loss.item())
"""


def test_clean_compile_code_gets_no_finding_from_any_rule():
    assert lint_code(CLEAN, STABLE) == []
    assert lint_code(CLEAN, ALL_RULES) == []


def test_clean_compile_code_compiles_without_a_break():
    _skip_without_dynamo()
    pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "rules"))
    from dynamo_helpers import load, observe

    run = observe(lambda backend: load(CLEAN, backend))
    assert run.user_breaks == [] and run.graphs == 2  # Net.forward and loss_fn, once each


HAZARD = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        return h / h.sum().item()

model = torch.compile(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(3, 2, 4):
    loss = model(x).sum()
    loss.backward()
    opt.step()
"""


def test_a_hazard_in_a_compiled_region_is_reported_once_and_without_torch_xla_advice():
    without_dyn = lint_code(HAZARD, [r for r in STABLE if not r.code.startswith("DYN")])
    assert [d.code for d in without_dyn] == ["XLA101"]
    assert "add_step_closure" in RULES_BY_CODE["XLA101"].hint
    assert without_dyn[0].hint == RULES_BY_CODE["DYN101"].hint  # compile advice, not xm's
    assert [d.code for d in lint_code(HAZARD, ALL_RULES)] == ["DYN101"]  # reported once, by the compile rule
    assert [d.code for d in lint_code(HAZARD, STABLE)] == ["DYN101"]  # DYN101 is on by default


def test_in_a_torch_xla_file_the_xla_rules_keep_their_advice():
    code = HAZARD.replace("import torch\n", "import torch\nimport torch_xla\n", 1)
    found = {d.code: d for d in lint_code(code, ALL_RULES)}
    assert "XLA101" in found and found["XLA101"].hint is None


def _skip_without_dynamo():
    torch = pytest.importorskip("torch")
    if torch._C._get_privateuse1_backend_name() != "privateuseone":
        pytest.skip("torchax was imported in this process (tests/rules/test_dynamo_rules.py reruns this in a fresh one)")


def test_a_bound_method_compiled_is_traced_with_what_it_calls():
    """`torch.compile(model.generate)`: the method of the instance's evident class, not `forward`."""
    _, names = _regions("""
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                return x

            def step(self, x):
                return x * 2

            def generate(self, x):
                return self.step(x)

        model = Net()
        gen = torch.compile(model.generate, dynamic=False)
        """)
    assert set(names) == {"generate", "step"} and names["generate"].dynamic is False


def test_a_bound_method_compiled_in_another_module(tmp_path, run_cli):
    """The class is imported: the project index finds the method; and a module re-summarised with
    the project's facts (it trains, so its loops are looked at again) keeps what others compile."""
    import json

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import torch
        from net import Net

        model = Net()
        infer = torch.compile(model.infer)
        train = torch.compile(model)
        """))
    (tmp_path / "net.py").write_text(textwrap.dedent("""
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 3)
                self.optimizer = torch.optim.SGD(self.lin.parameters(), lr=0.1)

            def forward(self, x):
                return self.train_step(x)

            def train_step(self, x):
                loss = self.lin(x).sum()
                self.optimizer.step()
                return loss

            def infer(self, x):
                y = self.lin(x)
                if y.sum() > 0:
                    return y
                return -y
        """))
    code, out, _ = run_cli("check", "--preview", "--select", "DYN", "--no-cache", "--output-format", "json",
                           "--exit-zero", tmp_path)
    assert sorted((d["code"], d["location"]["row"]) for d in json.loads(out)) == [("DYN104", 20), ("DYN121", 15)]
