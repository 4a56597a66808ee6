"""JAX113 array-grown-in-loop: Flags, in a loop outside traced code, an array grown by joining it with
a new piece and assigning the result back."""

from __future__ import annotations

import ast

from xlalint.analysis.index import target_names
from xlalint.analysis.jax_tracing import enclosing_traced, in_module_forward
from xlalint.rule import Invalid, Rule, Valid

# jax.numpy functions that join arrays: `x = jnp.append(x, v)` in a loop grows `x`
JOINING = {"append", "concatenate", "vstack", "hstack", "dstack", "column_stack", "row_stack"}


class ArrayGrownInLoop(Rule):
    """## What it does
    Flags, in a loop outside traced code, an array grown by joining it with a new piece and
    assigning the result back: `losses = jnp.append(losses, loss)`, `xs = jnp.concatenate([xs, x])`,
    `jnp.vstack((rows, row))`. It grows only when the join reads its own result of the previous
    iteration: not when the body makes the array afresh before the join, cuts a fixed window from
    it after, or joins a list once; nor in the forward (`__call__`, a `@compact` method) of a Flax,
    Equinox or Haiku module, whose loops are its structure (the same shapes at every call, traced
    once under the step's `jit`).

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
        loop = self.ctx.index.enclosing_loop(node)
        if (
            loop is None
            or enclosing_traced(self.ctx, node) is not None
            or in_module_forward(self.ctx, node)  # the module's structure fixes its loop: same shapes each call
            or not self._carried(loop, node, target)
        ):
            return
        self.report(value, self.summary.format(func=f"jnp.{func}", array=target))

    def _carried(self, loop: ast.For | ast.AsyncFor | ast.While, join: ast.Assign, name: str) -> bool:
        """The join's own result reaches it again at the next iteration: the array read there is
        the one the previous iteration grew, not one the body makes afresh before the join
        (`video = jnp.pad(...)` then `video = jnp.concatenate([video, ...])`) or after it (a
        window cut from it, a module's layer applied to it). Followed back from the end of the
        body through the assignments of `name` that keep its shape (`x = x * 2`, `x += 1`)."""
        order = self.ctx.index.order
        assignments = sorted(_assignments(loop.body, name), key=lambda a: order.get(a, 0))
        if any(self._dominates(a, join, loop) for a in assignments):
            return False  # bound afresh on the way to the join, before it reads it
        for assignment in reversed(assignments):  # the value the next iteration starts from
            if assignment is join:
                return True
            if not _keeps_shape(assignment, name) and self._always(assignment, loop):
                return False
        return False

    def _dominates(self, statement: ast.stmt, join: ast.stmt, loop: ast.AST) -> bool:
        """`statement` runs before `join` whenever `join` runs in an iteration of `loop`: an earlier
        statement of a block that holds `join` (or the branch, loop or `with` holding it)."""
        index = self.ctx.index
        for node in (join, *index.ancestors(join)):
            if node is loop:
                return False
            if (
                index.parent(node) is index.parent(statement)
                and index.field_of(node) == index.field_of(statement)
                and index.order.get(statement, 0) < index.order.get(node, 0)
            ):
                return True
        return False

    def _always(self, statement: ast.stmt, loop: ast.AST) -> bool:
        """`statement` runs in every iteration of `loop`: no branch, loop or handler between."""
        child: ast.AST = statement
        for anc in self.ctx.index.ancestors(statement):
            if anc is loop:
                return self.ctx.index.field_of(child) == "body"
            if not (
                isinstance(anc, (ast.With, ast.AsyncWith))
                or (isinstance(anc, TRY) and self.ctx.index.field_of(child) in ("body", "finalbody"))
            ):
                return False
            child = anc
        return False


TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def _assignments(body: list[ast.stmt], name: str) -> list[ast.stmt]:
    """The statements of a loop body (not of functions or classes defined in it) that bind `name`."""
    found: list[ast.stmt] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and any(name in target_names(t) for t in node.targets):
            found.append(node)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and name in target_names(node.target):
            found.append(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)) and name in target_names(node.target):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _keeps_shape(statement: ast.stmt, name: str) -> bool:
    """`x += 1`, `x = x * scale`, `x = -x`, `x = x.astype(...)`: the same array's shape, kept."""
    if isinstance(statement, ast.AugAssign):
        return True
    if (
        not isinstance(statement, ast.Assign)
        or len(statement.targets) != 1
        or not isinstance(statement.targets[0], ast.Name)
    ):
        return False
    value = statement.value
    if isinstance(value, ast.UnaryOp):
        value = value.operand
    elif isinstance(value, ast.BinOp):
        return any(isinstance(o, ast.Name) and o.id == name for o in (value.left, value.right))
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "astype":
        value = value.func.value
    return isinstance(value, ast.Name) and value.id == name
