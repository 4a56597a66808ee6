"""What Dynamo traces: the functions `torch.compile` compiles, and what they call.

A function is compiled when it is decorated (`@torch.compile`, `@torch.compile(...)`,
`@torch._dynamo.optimize(...)`), wrapped anywhere in its module (`step = torch.compile(f)`), or is
the `forward` of a module compiled there (`torch.compile(model)`, `model.compile()`, where the
model's class is evident). What a compiled function calls is traced into too, in its module and,
through the project index, in others: a graph break in a callee splits the caller's graph. A
function under `torch.compiler.disable` is never traced (a call of it is itself a break).

Inside a compiled region every tensor counts, a CPU tensor included: Dynamo breaks the graph on a
host read whatever the device. The options that change a verdict are recorded per region
(`dynamic=False` or the TorchTPU backend make each new value of a Python scalar a recompilation,
up to the limit of 8; `fullgraph=True` turns a break into an error at compile time), and so are the
file's `torch._dynamo.config` switches that capture scalars or dynamic output shapes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ..diagnostics import Location, Step
from .index import FUNCTIONS
from .names import dotted_name, keyword_value, positional, string_value

if TYPE_CHECKING:
    from .file import File

COMPILERS = {"torch.compile", "torch._dynamo.optimize"}
DISABLERS = {"torch.compiler.disable", "torch._dynamo.disable", "torch._disable_dynamo"}
IS_COMPILING = {"torch.compiler.is_compiling", "torch._dynamo.is_compiling", "torch.compiler.is_dynamo_compiling"}
# false while Dynamo traces (it folds them): their branch is dead code there (`_get_tracing_state()`
# is None: measured on torch 2.13, one graph without the branch's ops)
NOT_WHILE_COMPILING = {
    "torch.jit.is_scripting",
    "torch.jit.is_tracing",
    "torch.onnx.is_in_onnx_export",
    "torch._C._get_tracing_state",
}
CONFIG = "torch._dynamo.config."
RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit (2.13)


@dataclass(frozen=True)
class CompileOptions:
    """The options of a `torch.compile` that change what a hazard costs."""

    dynamic: bool | None = None  # None: automatic dynamic shapes (the default)
    backend: str | None = None
    fullgraph: bool = False
    # compiled only because the user says so (`--assume-compiled`): why, for the evidence chain
    # (`forward of nn.Module `Block``); None where a `torch.compile` of the project compiles it
    assumed: str | None = None

    @property
    def tpu(self) -> bool:
        return self.backend == "tpu"

    @property
    def static(self) -> bool:
        """Every new shape or Python scalar value compiles again, up to the recompile limit
        (`dynamic=False`, and TorchTPU's backend, which forces it)."""
        return self.dynamic is False or (self.tpu and self.dynamic is None)

    def merge(self, other: CompileOptions) -> CompileOptions:
        """A function compiled twice (or reached from two compiled callers): the stricter reading."""
        dynamic = (
            False
            if False in (self.dynamic, other.dynamic)
            else (self.dynamic if self.dynamic is not None else other.dynamic)
        )
        # compiled for real by either: no assumption; else the first reason (sorted: the same
        # whatever order the callers are reached in)
        assumed = min(self.assumed, other.assumed) if self.assumed and other.assumed else None
        return CompileOptions(dynamic, self.backend or other.backend, self.fullgraph or other.fullgraph, assumed)

    def key(self) -> str:
        base = f"{self.dynamic}|{self.backend or ''}|{int(self.fullgraph)}"
        return f"{base}|{self.assumed}" if self.assumed else base

    @classmethod
    def from_key(cls, key: str) -> CompileOptions:
        dynamic, backend, fullgraph, *assumed = key.split("|", 3)
        return cls(
            {"True": True, "False": False}.get(dynamic),
            backend or None,
            fullgraph == "1",
            assumed[0] if assumed else None,
        )

    def describe(self) -> str:
        """How the options change the cost, for a message (empty for the defaults)."""
        if self.tpu:
            return " (backend `tpu` forces `dynamic=False`)"
        return " (`dynamic=False`)" if self.dynamic is False else ""


def options_of(ctx: File, spec: ast.expr) -> CompileOptions:
    """The options a decorator or compiling call passes: `torch.compile(f, dynamic=False,
    backend="tpu", fullgraph=True)`, `torch._dynamo.optimize("eager", nopython=True)`."""
    if not isinstance(spec, ast.Call):
        return CompileOptions()
    if _is_partial(ctx, spec):
        spec = ast.Call(func=spec.args[0], args=[], keywords=spec.keywords)
    dynamic = keyword_value(spec, "dynamic")
    backend = keyword_value(spec, "backend")
    fullgraph = keyword_value(spec, "fullgraph") or keyword_value(spec, "nopython")
    if backend is None and ctx.qualified_name(spec.func) == "torch._dynamo.optimize" and spec.args:
        backend = spec.args[0]
    return CompileOptions(
        dynamic.value if isinstance(dynamic, ast.Constant) and isinstance(dynamic.value, bool) else None,
        string_value(backend),
        isinstance(fullgraph, ast.Constant) and fullgraph.value is True,
    )


def _is_partial(ctx: File, call: ast.Call) -> bool:
    return (
        ctx.qualified_name(call.func) in ("functools.partial", "partial")
        and bool(call.args)
        and ctx.qualified_name(call.args[0]) in COMPILERS
    )


def _compiler(ctx: File, spec: ast.expr) -> bool:
    """`torch.compile`, `torch.compile(...)`, `torch._dynamo.optimize(...)`, `partial(torch.compile, ...)`."""
    if ctx.qualified_name(spec) == "torch.compile":
        return True
    return isinstance(spec, ast.Call) and (ctx.qualified_name(spec.func) in COMPILERS or _is_partial(ctx, spec))


def _disabler(ctx: File, spec: ast.expr) -> bool:
    return ctx.qualified_name(spec.func if isinstance(spec, ast.Call) else spec) in DISABLERS


class CompiledRegions:
    """The compiled functions of one file (computed once, on first question)."""

    def __init__(self, ctx: File) -> None:
        self.ctx = ctx
        # name (`step`, `model`, a decorated function's name) -> (the function it runs, options)
        self.callables: dict[str, tuple[ast.AST, CompileOptions]] = {}
        self.roots: dict[ast.AST, CompileOptions] = {}
        self.disabled: set[ast.AST] = set()
        self.compile_calls: list[ast.Call] = []  # `torch.compile(...)` calls (not decorators)
        if ctx.index.imports.get("torch") is None and not any(
            b.qualified.split(".")[0] == "torch" for b in ctx.index.imports.values()
        ):
            self.functions: dict[ast.AST, CompileOptions] = {}
            return
        self._find_roots()
        self.functions = self._reach()

    # -- roots ------------------------------------------------------------------------------------
    def _find_roots(self) -> None:
        ctx = self.ctx
        for func in (*ctx.index.by_type.get(ast.FunctionDef, ()), *ctx.index.by_type.get(ast.AsyncFunctionDef, ())):
            if any(_disabler(ctx, d) for d in func.decorator_list):
                self.disabled.add(func)
                continue
            specs = [d for d in func.decorator_list if _compiler(ctx, d)]
            if specs:
                options = _merged(options_of(ctx, s) for s in specs)
                self._root(func, options)
                if not isinstance(ctx.index.parent(func), ast.ClassDef):
                    self.callables[func.name] = (func, options)
        for call in ctx.index.calls:
            name = ctx.qualified_name(call.func)
            if name in DISABLERS and call.args:  # `f = torch.compiler.disable(f)`
                self.disabled.update(self.functions_named(call.args[0]))
            elif name == "torch.compile" and call.args:
                self.compile_calls.append(call)
                self._compiled_call(call, call.args[0], options_of(ctx, call))
            elif (
                isinstance(call.func, ast.Call)
                and ctx.qualified_name(call.func.func) == "torch._dynamo.optimize"
                and call.args
            ):  # `torch._dynamo.optimize("eager")(f)`
                self._compiled_call(call, call.args[0], options_of(ctx, call.func))
            elif isinstance(call.func, ast.Attribute) and call.func.attr == "compile" and name not in COMPILERS:
                for cls in self._instance_classes(call.func.value):  # `model.compile()`
                    self._module_root(
                        cls,
                        options_of(ctx, ast.Call(func=call.func, args=[], keywords=call.keywords)),
                        dotted_name(call.func.value),
                    )

    def _compiled_call(self, call: ast.Call, target: ast.expr, options: CompileOptions) -> None:
        parent = self.ctx.index.parent(call)
        bound = dotted_name(parent.targets[0]) if isinstance(parent, ast.Assign) and len(parent.targets) == 1 else None
        if isinstance(target, ast.Lambda):
            self._root(target, options)
            if bound:
                self.callables[bound] = (target, options)
            return
        for func in self.functions_named(target):
            self._root(func, options)
            if bound:
                self.callables[bound] = (func, options)
        for cls in self._instance_classes(target):
            self._module_root(cls, options, bound or dotted_name(target))
        if isinstance(target, ast.Attribute):  # `torch.compile(model.generate)`, `model = Net()`
            for cls in self._instance_classes(target.value):
                self._module_root(cls, options, bound, target.attr)

    def _module_root(
        self, cls: ast.ClassDef, options: CompileOptions, bound: str | None, method: str = "forward"
    ) -> None:
        forward = _method(cls, method)
        if forward is not None:
            self._root(forward, options)
            if bound:
                self.callables[bound] = (forward, options)

    def _root(self, func: ast.AST, options: CompileOptions) -> None:
        if func in self.disabled:
            return
        self.roots[func] = self.roots[func].merge(options) if func in self.roots else options

    def functions_named(self, expr: ast.expr) -> list[ast.AST]:
        """The functions `f`, `self.f` name where written (methods through `self`)."""
        from .jax_tracing import resolve_function

        if isinstance(expr, ast.Name):
            return resolve_function(self.ctx, expr)
        name = dotted_name(expr) or ""
        head, _, attr = name.partition(".")
        if head in ("self", "cls") and "." not in attr:
            cls = self.ctx.index.enclosing_class(expr)
            method = _method(cls, attr) if cls is not None else None
            return [method] if method is not None else []
        return []

    def _instance_classes(self, expr: ast.expr) -> list[ast.ClassDef]:
        """The classes of this module `expr` is evidently an instance of: `Net()`, or a name or
        `self.x` assigned one."""
        values = [expr] if isinstance(expr, ast.Call) else self.ctx.assigned_values(expr)
        found = []
        for value in values:
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                found += [c for c in self.ctx.index.of_type(ast.ClassDef) if c.name == value.func.id]
        return found

    # -- what the roots call ------------------------------------------------------------------------
    @cached_property
    def own_functions(self) -> dict[ast.AST, CompileOptions]:
        """What this module's own compile calls reach, whatever the project says (its summary: the
        project adds the rest, and a second summary made with the facts must not claim them)."""
        return self._reach(with_project=False) if self.ctx.project.compiled else self.functions

    def _reach(self, with_project: bool = True) -> dict[ast.AST, CompileOptions]:
        ctx = self.ctx
        reached = dict(self.roots)
        for qualified, key in ctx.project.compiled if with_project else ():  # compiled from another module
            for func in _by_qualname(ctx, qualified):
                if func not in self.disabled:
                    options = CompileOptions.from_key(key)
                    reached[func] = reached[func].merge(options) if func in reached else options
        pending = list(reached)
        while pending:
            func = pending.pop()
            options = reached[func]
            for callee in self._callees(func):
                if callee in self.disabled:
                    continue
                merged = reached[callee].merge(options) if callee in reached else options
                if reached.get(callee) != merged:
                    reached[callee] = merged
                    pending.append(callee)
        return reached

    def _callees(self, func: ast.AST) -> list[ast.AST]:
        """Functions `func` runs: bare-name calls, `self.m(...)`, submodules called (`self.block(x)`,
        a module instance's `forward`), and the functions and lambdas defined in it."""
        found: list[ast.AST] = []
        for node in ast.walk(func):
            if isinstance(node, (*FUNCTIONS, ast.Lambda)) and node is not func:
                found.append(node)
            elif isinstance(node, ast.Call):
                found += self.called(node)
        return found

    def called(self, call: ast.Call) -> list[ast.AST]:
        """The functions of this module a call runs (for calls in compiled code)."""
        found = self.functions_named(call.func)
        if not found and isinstance(call.func, (ast.Name, ast.Attribute)):
            for cls in self._instance_classes(call.func):
                forward = _method(cls, "forward")
                if forward is not None:
                    found.append(forward)
        return found

    # -- questions ----------------------------------------------------------------------------------
    def region(self, node: ast.AST) -> ast.AST | None:
        """The compiled function around `node`, or None; None too in the branch that
        `torch.compiler.is_compiling()` rules out (`if not is_compiling(): print(...)`)."""
        if not self.functions:
            return None
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
                polarity = self._compiling_test(anc.test)
                field = self.ctx.index.field_of(child)
                if (field == "body" and polarity < 0) or (field == "orelse" and polarity > 0):
                    return None
            if isinstance(child, ast.stmt) and self.ctx.index.after_in_block(
                child, "compiling-exit", self._compiling_exit
            ):
                return None  # below `if torch.compiler.is_compiling(): return ...`
            if anc in self.functions:
                return anc
            if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
                return None
            child = anc
        return None

    def _compiling_exit(self, statement: ast.stmt) -> bool:
        from .guards import exits_block

        return (
            isinstance(statement, ast.If)
            and not statement.orelse
            and exits_block(statement.body)
            and self._compiling_test(statement.test) > 0
        )

    def _compiling_test(self, test: ast.expr) -> int:
        """1: `test` is true while Dynamo traces (`is_compiling()`); -1: false (`torch.jit.is_scripting()`,
        a module flag only ever set to False, as `self.debug_print = False`: a static attribute
        Dynamo folds); 0: unknown."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return -self._compiling_test(test.operand)
        if isinstance(test, ast.Call):
            name = self.ctx.qualified_name(test.func)
            return 1 if name in IS_COMPILING else -1 if name in NOT_WHILE_COMPILING else 0
        name = dotted_name(test) or ""
        if name.startswith("self.") and name.count(".") == 1:
            values = self.ctx.attribute_values(name)
            if values and all(isinstance(v, ast.Constant) and not v.value for v in values):
                return -1
        return 0

    def assumed_chain(self, node: ast.AST) -> tuple[Step, ...]:
        """The evidence of a finding at `node` in code compiled only under `--assume-compiled`:
        one step at the compiled function saying why it is taken as compiled (empty elsewhere)."""
        region = self.region(node)
        options = self.functions.get(region) if region is not None else None
        if options is None or not options.assumed:
            return ()
        line = getattr(region, "lineno", 1)
        column = self.ctx.text.column(line, getattr(region, "col_offset", 0)) + 1
        name = getattr(region, "name", "<lambda>")
        return (
            Step(
                Location(line, column),
                f"in `{name}`, traced from the {options.assumed}, compiled under --assume-compiled",
            ),
        )

    def options(self, node: ast.AST) -> CompileOptions:
        region = self.region(node)
        return self.functions.get(region, CompileOptions()) if region is not None else CompileOptions()

    def target(self, call: ast.Call) -> tuple[ast.AST, CompileOptions] | None:
        """The compiled function a call (outside compiled code) runs: `step(...)` for
        `step = torch.compile(f)` or a decorated `step`, `model(x)` for a compiled model."""
        name = dotted_name(call.func)
        if name is None:
            return None
        found = self.callables.get(name)
        if found is not None:
            return found
        if (
            isinstance(call.func, ast.Call)
            and self.ctx.qualified_name(call.func.func) == "torch.compile"
            and call.func.args
        ):  # `torch.compile(f)(x)`
            funcs = self.functions_named(call.func.args[0])
            return (funcs[0], options_of(self.ctx, call.func)) if funcs else None
        return None

    @cached_property
    def config(self) -> dict[str, bool]:
        """`torch._dynamo.config.<name> = True/False` set anywhere in the file (the last wins)."""
        found: dict[str, bool] = {}
        for node in self.ctx.index.of_type(ast.Assign):
            for target in node.targets:
                name = self.ctx.qualified_name(target) or ""
                if name.startswith(CONFIG) and isinstance(node.value, ast.Constant):
                    found[name[len(CONFIG) :]] = node.value.value is True
        return found

    def captures(self, switch: str) -> bool:
        """`capture_scalar_outputs` / `capture_dynamic_output_shape_ops` is on in this file."""
        return self.config.get(switch, False)


# what Dynamo traces without a break although torch_xla would sync on it (measured, torch 2.13)
NON_BREAKING_METHODS = {"cpu", "numpy", "detach", "size", "dim"}
NON_BREAKING_BUILTINS = {"len", "max", "min", "isinstance"}
PRINTING = {"print", "str", "repr", "format"}


def traced_without_break(ctx: File, node: ast.AST) -> bool:
    """Under compile, the code at `node` is traced into the graph although torch_xla would sync
    there: an `assert` on a tensor, a boolean-mask assignment (`x[m] = 0`), `.cpu()`/`.numpy()`,
    `len(t)`, `max(t)`, shapes, and an f-string of a tensor that is not printed (all measured:
    one graph). A finding of another family there is no hazard inside a compiled region."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return True
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Subscript) for t in targets)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in NON_BREAKING_METHODS:
            return True
        if isinstance(node.func, ast.Name) and node.func.id in NON_BREAKING_BUILTINS:
            return True
    formatted = isinstance(node, (ast.JoinedStr, ast.FormattedValue))
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.Assert):
            return True
        if isinstance(anc, ast.Call) and isinstance(anc.func, ast.Name) and anc.func.id in PRINTING:
            return False
        if isinstance(anc, (ast.JoinedStr, ast.FormattedValue)):
            formatted = True
        if isinstance(anc, ast.stmt):
            break
    return formatted


def _method(cls: ast.ClassDef, name: str) -> ast.AST | None:
    return next((f for f in cls.body if isinstance(f, FUNCTIONS) and f.name == name), None)


def _merged(options) -> CompileOptions:
    result = CompileOptions()
    for o in options:
        result = result.merge(o)
    return result


def _by_qualname(ctx: File, qualified: str) -> list[ast.AST]:
    from .index import qualname

    name = qualified.rpartition(".")[2]
    return [f for f in ctx.index.functions.get(name, ()) if qualname(ctx.index, f) == qualified]


def summary_entries(ctx: File) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """For the project index: this module's compiled functions (qualname -> options key), the
    classes it compiles that live elsewhere (`torch.compile(Model())` with `Model` imported: name
    as written -> options key; `Model:generate` for `torch.compile(model.generate)`; `learn()` for
    an imported function compiled itself, `torch.compile(learn)`), and its disabled functions."""
    from .index import qualname

    regions = ctx.cached(CompiledRegions)
    compiled = {qualname(ctx.index, f): o.key() for f, o in regions.own_functions.items() if isinstance(f, FUNCTIONS)}
    imported: dict[str, str] = {}
    for call in regions.compile_calls:
        target, method = call.args[0], ""
        written = dotted_name(target)
        if written and written.partition(".")[0] in ctx.index.imports and not regions.functions_named(target):
            # `torch.compile(learn)`, `torch.compile(steps.update)`: an imported name (a function
            # there is compiled; the project resolves it, and ignores it unless it is a function)
            imported[written + "()"] = options_of(ctx, call).key()
            continue
        if (
            isinstance(target, ast.Attribute)
            and not isinstance(target.value, ast.Call)
            and not ctx.assigned_values(target)
        ):  # `torch.compile(model.generate)`: a bound method
            method = f":{target.attr}"
            target = target.value
        for value in [target, *ctx.assigned_values(target)]:
            callee = dotted_name(value.func) if isinstance(value, ast.Call) else None
            if callee is not None and callee.partition(".")[0] in ctx.index.imports:
                imported[callee + method] = options_of(ctx, call).key()
    disabled = [qualname(ctx.index, f) for f in regions.disabled]
    return compiled, imported, disabled


def compiled_arguments(ctx: File, param: ast.arg) -> list[ast.expr] | None:
    """What the callers of a compiled function pass for `param` (`step(x, i)` after
    `step = torch.compile(f)`), or None without such calls (their kind is `tensors`' business:
    this module does not import it, which imports this one)."""
    from .names import argument

    regions = ctx.cached(CompiledRegions)
    func = ctx.index.parent(ctx.index.parent(param))
    if func not in regions.roots or not isinstance(func, FUNCTIONS):
        return None
    position = ctx.call_position(func, param)
    names = {name for name, (f, _) in regions.callables.items() if f is func}
    values = [argument(call, position, param.arg) for call in ctx.index.calls if dotted_name(call.func) in names]
    passed = [v for v in values if v is not None]
    if not values or len(passed) != len(values):
        return None
    return passed


def passed_positions(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    """A compiled function's parameters in call order (`self` left out)."""
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    return params[1:] if params and params[0] in ("self", "cls") else params


__all__ = [
    "CompileOptions",
    "CompiledRegions",
    "RECOMPILE_LIMIT",
    "compiled_arguments",
    "options_of",
    "passed_positions",
    "positional",
    "summary_entries",
]
