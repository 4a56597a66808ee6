"""TPU203 optimizer-not-capturable: a stateful optimizer stepped inside a TorchTPU-compiled function without `capturable=True`."""

from __future__ import annotations

import ast

from xlalint.analysis.names import dotted_name, has_star_args, keyword
from xlalint.analysis.torchtpu import compiled_functions, on_tpu_backend, uses_torchtpu
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

# The optimizers TorchTPU's guide names ("Adam, AdamW, Adamax, ASGD, NAdam, RAdam, RMSProp, Rprop"),
# plus Adadelta: each keeps a step counter and takes `capturable` in torch 2.13 (checked in a test)
STATEFUL = frozenset({"Adam", "AdamW", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop", "Adadelta"})


class OptimizerNotCapturable(Rule):
    """## What it does
    Flags the construction of a stateful optimizer (`Adam`, `AdamW`, `Adamax`, `ASGD`, `NAdam`,
    `RAdam`, `RMSprop`, `Rprop`, `Adadelta` from `torch.optim`) without `capturable=True`, when its
    `.step()` runs inside a function compiled for TorchTPU (`@torch.compile` / `torch.compile(f)`
    with `backend="tpu"`, or no backend in a TorchTPU file).

    ## Why is this bad?
    TorchTPU's `torch.compile` guide (`docs/notebooks/advanced_compile.py`, "Compiling the Training
    Step") says stateful optimizers "**must** pass `capturable=True`": without it the optimizer's
    lazily created state (the `step` counter is kept on the CPU) is not captured into the TPU graph
    and the compiled step fails on CPU tensors. torch-tpu 0.2.0's own `AdamW` fork
    (`torch_tpu/_internal/optim/adamw.py`) exists for this reason: "Dynamically allocated optimizer
    states during `torch.compile` (e.g. `step` counter hosted on CPU) cause compilation errors or
    graph breaks on TPU backends".

    ## Example
    ```python
    import torch

    model = Net().to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.compile(backend="tpu")
    def train_step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()
    ```

    Use instead:
    ```python
    import torch

    model = Net().to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)

    @torch.compile(backend="tpu")
    def train_step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()
    ```

    ## Fix safety
    Adds `capturable=True`; unsafe: with parameters on the CPU (a CPU dry run of the same script)
    torch's capturable optimizers raise, as they accept only accelerator parameters.

    ## Known problems
    The optimizer must be a name or `self.<attr>` assigned in this module, stepped directly in the
    compiled function (not in a helper it calls).

    ## References
    - TorchTPU guide: `docs/notebooks/advanced_compile.py` (google-pytorch/torch_tpu)
    - torch-tpu 0.2.0 wheel: `torch_tpu/_internal/optim/adamw.py`
    """

    code, name, category = "TPU203", "optimizer-not-capturable", "optimizer_step"
    summary = "`<optimizer>` is stepped in a function compiled for TorchTPU without `capturable=True`"
    hint = "pass `capturable=True` (TorchTPU's compile guide: stateful optimizers must)"
    fix_availability = "sometimes"
    preview = True

    VALID = [
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters(), capturable=True)

            @torch.compile(backend="tpu")
            def train_step(x):
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # no step counter

            @torch.compile(backend="tpu")
            def train_step(x):
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.Adam(model.parameters())

            @torch.compile(backend="tpu")
            def forward(x):
                return model(x)

            for x in loader:
                forward(x).sum().backward()
                optimizer.step()  # eager, outside the compiled function
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.Adam(model.parameters())

            @torch.compile  # no TorchTPU in this file
            def train_step(x):
                model(x).sum().backward()
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

            @torch.compile(backend="tpu")
            def train_step(x, y):
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.detach()
            """,
            line=3,
            expected_replacement="""
            import torch

            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)

            @torch.compile(backend="tpu")
            def train_step(x, y):
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.detach()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch
            from torch import optim

            class Trainer:
                def __init__(self, model):
                    self.model = model.to(torch.device("tpu"))
                    self.opt = optim.Adam(model.parameters(), capturable=False)
                    self.step_fn = torch.compile(self.train_step)

                def train_step(self, x):
                    self.model(x).sum().backward()
                    self.opt.step()
            """,
            line=7,
        ),
    ]

    def finish(self) -> None:
        ctx = self.ctx
        compiled = dict(compiled_functions(ctx))
        # `torch.compile(self.train_step)`: a method of this module compiled through `self`
        for site_func in _compiled_methods(ctx):
            compiled.setdefault(site_func, [])
        reported: set[ast.Call] = set()
        for func, sites in compiled.items():
            if sites and not any(on_tpu_backend(ctx, s) for s in sites):
                continue
            if not sites and not uses_torchtpu(ctx):
                continue
            for call in ctx.calls_within(func):
                if not (isinstance(call.func, ast.Attribute) and call.func.attr == "step" and not call.args):
                    continue
                owner = dotted_name(call.func.value)
                if not owner:
                    continue  # (as _constructions: none to find)
                for made in _constructions(ctx, owner):
                    if made not in reported:
                        reported.add(made)
                        self._check(made, owner)

    def _check(self, made: ast.Call, owner: str) -> None:
        kw = keyword(made, "capturable")
        if kw is not None and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
            return
        fix = None if kw is not None or has_star_args(made) else (lambda cctx, c=made: _add_capturable(cctx, c))
        self.report(made, self.summary.replace("<optimizer>", owner), fix=fix)


def _compiled_methods(ctx):
    """Methods compiled as `torch.compile(self.method)` in their own class."""
    found = []
    for call in ctx.index.calls:
        if ctx.qualified_name(call.func) != "torch.compile" or not call.args:
            continue
        target = dotted_name(call.args[0]) or ""
        if target.startswith("self.") and target.count(".") == 1:
            cls = ctx.index.enclosing_class(call)
            for item in getattr(cls, "body", ()):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == target[5:]:
                    found.append(item)
    return found


def _constructions(ctx, owner: str | None) -> list[ast.Call]:
    """The `torch.optim.<Stateful>(...)` calls assigned to `owner` anywhere in the module."""
    if not owner:
        return []
    found = []
    for names in ctx.index.assignments.values():
        for value in names.get(owner, ()):
            if isinstance(value, ast.Call):
                qualified = ctx.qualified_name(value.func) or ""
                module, _, cls = qualified.rpartition(".")
                if module in ("torch.optim", f"torch.optim.{cls.lower()}") and cls in STATEFUL:
                    found.append(value)
    return found


def _add_capturable(cctx, call: ast.Call):
    old = cctx.locate(call)
    if old is None or not old.args:
        return None
    last = old.args[-1]
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new_arg = cst.Arg(
        keyword=cst.Name("capturable"),
        value=cst.Name("True"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = [*old.args[:-1], last.with_changes(comma=comma), new_arg]
    return Fix.replace(old, old.with_changes(args=args), title="Pass `capturable=True`", safe=False)
