"""Code written for an older release on purpose: the old side of a version check (`if
XLA_GE_28: torch_xla.sync() else: xm.mark_step()`), of a `try`/`except AttributeError` fallback, or
the platform's own implementation of the API. A table with `guards = true` leaves such code alone."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from xlalint.analysis.context import FileContext
from xlalint.analysis.guards import exits_block, words
from xlalint.analysis.index import FUNCTIONS
from xlalint.analysis.names import dotted_name, last_part

from .resolve import qualified_names
from .table import Migration

NEW, OLD, EITHER = 1, -1, 0  # the branch runs on the newer torch_xla / on the older one / can't tell
_VERSION_WORD = re.compile(
    r"version|\d+_\d+|greater|at_?least|newer|older|lower|less_than|torch_xla\s*[<>=!~]|^\s*[<>=!~]=?\s*\d+\.\d+|"
    r"(^|_)(ge|gt|le|lt)_?\d",  # `XLA_GE_28`, `_TORCH_XLA_LT_2_8`
    re.I,
)
_NEW_WORD = re.compile(r"greater|at_?least|newer|>|(^|_)(ge|gt)_?\d", re.I)
_OLD_WORD = re.compile(r"older|lower|less|<|(^|_)(le|lt)_?\d", re.I)
_MISSING_API_ERRORS = {"AttributeError", "ImportError", "ModuleNotFoundError", "NameError"}


def _version_polarity(test: ast.expr) -> int | None:
    """None if `test` is no version/feature check; else which torch_xla its body is written for."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _version_polarity(test.operand)
        return None if inner is None else -inner
    if isinstance(test, ast.Call) and dotted_name(test.func) in ("hasattr", "getattr"):
        return EITHER  # feature detection: either branch may be the compatibility path
    if isinstance(test, ast.BoolOp):  # `a and b and c` is `(a and b) and c`
        polarity = _version_polarity(test.values[0])
        for value in test.values[1:]:
            polarity = _combined(polarity, _version_polarity(value))
        return polarity
    # keyword and parameter names are words too: `if check(min_version=...)`
    test_words = [*words(test), *(n.arg for n in ast.walk(test) if isinstance(n, (ast.keyword, ast.arg)) and n.arg)]
    if not any(_VERSION_WORD.search(w) for w in test_words):
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and not isinstance(test.left, (ast.Constant, ast.Tuple)):
        op = test.ops[0]
        if isinstance(op, (ast.Lt, ast.LtE)):
            return OLD
        if isinstance(op, (ast.Gt, ast.GtE)):
            return NEW
    new = any(_NEW_WORD.search(w) for w in test_words)
    old = any(_OLD_WORD.search(w) for w in test_words)
    return NEW if new and not old else OLD if old and not new else EITHER


def _combined(left: int | None, right: int | None) -> int | None:
    """Both sides of `and`/`or`: the same direction when both check versions, else EITHER."""
    known = [s for s in (left, right) if s is not None]
    if not known:
        return None
    return known[0] if len(known) == 2 and left == right else EITHER


def _catches_missing_api(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(last_part(dotted_name(t)) in _MISSING_API_ERRORS | {"Exception", "BaseException"} for t in types)


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """The handler does something (an import or a call), not just `xm = None` / `pass` / `raise ...`."""
    stack: list[ast.AST] = list(handler.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Call, ast.Import, ast.ImportFrom)):
            return True
        if not isinstance(node, ast.Raise):
            stack.extend(ast.iter_child_nodes(node))
    return False


def in_compat_fallback(
    ctx: FileContext, node: ast.AST, entry: Migration | None = None, moved_modules: Sequence[Migration] = ()
) -> bool:
    """`node` is the old-torch_xla side of a version/feature check or of a try/except fallback, or
    of an `if`/`else` whose other branch calls `entry`'s replacement (`if flag: torch_xla.sync()
    else: xm.mark_step()`: whatever the flag is, the file already chose per version)."""
    child = node
    for anc in ctx.index.ancestors(node):
        field = ctx.index.field_of(child) or ""
        if isinstance(anc, (ast.If, ast.IfExp)):
            polarity = _version_polarity(anc.test)
            other = {"body": anc.orelse, "orelse": anc.body}.get(field)
            if (
                entry is not None
                and entry.replacement
                and other
                and _names(ctx, other, entry.replacement, moved_modules)
            ):
                return True
            if polarity is not None:
                if field == "body" and polarity != NEW:
                    return True
                if field == "orelse" and polarity != OLD:
                    return True
        elif isinstance(anc, ast.Try):
            if field == "handlers" and isinstance(child, ast.ExceptHandler) and _catches_missing_api(child):
                return True
            if field == "body" and any(_catches_missing_api(h) and _falls_back(h) for h in anc.handlers):
                return True
        if isinstance(child, ast.stmt) and ctx.index.after_in_block(child, "new-xla-exit", _new_xla_exit):
            return True  # `if new_xla: ...; return` then the old path
        child = anc
    return False


def _new_xla_exit(earlier: ast.stmt) -> bool:
    """`if new_xla: ...; return`: the statements after it run on old torch_xla only."""
    if isinstance(earlier, ast.If) and not earlier.orelse and exits_block(earlier.body):
        polarity = _version_polarity(earlier.test)
        return polarity is not None and polarity != OLD
    return False


def _names(
    ctx: FileContext, branch: ast.AST | list[ast.stmt], qualified: str, moved_modules: Sequence[Migration]
) -> bool:
    """Some name or attribute in `branch` refers to `qualified` through the file's imports."""
    for root in branch if isinstance(branch, list) else [branch]:
        for node in ast.walk(root):
            if isinstance(node, (ast.Name, ast.Attribute)) and qualified in qualified_names(ctx, node, moved_modules):
                return True
    return False


def own_implementation(ctx: FileContext, node: ast.AST, entry: Migration) -> bool:
    """The package's own code implementing the API (e.g. `torch_xla.runtime.use_spmd` setting `XLA_USE_SPMD`)."""
    if entry.package.split(".")[0] not in ctx.path.parts[:-1]:
        return False
    names = {entry.name.rsplit(".", 1)[-1]}
    if entry.replacement:
        names.add(entry.replacement.rsplit(".", 1)[-1])
    return any(isinstance(a, FUNCTIONS) and a.name in names for a in ctx.index.ancestors(node))
