"""DYN203 scheduled-lr-in-compiled-step: Flags `opt.step()` inside a function compiled with `dynamic=False`
(or `backend="tpu"`) where `opt` is a `torch.optim` optimizer created with a Python float learning rate
and a `torch.optim.lr_scheduler` scheduler of this file changes it."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import compiled_options, is_tensor, recompile_note

from xlalint.analysis.names import dotted_name, keyword_value, positional
from xlalint.rule import Invalid, Rule, Valid


class ScheduledLrInCompiledStep(Rule):
    """## What it does
    Flags `opt.step()` inside a function compiled with `dynamic=False` (or `backend="tpu"`) where
    `opt` is a `torch.optim` optimizer created with a Python float learning rate and a
    `torch.optim.lr_scheduler` scheduler of this file changes it.

    ## Why is this bad?
    The compiled optimizer step reads `param_groups[i]["lr"]` as a Python float and guards on its
    value. The scheduler changes it every step, so every step compiles again; with static shapes
    that goes on until the limit of 8 (`recompile_limit`), then the step runs eagerly for the rest
    of the run (measured: 8 compilations in 12 steps; 2 with the default `dynamic=None`, not flagged).

    ## Example
    ```python
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)

    @torch.compile(backend="tpu")
    def opt_step():
        opt.step()
    ```

    Use instead:
    ```python
    opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1))  # updated in place by the scheduler
    ```

    ## References
    - PyTorch tutorial "(beta) Running the compiled optimizer with an LR Scheduler" (wrap the lr in a tensor)
    """

    code, name, category = "DYN203", "scheduled-lr-in-compiled-step", "varying_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = "`{opt}.step()` in a compiled function reads a float learning rate a scheduler changes: {consequence}"
    hint = "create the optimizer with `lr=torch.tensor(lr)`: the scheduler then updates a tensor, not a guarded float"
    recompiles = True

    VALID = [
        Valid(
            """
            import torch

            model = torch.nn.Linear(3, 3)
            opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1))
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)

            @torch.compile(dynamic=False)
            def opt_step():
                opt.step()

            for _ in range(12):
                model(torch.ones(2, 3)).sum().backward()
                opt_step()
                sched.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            model = torch.nn.Linear(3, 3)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)

            @torch.compile(dynamic=False)
            def opt_step():
                opt.step()

            for _ in range(12):
                model(torch.ones(2, 3)).sum().backward()
                opt_step()
                sched.step()
            """,
            line=9,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "step" and not node.args):
            return
        options = compiled_options(self.ctx, node)
        if options is None or not options.static:
            return
        opt = dotted_name(func.value)
        if opt and self._float_lr(func.value) and self._scheduled(opt):
            self.report(node, self.summary.format(opt=opt, consequence=recompile_note(options)))

    def _float_lr(self, expr: ast.expr) -> bool:
        for value in self.ctx.assigned_values(expr):
            if (
                isinstance(value, ast.Call)
                and (self.ctx.qualified_name(value.func) or "").startswith("torch.optim.")
                and not (self.ctx.qualified_name(value.func) or "").startswith("torch.optim.lr_scheduler")
            ):
                lr = keyword_value(value, "lr")
                if lr is None and len(positional(value)) > 1:
                    lr = positional(value)[1]
                return lr is None or not is_tensor(self.ctx, lr)
        return False

    def _scheduled(self, opt: str) -> bool:
        for call in self.ctx.index.calls:
            if (
                (self.ctx.qualified_name(call.func) or "").startswith("torch.optim.lr_scheduler.")
                and call.args
                and dotted_name(call.args[0]) == opt
            ):
                return True
        return False
