"""DYN101 item-in-compiled: Flags `t.item()` and `t.tolist()` on a tensor inside a function `torch.compile`
traces (decorated, wrapped by `torch.compile(f)`, the `forward` of a compiled module, or a function they
call)."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid

GB = {"item": "GB0124", "tolist": "GB0109"}


class ItemInCompiled(Rule):
    """## What it does
    Flags `t.item()` and `t.tolist()` on a tensor inside a function `torch.compile` traces (decorated,
    wrapped by `torch.compile(f)`, the `forward` of a compiled module, or a function they call).

    ## Why is this bad?
    Dynamo cannot put a tensor's value into a graph as a Python number: it breaks the graph
    ([GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html) "Unsupported
    Tensor.item() call with capture_scalar_outputs=False"; `.tolist()`:
    [GB0109](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0109.html), or
    [GB0033](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0033.html) for an integer
    tensor). The graph is split in two, the host waits for the value, and the rest runs as a second
    graph; on a CPU tensor too. With `fullgraph=True` the call is captured silently and still reads
    the value on the host (pytorch#196198): no error tells you.

    ## Example
    ```python
    @torch.compile
    def normalise(x):
        y = x * 2
        return y / y.sum().item()
    ```

    Use instead:
    ```python
    @torch.compile
    def normalise(x):
        y = x * 2
        return y / y.sum()  # a 0-d tensor broadcasts: one graph, no host read
    ```
    Read values after the compiled call returns, or set
    `torch._dynamo.config.capture_scalar_outputs = True` (the value stays symbolic).

    ## References
    - [GB0124](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html),
      [GB0109](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0109.html)
    - PyTorch docs, "torch.compile: graph breaks"
    """

    code, name, category = "DYN101", "item-in-compiled", "item_sync"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    # stable: right on 25 of 26 executed lines of the real-code oracle (benchmarks/compile_oracle)
    covers = ("XLA101",)  # the same hazard, in torch_xla's words
    summary = "`.{method}()` inside a compiled function: {consequence} and a host read ({gb})"
    hint = "keep the value a tensor (a 0-d tensor broadcasts) and read it after the compiled call returns"
    gb_ids = ("GB0124", "GB0109", "GB0033")

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def normalise(x):
                y = x * 2
                return y / y.sum()

            normalise(torch.ones(4))
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def normalise(x):
                return x / x.sum()

            total = normalise(torch.ones(4)).sum().item()  # outside: the compiled call has returned
            """
        ),
        Valid(
            """
            import torch

            torch._dynamo.config.capture_scalar_outputs = True

            @torch.compile
            def normalise(x):
                y = x * 2
                return y / y.sum().item()  # captured: the value stays symbolic

            normalise(torch.ones(4))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def normalise(x):
                y = x * 2
                return y / y.sum().item()

            normalise(torch.ones(4))
            """,
            line=6,
        ),
        Invalid(
            """
            import torch

            class Head(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = torch.nn.Linear(4, 4)

                def forward(self, x):
                    h = self.proj(x)
                    sizes = h.argmax(-1).tolist()
                    return h * len(sizes)

            model = torch.compile(Head())
            model(torch.ones(2, 4))
            """,
            line=10,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in GB and not node.args and not node.keywords):
            return
        options = compiled_options(self.ctx, node)
        if options is None or not is_tensor(self.ctx, func.value):
            return
        if self.ctx.compiled.captures("capture_scalar_outputs"):
            return  # captured as an unbacked symbol: no break
        if options.fullgraph and func.attr == "item":
            consequence = "`fullgraph=True` captures it silently (pytorch#196198), still"
        else:
            consequence = "a graph break" if not options.fullgraph else "with `fullgraph=True` an error at compile time"
        self.report(node, self.summary.format(method=func.attr, consequence=consequence, gb=GB[func.attr]))
