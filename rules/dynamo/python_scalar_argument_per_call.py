"""DYN201 python-scalar-argument-per-call: Flags a call, in a loop, of a function compiled with
`dynamic=False` (or `backend="tpu"`, which forces it) that passes a Python number changing every
iteration: the loop's counter (`for step in range(n)`, `enumerate`'s index, `step += 1`) or a value
computed from it (`warmup = step / total`)."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import is_tensor, recompile_note

from xlalint.analysis.index import FUNCTIONS, LOOPS
from xlalint.analysis.jax_tracing import reads_any
from xlalint.analysis.steps import loop_counters
from xlalint.rule import Invalid, Rule, Valid


class ScalarArgumentPerCall(Rule):
    """## What it does
    Flags a call, in a loop, of a function compiled with `dynamic=False` (or `backend="tpu"`, which
    forces it) that passes a Python number changing every iteration: the loop's counter
    (`for step in range(n)`, `enumerate`'s index, `step += 1`) or a value computed from it
    (`warmup = step / total`).

    ## Why is this bad?
    Dynamo guards on the value of a Python int or float argument (`L['step'] == 3`). With static
    shapes every new value fails the guard and compiles the function again; after 8 values
    (`torch._dynamo.config.recompile_limit`) Dynamo gives up and runs the function eagerly, with a
    warning, for the rest of the run. (With the default `dynamic=None` the second value makes the
    argument dynamic: one recompilation, not flagged.)

    ## Example
    ```python
    step_fn = torch.compile(train_step, backend="tpu")
    for step, batch in enumerate(loader):
        step_fn(batch, step)
    ```

    Use instead:
    ```python
    step_fn = torch.compile(train_step, backend="tpu")
    step_t = torch.zeros((), dtype=torch.long)
    for batch in loader:
        step_fn(batch, step_t)  # a tensor: its value is data, not a guard
        step_t += 1
    ```

    ## References
    - PyTorch docs, "torch.compile: recompilation" (guards, `recompile_limit`)
    - TorchTPU 0.2.0 `_loader._default_tpu_compile`: backend `tpu` sets `dynamic=False`
    """

    code, name, category = "DYN201", "python-scalar-argument-per-call", "varying_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = "`{value}` changes every iteration and is passed to the compiled `{func}`: {consequence}"
    hint = "pass it as a tensor (`torch.tensor(step)`, updated in place), or keep it out of the compiled function"
    recompiles = True

    VALID = [
        Valid(
            """
            import torch

            def scale(x, step):
                return x * step

            step_fn = torch.compile(scale, dynamic=False)
            step_t = torch.zeros(())
            for _ in range(12):
                step_fn(torch.ones(3), step_t)
                step_t += 1
            """
        ),
        Valid(
            """
            import torch

            def scale(x, step):
                return x * step

            step_fn = torch.compile(scale)  # dynamic=None: the int becomes dynamic after one recompile
            for step in range(12):
                step_fn(torch.ones(3), 2)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def scale(x, step):
                return x * step

            step_fn = torch.compile(scale, dynamic=False)
            for step in range(12):
                step_fn(torch.ones(3), step)
            """,
            line=8,
        ),
        Invalid(
            """
            import torch

            @torch.compile(backend="tpu")
            def warm(x, frac):
                return x * frac

            total = 12
            for i, x in enumerate([torch.ones(3)] * total):
                warm(x, i / total)
            """,
            line=9,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        regions = self.ctx.compiled
        if not regions.callables or regions.region(node) is not None:
            return
        target = regions.target(node)
        if target is None or not target[1].static:
            return
        counters = self._counters(node)
        if not counters:
            return
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Starred) or is_tensor(self.ctx, arg) or not reads_any(self.ctx, arg, counters):
                continue
            value = ast.unparse(arg)
            self.report(
                node,
                self.summary.format(
                    value=value, func=getattr(target[0], "name", "lambda"), consequence=recompile_note(target[1])
                ),
            )
            return

    def _counters(self, node: ast.AST) -> set[str]:
        """The names the loops around `node` (in its function) count their iterations in."""
        found: set[str] = set()
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
                break
            if isinstance(anc, LOOPS):
                found |= loop_counters(self.ctx, anc)
        return found
