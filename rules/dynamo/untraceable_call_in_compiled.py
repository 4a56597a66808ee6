"""DYN121 untraceable-call-in-compiled: Flags, inside a function `torch.compile` traces, calls Dynamo cannot
trace, listed as data in `rules/dynamo/untraceable.toml` with the graph-break id each gives (measured on
torch 2.11 and 2.13, per release where they differ): the clock (`time.time`, `perf_counter`,
`monotonic`, `sleep`), `os.getpid`, Python's `random`, `torch.manual_seed`, `torch.save`,
`copy.deepcopy`, `json.dumps`, `nn.Parameter(...)` created inside, `t.backward()`
and `torch.autograd.grad` inside, `t.data_ptr()`, `Variable(...)`, packing
sequences (`pack_padded_sequence`, ...), calling an RNN module or its `flatten_parameters()`, an optimizer's `step()`, and a
leftover `torch._dynamo.graph_break()`."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from importlib import resources

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid
from xlalint.torch_version import gb_for_installed, version_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE_FILE = "untraceable.toml"
OPTIONAL = {"note", "receiver", "setup", "alone_ok", "gb_by_torch", "no_break_on"}
KEYS = {"name", "gb", "what", "example", "proven"} | OPTIONAL
REQUIRED = KEYS - OPTIONAL
RELEASE = re.compile(r"\d+\.\d+")  # a torch release, "2.11"


@dataclass(frozen=True)
class Untraceable:
    name: str  # `time.time`, or `.backward` for a tensor method
    gb: str
    what: str
    example: str
    proven: tuple[str, ...]  # the torch releases its example was proven on ("2.11", "2.13")
    note: str = ""
    receiver: tuple[str, ...] = ()  # a method's receiver is built from one of these classes (else: a tensor)
    setup: str = ""  # the example's module-level statement
    alone_ok: bool = False  # harmless as the compiled function's only statement
    gb_by_torch: tuple[tuple[str, str], ...] = ()  # (release, id) where a proven release prints another id
    no_break_on: tuple[tuple[str, str], ...] = ()  # (release, why) where a proven release gives no id

    def gb_on(self, release: str) -> str | None:
        """The id a proven release prints (None: no break there); `gb` on other releases."""
        if release in dict(self.no_break_on):
            return None
        return dict(self.gb_by_torch).get(release, self.gb)

    @property
    def ids_by_torch(self) -> dict[str, str | None]:
        return {release: self.gb_on(release) for release in self.proven}

    def receiver_matches(self, qualified: str) -> bool:
        return any(re.fullmatch(re.escape(p).replace(r"\*", r"[A-Za-z_]\w*"), qualified) for p in self.receiver)

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
            raise ValueError(
                f"{where}: unknown keys {sorted(set(row) - KEYS)} or missing {sorted(REQUIRED - set(row))}"
            )
        if not re.fullmatch(r"GB\d{4}", row["gb"]) or not re.fullmatch(r"\.?[A-Za-z_][\w.]*", row["name"]):
            raise ValueError(f"{where}: bad name or gb id")
        receiver = row.get("receiver", [])
        if (
            not isinstance(receiver, list)
            or (receiver and not row["name"].startswith("."))
            or not all(isinstance(r, str) and re.fullmatch(r"[A-Za-z_][\w.*]*", r) for r in receiver)
        ):
            raise ValueError(f"{where}: `receiver` is a list of class names, for a method only")
        proven = row["proven"]
        if not (
            isinstance(proven, list) and proven and all(isinstance(v, str) and RELEASE.fullmatch(v) for v in proven)
        ):
            raise ValueError(f'{where}: `proven` is a list of torch releases such as "2.11"')
        per_release = {}
        for key, pattern in (("gb_by_torch", r"GB\d{4}"), ("no_break_on", r".+")):
            table = row.get(key, {})
            if not isinstance(table, dict) or not all(
                k in proven and isinstance(v, str) and re.fullmatch(pattern, v) for k, v in table.items()
            ):
                raise ValueError(
                    f"{where}: `{key}` maps proven releases to {'ids' if key == 'gb_by_torch' else 'reasons'}"
                )
            per_release[key] = tuple(sorted(table.items()))
        if set(row.get("gb_by_torch", {})) & set(row.get("no_break_on", {})):
            raise ValueError(f"{where}: a release in both `gb_by_torch` and `no_break_on`")
        found.append(Untraceable(**{**row, "receiver": tuple(receiver), "proven": tuple(proven), **per_release}))
    if not found:
        raise ValueError(f"{source}: no [[untraceable]] rows")
    return tuple(found)


TABLE = load_table(resources.files(__package__ or "xlalint.rules.dynamo").joinpath(TABLE_FILE).read_text("utf-8"))
BY_NAME = {row.name: row for row in TABLE if row.method is None}
BY_METHOD: dict[str, list[Untraceable]] = {}
for _row in TABLE:
    if _row.method is not None:
        BY_METHOD.setdefault(_row.method, []).append(_row)


class UntraceableCallInCompiled(Rule):
    """## What it does
    Flags, inside a function `torch.compile` traces, calls Dynamo cannot trace, listed as data in
    `rules/dynamo/untraceable.toml` with the graph-break id each gives (measured on torch 2.11 and 2.13;
    per release where they differ, and a message names the id of the installed torch): the clock (`time.time`, `perf_counter`, `monotonic`, `sleep`), `os.getpid`, Python's `random`,
    `torch.manual_seed`, `torch.save`, `copy.deepcopy`, `json.dumps`, `nn.Parameter(...)` created
    inside, `t.backward()` and `torch.autograd.grad` inside, `t.data_ptr()`, `Variable(...)`, packing
    sequences (`pack_padded_sequence`, `pack_sequence`, `pad_packed_sequence`), calling an RNN
    module (`self.lstm(x)`) or its `flatten_parameters()` (Dynamo does not trace RNN, GRU or LSTM
    unless `torch._dynamo.config.allow_rnn` is set), an optimizer's `step()` (torch
    breaks the graph around it on purpose: harmless only as the compiled function's whole body) and
    `zero_grad()` (Dynamo skips it), and a leftover `torch._dynamo.graph_break()`. A method is
    flagged on a receiver evidently built from the listed class (`self.opt = optim.Adam(...)`), an
    optimizer parameter by its name (`critic_optimizer`, never a scheduler or scaler), or a tensor.

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
      [GB0156](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0156.html),
      [GB9186](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb9186.html),
      [GB0014](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0014.html),
      [GB0008](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0008.html)
    """

    code, name, category = "DYN121", "untraceable-call-in-compiled", "other"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    # stable: right on 25 of 26 executed lines of the real-code oracle (benchmarks/compile_oracle)
    summary = "`{func}` {what} inside a compiled function: {consequence} ({gb})"
    hint = "move it out of the compiled function (before or after the call), or use the traced torch equivalent"
    gb_ids = tuple(sorted({gb for row in TABLE for gb in row.ids_by_torch.values() if gb is not None}))

    @classmethod
    def torch_differences(cls) -> list[str]:
        """The rows whose id differs between proven releases, one line each."""
        return [
            f"`{row.name}`: " + ", ".join(f"{gb or 'no break id'} on torch {v}" for v, gb in row.ids_by_torch.items())
            for row in TABLE
            if len(set(row.ids_by_torch.values())) > 1
        ]

    @classmethod
    def gb_ids_by_torch(cls) -> dict[str, tuple[str, ...]]:
        """Per proven release, the ids its rows print there (from the table)."""
        releases = sorted({v for row in TABLE for v in row.proven}, key=version_key)
        return {v: tuple(sorted({gb for row in TABLE if (gb := row.ids_by_torch.get(v))})) for v in releases}

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
        Valid(
            """
            import torch

            model = torch.nn.Linear(3, 3)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)

            @torch.compile
            def forward_loss(x, lr_scheduler):
                return model(x).sum() * 2  # the scheduler is passed, never stepped inside

            forward_loss(torch.ones(2, 3), torch.optim.lr_scheduler.StepLR(opt, 1))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            model = torch.nn.Linear(3, 3)

            @torch.compile
            def learn(x, critic_optimizer):
                loss = model(x).sum()
                critic_optimizer.zero_grad()
                return loss * 2

            learn(torch.ones(2, 3), torch.optim.SGD(model.parameters(), lr=0.1))
            """,
            line=8,
        ),
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
        options = compiled_options(self.ctx, node)
        if options is None:
            return  # asked first: most calls of most files are in no compiled region
        row = BY_NAME.get(self.ctx.qualified_name(node.func) or "")
        func = row.name if row is not None else None
        if row is None and isinstance(node.func, ast.Attribute):
            row = next((r for r in BY_METHOD.get(node.func.attr, ()) if self._receiver_fits(r, node.func.value)), None)
            func = f".{node.func.attr}()"
        if row is None and isinstance(node.func, (ast.Name, ast.Attribute)):  # a module called: `self.lstm(x)`
            row = next((r for r in BY_METHOD.get("__call__", ()) if self._receiver_fits(r, node.func)), None)
            func = f"{ast.unparse(node.func)}(...)"
            if row is not None and self.ctx.compiled.captures("allow_rnn"):
                return  # `torch._dynamo.config.allow_rnn = True`: Dynamo traces the module (measured)
            if row is not None and self._flattened_before(node):
                return  # Dynamo gave up on the function at `flatten_parameters()`: this call runs eagerly
        if row is None or (row.alone_ok and self._alone(node)):
            return
        gb = gb_for_installed(row.ids_by_torch)
        message = self.summary.format(func=func, what=row.what, consequence=break_note(options), gb=gb)
        self.report(node, f"{message}; {row.note}" if row.note else message)

    def _receiver_fits(self, row: Untraceable, receiver: ast.expr) -> bool:
        """A tensor; or, for a row naming classes, a value evidently built from one of them."""
        if not row.receiver:
            return is_tensor(self.ctx, receiver)
        values = self._own_class_values(receiver, self.ctx.assigned_values(receiver))
        if not values and row.receiver_matches("torch.optim.Optimizer"):
            # a parameter or attribute built elsewhere (`def learn(batch, critic_optimizer)`): the step
            # model's judgement of what an optimizer is (its name, never a scheduler's or a scaler's)
            return self.ctx.barriers.is_optimizer(receiver)
        return bool(values) and all(
            isinstance(v, ast.Call) and row.receiver_matches(self.ctx.qualified_name(v.func) or "") for v in values
        )

    def _flattened_before(self, call: ast.Call) -> bool:
        """`rnn.flatten_parameters()` of the same module runs earlier in the same function: Dynamo
        cannot resume after that break (measured, torch 2.11 and 2.13), so it reports none here."""
        func = self.ctx.index.enclosing_function(call)
        if func is None:
            return False
        receiver = ast.dump(call.func)
        return any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "flatten_parameters"
            and ast.dump(n.func.value) == receiver
            and n.lineno < call.lineno
            and self.ctx.index.enclosing_function(n) is func
            for n in ast.walk(func)
        )

    def _own_class_values(self, receiver: ast.expr, values: list[ast.expr]) -> list[ast.expr]:
        """`self.lstm` in a method of a class that assigns `self.lstm` itself: the values that class
        assigns (another class of the file may give its own `self.lstm` something else)."""
        if not (isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name)):
            return values
        if receiver.value.id != "self":
            return values
        cls = self.ctx.index.enclosing_class(receiver)
        own = [v for v in values if cls is not None and self.ctx.index.enclosing_class(v) is cls]
        return own or values

    def _alone(self, node: ast.Call) -> bool:
        """The call is the whole body of its compiled function (a docstring aside)."""
        region = self.ctx.compiled.region(node)
        body = [
            s
            for s in getattr(region, "body", [])
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        return len(body) == 1 and isinstance(body[0], ast.Expr) and body[0].value is node
