"""DYN205 compile-in-loop: Flags `torch.compile(f)` inside a loop where `f` is a lambda or a function
defined in the loop that reads a variable the loop changes (its target, or a name assigned in its body)."""

from __future__ import annotations

import ast

from xlalint.analysis.index import FUNCTIONS, LOOPS, target_names
from xlalint.rule import Invalid, Rule, Valid


class CompileInLoop(Rule):
    """## What it does
    Flags `torch.compile(f)` inside a loop where `f` is a lambda or a function defined in the loop
    that reads a variable the loop changes (its target, or a name assigned in its body).

    ## Why is this bad?
    Dynamo caches compiled code on the function's code object and guards on the values the
    closure captures (`G['k'] == 0`): each iteration's new value fails the guard and compiles
    again (measured: 2 compilations in 12 iterations for an int with the default options, 8 and
    then eager with `dynamic=False`; a string or other object recompiles every time), and the
    wrapping itself costs time at every iteration.

    ## Example
    ```python
    for k in range(steps):
        f = torch.compile(lambda t: t * k)
        out = f(x)
    ```

    Use instead:
    ```python
    f = torch.compile(lambda t, k: t * k)  # once, before the loop; what changes is an argument
    for k in range(steps):
        out = f(x, torch.tensor(k))
    ```

    ## References
    - PyTorch docs, "torch.compile: recompilation" (guards on closure variables)
    """

    code, name, category = "DYN205", "compile-in-loop", "varying_shape"
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = "`torch.compile` of a new closure over `{name}` at every iteration: a recompilation per value of `{name}`"
    hint = "compile once before the loop a function that takes what changes as a (tensor) argument"
    recompiles = True

    VALID = [
        Valid(
            """
            import torch

            f = torch.compile(lambda t, k: t * k)
            for k in range(12):
                f(torch.ones(3), torch.tensor(k))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            for k in range(12):
                f = torch.compile(lambda t: t * k)
                f(torch.ones(3))
            """,
            line=4,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch.compile" or not node.args:
            return
        loop = self._loop(node)
        if loop is None:
            return
        target = node.args[0]
        funcs = (
            [target]
            if isinstance(target, ast.Lambda)
            else [f for f in self.ctx.compiled.functions_named(target) if loop in set(self.ctx.index.ancestors(f))]
        )
        changing = self._changing(loop)
        for func in funcs:
            read = sorted(
                {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                & changing - _params(func)
            )
            if read:
                self.report(node, self.summary.format(name=read[0]))
                return

    def _loop(self, node: ast.AST) -> ast.For | ast.AsyncFor | ast.While | None:
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, LOOPS):
                return anc
            if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
                return None
        return None

    @staticmethod
    def _changing(loop: ast.For | ast.AsyncFor | ast.While) -> set[str]:
        names = set(target_names(loop.target)) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
        for stmt in loop.body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
        return names


def _params(func: ast.AST) -> set[str]:
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()  # (never: a lambda, or a def functions_named found)
    a = func.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
