"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast


def enclosing(ctx, node: ast.AST, kind):
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, kind):
            return anc
    return None


NEW_SIZED = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


def arg_values(call: ast.Call) -> list[ast.expr]:
    """Every argument's value (`*xs` and `**kw` give `xs` and `kw`): positional ones, then keywords."""
    return [*(a.value if isinstance(a, ast.Starred) else a for a in call.args), *(k.value for k in call.keywords)]
