"""DYN106 logging-in-compiled: Flags calls of a `logging.Logger` (`logger.info(...)` where `logger =
logging.getLogger(...)`), of the `logging` module's functions, and `warnings.warn(...)` inside a function
`torch.compile` traces."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import break_note, compiled_options

from xlalint.analysis.names import dotted_name
from xlalint.rule import Invalid, Rule, Valid

LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}


class LoggingInCompiled(Rule):
    """## What it does
    Flags calls of a `logging.Logger` (`logger.info(...)` where `logger = logging.getLogger(...)`),
    of the `logging` module's functions, and `warnings.warn(...)` inside a function
    `torch.compile` traces.

    ## Why is this bad?
    Dynamo does not trace into logging: a logger method breaks the graph
    ([GB0291](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0291.html)), and
    `warnings.warn` is a function marked as skipped
    ([GB0007](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html)). The
    function becomes two graphs with eager code between, at every call, whether or not the
    message is shown. With `fullgraph=True` compiling raises.

    ## Example
    ```python
    logger = logging.getLogger(__name__)

    @torch.compile
    def step(x):
        y = x * 2
        logger.info("step done")
        return y + 1
    ```

    Use instead:
    ```python
    @torch.compile
    def step(x):
        y = x * 2
        return y + 1

    out = step(x)
    logger.info("step done")  # outside the compiled function
    ```
    or list the function in `torch._dynamo.config.ignore_logger_methods` /
    `reorderable_logging_functions`.

    ## References
    - [GB0291](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0291.html),
      [GB0007](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html)
    - pytorch/pytorch#108650 (`Logger.info` in a compiled UNet)
    """

    code, name, category = "DYN106", "logging-in-compiled", "other"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = "`{func}` inside a compiled function: {consequence} ({gb})"
    hint = "log after the compiled call returns, or register the method in `torch._dynamo.config.ignore_logger_methods`"
    gb_ids = ("GB0291", "GB0007")

    VALID = [
        Valid(
            """
            import logging

            import torch

            logger = logging.getLogger(__name__)

            @torch.compile
            def step(x):
                y = x * 2
                return y + 1

            out = step(torch.ones(3))
            logger.info("step done")
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def step(x, log):
                y = x * 2
                log.append("step")  # a list's method, not a logger
                return y + 1

            step(torch.ones(3), [])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import logging

            import torch

            logger = logging.getLogger(__name__)

            @torch.compile
            def step(x):
                y = x * 2
                logger.info("step done")
                return y + 1

            step(torch.ones(3))
            """,
            line=10,
        ),
        Invalid(
            """
            import warnings

            import torch

            @torch.compile
            def step(x):
                y = x * 2
                warnings.warn("deprecated path")
                return y + 1

            step(torch.ones(3))
            """,
            line=8,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        if name == "warnings.warn":
            gb = "GB0007"
        elif name.startswith("logging.") and name.rpartition(".")[2] in LOG_METHODS:
            gb = "GB0291"
        elif isinstance(node.func, ast.Attribute) and node.func.attr in LOG_METHODS and self._logger(node.func.value):
            gb = "GB0291"
        else:
            return
        options = compiled_options(self.ctx, node)
        if options is not None:
            self.report(
                node, self.summary.format(func=dotted_name(node.func) or name, consequence=break_note(options), gb=gb)
            )

    def _logger(self, expr: ast.expr) -> bool:
        """`logger` (or `self.logger`) assigned `logging.getLogger(...)` in this file."""
        return any(
            isinstance(v, ast.Call) and self.ctx.qualified_name(v.func) == "logging.getLogger"
            for v in self.ctx.assigned_values(expr)
        )
