"""DYN123 (a comprehension in a function Dynamo gives up on) and DYN121's RNN-module call, each case
linted and run under Dynamo: the lint flags the lines where Dynamo reports the break, and only those."""

import re
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from xlalint.rules import ALL_RULES  # noqa: E402
from xlalint.testing import lint_code  # noqa: E402

from dynamo_helpers import dynamo_usable, load, observe  # noqa: E402  (tests/rules/dynamo_helpers.py)

RULES = {r.code: r for r in ALL_RULES}
ITER_IDS = {"GB4347", "GB0156"}  # torch 2.13 "Missing tp_iternext", torch 2.11 "Unsupported method call"
AT_LINE = re.compile(r"Graph break in user code at example:(\d+)")

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="comprehensions are inlined from Python 3.12")


@pytest.fixture(autouse=True)
def _dynamo():
    if not dynamo_usable():
        pytest.skip("torchax was imported in this process: Dynamo cannot compile here")


def _lines(code: str, code_name: str) -> list[int]:
    return sorted(d.location.row for d in lint_code(textwrap.dedent(code), [RULES[code_name]]))


def _break_lines(code: str, ids: set[str]) -> set[int]:
    """Lines of `example` where Dynamo logged a break with one of `ids`."""
    run = observe(lambda backend: load(code, backend))
    found = set()
    for record in run.breaks:
        at = AT_LINE.search(record)
        if at and any(f"gb/{gb.lower()}.html" in record for gb in ids):
            found.add(int(at[1]))
    return found


CASES = {
    # a method of a module: `self` is in the comprehension's frame, the iterator is a zip
    "module_zip_in_loop": (
        """
        import torch

        class Inner(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lr = 0.5
                self.w = torch.nn.Parameter(torch.ones(3))

            def forward(self, xs):
                out = []
                for x in xs:
                    g = (x * self.w).sum()
                    out.append(g.item())
                    new = [a - self.lr * b for a, b in zip(xs, xs)]
                return new, out

        torch.compile(Inner())([torch.ones(3), torch.ones(3)])
        """,
        [15],
    ),
    # `torch` named inside, a list from `.tolist()`, the loop after it (no break between them)
    "tolist_then_loop": (
        """
        import torch

        @torch.compile
        def pick(t, idx):
            chosen = idx.tolist()
            rows = [torch.relu(t[i]) for i in chosen]
            acc = 0.0
            for i in chosen:
                acc += t[i].item()
            return torch.stack(rows) * acc

        pick(torch.ones(4), torch.tensor([1, 3]))
        """,
        [7],
    ),
    # near-miss: a range is stepped by Dynamo as the frame's input
    "over_range": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            for w in ws:
                x = x * w
                print(x.sum().item())
            return [torch.relu(x) * i for i in range(3)]

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: a tuple too
    "over_tuple": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            for w in ws:
                x = x * w
                print(x.sum().item())
            return [torch.relu(w) for w in tuple(ws)]

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: nothing of torch in the comprehension's frame when it starts (its own variable is
    # a tensor only once it runs): Dynamo does not compile it alone
    "no_torch_in_frame": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            for w in ws:
                x = x * w
                print(x.sum().item())
            return [w * 2 for w in list(ws)]

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: a break outside the loop between the comprehension and the loop: the comprehension
    # was traced in the first graph
    "break_between": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            ys = [torch.relu(w) for w in list(ws)]
            print("between")
            for w in ws:
                x = x * w
                print(x.sum().item())
            return ys, x

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: the same, where the break is in a helper of this file called between them
    "helper_break_between": (
        """
        import torch

        def report(t):
            print("report", t.sum().item())

        @torch.compile
        def f(x, ws):
            ys = [torch.relu(w) for w in list(ws)]
            report(x)
            for w in ws:
                x = x * w
                print(x.sum().item())
            return ys, x

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: the break after the loop, not in it: Dynamo resumes, the comprehension is traced
    "break_after_loop": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            for w in ws:
                x = x * w
            print(x.sum().item())
            return [torch.relu(w) for w in list(ws)]

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
    # near-miss: a generator expression is not compiled alone
    "generator_expression": (
        """
        import torch

        @torch.compile
        def f(x, ws):
            for w in ws:
                x = x * w
                print(x.sum().item())
            return sum(torch.relu(w) for w in list(ws))

        f(torch.ones(3), [torch.ones(3), torch.ones(3)])
        """,
        [],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_dyn123_flags_exactly_the_comprehensions_dynamo_breaks_on(name):
    code, expected = CASES[name]
    assert _lines(code, "DYN123") == expected
    # what Dynamo did: a break at each flagged comprehension, none at the near-misses' comprehension
    comprehension = {i + 1 for i, line in enumerate(textwrap.dedent(code).splitlines()) if " for " in line
                     and ("[" in line or "sum(" in line) and "for w in ws:" not in line}
    assert _break_lines(code, ITER_IDS) & comprehension == set(expected)


def test_dyn123_reports_nothing_where_comprehensions_are_inlined(monkeypatch):
    from xlalint.rules.dynamo import comprehension_in_eager_frame as mod

    code, expected = CASES["tolist_then_loop"]
    assert expected and _lines(code, "DYN123") == expected
    monkeypatch.setattr(mod, "comprehensions_are_frames", lambda: False)  # Python 3.12+
    assert _lines(code, "DYN123") == []


RNN_CASES = {
    # calling the LSTM module itself breaks (not only its `flatten_parameters()`)
    "lstm_called": (
        """
        import torch

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.GRU(3, 3)
                self.proj = torch.nn.Linear(3, 3)

            def forward(self, x):
                h = self.proj(x)
                return self.rnn(h)[0] * 2

        torch.compile(Encoder())(torch.ones(2, 3))
        """,
        [12],
    ),
    # the attribute this class assigns decides (another class's `self.rnn` is an RNN)
    "own_class_attribute": (
        """
        import torch

        class Recurrent(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.LSTM(3, 3)

        class Plain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.Linear(3, 3)

            def forward(self, x):
                return self.rnn(x) * 2

        torch.compile(Plain())(torch.ones(2, 3))
        """,
        [],
    ),
    # near-miss: after the module's `flatten_parameters()` Dynamo gives up on the function: the
    # call runs eagerly, the break is reported at `flatten_parameters()` alone
    "after_flatten_parameters": (
        """
        import torch

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.LSTM(3, 3)

            def forward(self, x):
                self.rnn.flatten_parameters()
                return self.rnn(x * 2)[0]

        torch.compile(Encoder())(torch.ones(2, 3))
        """,
        [10],
    ),
    # near-miss: `allow_rnn` makes Dynamo trace the module
    "allow_rnn": (
        """
        import torch
        import torch._dynamo

        torch._dynamo.config.allow_rnn = True

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = torch.nn.LSTM(3, 3)

            def forward(self, x):
                return self.rnn(x * 2)[0]

        torch.compile(Encoder())(torch.ones(2, 3))
        """,
        [],
    ),
}


@pytest.mark.parametrize("name", list(RNN_CASES))
def test_dyn121_flags_an_rnn_module_call_where_dynamo_breaks(name):
    import torch._dynamo

    code, expected = RNN_CASES[name]
    assert _lines(code, "DYN121") == expected
    with torch._dynamo.config.patch(allow_rnn=False):  # the example sets it where it means to; restored after
        run = observe(lambda backend: load(code, backend))
    if expected:
        assert "GB0014" in run.gb_ids and (run.graphs >= 2 or run.graphs == 0), (run.graphs, run.breaks)
        assert {int(m[1]) for r in run.breaks if (m := AT_LINE.search(r))} == set(expected), run.breaks
    else:
        assert (run.graphs, run.user_breaks) == (1, []), (run.graphs, run.breaks)
