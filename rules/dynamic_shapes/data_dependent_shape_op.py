"""XLA301 data-dependent-shape-op: Flags ops whose output shape depends on the values of a device
tensor, on a per-step path."""

from __future__ import annotations

import ast

from xlalint.analysis.context import FileContext
from xlalint.analysis.names import keyword, keyword_value, method_name, positional, receiver
from xlalint.analysis.tensors import Kind, is_torch
from xlalint.analysis.vocabulary import LIKE_FACTORIES
from xlalint.rule import Invalid, Rule, Valid

from ._common import shaped_out


def _tensorish(ctx: FileContext, expr: ast.expr) -> bool:
    """A receiver of a tensor-only method (`.masked_select()`, `.nonzero()`) that is not known to be
    host data: a device tensor, an unknown value, or a chain rooted in a torch function."""
    kind = ctx.tensor_kind(expr)
    if kind.on_device or kind == Kind.UNKNOWN:
        return True
    while isinstance(expr, (ast.Call, ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Call):
            qualified = ctx.qualified_name(expr.func) or ""
            if qualified.startswith("torch.") and qualified.rpartition(".")[2] in LIKE_FACTORIES:
                return True
            expr = expr.func
        else:
            expr = expr.value
    return False


# -- XLA301 ----------------------------------------------------------------------------------------


class DataDependentShapeOp(Rule):
    """## What it does
    Flags ops whose output shape depends on the values of a device tensor, on a per-step path:
    `nonzero` (also `as_tuple=True`), `argwhere`, one-argument `torch.where(cond)`,
    `masked_select`, `unique`/`unique_consecutive`, and `repeat_interleave` with tensor repeats.

    ## Why is this bad?
    XLA compiles programs for static shapes. These ops have no static-shape lowering: torch_xla
    runs them as CPU fallbacks (`aten::nonzero`, `aten::masked_select`, `aten::_unique2`,
    `repeat_interleave.Tensor` show up as `aten::` counters), which executes the pending graph,
    copies the input to the host and the result back. Every distinct output size then traces a new
    graph downstream, so the step can recompile again and again.

    ## Example
    ```python
    def forward(self, hidden, expert_mask):
        for e, expert in enumerate(self.experts):
            idx = torch.nonzero(expert_mask[e]).squeeze(-1)
            hidden[idx] = expert(hidden[idx])
        return hidden
    ```

    Use instead:
    ```python
    def forward(self, hidden, expert_mask):
        for e, expert in enumerate(self.experts):
            # every token through every expert, then select: static shapes
            hidden = torch.where(expert_mask[e].unsqueeze(-1), expert(hidden), hidden)
        return hidden
    ```

    When indices are really needed, bound their number: `torch.nonzero_static(m, size=K,
    fill_value=-1)` or `torch.topk` over the mask, and mask the padding slots.
    """

    code, name, category = "XLA301", "data-dependent-shape-op", "dynamic_shape"
    evidence = ("step",)
    summary = "`{op}` on a device tensor has a data-dependent output shape: a CPU fallback and recompilations"
    hint = "use static-shape alternatives: 3-argument `torch.where`, masks, `nonzero_static(m, size=K)`, `unique` over a known range via `bincount(minlength=K)`"

    VALID = [
        Valid(
            """
            def forward(self, x, mask):
                x = torch.where(mask, x, torch.zeros_like(x))  # three arguments: static shape
                return x.repeat_interleave(self.n_rep, dim=1)  # integer repeats
            """
        ),
        Valid(
            """
            def forward(self, x, mask):
                idx = torch.nonzero_static(mask.flatten(), size=self.max_tokens, fill_value=-1)
                return x.flatten(0, 1)[idx.clamp_min(0).squeeze(-1)]
            """
        ),
        Valid(
            """
            classes = np.unique(labels)  # host data, at setup
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
            """
        ),
        Valid(
            """
            vocab = torch.unique(torch.tensor(token_ids))  # CPU tensor, once
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
            """
        ),
        Valid(
            """
            def forward(self, x):
                if x.device.type == "cuda":
                    keep = x.abs().sum(-1).nonzero()
                    x = x[keep.squeeze(-1)]
                return self.layer(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def forward(self, hidden, router_logits):
                top = router_logits.argmax(-1)
                for e, expert in enumerate(self.experts):
                    idx = (top == e).nonzero(as_tuple=True)[0]
                    hidden[idx] = expert(hidden[idx])
                return hidden
            """,
            line=4,
        ),
        Invalid(
            """
            def update(self, preds, target):
                values = torch.unique(target)
                self.seen += values.numel()
            """,
            line=2,
        ),
        Invalid(
            """
            for x, y in loader:
                out = model(x)
                rows, cols = torch.where(out > 0.5)
                loss = loss_fn(out, y)
                loss.backward()
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, tokens, lengths):
                counts = lengths.clamp(min=1)
                return tokens.repeat_interleave(counts, dim=0)
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, pred, target, mask):
                picked = pred.masked_select(mask)
                return picked.var()
            """,
            line=2,
        ),
    ]

    FUNCS = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "repeat_interleave", "where"}

    def visit_Call(self, node: ast.Call) -> None:
        op = is_torch(self.ctx, node, self.FUNCS)
        if op is not None:
            args = positional(node)
            if not args:
                return
            subject = args[0]
            if op == "where" and (len(node.args) + len(node.keywords) != 1 or isinstance(node.args[0], ast.Starred)):
                return
            if op == "repeat_interleave" and not self._tensor_repeats(node, args[1:], functional=True):
                return
            label = f"torch.{op}" if op != "where" else "torch.where(cond)"
        else:
            op = method_name(node)
            if op not in self.FUNCS or op == "where":
                return
            qualified = self.ctx.qualified_name(node.func) or ""
            if qualified.split(".")[0] in ("numpy", "np", "pandas", "pd") or qualified.startswith("torch."):
                return
            recv = receiver(node)
            if recv is None:
                return  # (never: a method call has a receiver)
            subject = recv
            if op == "repeat_interleave" and not self._tensor_repeats(node, positional(node), functional=False):
                return
            if op == "nonzero" and (node.args or node.keywords) and not keyword(node, "as_tuple"):
                return  # not Tensor.nonzero's signature
            label = f".{op}()"
        tensor = self.ctx.on_device(subject) if label.startswith("torch.") else _tensorish(self.ctx, subject)
        if not tensor or shaped_out(self.ctx, node):
            return
        self.report(node, self.summary.format(op=label))

    def _tensor_repeats(self, node: ast.Call, rest: list[ast.expr], functional: bool) -> bool:
        value = keyword_value(node, "repeats")
        if value is None and rest:
            value = rest[0]
        if value is None:
            # torch.repeat_interleave(repeats): the one-argument form repeats indices by a tensor
            return functional
        # a literal is never a tensor; a name only when it is assigned one here
        return self.ctx.tensor_kind(value) >= Kind.CPU and (
            not isinstance(value, ast.Name) or bool(self.ctx.reaching_values(value))
        )
