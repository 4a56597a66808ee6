"""TorchTPU context: does this file run on Google's TorchTPU, and what does it hand to `torch.compile`.

File-level on purpose (a small analysis for the TPU2xx rules, checked against torch-tpu 0.2.0):

* **Evidence** of TorchTPU is `torch.device("tpu")` (or `"tpu:N"`), a `"tpu"` device string passed
  as `device=` or to `.to(...)`, any `torch.tpu.*` reference (the device module `torch_tpu._loader`
  registers), or `backend="tpu"` (the `torch.compile` backend `torch_tpu._internal.compile`
  registers, or the process-group backend `_loader._init_device_impl` registers). **Not** `import
  torch_tpu` alone: Sophgo's SG2260/BM1684X plug-in ships a Python package of the same name.
* **Compile sites**: `@torch.compile`, `@torch.compile(...)` and `torch.compile(f, ...)` with `f` a
  function of this module, with the options that change TorchTPU's verdict (`backend`, `dynamic`,
  `mode`, `options`). With no `backend=`, 0.2.0's patched `torch.compile` picks `tpu` when an input
  is on TPU (`_loader._default_tpu_compile`), so in a TorchTPU file it counts as the tpu backend.

What could later be shared with the torch.compile (DYN) analysis: `compile_sites` (which functions
are compiled, with their options); the DYN analysis also follows callees across modules, which this
one does not need (every TPU2xx hazard sits on the compile call or the compiled function itself).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .index import FUNCTIONS
from .names import dotted_name, keyword, positional, string_value

if TYPE_CHECKING:
    from .file import File

TPU_DEVICE = re.compile(r"tpu(:\d+)?")
COMPILE = "torch.compile"
UNKNOWN = object()  # an option whose value the file does not show


@dataclass(frozen=True)
class CompileSite:
    """One `torch.compile` of a function of this module."""

    call: ast.Call | None  # `torch.compile(...)`; None for a bare `@torch.compile`
    function: ast.FunctionDef | ast.AsyncFunctionDef | None  # what is compiled, when it is a function here
    backend: object  # a string, None (not passed) or UNKNOWN
    dynamic: object  # True / False / None (not passed or None) / UNKNOWN

    def option(self, name: str) -> ast.keyword | None:
        return keyword(self.call, name) if self.call is not None else None


def _literal(node: ast.expr | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return UNKNOWN


def _is_tpu_device(value: str | None) -> bool:
    return value is not None and TPU_DEVICE.fullmatch(value) is not None


def evidence(ctx: File) -> ast.AST | None:
    """The first node showing that the file runs on TorchTPU, or None."""
    cached = ctx.__dict__.get("_torchtpu_evidence", UNKNOWN)
    if cached is not UNKNOWN:
        return cached
    found = _find_evidence(ctx)
    ctx.__dict__["_torchtpu_evidence"] = found
    return found


def uses_torchtpu(ctx: File) -> bool:
    return evidence(ctx) is not None


def _find_evidence(ctx: File) -> ast.AST | None:
    for node in ctx.index.by_type.get(ast.Attribute, ()):
        qualified = ctx.qualified_name(node)
        if qualified and (qualified == "torch.tpu" or qualified.startswith("torch.tpu.")):
            return node
    for call in ctx.index.calls:
        qualified = ctx.qualified_name(call.func)
        args = positional(call)
        if qualified == "torch.device" and args and _is_tpu_device(string_value(args[0])):
            return call
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "to"
            and args
            and _is_tpu_device(string_value(args[0]))
        ):
            return call
        for kw in call.keywords:
            if kw.arg == "device" and _is_tpu_device(string_value(kw.value)):
                return call
            if kw.arg == "backend" and string_value(kw.value) == "tpu":
                return call
        if (
            qualified
            in ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
            and args
            and string_value(args[0]) in ("tpu", "tpu_dist")
        ):
            return call
    return None


def _is_compile(ctx: File, node: ast.AST) -> bool:
    return ctx.qualified_name(node) == COMPILE


def compile_sites(ctx: File) -> list[CompileSite]:
    """Every `torch.compile` of this module, with the function it compiles when that is known here."""
    cached = ctx.__dict__.get("_torchtpu_sites")
    if cached is not None:
        return cached
    sites: list[CompileSite] = []
    defs = [
        f
        for f in (*ctx.index.by_type.get(ast.FunctionDef, ()), *ctx.index.by_type.get(ast.AsyncFunctionDef, ()))
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]  # (all are: by_type's lists)
    functions = {f.name: f for f in defs}  # the last of a name wins, async after plain ones, as before
    for func in defs:
        for decorator in func.decorator_list:
            if _is_compile(ctx, decorator):
                sites.append(CompileSite(None, func, None, None))
            elif isinstance(decorator, ast.Call) and _is_compile(ctx, decorator.func) and not decorator.args:
                sites.append(_site(decorator, func))
    for call in ctx.index.calls:
        if not _is_compile(ctx, call.func) or ctx.index.field_of(call) == "decorator_list":
            continue
        args = positional(call)
        target = args[0] if args else None
        outer = ctx.parent(call)
        if target is None and isinstance(outer, ast.Call) and outer.func is call:
            inner = positional(outer)  # `torch.compile(backend="tpu")(f)`
            target = inner[0] if inner else None
        named = functions.get(target.id) if isinstance(target, ast.Name) else None
        sites.append(_site(call, named))
    ctx.__dict__["_torchtpu_sites"] = sites
    return sites


def _site(call: ast.Call, func) -> CompileSite:
    backend = keyword(call, "backend")
    dynamic = keyword(call, "dynamic")
    return CompileSite(
        call, func, _literal(backend.value) if backend else None, _literal(dynamic.value) if dynamic else None
    )


def on_tpu_backend(ctx: File, site: CompileSite) -> bool:
    """The site compiles with TorchTPU's `tpu` backend: named, or chosen by 0.2.0's default selector
    (no `backend=`) in a TorchTPU file."""
    return site.backend == "tpu" or (site.backend is None and uses_torchtpu(ctx))


def compiled_functions(ctx: File) -> dict[ast.AST, list[CompileSite]]:
    """The functions of this module that are compiled, with the sites that compile them."""
    found: dict[ast.AST, list[CompileSite]] = {}
    for site in compile_sites(ctx):
        if site.function is not None:
            found.setdefault(site.function, []).append(site)
    return found


def enclosing_function(ctx: File, node: ast.AST):
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, FUNCTIONS):
            return ancestor
    return None


def call_name(node: ast.expr) -> str | None:
    """`opt.step` -> "opt", `self.opt.step` -> "self.opt": the receiver as written."""
    return dotted_name(node.value) if isinstance(node, ast.Attribute) else None
