"""What the Dynamo rule tests share: running code under `torch.compile` on CPU and reading what
Dynamo did (graphs compiled, graph-break ids, recompilations) from its own counters and logs."""

from __future__ import annotations

import itertools
import logging
import re
import sys
import textwrap
import types
from dataclasses import dataclass, field

import torch
import torch._dynamo as dynamo
from torch._dynamo.testing import CompileCounter

LOGGERS = ("torch._dynamo.symbolic_convert.__graph_breaks", "torch._dynamo.guards.__recompiles")
GB_ID = re.compile(r"gb/(gb\d+)\.html")
_EXAMPLES = itertools.count()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


@dataclass
class Run:
    """What Dynamo did while some code ran."""

    graphs: int = 0  # graphs compiled (CompileCounter.frame_count)
    breaks: list[str] = field(default_factory=list)  # the graph_breaks log records
    recompiles: list[str] = field(default_factory=list)  # the recompiles log records
    limit_hit: bool = False  # "hit config.recompile_limit"

    @property
    def user_breaks(self) -> list[str]:
        """The breaks, less those torch's optimizers make on purpose around every compiled `step()`
        (`torch/optim/optimizer.py` `_use_grad` calls `torch._dynamo.graph_break()` twice, and a
        scheduler's wrapper of `step` in `lr_scheduler.py` is marked as skipped: by design)."""
        return [b for b in self.breaks if "/torch/optim/" not in b]

    @property
    def gb_ids(self) -> set[str]:
        return {m.upper() for r in self.breaks for m in GB_ID.findall(r)}


def dynamo_usable() -> bool:
    """Dynamo can compile in this process: no other package took the accelerator slot. Once torchax
    is imported (other tests import it), Dynamo's tracing asks `torch.accelerator` for the current
    stream of the `jax` device and fails ("PyTorch is not linked with support for jax devices")."""
    return torch._C._get_privateuse1_backend_name() == "privateuseone"


def observe(body) -> Run:
    """Run `body(backend)` with a fresh Dynamo and a `CompileCounter` backend; `body` compiles
    with that backend (the example's own `torch.compile(...)` calls are routed to it by `load`)."""
    handler = _Collect()
    loggers = [logging.getLogger(n) for n in LOGGERS]
    saved = [(lg.handlers[:], lg.propagate, lg.level) for lg in loggers]
    torch._logging.set_logs(graph_breaks=True, recompiles=True)
    for lg in loggers:
        lg.handlers[:] = [handler]
        lg.propagate = False
    dynamo.reset()
    counter = CompileCounter()
    try:
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            body(counter)
    finally:
        torch._logging.set_logs()
        for lg, (handlers, propagate, level) in zip(loggers, saved):
            lg.handlers[:], lg.propagate = handlers, propagate
            lg.setLevel(level)
    run = Run(counter.frame_count)
    run.breaks = [r for r in handler.records if "Graph break" in r or "gb/gb" in r]
    run.recompiles = [r for r in handler.records if r not in run.breaks]
    run.limit_hit = any("recompile_limit" in str(w.message) for w in caught)
    return run


def load(source: str, backend) -> dict:
    """Run an example module with `torch.compile` (and `model.compile()`, `torch._dynamo.optimize`)
    sending every graph to `backend`, keeping the example's other options (`dynamic=`,
    `fullgraph=`); a `backend="tpu"` is taken as `dynamic=False` (what TorchTPU forces)."""
    real_compile = torch.compile

    def compile_(model=None, **options):
        if options.get("backend") == "tpu" and "dynamic" not in options:
            options["dynamic"] = False
        options["backend"] = backend
        options.pop("mode", None)
        options.pop("options", None)
        if model is None:
            return lambda m: real_compile(m, **options)
        return real_compile(model, **options)

    real_module_compile = torch.nn.Module.compile

    def module_compile(self, *args, **options):
        options["backend"] = backend
        return real_module_compile(self, *args, **options)

    # A real module in sys.modules: Dynamo of torch 2.11 imports a frame's module by its __name__
    # while it builds guards (2.13 does not), so a bare namespace dict fails there; and it keeps what
    # it imported, so each example gets a module name of its own (a reused name finds the last one).
    module = types.ModuleType(f"xlalint_example_{next(_EXAMPLES)}")
    namespace: dict = module.__dict__
    torch.compile, torch.nn.Module.compile = compile_, module_compile
    sys.modules[module.__name__] = module
    try:
        exec(compile(textwrap.dedent(source), "example", "exec"), namespace)
    finally:
        torch.compile, torch.nn.Module.compile = real_compile, real_module_compile
    return namespace
