"""JAX rules (JAX1xx): code that cannot run, or recompiles, inside functions JAX traces."""

from __future__ import annotations

import ast
import json

from xlalint.analysis.jax_tracing import enclosing_traced, is_traced_value
from xlalint.analysis.names import has_star_args, keyword, positional
from xlalint.diagnostics import Fix, ImportRequest
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
    No automatic fix: the bound (`size=`) and what the padding means for the code that follows are
    the author's choice.

    ## References
    - JAX docs, "The sharp bits": dynamic shapes; `jax.numpy.nonzero` (`size`, `fill_value`)
    """

    code, name, category = "JAX101", "nonzero-without-size", "dynamic_shape"
    summary = "`{func}` without `size=` in a function JAX traces: its output size depends on the data"
    hint = "pass `size=` (a static bound) and `fill_value=`, or compute with `jnp.where(mask, x, 0)` instead of indices"

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
            self.report(node, self.summary.format(func=f"jnp.{func}"))


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
    NUMPY = {"numpy.asarray", "numpy.array"}

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        operand, what = None, ""
        if isinstance(func, ast.Name) and func.id in self.CONVERSIONS and len(node.args) == 1:
            operand, what = node.args[0], f"{func.id}()"
        elif isinstance(func, ast.Attribute) and func.attr in ("item", "tolist") and not node.args:
            operand, what = func.value, f".{func.attr}()"
        elif (self.ctx.qualified_name(func) or "") in self.NUMPY and node.args:
            operand, what = node.args[0], f"np.{func.attr if isinstance(func, ast.Attribute) else 'asarray'}()"
        if operand is not None and is_traced_value(self.ctx, operand):
            self.report(node, self.summary.format(what=what))


class PythonBranchOnTracer(Rule):
    """## What it does
    Flags Python control flow on a traced value inside a function JAX stages out: `if x > 0:`,
    `while err > tol:`, `assert jnp.all(x >= 0)`, `x and y`, `not x`, a conditional expression.

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
            if is_traced_value(self.ctx, part):
                self.report(test)
                return


class PrintOfTracer(Rule):
    """## What it does
    Flags `print(...)` of a traced value inside a function JAX stages out (`@jax.jit`, `jax.jit(f)`,
    `pmap`, `vmap`, a `lax.scan`/`fori_loop`/`while_loop`/`cond` body), including an f-string that
    formats one.

    ## Why is this bad?
    `print` runs once, while JAX traces the function, and shows the tracer's description
    (`JitTracer(float32[])` in current JAX), never a value; later calls reuse the
    compiled program and print nothing. `jax.debug.print` is staged into the program and prints
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
    spelling, imports = "jax", [ImportRequest("jax")]
    for binding in cctx.index.import_bindings:
        if binding.qualified == "jax":
            spelling, imports = binding.name, []
            break
    fmt = json.dumps(" ".join(parts), ensure_ascii=False)
    replacement = cctx.parse_expression(f"{spelling}.debug.print({', '.join([fmt, *args])})")
    return Fix.replace(call, replacement, title="Use `jax.debug.print`", safe=True, imports=imports)
