"""DYN105 print-in-compiled: Flags `print(...)` (of anything: a plain string too), and `str(t)` / `repr(t)`
of a tensor, inside a function `torch.compile` traces."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid


class PrintInCompiled(Rule):
    """## What it does
    Flags `print(...)` (of anything: a plain string too), and `str(t)` / `repr(t)` of a tensor,
    inside a function `torch.compile` traces. An f-string of a tensor (`f"{t}"`) alone is not
    flagged: Dynamo traces it without a break (measured).

    ## Why is this bad?
    Dynamo cannot trace `print` or a tensor's string form: it breaks the graph
    ([GB0059](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html) "Failed to
    trace builtin operator"; `repr(t)`:
    [GB0569](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0569.html)), so one
    function becomes two graphs with eager code between them, at every call. With
    `fullgraph=True` compiling raises.

    ## Example
    ```python
    @torch.compile
    def step(x):
        y = x * 2
        print("y", y)
        return y + 1
    ```

    Use instead:
    ```python
    @torch.compile
    def step(x):
        y = x * 2
        return y + 1

    y = step(x)
    print("y", y)  # after the compiled call
    ```
    or `torch._higher_order_ops.print("y={}", y)`, or
    `torch._dynamo.config.reorderable_logging_functions = {print}` (both: one graph, measured).

    ## References
    - [GB0059](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html),
      [GB0569](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0569.html)
    """

    code, name, category = "DYN105", "print-in-compiled", "item_sync"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    covers = ("XLA104",)  # the same hazard, in torch_xla's words
    summary = "`{func}` inside a compiled function: {consequence} ({gb})"
    hint = "print after the compiled call returns, or use `torch._higher_order_ops.print(fmt, t)`"
    gb_ids = ("GB0059", "GB0569")

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def step(x):
                y = x * 2
                return y + 1

            print("y", step(torch.ones(3)))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def step(x):
                y = x * 2
                label = f"{y}"  # an f-string of a tensor: traced, no break
                return y + 1

            step(torch.ones(3))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def step(x):
                y = x * 2
                if not torch.compiler.is_compiling():
                    print("eager only", y)
                return y + 1

            step(torch.ones(3))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def step(x):
                y = x * 2
                print("y", y)
                return y + 1

            step(torch.ones(3))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def step(x):
                y = x * 2
                text = repr(y)
                return y + len(text)

            step(torch.ones(3))
            """,
            line=6,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name) or self.ctx.qualified_name(node.func) != node.func.id:
            return
        func = node.func.id
        if func == "print":
            gb = "GB0059"
        elif func in ("str", "repr") and len(node.args) == 1 and is_tensor(self.ctx, node.args[0]):
            gb = "GB0569" if func == "repr" else "GB0059"
        else:
            return
        options = compiled_options(self.ctx, node)
        if options is not None:
            self.report(node, self.summary.format(func=f"{func}()", consequence=break_note(options), gb=gb))
