"""DYN123 comprehension-in-eager-frame: Flags, on Python 3.11 and older, a list, set or dict comprehension in a
compiled function that Dynamo gives up on because of a graph break inside a loop: the function runs
eagerly, and the comprehension (a function of its own before Python 3.12) is compiled alone and breaks
again."""

from __future__ import annotations

import ast
import sys

from xlalint.rules.dynamo._common import compiled_options, is_tensor

from xlalint.rule import Invalid, Rule, Valid
from xlalint.torch_version import gb_for_installed, version_key

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
# The comprehension's first iterable is evaluated by the enclosing function and passed in as an
# iterator: Dynamo cannot step these as a frame's input (measured: list, zip, enumerate, map, sorted,
# a dict's views, a module's `parameters()` generator). A `range`, a tuple or a tensor it steps.
ITERATOR_BUILDERS = {"zip", "enumerate", "map", "filter", "sorted", "reversed", "list"}
ITERATOR_METHODS = {"items", "keys", "values", "tolist", "parameters", "named_parameters", "buffers"}
# torch 2.11 "Unsupported method call", torch 2.13 "Missing tp_iternext"
IDS_BY_TORCH: dict[str, str | None] = {"2.11": "GB0156", "2.13": "GB4347"}
KIND = {ast.ListComp: "list", ast.SetComp: "set", ast.DictComp: "dict"}


def comprehensions_are_frames() -> bool:
    """Before Python 3.12 (PEP 709) a comprehension runs as a function of its own."""
    return sys.version_info < (3, 12)


class ComprehensionInEagerFrame(Rule):
    """## What it does
    Flags, on Python 3.11 and older, a list, set or dict comprehension in a compiled function that
    has a graph break inside a loop (one another DYN rule flags: `.item()`, `torch.autograd.grad`,
    `print`, ...), where the comprehension iterates a list, a `zip`, an `enumerate`, a dict's items or
    a module's parameters, and uses `torch` or a tensor (or the module) inside. Not flagged: a
    comprehension over a `range`, a tuple or a tensor (Dynamo steps those), one traced before an
    earlier break outside the loop, and a generator expression (measured on torch 2.11 and 2.13).

    ## Why is this bad?
    Dynamo does not resume after a graph break inside a loop: it gives up on the whole function
    ("graph break in loop", [GB7000](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb7000.html))
    and runs it eagerly. Before Python 3.12 a comprehension is a function of its own, called with an
    iterator: Dynamo then compiles each comprehension alone, cannot step the iterator it receives, and
    breaks again ([GB4347](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4347.html)
    "Missing tp_iternext" on torch 2.13,
    [GB0156](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0156.html) on torch 2.11,
    whose hint names this case). The comprehension runs eagerly, as does the rest of the function.
    Fixing the break in the loop puts the whole function back in one graph; this finding goes with it.

    ## Example
    ```python
    @torch.compile
    def inner_steps(x, ws):
        for w in ws.values():
            x = x * w
            print(x.sum().item())  # a break in the loop: the function runs eagerly
        return {name: x * w for name, w in ws.items()}  # compiled alone: breaks again
    ```

    Use instead:
    ```python
    @torch.compile
    def inner_steps(x, ws):
        for w in ws.values():
            x = x * w
        print(x.sum().item())  # after the loop: Dynamo resumes after it
        return {name: x * w for name, w in ws.items()}
    ```

    ## References
    - [GB4347](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4347.html),
      [GB0156](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0156.html),
      [GB7000](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb7000.html),
      [PEP 709](https://peps.python.org/pep-0709/) (comprehensions inlined from Python 3.12)
    """

    code, name, category = "DYN123", "comprehension-in-eager-frame", "other"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    python_below = (3, 12)  # the hazard exists on these Pythons only; its examples are skipped on others
    summary = (
        "{kind} comprehension in `{func}`, eager after the loop's graph break (line {line}): on Python <= 3.11 "
        "it is compiled alone and breaks again ({gb})"
    )
    hint = "fix the break in the loop (the whole function is then one graph), or write the comprehension as a loop"
    gb_ids = tuple(sorted({gb for gb in IDS_BY_TORCH.values() if gb}))

    @classmethod
    def gb_ids_by_torch(cls) -> dict[str, tuple[str, ...]]:
        return {v: (gb,) for v in sorted(IDS_BY_TORCH, key=version_key) if (gb := IDS_BY_TORCH[v])}

    VALID = [
        Valid(
            """
            import torch

            @torch.compile
            def scaled(x, ws):
                for w in ws:
                    x = x * w
                return [x * w for w in ws]  # no break anywhere: traced inline

            scaled(torch.ones(3), [torch.ones(3), torch.ones(3)])
            """
        ),
        Valid(
            """
            import torch

            @torch.compile
            def scaled(x, ws):
                ys = (x * w for w in ws)  # a generator expression: not compiled alone
                return sum(ys)

            scaled(torch.ones(3), [torch.ones(3), torch.ones(3)])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            @torch.compile
            def inner_steps(x, ws):
                for w in ws.values():
                    x = x * w
                    print(x.sum().item())
                return {name: x * w for name, w in ws.items()}

            inner_steps(torch.ones(3), {"a": torch.ones(3), "b": torch.ones(3)})
            """,
            line=8,
        ),
        Invalid(
            """
            import torch

            @torch.compile
            def sum_rows(t, rows):
                picked = rows.tolist()
                checked = [torch.clamp(t[i], min=0) for i in picked]
                total = 0.0
                for i in picked:
                    total += t[i].item()
                return torch.stack(checked) * total

            sum_rows(torch.ones(4), torch.tensor([0, 2]))
            """,
            line=6,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._breaks: dict[ast.AST, list[tuple[int, ast.AST | None]]] = {}

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._check(node)

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._check(node)

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._check(node)

    def _check(self, node: ast.ListComp | ast.SetComp | ast.DictComp) -> None:
        if not comprehensions_are_frames():
            return
        func = self._own_function(node)
        if func is None or compiled_options(self.ctx, node) is None:
            return
        if not self._steps_an_iterator(node.generators[0].iter) or not self._holds_torch(node, func):
            return
        breaks = self._function_breaks(func)
        loop_break = self._eager_by(node, breaks)
        if loop_break is None:
            return
        gb = gb_for_installed(IDS_BY_TORCH)
        self.report(node, self.summary.format(kind=KIND[type(node)], func=func.name, line=loop_break, gb=gb))

    def _own_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The `def` whose frame runs the comprehension (not one nested in another comprehension,
        which runs in that comprehension's frame, nor one in a lambda)."""
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (*COMPREHENSIONS, ast.GeneratorExp, ast.Lambda)):
                return None
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return anc
        return None

    def _steps_an_iterator(self, expr: ast.expr) -> bool:
        """The first iterable is evidently one whose iterator Dynamo cannot step as a frame input."""
        values = self.ctx.assigned_values(expr) if isinstance(expr, ast.Name) else [expr]
        return bool(values) and all(self._iterator_source(v) for v in values)

    def _iterator_source(self, value: ast.expr) -> bool:
        if isinstance(value, (ast.List, ast.ListComp, ast.Dict, ast.DictComp, ast.Set, ast.SetComp)):
            return True
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        if isinstance(func, ast.Name) and self.ctx.qualified_name(func) == func.id:
            return func.id in ITERATOR_BUILDERS
        return isinstance(func, ast.Attribute) and func.attr in ITERATOR_METHODS

    def _holds_torch(self, node: ast.AST, func: ast.AST) -> bool:
        """Dynamo compiles a frame alone only if it uses torch: a `torch` module by name, or a
        tensor or module among its variables (the iterator it receives is not looked into)."""
        generators = node.generators  # type: ignore[attr-defined]
        inside = {id(n) for n in ast.walk(generators[0].iter)}
        # its own loop variables are unbound when the frame starts: Dynamo looks at what it holds then
        own = {n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        for name in ast.walk(node):
            if not isinstance(name, ast.Name) or id(name) in inside or name.id in own:
                continue
            binding = self.ctx.index.imports.get(name.id)
            if binding is not None and binding.qualified.split(".")[0] == "torch":
                return True
            if name.id == "self" and self._module_method(func):
                return True
            if is_tensor(self.ctx, name):
                return True
        return False

    def _module_method(self, func: ast.AST) -> bool:
        """`func` is a method of an `nn.Module` (its `self` is a module: Dynamo compiles a frame holding one)."""
        options = compiled_options(self.ctx, func)
        if options is not None and options.assumed and "nn.Module" in options.assumed:
            return True
        cls = self.ctx.index.enclosing_class(func)
        return cls is not None and any((self.ctx.qualified_name(b) or "").startswith("torch.nn.") for b in cls.bases)

    def _function_breaks(self, func: ast.AST) -> list[tuple[int, ast.AST | None]]:
        """The graph breaks the other DYN break rules find in `func`'s own code: (line, the loop
        around it in `func`, or None)."""
        if func in self._breaks:
            return self._breaks[func]
        self._breaks[func] = []  # a recursive call sees no break while this one is judged
        from xlalint.rules import ALL_RULES  # the registry imports this module

        found: list[tuple[int, ast.AST | None]] = []
        nodes = [n for n in ast.walk(func) if n is func or self._own_function_of(n) is func]
        for rule in ALL_RULES:
            if (
                not rule.code.startswith("DYN1")
                or rule is type(self)
                or not getattr(rule, "gb_ids", ())
                or not rule.applies(self.ctx)
            ):
                continue
            checker = rule(self.ctx)
            visits = rule.visited_types()
            for n in nodes:
                method = visits.get(type(n))
                if method is not None:
                    getattr(checker, method)(n)
            for report in checker.reports:
                line = getattr(report.node, "lineno", None)
                if line is not None:
                    found.append((line, self._loop_around(report.node, func)))
        # a call of a function of this file that breaks splits `func` there too (Dynamo resumes
        # after it in a new frame); calls it cannot resolve are taken as traced
        for call in (n for n in nodes if isinstance(n, ast.Call)):
            if any(callee is not func and self._function_breaks(callee) for callee in self.ctx.compiled.called(call)):
                found.append((call.lineno, self._loop_around(call, func)))
        self._breaks[func] = found
        return found

    def _own_function_of(self, node: ast.AST) -> ast.AST | None:
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, FUNCTIONS):
                return anc
        return None

    def _loop_around(self, node: ast.AST, func: ast.AST) -> ast.AST | None:
        """The outermost loop of `func` whose body runs `node` (not its iterable, run once)."""
        outer, child = None, node
        for anc in self.ctx.index.ancestors(node):
            if anc is func:
                break
            if isinstance(anc, LOOPS) and self.ctx.index.field_of(child) not in ("iter", "target"):
                outer = anc
            child = anc
        return outer

    def _eager_by(self, node: ast.AST, breaks: list[tuple[int, ast.AST | None]]) -> int | None:
        """The line of a break in a loop that makes Dynamo run `node`'s part of the function
        eagerly: the comprehension is in that loop or after it, or before it with no break
        outside loops between them (Dynamo resumes after such a break in a new frame, which it
        gives up on at the loop; code before that break was traced in an earlier graph)."""
        line = node.lineno  # type: ignore[attr-defined]
        plain = [b for b, loop in breaks if loop is None]
        for brk, loop in sorted(breaks, key=lambda b: b[0]):
            if loop is None:
                continue
            start = loop.lineno  # type: ignore[attr-defined]
            if line >= start or not any(line <= b < start for b in plain):
                return brk
        return None
