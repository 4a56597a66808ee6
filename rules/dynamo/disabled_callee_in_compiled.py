"""DYN122 disabled-callee-in-compiled: Flags a call, inside a function `torch.compile` traces, of a function
of the same module under `@torch.compiler.disable` (or `torch._dynamo.disable`, or wrapped `f =
torch.compiler.disable(f)`)."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options

from xlalint.rule import Invalid, Rule, Valid


class DisabledCalleeInCompiled(Rule):
    """## What it does
    Flags a call, inside a function `torch.compile` traces, of a function of the same module under
    `@torch.compiler.disable` (or `torch._dynamo.disable`, or wrapped `f = torch.compiler.disable(f)`).

    ## Why is this bad?
    Dynamo skips a disabled function by breaking the graph around the call
    ([GB0098](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0098.html)): the caller
    becomes two graphs with the callee run eagerly between them, at every call. Disabling is meant
    for code that must not be traced; on a hot path each call costs a graph split. With
    `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compiler.disable
    def log_stats(y):
        stats.append(y.mean().item())

    @torch.compile
    def step(x):
        y = x * 2
        log_stats(y)
        return y + 1
    ```

    Use instead:
    ```python
    @torch.compile
    def step(x):
        y = x * 2
        return y + 1, y.mean().detach()

    out, mean = step(x)
    log_stats(mean)  # outside the compiled function
    ```

    ## References
    - [GB0098](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0098.html)
    - PyTorch docs, `torch.compiler.disable`
    """

    code, name, category = "DYN122", "disabled-callee-in-compiled", "other"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = (
        "`{func}` is under `torch.compiler.disable`: calling it inside a compiled function is {consequence} (GB0098)"
    )
    hint = "call it outside the compiled function (return what it needs), or let Dynamo trace it"
    gb_ids = ("GB0098",)

    VALID = [
        Valid(
            """
            import torch

            stats = []

            @torch.compiler.disable
            def log_stats(y):
                stats.append(y)

            @torch.compile
            def step(x):
                y = x * 2
                return y + 1, y.mean().detach()

            out, mean = step(torch.ones(3))
            log_stats(mean)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            stats = []

            @torch.compiler.disable
            def log_stats(y):
                stats.append(y)

            @torch.compile
            def step(x):
                y = x * 2
                log_stats(y)
                return y + 1

            step(torch.ones(3))
            """,
            line=12,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        regions = self.ctx.compiled
        if not regions.disabled:
            return
        callees = regions.functions_named(node.func)
        if not any(c in regions.disabled for c in callees):
            return
        options = compiled_options(self.ctx, node)
        if options is not None:
            name = getattr(callees[0], "name", "")  # a def's (functions_named finds defs)
            self.report(node, self.summary.format(func=name, consequence=break_note(options)))
