"""JAX110 host-read-per-step: Flags, on a per-step path of a JAX training loop (a loop that calls a
jitted function computing gradients, of this module or another of the project, or iterates batches),
a read of a device array on the host at every step."""

from __future__ import annotations

import ast

from xlalint.analysis.jax_tracing import enclosing_traced, is_device_array, is_numpy_function
from xlalint.analysis.names import positional
from xlalint.analysis.steps import is_step_loop, is_test_module, loop_trains
from xlalint.rule import Invalid, Rule, Valid

SHORT_LOOP = 10  # iterations: a demonstration, not training


class HostReadPerStep(Rule):
    """## What it does
    Flags, on a per-step path of a JAX training loop (a loop that calls a jitted function computing
    gradients, of this module or another of the project, or iterates batches), a read of a device array
    on the host at every step: `float(loss)`, `int(x)`, `x.item()`, `x.tolist()`, `np.asarray(x)`,
    `jax.device_get(x)`, `x.block_until_ready()`, `jax.block_until_ready(x)`, `print` of an array, and
    a NumPy function given a list of arrays (`np.mean([loss, acc])`: `np.mean(loss)` alone runs the
    array's own method, on the device). Device arrays are the results of the module's jitted functions
    (and of `jax.jit(f)(...)`, or of `self._update` after `self._update = jax.jit(update)`), of a
    method of the module's classes that returns one (`learner.advance(batch)`), jnp/random arrays, and
    what is computed from them, but not arrays made under `jax.default_device(cpu)` or put on the CPU
    (`jax.device_put(x, cpu)`): they are in host memory. Reads every N steps (`if step % 100 == 0:`)
    are not reported. In a loop over data that trains nothing, only what a jitted step computed is a
    read per step (an evaluation): eager jnp calls on the loop's own data are a data preparation pass,
    run once. A read in a function taken for a step by its name alone (`def step(...)` that no training
    loop is seen to call) is a possible finding, shown with `--confidence possible`.

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
    evidence = ("step",)
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
            modules={
                "train_lib.py": """
                import jax

                def loss_fn(params, batch):
                    return ((batch * params) ** 2).sum()

                @jax.jit
                def train_step(params, batch):
                    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
                    return params - 0.1 * grads, {"loss": loss}
                """
            },
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
            operands = [
                v.value
                for a in node.args
                if isinstance(a, ast.JoinedStr)
                for v in a.values
                if isinstance(v, ast.FormattedValue)
            ] + [a for a in node.args if not isinstance(a, ast.JoinedStr)]
            what = "print"
        elif (self.ctx.qualified_name(func) or "") in self.READS and node.args:
            operands, what = [node.args[0]], self.ctx.code(func) + "()"
        elif is_numpy_function(self.ctx, func) and node.args:  # `np.append(losses, loss)`, `np.exp(logits)`
            operands, what = list(positional(node)), self.ctx.code(func) + "()"
        elif (self.ctx.qualified_name(func) or "").startswith("numpy.") and node.args:
            # `np.mean(x)` calls a JAX array's own `mean` (on the device); `np.mean([a, b])` makes a
            # NumPy array of the list first: each element is read on the host
            operands, what = _displayed_elements(node.args[0]), self.ctx.code(func) + "()"
        if not operands or enclosing_traced(self.ctx, node) is not None:
            return
        if what != "print" and not what.startswith("."):  # `np.array([a, b])`: each element is read
            operands = [*operands, *(e for o in operands for e in _displayed_elements(o))]
        if (
            any(is_device_array(self.ctx, o, computed=self._trains_nothing(node)) for o in operands)
            and self._per_step(node)
            and not self._read_before(operands, node)
        ):
            self.report(node, self.summary.format(what=what))

    def _trains_nothing(self, node: ast.AST) -> bool:
        """The loop around `node` (in its function) iterates data but runs no training step: an
        evaluation reads what its jitted step computed, a data preparation pass (`np.asarray(
        jnp.asarray(batch) / 255)`) only what eager jnp calls made of its own data, once."""
        child = node
        for anc in self.ctx.index.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return False  # per step through the function's callers: judged where they loop
            if isinstance(anc, (ast.For, ast.AsyncFor, ast.While)) and self.ctx.index.field_of(child) == "body":
                if is_step_loop(self.ctx, anc):
                    return not loop_trains(self.ctx, anc)
            child = anc
        return False

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
        if (
            isinstance(loop, (ast.For, ast.AsyncFor))
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name)
            and loop.iter.func.id == "range"
            and len(
                bounds := [a.value for a in loop.iter.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
            )
            == len(loop.iter.args)
            and len(range(*bounds)) <= SHORT_LOOP
        ):
            return False
        return self.ctx.is_per_step(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        """`f"{loss:.3f}"` formats the value: a read (a `print` of it is reported as the print)."""
        parent = self.ctx.index.parent(node)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "print":
            return
        values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        if (
            values
            and enclosing_traced(self.ctx, node) is None
            and any(is_device_array(self.ctx, v, computed=self._trains_nothing(node)) for v in values)
            and self._per_step(node)
        ):
            self.report(node, self.summary.format(what="f-string"))


def _displayed_elements(expr: ast.expr) -> list[ast.expr]:
    """The elements of a list or tuple display (`[a, b]`), or of a comprehension (`[f(x) for x in
    xs]`: its element expression)."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        return [e for e in expr.elts if not isinstance(e, ast.Starred)]
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return [expr.elt]
    return []
