"""DYN202 module-int-attribute-mutated: Flags `self.<attr> += ...` (or `self.<attr> = self.<attr> + ...`) in
a compiled module's `forward` (or a function it calls) where `__init__` sets `self.<attr>` to a Python
int."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import compiled_options

from xlalint.analysis.names import dotted_name
from xlalint.rule import Invalid, Rule, Valid


class ModuleIntAttributeMutated(Rule):
    """## What it does
    Flags `self.<attr> += ...` (or `self.<attr> = self.<attr> + ...`) in a compiled module's
    `forward` (or a function it calls) where `__init__` sets `self.<attr>` to a Python int.

    ## Why is this bad?
    torch.compile treats integer attributes of an `nn.Module` as static: it guards on their value
    (`self.step == 0`). Changing one at every call fails the guard at every call: a recompilation
    each time until the limit of 8 (`recompile_limit`), then eager execution with a warning; this
    happens with the default `dynamic=None` too (measured: 8 compilations in 12 calls).

    ## Example
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * 2
    ```

    Use instead:
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))

        def forward(self, x):
            self.calls += 1  # a tensor buffer: updated in the graph
            return x * 2
    ```

    ## References
    - PyTorch docs, "torch.compile: recompilation" ("integer attributes of the nn.Module are static")
    """

    code, name, category = "DYN202", "module-int-attribute-mutated", "varying_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = "`{attr}` is a Python int of a compiled module changed at every call: a recompilation per value, then eager after the limit of 8"
    hint = "keep the counter in a tensor buffer (`register_buffer`) or outside the module"
    recompiles = True

    VALID = [
        Valid(
            """
            import torch

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("calls", torch.zeros((), dtype=torch.long))

                def forward(self, x):
                    self.calls += 1
                    return x * 2

            model = torch.compile(Net())
            for _ in range(12):
                model(torch.ones(3))
            """
        ),
        Valid(
            """
            import torch

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.calls = 0

                def forward(self, x):
                    return x * 2

            model = Net()
            compiled = torch.compile(model)
            for _ in range(12):
                compiled(torch.ones(3))
                model.calls += 1  # outside the compiled forward
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.calls = 0

                def forward(self, x):
                    self.calls += 1
                    return x * 2

            model = torch.compile(Net())
            for _ in range(12):
                model(torch.ones(3))
            """,
            line=9,
        ),
    ]

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check(node, node.target)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and any(dotted_name(n) == dotted_name(node.targets[0]) for n in ast.walk(node.value)):
            self._check(node, node.targets[0])

    def _check(self, node: ast.stmt, target: ast.expr) -> None:
        name = dotted_name(target) or ""
        if not name.startswith("self.") or name.count(".") != 1 or compiled_options(self.ctx, node) is None:
            return
        cls = self.ctx.index.enclosing_class(node)
        init = (
            next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if cls is not None
            else None
        )
        if init is None:
            return
        for stmt in ast.walk(init):
            if (
                isinstance(stmt, ast.Assign)
                and any(dotted_name(t) == name for t in stmt.targets)
                and isinstance(stmt.value, ast.Constant)
                and type(stmt.value.value) is int
            ):
                self.report(node, self.summary.format(attr=name))
                return
