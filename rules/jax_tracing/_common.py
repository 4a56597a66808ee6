"""What the rules of this family share: helpers, constants and fix builders."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import jitted_target
from xlalint.analysis.names import has_star_args
from xlalint.diagnostics import ImportRequest


def module_spelling(cctx, node, module: str) -> tuple[str, list[ImportRequest]]:
    """How fixed code at `node` spells `module`: the file's own name for it, else the dotted name
    (imported)."""
    bound = cctx.bound_name(module, node)
    return (bound, []) if bound is not None else (module, [ImportRequest(module)])


def static_arguments(ctx, call: ast.Call, *, filtered: bool = False):
    """The arguments `call` passes to static parameters of a jitted function of this module (with
    `filtered`, also to the non-array parameters of a `filter_jit` function, static by type)."""
    if not isinstance(call.func, ast.Name) or has_star_args(call):
        return
    target = jitted_target(ctx, call)
    if (
        target is None
        or not target.static
        or ctx.index.scope_of(call.func) is target.func
        or (target.filtered and not filtered)
    ):
        return
    for name, arg in zip(target.params, call.args):
        if name in target.static:
            yield name, arg
    for kw in call.keywords:
        if kw.arg in target.static:
            yield kw.arg, kw.value
