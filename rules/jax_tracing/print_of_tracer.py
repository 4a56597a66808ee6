"""JAX104 print-of-tracer: Flags `print(...)` of a traced value inside a function JAX stages out
(`@jax.jit`, `jax.jit(f)`, `pmap`, `vmap`, a `lax.scan`/`fori_loop`/`while_loop`/`cond` body),
including an f-string that formats one."""

from __future__ import annotations

import ast
import json

from xlalint.analysis.jax_tracing import is_traced_value
from xlalint.diagnostics import Fix
from xlalint.rule import Invalid, Rule, Valid

from ._common import module_spelling


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
    hint = 'use `jax.debug.print("... {}", x)`, which prints the values at every call'
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
        values = [
            v.value
            for a in node.args
            if isinstance(a, ast.JoinedStr)
            for v in a.values
            if isinstance(v, ast.FormattedValue)
        ]
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
                if not isinstance(value, ast.FormattedValue):
                    return None  # (never: an f-string is constants and fields)
                spec = ""
                if value.format_spec is not None:
                    written = value.format_spec.values if isinstance(value.format_spec, ast.JoinedStr) else []
                    constants = [v for v in written if isinstance(v, ast.Constant)]
                    if len(constants) != len(written):
                        return None  # a nested field in the spec: left as it is
                    spec = ":" + "".join(str(v.value) for v in constants)
                conversion = "" if value.conversion == -1 else "!" + chr(value.conversion)
                text += "{" + conversion + spec + "}"
                args.append(cctx.text.segment(value.value))
            parts.append(text)
        else:
            parts.append("{}")
            args.append(cctx.text.segment(arg))
    spelling, imports = module_spelling(cctx, call, "jax")
    fmt = json.dumps(" ".join(parts), ensure_ascii=False)
    replacement = cctx.parse_expression(f"{spelling}.debug.print({', '.join([fmt, *args])})")
    return Fix.replace(call, replacement, title="Use `jax.debug.print`", safe=True, imports=imports)
