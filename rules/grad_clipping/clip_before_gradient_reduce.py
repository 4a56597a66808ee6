"""XLA503 clip-before-gradient-reduce: Flags `torch.nn.utils.clip_grad_norm_` (or `clip_grad_value_`)
in multi-replica torch_xla data parallel code when the step reduces its gradients only afterwards,
in `xm.optimizer_step(optimizer)`, and no `xm.reduce_gradients(optimizer)` (or other all-reduce)
runs before the clip."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlalint.analysis.names import dotted_name, is_constant, last_part
from xlalint.analysis.vocabulary import XM, XM_OPTIMIZER_STEP
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

from ._common import CLIP_GRAD_NORM

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


# -- XLA503 ----------------------------------------------------------------------------------------

CLIP_CALLS = CLIP_GRAD_NORM | {"torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_value_"}
STEP_KEYWORDS = {"barrier", "optimizer_args", "groups", "pin_layout"}


class ClipBeforeGradientReduce(Rule):
    """## What it does
    Flags `torch.nn.utils.clip_grad_norm_` (or `clip_grad_value_`) in multi-replica torch_xla data
    parallel code when the step reduces its gradients only afterwards, in `xm.optimizer_step(optimizer)`,
    and no `xm.reduce_gradients(optimizer)` (or other all-reduce) runs before the clip.

    A file counts as multi-replica data parallel when it launches replicas (`xmp.spawn`,
    `torch_xla.launch`), builds a per-device loader (`MpDeviceLoader`, `ParallelLoader`,
    `per_device_loader`) or asks for the world size (`xr.world_size()`), or a module of the project
    that launches replicas calls it (`engine.train_one_epoch` run by `main.py`'s `_mp_fn`), and no
    DDP, FSDP, ZeRO or SPMD wrapper owns the reduction (there, or in the launcher's XLA code).

    ## Why is this bad?
    `xm.optimizer_step(optimizer)` is `xm.reduce_gradients(optimizer)` (an all-reduce averaging the
    gradients over the replicas) followed by `optimizer.step()`. Clipping before it clips each
    replica's *local* gradients by its *local* norm, then averages the clipped gradients. That is not
    the clipping of the averaged gradient, which the same code computes on one device or under DDP
    (where backward has already averaged them): the local norms are on average at least the norm of
    their average (averaging cancels noise), so clipping cuts in more often and harder than
    configured; each replica is scaled by its own factor, so the average leans towards the replicas
    with small gradients; and the norm `clip_grad_norm_` returns differs from replica to replica.
    torch_xla's own code reduces first: its ZeRO-1 optimizer runs `_reduce_gradients` before
    `_clip_grad_norm` in `step()`, and its distributed-embedding example calls
    `xm.reduce_gradients(optimizer)`, then `optimizer.clip_grad_norm(...)`, then `optimizer.step()`.

    ## Example
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    def _mp_fn(index):
        device = torch_xla.device()
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            xm.optimizer_step(optimizer)

    torch_xla.launch(_mp_fn)
    ```

    Use instead:
    ```python
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    def _mp_fn(index):
        device = torch_xla.device()
        for x, y in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            xm.reduce_gradients(optimizer)  # average over the replicas first
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

    torch_xla.launch(_mp_fn)
    ```

    ## Fix safety
    When `xm.optimizer_step(opt)` is a statement of the block that also holds the clip (or the
    statement around it, such as `if max_norm > 0:`), the fix inserts `xm.reduce_gradients(opt)`
    before that statement and turns the step into `opt.step()` (`groups=`/`pin_layout=` move to
    `reduce_gradients`, `optimizer_args=` becomes `**` arguments of `step`). It is offered only when
    `barrier` is absent or `False`, the optimizer is a plain name or attribute, and the clip is the
    first one reduced by that step. The fix is unsafe: with more than one replica it changes the
    results, which is its purpose (the clip now sees the averaged gradients, and the norm
    `clip_grad_norm_` returns is the global one, equal on every replica). Code between the clip and
    the step that reads gradients sees averaged ones, and a `continue` between them now skips a step
    whose gradients were already averaged. With one replica, `reduce_gradients` does nothing and the
    results are unchanged.

    ## Known problems
    Whether the file runs several replicas is judged per file: a training function in a module
    whose launcher lives in another module is not seen. The clip and the step must sit in the same
    function.

    ## References
    - `torch_xla/core/xla_model.py` at v2.9.0: `optimizer_step` (calls `reduce_gradients`, then
      `optimizer.step`) and `reduce_gradients` (all-reduce with `scale=1.0 / world_size`)
    - `torch_xla/distributed/zero_redundancy_optimizer.py` at v2.9.0: `step()` reduces, then clips
    - `torch_xla/distributed/fsdp/xla_fully_sharded_data_parallel.py` at v2.9.0: `clip_grad_norm_`
      ("calling it in the OSS context would lead to different scaling being applied per subset")
    - `contrib/colab/Distributing_Large_Embedding_tables.ipynb` at v2.0.0–v2.2.0: `reduce_gradients`,
      then `clip_grad_norm`, then `step`
    """

    code, name, category = "XLA503", "clip-before-gradient-reduce", "clip_grad_norm"
    summary = "`{func}` clips this replica's local gradients: `{step}` averages them across replicas only afterwards"
    hint = "call `xm.reduce_gradients(optimizer)` before clipping, then `optimizer.step()`"
    xla_only = True
    fix_availability = "sometimes"

    LAUNCHER = {
        "main.py": """
        import torch_xla
        from example import train_one_epoch

        def _mp_fn(index, args):
            train_one_epoch(build_model(args), build_loader(args), args.max_norm)

        if __name__ == "__main__":
            torch_xla.launch(_mp_fn, args=(parse_args(),))
        """
    }
    DDP_LAUNCHER = {
        "main.py": """
        import torch_xla
        from torch.nn.parallel import DistributedDataParallel as DDP
        from example import train_one_epoch

        def _mp_fn(index, args):
            model = DDP(build_model(args), gradient_as_bucket_view=True)
            train_one_epoch(model, build_loader(args), args.max_norm)

        if __name__ == "__main__":
            torch_xla.launch(_mp_fn, args=(parse_args(),))
        """
    }
    ENGINE = """
        import torch
        import torch_xla.core.xla_model as xm

        def train_one_epoch(model, loader, max_norm):
            for x, y in loader:
                loss_fn(model(x), y).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                xm.optimizer_step(optimizer)
        """

    VALID = [
        Valid(ENGINE),  # nothing launches replicas: one device
        Valid(ENGINE, modules=DDP_LAUNCHER),  # DDP reduced the gradients in backward
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm

            def _mp_fn(index):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    xm.reduce_gradients(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    torch_xla.sync()

            torch_xla.launch(_mp_fn)
            """
        ),
        Valid(
            """
            # one device: xm.optimizer_step reduces nothing, clipping first is fine
            import torch_xla
            import torch_xla.core.xla_model as xm

            device = torch_xla.device()
            for x, y in loader:
                loss_fn(model(x.to(device)), y.to(device)).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                xm.optimizer_step(optimizer, barrier=True)
            """
        ),
        Valid(
            """
            import torch_xla
            import torch_xla.core.xla_model as xm
            from torch.nn.parallel import DistributedDataParallel as DDP

            def _mp_fn(index):
                ddp_model = DDP(model)  # DDP averages the gradients during backward
                for x, y in loader:
                    loss_fn(ddp_model(x), y).backward()
                    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
                    optimizer.step()
                    torch_xla.sync()

            torch_xla.launch(_mp_fn)
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr

            def train(loader):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    xm.optimizer_step(optimizer)
                    # the gradients are averaged by now: this measures the global norm
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9)
                    lr = base_lr * xr.world_size()
            """
        ),
        Valid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index, use_xla):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    if use_xla:
                        xm.optimizer_step(optimizer)
                    else:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()

            xmp.spawn(_mp_fn, args=(True,))
            """
        ),
    ]
    INVALID = [
        Invalid(ENGINE, line=7, modules=LAUNCHER),
        Invalid(
            """
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                for x, y in pl.MpDeviceLoader(loader, device):
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    xm.optimizer_step(optimizer)

            torch_xla.launch(_mp_fn)
            """,
            line=11,
            expected_replacement="""
            import torch
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.parallel_loader as pl

            def _mp_fn(index):
                device = torch_xla.device()
                for x, y in pl.MpDeviceLoader(loader, device):
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    xm.reduce_gradients(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()

            torch_xla.launch(_mp_fn)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr
            from torch.nn.utils import clip_grad_norm_

            class Trainer:
                def train_step(self, batch):
                    loss = self.model(**batch).loss / xr.world_size()
                    loss.backward()
                    # clip only when configured
                    if self.max_grad_norm > 0:
                        grad_norm = clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                    xm.optimizer_step(self.optimizer, groups=self.groups)
                    self.optimizer.zero_grad()
            """,
            line=11,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            import torch_xla.runtime as xr
            from torch.nn.utils import clip_grad_norm_

            class Trainer:
                def train_step(self, batch):
                    loss = self.model(**batch).loss / xr.world_size()
                    loss.backward()
                    xm.reduce_gradients(self.optimizer, groups=self.groups)
                    # clip only when configured
                    if self.max_grad_norm > 0:
                        grad_norm = clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_multiprocessing as xmp

            def _mp_fn(index):
                for step, (x, y) in enumerate(loader):
                    (loss_fn(model(x), y) / accumulation).backward()
                    if (step + 1) % accumulation == 0:
                        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
                        xm.optimizer_step(optimizer, barrier=True)  # barrier: no fix offered
                        optimizer.zero_grad()

            xmp.spawn(_mp_fn)
            """,
            line=8,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = self.ctx.qualified_name(node.func)
        if func not in CLIP_CALLS or not self.ctx.barriers.replicated_data_parallel or self.ctx.in_non_xla_code(node):
            return
        step = self.ctx.barriers.late_reduction(node)
        if step is None:
            return
        plan = self._fix_plan(node, step)
        message = self.summary.format(func=last_part(func), step=self.ctx.code(step.func))
        self.report(node, message, fix=None if plan is None else lambda cctx: _reduce_first(cctx, *plan))

    # -- the fix: decided here, built on libcst by `_reduce_first` ----------------------------------
    def _fix_plan(self, clip: ast.Call, step: ast.Call):
        if self.ctx.qualified_name(step.func) != XM_OPTIMIZER_STEP:
            return None
        statement = self.ctx.parent(step)
        if not isinstance(statement, ast.Expr):
            return None
        block, field = self.ctx.parent(statement), self.ctx.index.field_of(statement)
        holder = next(
            (
                a
                for a in [clip, *self.ctx.index.ancestors(clip)]
                if self.ctx.parent(a) is block and self.ctx.index.field_of(a) == field
            ),
            None,
        )
        if not isinstance(holder, ast.stmt) or (holder.end_lineno or holder.lineno) >= statement.lineno:
            return None  # not in the step's block, or sharing its line (`clip(...); xm.optimizer_step(o)`)
        if any(
            other is not clip and self.ctx.barriers.late_reduction(other) is step
            for other in self.ctx.calls_within(self.ctx.index.scope_of(clip))
            if self.ctx.index.order[other] < self.ctx.index.order[clip]
            and self.ctx.qualified_name(other.func) in CLIP_CALLS
        ):
            return None  # an earlier clip reduced by the same step gets the fix
        if len(step.args) != 1 or isinstance(step.args[0], ast.Starred):
            return None
        optimizer = step.args[0]
        if not self._stable(optimizer, holder, statement):
            return None
        code = self.ctx.code
        reduce_arguments, step_arguments = [code(optimizer)], ""
        for kw in step.keywords:
            if kw.arg not in STEP_KEYWORDS:
                return None
            if kw.arg == "barrier":
                if not is_constant(kw.value, False):
                    return None
            elif kw.arg == "optimizer_args":
                step_arguments = f"**{code(kw.value)}"
            elif any(isinstance(n, ast.Call) for n in ast.walk(kw.value)):
                return None  # evaluated earlier than before: keep to plain values
            else:
                reduce_arguments.append(f"{kw.arg}={code(kw.value)}")
        module = code(step.func.value) if isinstance(step.func, ast.Attribute) else None
        return step, holder, module, ", ".join(reduce_arguments), f"{code(optimizer)}.step({step_arguments})"

    def _stable(self, optimizer: ast.expr, start: ast.stmt, end: ast.stmt) -> bool:
        """A plain name or attribute not reassigned between the new `reduce_gradients` and the step."""
        name = dotted_name(optimizer)
        if not name:
            return False
        order = self.ctx.index.order
        values = self.ctx.index.assignments.get(self.ctx.index.scope_of(optimizer), {}).get(name, [])
        return not any(order[start] < order[v] < order[end] for v in values)


def _reduce_first(
    cctx: CstContext, step: ast.Call, holder: ast.stmt, module: str | None, reduce_arguments: str, step_call: str
) -> Fix | None:
    call = cctx.locate(step)
    # the libcst statement of an `ast` one: a compound one, or a line of simple ones
    statement = cctx.locate(holder, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    if call is None or not isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return None
    imports = []
    if module is None:
        spelled, request = cctx.importable(XM, "reduce_gradients")
        imports.append(request)
    else:
        spelled = f"{module}.reduce_gradients"
    # blank lines above the statement go above the new call; its comments stay with it
    lines = list(statement.leading_lines)
    blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    reduce = cctx.parse_statement(f"{spelled}({reduce_arguments})").with_changes(leading_lines=lines[:blank])
    fix = Fix.replace(
        call,
        cctx.parse_expression(step_call),
        title=f"Call `{spelled}` before clipping, then `{step_call}`",
        safe=False,
        imports=imports,
    )
    fix.replacements[id(statement)] = (
        statement,
        cst.FlattenSentinel([reduce, statement.with_changes(leading_lines=lines[blank:])]),
    )
    return fix
