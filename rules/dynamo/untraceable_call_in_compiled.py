"""DYN121 untraceable-call-in-compiled: Flags, inside a function `torch.compile` traces, calls Dynamo cannot
trace, listed as data in `rules/dynamo/untraceable.toml` with the graph-break id each gives (measured on
torch 2.13): the clock (`time.time`, `perf_counter`, `monotonic`, `sleep`), `os.getpid`, Python's
`random`, `torch.manual_seed`, `torch.save`, `copy.deepcopy`, `json.dumps`, `nn.Parameter(...)` created
inside, `t.backward()` inside, `t.data_ptr()`, and a leftover `torch._dynamo.graph_break()`."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from importlib import resources

from xlalint.rule import Invalid, Rule, Valid

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE_FILE = "untraceable.toml"
KEYS = {"name", "gb", "what", "example", "torch", "note"}
REQUIRED = KEYS - {"note"}


@dataclass(frozen=True)
class Untraceable:
    name: str  # `time.time`, or `.backward` for a tensor method
    gb: str
    what: str
    example: str
    torch: str
    note: str = ""

    @property
    def method(self) -> str | None:
        return self.name[1:] if self.name.startswith(".") else None


def load_table(text: str, source: str = TABLE_FILE) -> tuple[Untraceable, ...]:
    """Parse and check the table; a problem raises `ValueError` naming the row."""
    rows = tomllib.loads(text).get("untraceable", [])
    found = []
    for i, row in enumerate(rows):
        where = f"{source}: [[untraceable]] #{i + 1} ({row.get('name', '?')})"
        if set(row) - KEYS or REQUIRED - set(row):
            raise ValueError(f"{where}: unknown keys {sorted(set(row) - KEYS)} or missing {sorted(REQUIRED - set(row))}")
        if not re.fullmatch(r"GB\d{4}", row["gb"]) or not re.fullmatch(r"\.?[A-Za-z_][\w.]*", row["name"]):
            raise ValueError(f"{where}: bad name or gb id")
        found.append(Untraceable(**row))
    if not found:
        raise ValueError(f"{source}: no [[untraceable]] rows")
    return tuple(found)


TABLE = load_table(resources.files(__package__ or "xlalint.rules.dynamo").joinpath(TABLE_FILE).read_text("utf-8"))
BY_NAME = {row.name: row for row in TABLE if row.method is None}
BY_METHOD = {row.method: row for row in TABLE if row.method is not None}


class UntraceableCallInCompiled(Rule):
    """## What it does
    Flags, inside a function `torch.compile` traces, calls Dynamo cannot trace, listed as data in
    `rules/dynamo/untraceable.toml` with the graph-break id each gives (measured on torch 2.13):
    the clock (`time.time`, `perf_counter`, `monotonic`, `sleep`), `os.getpid`, Python's `random`,
    `torch.manual_seed`, `torch.save`, `copy.deepcopy`, `json.dumps`, `nn.Parameter(...)` created
    inside, `t.backward()` inside, `t.data_ptr()`, and a leftover `torch._dynamo.graph_break()`.

    ## Why is this bad?
    Each call breaks the graph: Dynamo compiles the code before it and after it as separate
    graphs and runs the call eagerly between them, at every call (for example
    [GB0007](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html) "Attempted
    to call function marked as skipped",
    [GB0123](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0123.html) for
    `.backward()`,
    [GB0025](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0025.html) for
    `graph_break()`). A break inside a helper splits every compiled caller. With `fullgraph=True`
    compiling raises.

    ## Example
    ```python
    @torch.compile
    def step(x):
        t0 = time.perf_counter()
        y = model(x)
        return y, time.perf_counter() - t0
    ```

    Use instead:
    ```python
    @torch.compile
    def step(x):
        return model(x)

    t0 = time.perf_counter()
    y = step(x)
    elapsed = time.perf_counter() - t0  # time around the compiled call
    ```

    ## References
    - [GB0007](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html),
      [GB0123](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0123.html),
      [GB0025](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0025.html),
      [GB0264](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0264.html),
      [GB4198](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4198.html),
      [GB5976](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb5976.html),
      [GB0156](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0156.html)
    """

    code, name, category = "DYN121", "untraceable-call-in-compiled", "other"
    preview = True
    summary = "`{func}` {what} inside a compiled function: {consequence} ({gb})"
    hint = "move it out of the compiled function (before or after the call), or use the traced torch equivalent"
    gb_ids = tuple(sorted({row.gb for row in TABLE}))

    VALID = [
        Valid(
            """
            import time

            import torch

            @torch.compile
            def step(x):
                y = x * 2
                return y + 1

            t0 = time.perf_counter()
            out = step(torch.ones(3))
            elapsed = time.perf_counter() - t0
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def noisy(x):
                y = x * 2
                return y + torch.rand(y.shape)  # torch's generator: traced

            noisy(torch.ones(3))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import time

            import torch

            @torch.compile
            def step(x):
                y = x * 2
                t0 = time.perf_counter()
                return y + 1, t0

            step(torch.ones(3))
            """,
            line=8,
        ),
        Invalid(
            """
            import torch

            def debug_cut(y):
                torch._dynamo.graph_break()
                return y

            @torch.compile
            def step(x):
                y = x * 2
                return debug_cut(y) + 1

            step(torch.ones(3))
            """,
            line=4,
        ),
        Invalid(
            """
            import torch

            model = torch.nn.Linear(3, 3)

            @torch.compile
            def train_step(x):
                loss = model(x).sum()
                loss.backward()
                return loss * 2

            train_step(torch.ones(2, 3))
            """,
            line=8,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        row = BY_NAME.get(self.ctx.qualified_name(node.func) or "")
        func = row.name if row is not None else None
        if row is None and isinstance(node.func, ast.Attribute) and node.func.attr in BY_METHOD and \
                is_tensor(self.ctx, node.func.value):
            row, func = BY_METHOD[node.func.attr], f".{node.func.attr}()"
        if row is None:
            return
        options = compiled_options(self.ctx, node)
        if options is None:
            return
        message = self.summary.format(func=func, what=row.what, consequence=break_note(options), gb=row.gb)
        self.report(node, f"{message}; {row.note}" if row.note else message)
