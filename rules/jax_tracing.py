"""JAX rules (JAX1xx): code that cannot run, or recompiles, inside functions JAX traces."""

from __future__ import annotations

import ast
import json

from xlalint.analysis.index import target_names
from xlalint.analysis.jax_tracing import (
    COMPILING,
    elementwise_of,
    enclosing_traced,
    is_boolean_mask,
    is_device_array,
    is_bound_method,
    is_numpy_function,
    is_traced_value,
    jitted_target,
    reads_any,
    sweep_variables,
)
from xlalint.analysis.names import has_star_args, is_number, keyword, param_default, positional
from xlalint.analysis.steps import is_test_module, loop_counters
from xlalint.diagnostics import Applicability, Fix, ImportRequest
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy functions whose output size depends on the values, unless `size=` bounds it
SIZED = {"nonzero", "argwhere", "flatnonzero", "unique", "unique_values", "unique_counts", "unique_inverse",
         "unique_all", "extract", "union1d", "intersect1d", "setdiff1d", "setxor1d"}


class NonzeroWithoutSize(Rule):
    """## What it does
    Flags, inside a function JAX traces (`@jax.jit`, `jax.jit(f)`, `pmap`, `vmap`, `shard_map`, the
    body of `lax.scan`/`fori_loop`/`while_loop`/`cond`, or a function they call), `jnp.nonzero`,
    `argwhere`, `flatnonzero`, `unique` (and its variants), `extract`, the set operations, and
    one-argument `jnp.where(c)`, called without `size=`.

    ## Why is this bad?
    Under tracing every array has a static shape, and these functions return as many elements as
    the data holds. Without a bound JAX cannot trace them: the call raises
    `ConcretizationTypeError` ("The size argument of jnp.nonzero must be statically specified").
    Given `size=` (and `fill_value=` for the padding), the output has a fixed shape and the function
    compiles once for all data.

    ## Example
    ```python
    @jax.jit
    def positive_sum(x):
        idx = jnp.nonzero(x > 0)[0]
        return x[idx].sum()
    ```

    Use instead:
    ```python
    @jax.jit
    def positive_sum(x):
        idx = jnp.nonzero(x > 0, size=x.shape[0], fill_value=x.shape[0])[0]  # padded with an out-of-range index
        return x.at[idx].get(mode="fill", fill_value=0).sum()
    ```
    or, without indices at all: `jnp.where(x > 0, x, 0).sum()`.

    ## Fix safety
    When the bound is evident, the argument being an array (`jnp.nonzero(mask)`) or an elementwise
    test of one (`x > 0`, `jnp.isnan(x)`), an unsafe fix adds `size=<array>.size`: every input then
    fits, and the function compiles once. It is unsafe because the output changes: it always
    has that many entries, the extra ones padded with `fill_value` (index 0 for `nonzero`, the
    smallest value for `unique`), and the code that follows must mask or ignore them, or pass a
    `fill_value` that it can (an out-of-range index with `.at[idx].get(mode="fill")`).

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `jax.numpy.nonzero` (`size`, `fill_value`)
    """

    code, name, category = "JAX101", "nonzero-without-size", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` without `size=` in a function JAX traces: its output size depends on the data"
    hint = "pass `size=` (a static bound) and `fill_value=`, or compute with `jnp.where(mask, x, 0)` instead of indices"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0, size=x.shape[0], fill_value=x.shape[0])[0]
                return x.at[idx].get(mode="fill", fill_value=0).sum()
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def labels(y):  # not traced: runs on concrete arrays
                return jnp.unique(y)
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clip(x):
                return jnp.where(x > 0, x, 0.0)  # three arguments: same shape as x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0)[0]
                return x[idx].sum()
            """,
            line=6,
            applicability=Applicability.UNSAFE,
            expected_replacement="""
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positive_sum(x):
                idx = jnp.nonzero(x > 0, size=x.size)[0]
                return x[idx].sum()
            """,
        ),
        Invalid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            def count_classes(labels):
                return jnp.unique(labels).shape[0]

            @partial(jax.jit, static_argnames="n")
            def step(params, labels, n):
                return params * count_classes(labels) / n
            """,
            line=7,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            def body(carry, x):
                return carry + jnp.where(x > 0)[0].shape[0], None

            total, _ = jax.lax.scan(body, 0, xs)
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.ctx.qualified_name(node.func) or ""
        head, _, func = name.rpartition(".")
        if head != "jax.numpy" or keyword(node, "size") is not None or has_star_args(node):
            return
        if func not in SIZED and not (func == "where" and len(positional(node)) == 1 and not node.keywords):
            return
        if enclosing_traced(self.ctx, node) is not None:
            array = self._bound(node, func)
            fix = (lambda cctx: _with_size(cctx, node, array)) if array is not None else None
            self.report(node, self.summary.format(func=f"jnp.{func}"), fix=fix)

    def _bound(self, node: ast.Call, func: str) -> str | None:
        """The array whose size bounds the output: the argument, or the array an elementwise test
        of it is about; None for the set operations and `extract` (two arrays)."""
        args = positional(node)
        if func in ("union1d", "intersect1d", "setdiff1d", "setxor1d", "extract") or not args:
            return None
        arg = args[0]
        if isinstance(arg, ast.Name):
            return arg.id
        for name in {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}:
            if elementwise_of(self.ctx, arg, ast.Name(id=name)):
                return name
        return None


def _with_size(cctx, node: ast.Call, array: str):
    from xlalint.fixing.cst_names import with_keyword

    call = cctx.locate(node)
    if call is None:
        return None
    return Fix.replace(call, with_keyword(call, "size", cctx.parse_expression(f"{array}.size")),
                       title=f"Pad to `size={array}.size` (the output gains padded entries)", safe=False)


class HostConversionOfTracer(Rule):
    """## What it does
    Flags, inside a function JAX stages out (`@jax.jit`, `jax.jit(f)`, `pmap`, `vmap`, a
    `lax.scan`/`fori_loop`/`while_loop`/`cond` body), a conversion of a traced value to Python or
    NumPy: `float(x)`, `int(x)`, `bool(x)`, `x.item()`, `x.tolist()`, `np.asarray(x)`, `np.array(x)`.
    Traced values are the function's non-static parameters and what `jnp`/`lax` compute from them;
    metadata (`x.shape[0]`, `x.ndim`, `len(x)`) and `static_argnames`/`static_argnums` are not.

    ## Why is this bad?
    While tracing, an array has a shape and a dtype but no value: converting it raises
    `ConcretizationTypeError` (or `TracerIntegerConversionError`). Outside `jit` the same line is a
    blocking device-to-host copy, so moving the conversion out is the fix in both cases.

    ## Example
    ```python
    @jax.jit
    def loss_and_log(params, x):
        loss = jnp.mean((x @ params) ** 2)
        print("loss", float(loss))
        return loss
    ```

    Use instead:
    ```python
    @jax.jit
    def loss_and_log(params, x):
        loss = jnp.mean((x @ params) ** 2)
        jax.debug.print("loss {}", loss)  # printed when the value exists, no host round trip in the trace
        return loss
    ```
    or return the value and convert it outside the jitted function.

    ## Fix safety
    No automatic fix.

    ## References
    - JAX docs, "Key concepts: tracing" and the `ConcretizationTypeError` entry of "Errors"
    """

    code, name, category = "JAX102", "host-conversion-of-tracer", "item_sync"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{what}` converts a traced value to Python inside a function JAX traces: it has no value yet"
    hint = "return the value and convert it outside the jitted function, or use `jax.debug.print`"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="n")
            def tile(x, n):
                width = int(x.shape[0])  # metadata is static
                return jnp.tile(x, int(n))[: width * n]  # a static argument
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def report(x):  # not traced
                return float(jnp.mean(x))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def loss_and_log(params, x):
                loss = jnp.mean((x @ params) ** 2)
                print("loss", float(loss))
                return loss
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            def body(i, total):
                return total + total.item() * i

            out = jax.lax.fori_loop(0, 3, body, 1.0)
            """,
            line=4,
        ),
    ]

    CONVERSIONS = {"float", "int", "bool", "complex"}

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        operand, what = None, ""
        if isinstance(func, ast.Name) and func.id in self.CONVERSIONS and len(node.args) == 1:
            operand, what = node.args[0], f"{func.id}()"
        elif isinstance(func, ast.Attribute) and func.attr in ("item", "tolist") and not node.args:
            operand, what = func.value, f".{func.attr}()"
        elif is_numpy_function(self.ctx, func) and node.args:  # `np.asarray(x)`, `np.argmax(x)`
            operands = positional(node)
            operand = next((a for a in operands if is_traced_value(self.ctx, a)), None)
            what = f"np.{func.attr if isinstance(func, ast.Attribute) else 'asarray'}()"
        if operand is not None and is_traced_value(self.ctx, operand):
            self.report(node, self.summary.format(what=what))


class PythonBranchOnTracer(Rule):
    """## What it does
    Flags Python control flow on a traced value inside a function JAX stages out: `if x > 0:`,
    `while err > tol:`, `assert jnp.all(x >= 0)`, `x and y`, `not x`, a conditional expression.
    A bare truth test of a pytree's field (`if state.dynamic_scale:`) is left alone: it tests for
    `None` or an empty container, which Python may decide while tracing.

    ## Why is this bad?
    Python decides a branch while tracing, when the value does not exist yet: JAX raises
    `TracerBoolConversionError`. Marking the argument static compiles one program per value (a
    recompilation for each new value); the data-dependent forms are `jnp.where` (both sides computed,
    elementwise choice), `lax.cond`/`lax.switch` (one side run), and `lax.while_loop`.

    ## Example
    ```python
    @jax.jit
    def relu_or_zero(x, t):
        if t > 0:
            return jax.nn.relu(x)
        return jnp.zeros_like(x)
    ```

    Use instead:
    ```python
    @jax.jit
    def relu_or_zero(x, t):
        return jnp.where(t > 0, jax.nn.relu(x), jnp.zeros_like(x))
    ```

    ## Fix safety
    No automatic fix: `jnp.where` computes both sides, `lax.cond` needs both branches to return the
    same shapes, and which suits the code is the author's choice.

    ## References
    - JAX docs, "Control flow and logical operators with JIT" (`TracerBoolConversionError`)
    """

    code, name, category = "JAX103", "python-branch-on-tracer", "control_flow_on_tensor"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "Python branches on a traced value inside a function JAX traces: the value does not exist yet"
    hint = "use `jnp.where`, `lax.cond`/`lax.switch`, `lax.while_loop`, or mark the argument static"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="training")
            def dropout(x, key, training):
                if training and x.ndim > 1:  # a static argument and metadata
                    return x * jax.random.bernoulli(key, 0.9, x.shape) / 0.9
                return x
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def relu_or_zero(x, t):
                return jnp.where(t > 0, jax.nn.relu(x), jnp.zeros_like(x))
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def train_step(state, grads):
                dynamic_scale = state.dynamic_scale
                if dynamic_scale:  # a pytree field that may be None: Python decides, as intended
                    grads = dynamic_scale.unscale(grads)
                return state.apply_gradients(grads=grads)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def relu_or_zero(x, t):
                if t > 0:
                    return jax.nn.relu(x)
                return jnp.zeros_like(x)
            """,
            line=6,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            def solve(x):
                err = jnp.abs(x).max()
                while err > 1e-3:
                    x = x / 2
                    err = jnp.abs(x).max()
                return x

            solve_fast = jax.jit(solve)
            """,
            line=6,
        ),
    ]

    def visit_If(self, node: ast.If) -> None:
        self._check(node.test, node)

    def visit_While(self, node: ast.While) -> None:
        self._check(node.test, node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._check(node.test, node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._check(node.test, node)

    def _check(self, test: ast.expr, node: ast.AST) -> None:
        parts = test.values if isinstance(test, ast.BoolOp) else [test]
        for part in parts:
            if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not):
                part = part.operand
            if is_traced_value(self.ctx, part) and not self._optional_field(part):
                self.report(test)
                return

    def _optional_field(self, expr: ast.expr, depth: int = 0) -> bool:
        """`if dynamic_scale:` with `dynamic_scale = state.dynamic_scale`: the truth of a pytree's
        field is usually a test for `None` or an empty container, which JAX leaves to Python; an
        array's truth is a comparison, a reduction, a jnp result, or a flag passed as an argument."""
        if isinstance(expr, ast.Attribute):
            return True
        if isinstance(expr, ast.Name) and depth < 4:
            values = self.ctx.reaching_values(expr)  # none: a parameter (`if training:`), reported
            if not values:  # ... unless it defaults to None (`existing_prefix=None`): a None test
                return self._defaults_to_none(expr)
            return all(self._optional_field(v, depth + 1) for v in values)
        return False

    def _defaults_to_none(self, name: ast.Name) -> bool:
        param = self.ctx.parameter(name)
        func = self.ctx.index.parent(self.ctx.index.parent(param)) if param is not None else None
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        default = param_default(func, param)
        return isinstance(default, ast.Constant) and default.value is None


class PrintOfTracer(Rule):
    """## What it does
    Flags `print(...)` of a traced value inside a function JAX stages out (`@jax.jit`, `jax.jit(f)`,
    `pmap`, `vmap`, a `lax.scan`/`fori_loop`/`while_loop`/`cond` body), including an f-string that
    formats one.

    ## Why is this bad?
    `print` runs once, while JAX traces the function, and shows the tracer's description
    (`JitTracer(float32[])` in current JAX), never a value; later calls reuse the
    compiled program and print nothing; with a format spec (`f"{loss:.3f}"`) it raises `TypeError`
    while tracing. `jax.debug.print` is staged into the program and prints
    the values at every call, without a host round trip in the traced code.

    ## Example
    ```python
    @jax.jit
    def step(params, x):
        loss = jnp.mean((x @ params) ** 2)
        print("loss", loss)
        return loss
    ```

    Use instead:
    ```python
    @jax.jit
    def step(params, x):
        loss = jnp.mean((x @ params) ** 2)
        jax.debug.print("loss {}", loss)
        return loss
    ```

    ## Fix safety
    The fix is safe: it rewrites the arguments into a `jax.debug.print` format string (literals
    kept, with `{` and `}` doubled; f-string fields keep their format spec and conversion), which
    prints the same text with the values in place of the tracers' descriptions. The computed
    results are unchanged. It is offered only for positional arguments, without `sep=`, `end=`,
    `file=` or `*args`.

    ## References
    - JAX docs, "Introduction to debugging": `jax.debug.print` versus Python's `print` under `jit`
    """

    code, name, category = "JAX104", "print-of-tracer", "item_sync"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`print` of a traced value inside a function JAX traces shows a tracer, once, not the values"
    hint = "use `jax.debug.print(\"... {}\", x)`, which prints the values at every call"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def step(params, x):
                loss = jnp.mean((x @ params) ** 2)
                jax.debug.print("loss {}", loss)
                print("tracing step for shape", x.shape)  # metadata: printed once on purpose
                return loss
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def step(params, x):
                loss = jnp.mean((x @ params) ** 2)
                print("loss", loss)
                return loss
            """,
            line=7,
            expected_replacement="""
            import jax
            import jax.numpy as jnp

            @jax.jit
            def step(params, x):
                loss = jnp.mean((x @ params) ** 2)
                jax.debug.print("loss {}", loss)
                return loss
            """,
        ),
        Invalid(
            """
            from jax import jit
            import jax.numpy as jnp

            @jit
            def step(x):
                total = jnp.sum(x)
                print(f"total={total:.3f} {{x}}")
                return total
            """,
            line=7,
            expected_replacement="""
            from jax import jit
            import jax.numpy as jnp
            import jax

            @jit
            def step(x):
                total = jnp.sum(x)
                jax.debug.print("total={:.3f} {{x}}", total)
                return total
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not (isinstance(node.func, ast.Name) and node.func.id == "print"):
            return
        values = [v.value for a in node.args if isinstance(a, ast.JoinedStr) for v in a.values
                  if isinstance(v, ast.FormattedValue)]
        values += [a.value if isinstance(a, ast.Starred) else a for a in node.args if not isinstance(a, ast.JoinedStr)]
        if any(is_traced_value(self.ctx, v) for v in values):
            fixable = not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args)
            self.report(node, fix=(lambda cctx: _debug_print(cctx, node)) if fixable else None)


def _debug_print(cctx, node: ast.Call):
    """`print("loss", loss, f"{acc:.2f}")` -> `jax.debug.print("loss {} {:.2f}", loss, acc)`."""
    call = cctx.locate(node)
    if call is None:
        return None
    parts, args = [], []
    for arg in node.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            parts.append(arg.value.replace("{", "{{").replace("}", "}}"))
        elif isinstance(arg, ast.JoinedStr):
            text = ""
            for value in arg.values:
                if isinstance(value, ast.Constant):
                    text += str(value.value).replace("{", "{{").replace("}", "}}")
                    continue
                spec = ""
                if value.format_spec is not None:
                    if not all(isinstance(v, ast.Constant) for v in value.format_spec.values):
                        return None  # a nested field in the spec: left as it is
                    spec = ":" + "".join(str(v.value) for v in value.format_spec.values)
                conversion = "" if value.conversion == -1 else "!" + chr(value.conversion)
                text += "{" + conversion + spec + "}"
                args.append(cctx.text.segment(value.value))
            parts.append(text)
        else:
            parts.append("{}")
            args.append(cctx.text.segment(arg))
    spelling, imports = _module_spelling(cctx, call, "jax")
    fmt = json.dumps(" ".join(parts), ensure_ascii=False)
    replacement = cctx.parse_expression(f"{spelling}.debug.print({', '.join([fmt, *args])})")
    return Fix.replace(call, replacement, title="Use `jax.debug.print`", safe=True, imports=imports)


class BooleanMaskOfTracer(Rule):
    """## What it does
    Flags, inside a function JAX traces, indexing with a traced boolean mask: `x[mask]`,
    `x[:, mask]`, and the indexed updates `x.at[mask].set(v)` / `.add(v)` / `.get()`, where `mask`
    is evidently boolean (a comparison, `~m`, `m & n`, `jnp.isnan(x)`, `x.astype(bool)`, or a name
    holding one) and computed from traced values.

    ## Why is this bad?
    The result of `x[mask]` has as many elements as the mask has `True`s, which is unknown while
    tracing: JAX raises `NonConcreteBooleanIndexError`. The indexed-update form `x.at[mask]` raises
    the same error. The static-shape forms select with `jnp.where` over the whole array.

    ## Example
    ```python
    @jax.jit
    def clean(x):
        x = x.at[jnp.isnan(x)].set(0)
        return x[x > 0].sum()
    ```

    Use instead:
    ```python
    @jax.jit
    def clean(x):
        x = jnp.where(jnp.isnan(x), 0, x)
        return jnp.where(x > 0, x, 0).sum()
    ```

    ## Fix safety
    Two rewrites are offered when the mask evidently has the array's shape (a comparison of the
    array itself with numbers, `jnp.isnan(x)`-like tests of it, and `~`, `&`, `|` of those):
    `x[m].sum()` -> `jnp.where(m, x, 0).sum()` and `x.at[m].set(c)` ->
    `jnp.where(m, c, x).astype(x.dtype)` for a number `c` (`.at[].set` keeps the array's dtype; the
    cast undoes `where`'s promotion of a bool array to int32). Both are exact, and safe, for an
    integer `c`; for a float `c` the rewrite is unsafe: `.at[].set` casts `c` to an integer array's
    dtype, `jnp.where` computes in float first (int32 values above 2**24 lose digits). A
    row mask (`x[valid]` with `valid` of shape `(n,)` and `x` of shape `(n, d)`) is not elementwise
    and gets no fix.

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `NonConcreteBooleanIndexError` in "Errors"
    """

    code, name, category = "JAX105", "boolean-mask-of-tracer", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "boolean-mask index of a traced array: the result's size depends on the data, JAX cannot trace it"
    hint = "select with `jnp.where(mask, x, 0)` over the whole array, or `jnp.nonzero(mask, size=...)`"
    fix_availability = "sometimes"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = jnp.where(jnp.isnan(x), 0, x)
                return jnp.where(x > 0, x, 0).sum()
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            def positives(x):  # not traced: concrete arrays have a known mask
                return x[x > 0]
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def gather(x, idx):
                return x[idx] + x.at[0].get()  # integer indices keep their shape
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = x.at[jnp.isnan(x)].set(0)
                return jnp.where(x > 0, x, 0).sum()
            """,
            line=6,
            expected_replacement="""
            import jax
            import jax.numpy as jnp

            @jax.jit
            def clean(x):
                x = jnp.where(jnp.isnan(x), 0, x).astype(x.dtype)
                return jnp.where(x > 0, x, 0).sum()
            """,
        ),
        Invalid(
            """
            import jax

            @jax.jit
            def positive_sum(x):
                return x[x > 0].sum()
            """,
            line=5,
            expected_replacement="""
            import jax

            @jax.jit
            def positive_sum(x):
                return jax.numpy.where(x > 0, x, 0).sum()
            """,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def masked_rows(x, lengths):
                valid = jnp.arange(x.shape[0]) < lengths
                return x[valid].mean(axis=0)  # a row mask: no fix
            """,
            line=7,
        ),
    ]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        masks = [i for i in index if is_boolean_mask(self.ctx, i)]
        if not masks or not any(is_traced_value(self.ctx, m) for m in masks):
            return
        if enclosing_traced(self.ctx, node) is None:
            return
        self.report(node, fix=self._fix(node, masks[0]) if len(index) == 1 else None)

    def _fix(self, node: ast.Subscript, mask: ast.expr):
        """`x[m].sum()` or `x.at[m].set(c)`, with `m` elementwise on `x`: the call to rewrite."""
        call = self.ctx.index.parent(self.ctx.index.parent(node))
        if not isinstance(call, ast.Call) or call.func is not self.ctx.index.parent(node) or call.keywords:
            return None
        method = call.func.attr
        base = node.value
        if isinstance(base, ast.Attribute) and base.attr == "at":  # `x.at[m].set(c)`
            array = base.value
            if method != "set" or len(call.args) != 1 or not is_number(call.args[0]):
                return None
            number = call.args[0]
            literal = number.operand if isinstance(number, ast.UnaryOp) else number
            safe = type(literal.value) is int
            parts = lambda seg: (seg(mask), seg(number), seg(array))  # noqa: E731
        else:
            array = base
            if method != "sum" or call.args:
                return None
            safe = True
            parts = lambda seg: (seg(mask), seg(array), "0")  # noqa: E731
        if not elementwise_of(self.ctx, mask, array):
            return None
        # `.at[].set` keeps the array's dtype (it casts the fill); `where` promotes a bool array
        # filled with an int to int32: cast back, exact for every integer fill and every dtype
        return lambda cctx: _where(cctx, call, parts(cctx.text.segment), safe,
                                   tail=".sum()" if method == "sum" else f".astype({cctx.text.segment(array)}.dtype)")


def _where(cctx, node: ast.Call, arguments: tuple[str, str, str], safe: bool, tail: str):
    call = cctx.locate(node)
    if call is None:
        return None
    spelling, imports = _module_spelling(cctx, call, "jax.numpy")
    replacement = cctx.parse_expression(f"{spelling}.where({', '.join(arguments)}){tail}")
    return Fix.replace(call, replacement, title="Select with `jnp.where` (static shape)", safe=safe, imports=imports)


def _module_spelling(cctx, node, module: str) -> tuple[str, list[ImportRequest]]:
    """How fixed code at `node` spells `module`: the file's own name for it, else the dotted name
    (imported)."""
    bound = cctx.bound_name(module, node)
    return (bound, []) if bound is not None else (module, [ImportRequest(module)])


class PythonLoopOverTracedRange(Rule):
    """## What it does
    Flags, inside a function JAX traces, a Python `for` loop over `range(...)` whose bound is a
    traced value (a non-static parameter, or what `jnp` computes from one).

    ## Why is this bad?
    `range` needs a Python integer while JAX traces the function, when a traced bound has no
    value: JAX raises `TracerIntegerConversionError`. Marking the bound static compiles one
    program per value and unrolls the loop into it (long compiles for long loops). `lax.fori_loop`
    takes a traced bound and compiles the body once.

    ## Example
    ```python
    @jax.jit
    def power_iteration(a, v, n):
        for _ in range(n):
            v = a @ v
            v = v / jnp.linalg.norm(v)
        return v
    ```

    Use instead:
    ```python
    @jax.jit
    def power_iteration(a, v, n):
        def body(_, v):
            v = a @ v
            return v / jnp.linalg.norm(v)
        return jax.lax.fori_loop(0, n, body, v)
    ```

    ## Fix safety
    No automatic fix: the loop's body has to become a function of its carried values.

    ## References
    - JAX docs, "Control flow and logical operators with JIT": `lax.fori_loop`, `static_argnames`
    """

    code, name, category = "JAX106", "python-loop-over-traced-range", "control_flow_on_tensor"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "Python loop over `range` of a traced value inside a function JAX traces: the bound has no value yet"
    hint = "use `jax.lax.fori_loop(0, n, body, init)`, or mark the bound static (one compile per value)"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def power_iteration(a, v, n):
                def body(_, v):
                    v = a @ v
                    return v / jnp.linalg.norm(v)
                return jax.lax.fori_loop(0, n, body, v)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def cumulative(x):
                for i in range(1, x.shape[0]):  # metadata: a static bound, unrolled
                    x = x.at[i].add(x[i - 1])
                return x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def power_iteration(a, v, n):
                for _ in range(n):
                    v = a @ v
                    v = v / jnp.linalg.norm(v)
                return v
            """,
            line=6,
        ),
    ]

    def visit_For(self, node: ast.For) -> None:
        loop = node.iter
        if isinstance(loop, ast.Call) and isinstance(loop.func, ast.Name) and loop.func.id == "range" \
                and any(is_traced_value(self.ctx, a) for a in loop.args):
            self.report(loop)


class JitRebuiltInLoop(Rule):
    """## What it does
    Flags `jax.jit(...)` (and `jax.pmap`, `pjit`, `equinox.filter_jit`) applied inside a loop to a
    function object the loop creates anew: a `lambda`, a `functools.partial(...)`, a bound method
    (`self.apply`), or a function defined in the loop; and a `@jax.jit` function defined in a loop.

    ## Why is this bad?
    JAX caches compiled programs per function object. A new lambda, partial or bound method at
    every iteration is a new object: every iteration traces and compiles again, which takes far
    longer than the step itself. Jitting the same module-level function again hits the cache, and
    a loop over literal configurations (`for block in (64, 128)`, autotuning) whose values the
    function reads compiles per configuration on purpose: neither is reported.

    ## Example
    ```python
    for batch in batches:
        loss = jax.jit(lambda p: loss_fn(p, batch))(params)
    ```

    Use instead:
    ```python
    loss_jit = jax.jit(loss_fn)
    for batch in batches:
        loss = loss_jit(params, batch)  # the batch is an argument: one compile
    ```

    ## Fix safety
    No automatic fix: hoisting is exact only when the wrapped function and its static arguments do
    not change between iterations, and a lambda usually closes over the loop's variables.

    ## References
    - JAX docs, "Just-in-time compilation": caching (avoid `jax.jit` of temporary functions)
    """

    code, name, category = "JAX107", "jit-rebuilt-in-loop", "other"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` of a new function object at every loop iteration: each iteration compiles again"
    hint = "jit once, before the loop, a function that takes what changes as arguments"

    VALID = [
        Valid(
            """
            import jax

            def loss_fn(params, batch):
                return ((batch @ params) ** 2).mean()

            loss_jit = jax.jit(loss_fn)
            for batch in batches:
                loss = loss_jit(params, batch)
            """
        ),
        Valid(
            """
            import jax

            def scale(x):
                return x * 2

            for x in inputs:
                y = jax.jit(scale)(x)  # the same function object: the cache is hit
            """
        ),
        Valid(
            """
            import itertools

            import jax

            for block, unroll in itertools.product((64, 128), (1, 2)):  # autotuning: a program per configuration
                kernel = jax.jit(lambda x: step(x, block, unroll))
                timings[block, unroll] = benchmark(kernel, x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax

            def loss_fn(params, batch):
                return ((batch @ params) ** 2).mean()

            for batch in batches:
                loss = jax.jit(lambda p: loss_fn(p, batch))(params)
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            def train(params, batches):
                for batch in batches:
                    @jax.jit
                    def step(p):
                        return p - 0.1 * batch.mean()
                    params = step(params)
                return params
            """,
            line=5,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = self.ctx.qualified_name(node.func) or ""
        if func in COMPILING and node.args and self._new_each_iteration(node.args[0], node) and \
                not self._per_configuration(node.args[0], node):
            self.report(node, self.summary.format(func=func.rpartition(".")[2]))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        decorators = [d for d in node.decorator_list if self._compiles(d)]
        if decorators and self.ctx.index.enclosing_loop(node) is not None and not self._per_configuration(node, node):
            self.report(decorators[0], self.summary.format(func="@" + self.ctx.code(decorators[0]).split("(")[0]))

    def _per_configuration(self, wrapped: ast.AST, node: ast.AST) -> bool:
        """The function reads a variable of a loop over literal configurations (an autotuning
        sweep), itself or through the names it is built from (`f = transform(partial(g,
        axis=axis))` then `jax.pmap(f.apply)`): a compilation per configuration is the point."""
        loop = self.ctx.index.enclosing_loop(node)
        if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, (ast.Tuple, ast.List)) and \
                all(isinstance(e, (ast.Name, ast.Attribute, ast.Constant)) for e in loop.iter.elts):
            return True  # `for wrapper in (jax.jit, eqx.filter_jit):`: as many compiles as written items
        sweep = sweep_variables(self.ctx, node)
        return bool(sweep) and reads_any(self.ctx, wrapped, sweep)

    def _compiles(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if self.ctx.qualified_name(target) in COMPILING:
            return True
        return isinstance(decorator, ast.Call) and self.ctx.qualified_name(decorator.func) in ("functools.partial", "partial") \
            and bool(decorator.args) and self.ctx.qualified_name(decorator.args[0]) in COMPILING

    def _new_each_iteration(self, wrapped: ast.expr, call: ast.Call) -> bool:
        loop = self.ctx.index.enclosing_loop(call)
        if loop is None:
            return False
        if isinstance(wrapped, ast.Lambda):
            return True
        if isinstance(wrapped, ast.Call):
            return self.ctx.qualified_name(wrapped.func) in ("functools.partial", "partial")
        if isinstance(wrapped, ast.Attribute):
            return is_bound_method(self.ctx, wrapped, loop)
        if isinstance(wrapped, ast.Name):  # a function defined in the loop, or a name the loop rebinds
            defined = [f for f in self.ctx.index.functions.get(wrapped.id, []) if loop in set(self.ctx.index.ancestors(f))]
            return bool(defined)
        return False


def _static_arguments(ctx, call: ast.Call, *, filtered: bool = False):
    """The arguments `call` passes to static parameters of a jitted function of this module (with
    `filtered`, also to the non-array parameters of a `filter_jit` function, static by type)."""
    if not isinstance(call.func, ast.Name) or has_star_args(call):
        return
    target = jitted_target(ctx, call)
    if target is None or not target.static or ctx.index.scope_of(call.func) is target.func or \
            (target.filtered and not filtered):
        return
    for name, arg in zip(target.params, call.args):
        if name in target.static:
            yield name, arg
    for kw in call.keywords:
        if kw.arg in target.static:
            yield kw.arg, kw.value


class UnhashableStaticArgument(Rule):
    """## What it does
    Flags a call of a jitted function of the same module (`@partial(jax.jit, static_argnames=...)`,
    `step = jax.jit(f, static_argnums=...)`) that passes a list, dict or set (a display or a
    comprehension), or a NumPy/JAX array, to a static parameter.

    ## Why is this bad?
    JAX keys its compilation cache on the static arguments' hashes: an unhashable value raises
    `ValueError: Non-hashable static arguments are not supported`. An array is not hashable either
    (and as a static value it would compile once per content).

    ## Example
    ```python
    @partial(jax.jit, static_argnames="dims")
    def project(x, dims):
        return x[..., dims[0] : dims[1]]

    y = project(x, dims=[0, 2])
    ```

    Use instead:
    ```python
    y = project(x, dims=(0, 2))  # a tuple is hashable
    ```

    ## Fix safety
    No automatic fix: a tuple is the usual replacement, but the function may mutate or compare
    the value as a list.

    ## References
    - `jax.jit` documentation: `static_argnums` ("must be hashable and immutable")
    """

    code, name, category = "JAX108", "unhashable-static-argument", "other"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "unhashable value for the static argument `{name}` of a jitted function: JAX raises `ValueError`"
    hint = "pass a tuple (or another hashable value), or make the argument a traced array"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="dims")
            def project(x, dims):
                return x[..., dims[0] : dims[1]]

            y = project(x, dims=(0, 2))
            z = project(x + 1, dims=(0, 2))  # the same static value: the same program
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="dims")
            def project(x, dims):
                return x[..., dims[0] : dims[1]]

            y = project(x, dims=[0, 2])
            """,
            line=9,
        ),
        Invalid(
            """
            import jax
            import numpy as np

            def tile(x, reps):
                return jax.numpy.tile(x, reps)

            tile_jit = jax.jit(tile, static_argnums=1)
            y = tile_jit(x, np.array([2, 1]))
            """,
            line=8,
        ),
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnums=1)
            def reduce(x, axes):
                return x.sum(axis=axes)

            axes = [0, 1]
            total = reduce(x, axes)
            """,
            line=10,
        ),
    ]

    ARRAYS = {"numpy.array", "numpy.asarray", "numpy.zeros", "numpy.ones", "numpy.arange", "jax.numpy.array",
              "jax.numpy.asarray", "jax.numpy.zeros", "jax.numpy.ones", "jax.numpy.arange"}

    def visit_Call(self, node: ast.Call) -> None:
        for name, arg in _static_arguments(self.ctx, node):
            # a variable holding one (`dims = [0, 1]; f(x, dims)`): every value that reaches the call
            values = self.ctx.reaching_values(arg) if isinstance(arg, ast.Name) else [arg]
            if values and all(self._unhashable(v) for v in values):
                self.report(arg, self.summary.format(name=name))

    def _unhashable(self, value: ast.expr) -> bool:
        return isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or \
            (isinstance(value, ast.Call) and self.ctx.qualified_name(value.func) in self.ARRAYS)


class StaticArgumentPerIteration(Rule):
    """## What it does
    Flags a call of a jitted function of the same module, inside a loop, that passes the loop's
    counter (or what is computed from it: `step`, `epoch * n + i`, `lr = schedule(step)`) to a
    static parameter. A loop's items are not reported: they may repeat (a mask's two values). Under
    Equinox's `filter_jit` every argument that is not an array is static: a loop counter
    (`range`, `enumerate`) passed to a parameter not annotated as an array is reported too, also
    to a `filter_jit` method of another module of the project (found by its name when no other
    method of the project has it).

    ## Why is this bad?
    Every distinct static value compiles a new program. Passing the loop variable compiles once
    per iteration: the training loop spends its time in the compiler, and the compilation cache
    grows without bound. A value that changes every step belongs in a traced argument. A loop over
    literal configurations (`for causal in (False, True)`) is not reported: a program per
    configuration is the intent.

    ## Example
    ```python
    @partial(jax.jit, static_argnames="step")
    def update(params, grads, step):
        lr = 0.1 * 0.99 ** step
        return params - lr * grads

    for step in range(1000):
        params = update(params, grads, step=step)
    ```

    Use instead:
    ```python
    @jax.jit
    def update(params, grads, step):  # traced: one program for every step
        lr = 0.1 * 0.99 ** step
        return params - lr * grads
    ```

    ## Fix safety
    No automatic fix: the function may use the value where JAX needs a static one (a shape, a
    Python branch); those uses must change too.

    ## References
    - `jax.jit` documentation: `static_argnums` ("calling the jitted function with different values
      for these constants will trigger recompilation")
    """

    code, name, category = "JAX109", "static-argument-per-iteration", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "the loop variable `{value}` is passed to the static argument `{name}`: one compile per iteration"
    hint = "make the argument traced (drop it from `static_argnames`/`static_argnums`), or pass a value fixed across the loop"

    VALID = [
        Valid(
            """
            import jax

            @jax.jit
            def update(params, grads, step):
                lr = 0.1 * 0.99 ** step
                return params - lr * grads

            for step in range(1000):
                params = update(params, grads, step=step)
            """
        ),
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="training")
            def forward(params, x, training):
                return x @ params if training else (x @ params) * 0.5

            for epoch in range(10):
                for x in batches:
                    y = forward(params, x, training=True)  # the same value every iteration
            """
        ),
        Valid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="causal")
            def attention(q, k, causal):
                return q @ k.T if causal else q @ k.T * 0.5

            for causal in (False, True):  # two configurations, two programs: on purpose
                out = attention(q, k, causal=causal)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="step")
            def update(params, grads, step):
                lr = 0.1 * 0.99 ** step
                return params - lr * grads

            for step in range(1000):
                params = update(params, grads, step=step)
            """,
            line=11,
        ),
        Invalid(
            """
            import equinox as eqx

            @eqx.filter_jit
            def free(table, slot):
                return table.at[slot].set(0)

            for slot in range(num_slots):
                table = free(table, slot)
            """,
            line=8,
        ),
        Invalid(
            """
            import jax.numpy as jnp
            from pages import PageTable

            table = PageTable(jnp.ones(num_slots))
            for slot in range(num_slots):
                table = table.free_pages(slot)
            """,
            line=6,
            modules={"pages.py": """
                import equinox as eqx
                import jax.numpy as jnp

                class PageTable(eqx.Module):
                    refs: jnp.ndarray

                    @eqx.filter_jit
                    def free_pages(self, slot: int) -> "PageTable":
                        return PageTable(self.refs.at[slot].set(0))
                """},
        ),
        Invalid(
            """
            from functools import partial

            import jax

            @partial(jax.jit, static_argnames="lr")
            def update(params, grads, lr):
                return params - lr * grads

            for step in range(1000):
                lr = 0.1 * 0.99 ** step
                params = update(params, grads, lr=lr)
            """,
            line=11,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        target = jitted_target(self.ctx, node) if isinstance(node.func, ast.Name) else None
        passed = list(_static_arguments(self.ctx, node, filtered=True))
        # static by declaration, a value computed from the counter is new each step too; static
        # by type (filter_jit), only a plain counter is evidently a Python int
        declared = bool(passed) and not (target is not None and target.filtered)
        passed = passed or list(self._project_method_arguments(node))
        for name, arg in passed:
            counter = self._loop_variable(arg, node, derived=declared)
            if counter is not None:
                self.report(arg, self.summary.format(value=counter, name=name))
                return

    def _project_method_arguments(self, call: ast.Call):
        """`table.free_pages(slot)` where `free_pages` is a filter_jit method of the project (the
        only method of that name there): the arguments it passes to its static parameters."""
        func = call.func
        if not self.ctx.project.static_methods or not isinstance(func, ast.Attribute) or has_star_args(call):
            return
        root = func.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.ctx.index.imports:
            return  # `module.func(...)`: a function, not the method
        for name, params, static in self.ctx.project.static_methods:
            if name == func.attr:
                yield from ((p, a) for p, a in zip(params, call.args) if p in static)
                yield from ((k.arg, k.value) for k in call.keywords if k.arg in static)
                return

    def _loop_variable(self, arg: ast.expr, call: ast.Call, derived: bool = True) -> str | None:
        """The name of a loop counter (`range(...)`, `enumerate`'s index, of a loop around `call`)
        that `arg` is computed from: a new value every iteration. A loop's items may repeat
        (`for trainable in mask_leaves`: two values) or be arrays (which `filter_jit` traces)."""
        loops = [a for a in self.ctx.index.ancestors(call) if isinstance(a, (ast.For, ast.AsyncFor))]
        targets = {n for loop in loops for n in loop_counters(self.ctx, loop)} - sweep_variables(self.ctx, call)
        for name in ast.walk(arg):
            if isinstance(name, ast.Name) and name.id in targets:
                return name.id
            if isinstance(name, (ast.Attribute, ast.Subscript, ast.Call)):
                return None  # `batch.shape[0]`, `len(x)`: a size, not the counter (see the shape rules)
        if isinstance(arg, ast.Name) and derived:
            # `lr = schedule(step)` in the loop, then `update(..., lr=lr)`: a new value every step
            loop = self.ctx.index.enclosing_loop(call)
            inside = [v for v in self.ctx.reaching_values(arg) if loop is not None and loop in set(self.ctx.index.ancestors(v))]
            if inside and all(reads_any(self.ctx, v, targets) for v in inside):
                return arg.id
        return None


SHORT_LOOP = 10  # iterations: a demonstration, not training


class HostReadPerStep(Rule):
    """## What it does
    Flags, on a per-step path of a JAX training loop (a loop that calls a jitted function computing
    gradients, of this module or another of the project, or iterates batches), a read of a device array on the host at every step:
    `float(loss)`, `int(x)`, `x.item()`, `x.tolist()`, `np.asarray(x)`, `jax.device_get(x)`,
    `x.block_until_ready()`, `jax.block_until_ready(x)`, and `print` of an array. Device arrays are
    the results of the module's jitted functions (and of `jax.jit(f)(...)`), jnp/random arrays, and
    what is computed from them. Reads every N steps (`if step % 100 == 0:`) are not reported.

    ## Why is this bad?
    JAX dispatches asynchronously: a jitted step returns at once, and the host prepares the next
    batch while the device computes. Reading a value on the host waits for the step to finish and
    copies it back, every step: the device idles while the host catches up, and on a TPU the
    transfer itself costs a round trip. Accumulating on the device and reading every N steps (or
    once, at the end) keeps the pipeline full.

    ## Example
    ```python
    for batch in batches:
        params, loss = train_step(params, batch)
        losses.append(float(loss))
    ```

    Use instead:
    ```python
    for batch in batches:
        params, loss = train_step(params, batch)
        losses.append(loss)  # stays on the device
    history = [float(v) for v in jax.device_get(losses)]  # one transfer, after the loop
    ```

    ## Fix safety
    No automatic fix: where to read the value (every N steps, after the loop) is the author's choice.

    ## References
    - JAX docs, "Asynchronous dispatch"; "Benchmarking JAX code" (`block_until_ready`)
    """

    code, name, category = "JAX110", "host-read-per-step", "item_sync"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{what}` reads a device array on the host at every step: the host waits for the device"
    hint = "keep the values on the device and read them every N steps, or once after the loop"

    VALID = [
        Valid(
            """
            import jax

            @jax.jit
            def train_step(params, batch):
                loss, grads = jax.value_and_grad(loss_fn)(params, batch)
                return params - 0.1 * grads, loss

            losses = []
            for step, batch in enumerate(batches):
                params, loss = train_step(params, batch)
                losses.append(loss)
                if step % 100 == 0:
                    print(f"step {step}: loss {float(loss):.4f}")  # every 100 steps
            history = [float(v) for v in jax.device_get(losses)]
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def forward(x):
                return jnp.tanh(x @ x)

            for _ in range(10):  # a benchmark, not a training loop
                forward(x).block_until_ready()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax

            @jax.jit
            def train_step(params, batch):
                loss, grads = jax.value_and_grad(loss_fn)(params, batch)
                return params - 0.1 * grads, loss

            losses = []
            for step in range(num_steps):
                params, loss = train_step(params, batches[step])
                losses.append(float(loss))
            """,
            line=11,
        ),
        Invalid(
            """
            import jax
            import numpy as np

            from train_lib import train_step

            params = jax.device_put(params)
            history = []
            for batch in batches:
                params, metrics = train_step(params, batch)
                history.append(np.asarray(metrics["loss"]))
            """,
            line=10,
            modules={"train_lib.py": """
                import jax

                def loss_fn(params, batch):
                    return ((batch * params) ** 2).sum()

                @jax.jit
                def train_step(params, batch):
                    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
                    return params - 0.1 * grads, {"loss": loss}
                """},
        ),
    ]

    CONVERSIONS = {"float", "int", "bool"}
    READS = {"numpy.asarray", "numpy.array", "jax.device_get", "jax.block_until_ready"}

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._reads: set[tuple] = set()  # (loop, name, its binding) already read: see _read_before

    @classmethod
    def applies(cls, ctx) -> bool:
        return ctx.imports_jax

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        operands, what = [], ""
        if isinstance(func, ast.Name) and func.id in self.CONVERSIONS and len(node.args) == 1:
            operands, what = [node.args[0]], f"{func.id}()"
        elif isinstance(func, ast.Attribute) and func.attr in ("item", "tolist", "block_until_ready") and not node.args:
            operands, what = [func.value], f".{func.attr}()"
        elif isinstance(func, ast.Name) and func.id == "print":
            operands = [v.value for a in node.args if isinstance(a, ast.JoinedStr) for v in a.values
                        if isinstance(v, ast.FormattedValue)] + [a for a in node.args if not isinstance(a, ast.JoinedStr)]
            what = "print"
        elif (self.ctx.qualified_name(func) or "") in self.READS and node.args:
            operands, what = [node.args[0]], self.ctx.code(func) + "()"
        elif is_numpy_function(self.ctx, func) and node.args:  # `np.append(losses, loss)`, `np.exp(logits)`
            operands, what = list(positional(node)), self.ctx.code(func) + "()"
        if not operands or enclosing_traced(self.ctx, node) is not None:
            return
        if any(is_device_array(self.ctx, o) for o in operands) and self._per_step(node) and \
                not self._read_before(operands, node):
            self.report(node, self.summary.format(what=what))

    def _read_before(self, operands: list[ast.expr], node: ast.AST) -> bool:
        """The same array was already read in this iteration (`losses.append(loss.item())`, then
        `pbar.set_postfix(loss=loss.item())`): the value is on the host now (a jax.Array keeps
        its host copy), so only the first read waits."""
        if len(operands) != 1 or not isinstance(operands[0], ast.Name):
            return False
        name = operands[0]
        key = (self.ctx.index.enclosing_loop(node), name.id, tuple(map(id, self.ctx.reaching_values(name))))
        if key in self._reads:
            return True
        self._reads.add(key)
        return False

    def _per_step(self, node: ast.AST) -> bool:
        """Per step of a loop that runs long enough for the waits to matter: a loop of a few
        iterations written out (`for _ in range(3):`, a tutorial printing each result) is not, nor
        a test's loop of checks on jitted results (`*_test.py`, `test_*.py`, `tests/`)."""
        if is_test_module(self.ctx.path):
            return False
        loop = self.ctx.index.enclosing_loop(node)
        if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Call) and \
                isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range" and \
                all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in loop.iter.args) and \
                len(range(*[a.value for a in loop.iter.args])) <= SHORT_LOOP:
            return False
        return self.ctx.is_per_step(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        """`f"{loss:.3f}"` formats the value: a read (a `print` of it is reported as the print)."""
        parent = self.ctx.index.parent(node)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "print":
            return
        values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        if values and enclosing_traced(self.ctx, node) is None and \
                any(is_device_array(self.ctx, v) for v in values) and self._per_step(node):
            self.report(node, self.summary.format(what="f-string"))


class PythonScalarBecomesArray(Rule):
    """## What it does
    Flags, in a loop, a call of a jitted function of the module that passes a variable which starts
    as a Python number before the loop and is reassigned to a JAX array inside it (typically the
    function's own result): `total = 0.0` ... `total = accumulate(total, batch)`.

    ## Why is this bad?
    JAX keys compiled programs on the abstract type of each argument. A Python number is traced
    as a *weakly typed* scalar; the array the function returns is strongly typed. The first call
    compiles for the weak type, the second compiles again for the strong one: a full extra
    compilation of the function (minutes for a large training step on a TPU), and the two programs
    can differ in dtype promotion.

    ## Example
    ```python
    total = 0.0
    for batch in batches:
        total = accumulate(total, batch)
    ```

    Use instead:
    ```python
    total = jnp.zeros((), jnp.float32)  # the type the loop carries
    for batch in batches:
        total = accumulate(total, batch)
    ```

    ## Fix safety
    No automatic fix: the array's dtype must be the one the function returns, which the code does
    not show.

    ## References
    - JAX docs, "Type promotion semantics": weakly typed values; "Just-in-time compilation": caching
    """

    code, name, category = "JAX111", "python-scalar-becomes-array", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{value}` is a Python number on the first call and a JAX array after: `{func}` compiles twice"
    hint = "start the loop with an array of the type it carries, e.g. `jnp.zeros((), jnp.float32)`"

    VALID = [
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def accumulate(total, batch):
                return total + batch.sum()

            total = jnp.zeros((), jnp.float32)
            for batch in batches:
                total = accumulate(total, batch)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def scale(x, factor):
                return x * factor

            factor = 0.5
            for x in inputs:
                y = scale(x, factor)  # a Python number every time: one program
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax

            @jax.jit
            def accumulate(total, batch):
                return total + batch.sum()

            total = 0.0
            for batch in batches:
                total = accumulate(total, batch)
            """,
            line=9,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name) or has_star_args(node):
            return
        target = jitted_target(self.ctx, node)
        loop = self.ctx.index.enclosing_loop(node)
        if target is None or loop is None:
            return
        passed = [(name, arg) for name, arg in zip(target.params, node.args)]
        passed += [(kw.arg, kw.value) for kw in node.keywords]
        for name, arg in passed:
            if name not in target.static and isinstance(arg, ast.Name) and self._flips(arg, loop):
                self.report(arg, self.summary.format(value=arg.id, func=node.func.id))
                return

    def _flips(self, name: ast.Name, loop: ast.AST) -> bool:
        values = self.ctx.index.assignments.get(self.ctx.index.scope_of(name), {}).get(name.id, [])
        inside = [v for v in values if loop in set(self.ctx.index.ancestors(v))]
        before = [v for v in values if v not in inside]
        return bool(inside) and bool(before) and all(is_number(v) for v in before) and \
            all(is_device_array(self.ctx, v) for v in inside)


# jax.numpy constructors: (positions, keywords) of the arguments that give the output's size
SIZE_ARGUMENTS = {"arange": ((0, 1, 2), ("start", "stop", "step")), "zeros": ((0,), ("shape",)),
                  "ones": ((0,), ("shape",)), "empty": ((0,), ("shape",)), "full": ((0,), ("shape",)),
                  "eye": ((0, 1), ("N", "M")), "identity": ((0,), ("n",)), "tri": ((0, 1), ("N", "M")),
                  "linspace": ((2,), ("num",)), "logspace": ((2,), ("num",)), "tile": ((1,), ("reps",)),
                  "reshape": ((1,), ("shape", "newshape"))}


class TracedSize(Rule):
    """## What it does
    Flags, inside a function JAX traces, an array whose size comes from a traced value:
    `jnp.arange(n)`, `jnp.zeros((n, d))` (`ones`, `full`, `empty`, `eye`, `linspace(num=n)`, `tile`),
    `lax.full((n, d), v)`, `x.reshape(n, -1)`, and `jax.ops.segment_sum` (`segment_max`, ...) without
    `num_segments`, where `n` is a traced argument or computed from array values (`mask.sum()`).
    A size computed from shapes (`x.shape[0]`, `len(x)`) or a static argument is known while
    tracing and is not reported.

    ## Why is this bad?
    JAX compiles one program per input shape: every array inside it must have a size known while
    tracing. A size taken from a value raises `ConcretizationTypeError`, or a `TypeError` ("Shapes
    must be 1D sequences of concrete values of integer type"): the most asked JAX error; `segment_sum`
    without `num_segments` computes the count from the ids' maximum, a value.

    ## Example
    ```python
    @jax.jit
    def first_n(x, n):
        return jnp.ones(n) * x.sum()
    ```

    Use instead:
    ```python
    @partial(jax.jit, static_argnames="n")
    def first_n(x, n):  # one program per value of n: keep their number small
        return jnp.ones(n) * x.sum()
    ```
    or pad to a bound known outside (`jnp.where(jnp.arange(bound) < n, ...)`), or pass
    `num_segments=` from the data's static size.

    ## Fix safety
    No automatic fix: making `n` static compiles once per value, and a bound changes the shapes.

    ## References
    - JAX docs, "Common gotchas: dynamic shapes"; `jax.errors.ConcretizationTypeError`
    - `jax.ops.segment_sum`: "num_segments ... required under jit"
    """

    code, name, category = "JAX112", "traced-size", "dynamic_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` takes its size from a traced value inside a function JAX traces: the shape is unknown"
    hint = "make the size a static argument, compute it from shapes (`x.shape[0]`), or pad to a bound"

    VALID = [
        Valid(
            """
            from functools import partial

            import jax
            import jax.numpy as jnp

            @partial(jax.jit, static_argnames="n")
            def first_n(x, n):
                return jnp.ones(n) * x.sum()
            """
        ),
        Valid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def positions(x):
                n = x.shape[0]
                return jnp.arange(n) * x + jnp.zeros((len(x),)), x.reshape(n // 2, -1)
            """
        ),
        Valid(
            """
            import jax

            @jax.jit
            def pool(data, segment_ids):
                return jax.ops.segment_sum(data, segment_ids, num_segments=data.shape[0])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def first_n(x, n):
                return jnp.ones(n) * x.sum()
            """,
            line=6,
        ),
        Invalid(
            """
            import jax
            import jax.numpy as jnp

            @jax.jit
            def kept(x):
                count = (x > 0).sum()
                return jnp.arange(count)
            """,
            line=7,
        ),
        Invalid(
            """
            import jax

            @jax.jit
            def pool(data, segment_ids):
                return jax.ops.segment_sum(data, segment_ids)
            """,
            line=5,
        ),
    ]

    SEGMENTS = {"jax.ops.segment_sum", "jax.ops.segment_max", "jax.ops.segment_min", "jax.ops.segment_prod"}

    def visit_Call(self, node: ast.Call) -> None:
        if has_star_args(node) or enclosing_traced(self.ctx, node) is None:
            return
        name = self.ctx.qualified_name(node.func) or ""
        head, _, func = name.rpartition(".")
        if name in self.SEGMENTS:
            if keyword(node, "num_segments") is None and len(node.args) < 3:
                self.report(node, self.summary.format(func=f"{func} without num_segments"))
            return
        sizes: list[ast.expr] = []
        if head == "jax.numpy" and func in SIZE_ARGUMENTS:
            positions, keywords = SIZE_ARGUMENTS[func]
            sizes = [node.args[p] for p in positions if p < len(node.args)]
            sizes += [k.value for k in node.keywords if k.arg in keywords]
            label = f"jnp.{func}"
        elif name == "jax.lax.full" and node.args:
            sizes, label = [node.args[0]], "lax.full"
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "reshape" and head != "jax.numpy" \
                and is_traced_value(self.ctx, node.func.value):
            sizes, label = list(node.args) + [k.value for k in node.keywords if k.arg == "shape"], ".reshape"
        else:
            return
        parts = [e for s in sizes for e in (s.elts if isinstance(s, (ast.Tuple, ast.List)) else [s])]
        if any(is_traced_value(self.ctx, p) for p in parts):
            self.report(node, self.summary.format(func=label))


# jax.numpy functions that join arrays: `x = jnp.append(x, v)` in a loop grows `x`
JOINING = {"append", "concatenate", "vstack", "hstack", "dstack", "column_stack", "row_stack"}


class ArrayGrownInLoop(Rule):
    """## What it does
    Flags, in a loop outside traced code, an array grown by joining it with a new piece and
    assigning the result back: `losses = jnp.append(losses, loss)`, `xs = jnp.concatenate([xs, x])`,
    `jnp.vstack((rows, row))`.

    ## Why is this bad?
    Outside `jit`, every `jnp` operation runs a small compiled program, cached per input shape. An
    array that grows by one piece per iteration has a new shape each time: every iteration compiles
    the join again (20 compilations in 20 iterations, measured on CPU: 1.9 s against 0.1 s), and
    copies everything gathered so far, on the device. NumPy's `np.append` has the same quadratic
    copying on the host (with `import jax.numpy as np` it is this one).

    ## Example
    ```python
    losses = jnp.array([])
    for batch in loader:
        losses = jnp.append(losses, eval_step(params, batch))
    ```

    Use instead:
    ```python
    losses = [eval_step(params, batch) for batch in loader]
    losses = jnp.stack(losses)  # one join, after the loop
    ```

    ## Fix safety
    No automatic fix: the loop may read the grown array (its length, its values) before it ends.

    ## References
    - JAX docs, "Just-in-time compilation" (caching by shape); "Asynchronous dispatch"
    """

    code, name, category = "JAX113", "array-grown-in-loop", "varying_shape"
    preview = True  # the JAX family: precision on real JAX code bases not yet shown
    summary = "`{func}` grows `{array}` at every iteration: a new shape, so a new compilation, each time"
    hint = "collect the pieces in a list and join them once after the loop (`jnp.stack`), or preallocate"

    VALID = [
        Valid(
            """
            import jax.numpy as jnp

            losses = []
            for batch in batches:
                losses.append(eval_step(params, batch))
            losses = jnp.stack(losses)
            """
        ),
        Valid(
            """
            import jax.numpy as jnp

            for batch in batches:
                padded = jnp.concatenate([batch, jnp.zeros((4, 3))])  # a new name: the shape is the same each time
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import jax.numpy as jnp

            losses = jnp.array([])
            for batch in batches:
                losses = jnp.append(losses, eval_step(params, batch))
            """,
            line=5,
        ),
        Invalid(
            """
            import jax.numpy as jnp

            def collect(rows):
                table = jnp.zeros((0, 3))
                for row in rows:
                    table = jnp.vstack((table, row))
                return table
            """,
            line=6,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name) or not isinstance(value, ast.Call):
            return
        head, _, func = (self.ctx.qualified_name(value.func) or "").rpartition(".")
        if head != "jax.numpy" or func not in JOINING or not value.args:
            return
        target = node.targets[0].id
        first = value.args[0]
        pieces = first.elts if func != "append" and isinstance(first, (ast.List, ast.Tuple)) else [first]
        if not any(isinstance(p, ast.Name) and p.id == target for p in pieces):
            return
        if self.ctx.index.enclosing_loop(node) is None or enclosing_traced(self.ctx, node) is not None:
            return
        self.report(value, self.summary.format(func=f"jnp.{func}", array=target))
