"""Rank gates: branches that hold on some replicas and not on others.

`if xm.is_master_ordinal():`, `if rank == 0:`, `if xr.global_ordinal() == 0`, `if local_rank in (-1,
0)` test the process's own ordinal, so the code under them runs on some replicas only. A collective
(a rendezvous every replica must join) placed there is reached by those replicas alone. A test of the
world size (`if world_size > 1`) holds on all replicas alike and is not a rank gate.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .guards import exits_block
from .index import FUNCTIONS
from .names import function_params
from .vocabulary import REPLICA_LAUNCH, XM

if TYPE_CHECKING:
    from .file import File

# Calls that return the calling process's rank or ordinal (different on every replica).
RANK_CALLS = {
    f"{XM}.get_ordinal",
    f"{XM}.get_local_ordinal",
    "torch_xla.runtime.global_ordinal",
    "torch_xla.runtime.local_ordinal",
    "torch.distributed.get_rank",
    "torch.distributed.get_node_local_rank",
}
# Calls that say whether this process is the (host's or job's) master: true on some replicas only.
MASTER_CALLS = {f"{XM}.is_master_ordinal"}

# Calls every replica of the job must make: each one waits for all the others.
COLLECTIVES = {
    f"{XM}.{name}"
    for name in (
        "rendezvous",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "collective_permute",
        "reduce_gradients",
        "optimizer_step",
        "mesh_reduce",
    )
} | {
    f"torch.distributed.{name}"
    for name in (
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
    )
}


def rank_gate(ctx: File, node: ast.AST) -> tuple[ast.If, bool] | None:
    """The innermost `if` of `node`'s function whose branch holding `node` depends on the process's
    rank, and whether `node` runs where its test holds (False: its `else`, or after an early exit);
    None when there is none. Both branches count (`else` of `if rank == 0` holds on the other replicas only), and
    so does an earlier `if rank != 0: return` of an enclosing block."""
    child: ast.AST = node
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, ast.If) and child is not anc.test and is_rank_test(ctx, anc.test):
            return anc, child in anc.body
        for field in ("body", "orelse", "finalbody"):
            block = getattr(anc, field, None)
            if isinstance(block, list) and child in block:
                # `if rank != 0: return` earlier in the block: what follows runs on the rest only
                for stmt in block[: block.index(child)]:
                    if isinstance(stmt, ast.If) and exits_block(stmt.body) and is_rank_test(ctx, stmt.test):
                        return stmt, False
        if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef, ast.Module)):
            return None
        child = anc
    return None


def is_rank_test(ctx: File, test: ast.expr, depth: int = 0) -> bool:
    """`test` holds on some replicas and not on others because it tests the process's rank (a name
    counts when every value it may hold here is such a test: `is_main = xm.get_ordinal() == 0`)."""
    if depth > 3:
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_rank_test(ctx, test.operand, depth + 1)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And):
            return any(is_rank_test(ctx, v, depth + 1) for v in test.values)
        return all(is_rank_test(ctx, v, depth + 1) for v in test.values)
    if isinstance(test, ast.Call):
        return ctx.qualified_name(test.func) in MASTER_CALLS
    if isinstance(test, ast.Name):
        values = ctx.reaching_values(test)
        return bool(values) and all(is_rank_test(ctx, v, depth + 1) for v in values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
            return (is_rank(ctx, left) and _int_constant(right)) or (is_rank(ctx, right) and _int_constant(left))
        if isinstance(test.ops[0], (ast.In, ast.NotIn)):
            return (
                is_rank(ctx, left)
                and isinstance(right, (ast.Tuple, ast.List, ast.Set))
                and bool(right.elts)
                and all(_int_constant(e) for e in right.elts)
            )
    return False


def is_rank(ctx: File, node: ast.expr, depth: int = 0) -> bool:
    """`node` is the process's rank: a rank call (`xm.get_ordinal()`, `dist.get_rank()`,
    `xr.global_ordinal()`, through `int(...)`), a name bound only from one, or the first parameter of
    a function the module launches as its replicas (`xmp.spawn(_mp_fn)`, `torch_xla.launch(_mp_fn)`),
    which receives the replica's index."""
    if depth > 3:
        return False
    if isinstance(node, ast.Call):
        if ctx.qualified_name(node.func) in RANK_CALLS:
            return True
        return ctx.qualified_name(node.func) == "int" and len(node.args) == 1 and is_rank(ctx, node.args[0], depth + 1)
    if not isinstance(node, ast.Name):
        return False
    values = ctx.reaching_values(node)
    if values:
        return all(is_rank(ctx, v, depth + 1) for v in values)
    param = ctx.parameter(node)
    if param is None:
        return False
    func = ctx.index.parent(param)
    while func is not None and not isinstance(func, FUNCTIONS):
        func = ctx.index.parent(func)
    if func is None:
        return False
    params = function_params(func)
    return bool(params) and params[0] is param and _launched_as_replica(ctx, func)


def _launched_as_replica(ctx: File, func: ast.AST) -> bool:
    name = getattr(func, "name", None)
    if name is None or not isinstance(ctx.index.parent(func), ast.Module):
        return False
    return any(
        ctx.qualified_name(call.func) in REPLICA_LAUNCH
        and call.args
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == name
        for call in ctx.index.calls
    )


def _int_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def joined_on_other_branch(ctx: File, call: ast.Call, gate: ast.If, holds: bool, name: str) -> bool:
    """The replicas that skip `call` make the same collective elsewhere in its function, under the
    complementary test: the `else` of the same `if`, or `if not main: barrier()` ... `if main:
    barrier()` (the "main process first" idiom: every replica calls it once)."""
    func = next((a for a in ctx.index.ancestors(call) if isinstance(a, (*FUNCTIONS, ast.Module))), None)
    if func is None:
        return False
    test, polarity = _canonical(gate.test, holds)
    for other in ctx.calls_within(func):
        if other is call or ctx.qualified_name(other.func) != name:
            continue
        found = rank_gate(ctx, other)
        if found is None:
            continue
        other_gate, other_holds = found
        if other_gate is gate and other_holds != holds:
            return True
        other_test, other_polarity = _canonical(other_gate.test, other_holds)
        if ast.dump(other_test) == ast.dump(test) and other_polarity != polarity:
            return True
    return False


_NEGATED: dict[type, type] = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def _canonical(test: ast.expr, holds: bool) -> tuple[ast.expr, bool]:
    """`test` without its negations (`not x`, `!=`, `not in`), and whether the branch runs where that
    form holds."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, holds = test.operand, not holds
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in (ast.NotEq, ast.NotIn):
        flipped = _NEGATED[type(test.ops[0])]()
        return ast.Compare(left=test.left, ops=[flipped], comparators=test.comparators), not holds
    return test, holds
