"""XLA314 per-sample-targets-concatenated: Flags, on a per-step path, `torch.cat` of a field of each
sample of a list of per-sample records (`torch.cat([t["labels"] for t in targets])`)."""

from __future__ import annotations

import ast

from xlalint.analysis.index import COMPREHENSIONS, target_names
from xlalint.analysis.names import dotted_name, method_name, receiver, string_value
from xlalint.rule import Invalid, Rule, Valid

_CONCATENATIONS = {"torch.cat", "torch.concat", "torch.concatenate"}
# methods that keep the rows of a field (`t["boxes"].to(device)`, `t["labels"][J].long()`)
_ROW_KEEPING = {"to", "long", "float", "int", "detach", "clone", "contiguous", "cuda", "type", "view", "reshape"}


class PerSampleTargetsConcatenated(Rule):
    """## What it does
    Flags, on a per-step path (a loss, a matcher's `forward`, the training loop), `torch.cat` of a
    field of each sample of a list of per-sample records: `torch.cat([v["labels"] for v in targets])`,
    `torch.cat([t["boxes"][i] for t, (_, i) in zip(targets, indices)])`, the targets of detection
    matchers and losses. One finding per function: its other concatenations of the same samples are
    named in the message.

    ## Why is this bad?
    A batch that reaches the step as a list of per-sample dicts was left uncollated because its
    samples differ in size (a number of boxes, of labels, of keypoints per image). Their
    concatenation has as many rows as the batch has objects, a number that changes from step to
    step, and so does everything computed from it (the cost matrix, the matched loss). XLA compiles
    one program per set of shapes: each new total traces and compiles the step again (measured
    under Dynamo with static shapes: three batches with 5, 7 and 4 objects, three compilations).

    ## Example
    ```python
    def loss_labels(self, outputs, targets, indices):
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
        target_classes = torch.full(outputs["pred_logits"].shape[:2], self.num_classes)
        target_classes[idx] = target_classes_o
    ```

    Use instead:
    ```python
    # collate the targets once, padded to a fixed number of objects per image, with a validity mask:
    # labels: (batch, max_objects), boxes: (batch, max_objects, 4), valid: (batch, max_objects)
    def loss_labels(self, outputs, labels, valid, assignment):
        target_classes = torch.where(assignment >= 0, labels.gather(1, assignment.clamp(min=0)), self.num_classes)
    ```

    ## Known problems
    Samples whose fields all have the same size (a list of dicts of fixed-size tensors) concatenate
    to a static shape; the rule cannot see sizes and reports them too: say so with a `noqa`.
    """

    code, name, category = "XLA314", "per-sample-targets-concatenated", "varying_shape"
    evidence = ("step",)
    xla_only = True
    summary = "`{what}` joins a field of each sample per step: one row per object, a new shape per batch"
    hint = "pad the targets to a fixed number of objects per sample in the collate function and carry a validity mask"

    VALID = [
        Valid(
            """
            import torch_xla

            def forward(self, x, targets):
                # a fixed-size field per sample: the rows are the batch size
                flat = torch.cat([p.grad.view(-1) for p in self.parameters()])
                feats = torch.cat([self.heads[k](x) for k in range(4)], dim=1)
                return flat, feats
            """
        ),
        Valid(
            """
            import torch_xla

            def collate(batch):  # host data, once per batch in the loader's workers; XLA312's concern
                images = torch.stack([b["image"] for b in batch])
                labels = torch.cat([b["labels"] for b in batch])
                return images, labels
            """
        ),
        Valid(
            """
            import torch_xla

            def forward(self, outputs, targets):
                if self.step % 100 == 0:  # every N steps
                    self.log_hist(torch.cat([t["labels"] for t in targets]))
                return self.loss(outputs["logits"], torch.stack([t["label"] for t in targets]))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla

            class HungarianMatcher(nn.Module):
                @torch.no_grad()
                def forward(self, outputs, targets):
                    out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
                    tgt_ids = torch.cat([v["labels"] for v in targets])
                    tgt_bbox = torch.cat([v["boxes"] for v in targets])  # the same cause: named in the message
                    return -out_prob[:, tgt_ids] + torch.cdist(outputs["pred_boxes"].flatten(0, 1), tgt_bbox)
            """,
            line=7,
        ),
        Invalid(
            """
            import torch_xla

            class SetCriterion(nn.Module):
                def loss_boxes(self, outputs, targets, indices, num_boxes):
                    idx = self._get_src_permutation_idx(indices)
                    src_boxes = outputs["pred_boxes"][idx]
                    target_boxes = torch.cat([t["boxes"][i] for t, (_, i) in zip(targets, indices)], dim=0)
                    return F.l1_loss(src_boxes, target_boxes, reduction="sum") / num_boxes
            """,
            line=7,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._found: dict[ast.AST | None, list[ast.Call]] = {}  # per function: one cause, one finding

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified_name(node.func) not in _CONCATENATIONS or not node.args:
            return
        parts = _comprehension(self.ctx, node.args[0])
        if parts is None or not _per_sample_field(parts.elt, _bound(parts)):
            return
        if self.ctx.runs_hot(node) and not self.ctx.in_non_xla_code(node):
            self._found.setdefault(self.ctx.index.enclosing_function(node), []).append(node)

    def finish(self) -> None:
        for calls in self._found.values():
            first, *others = sorted(calls, key=lambda c: self.ctx.index.order[c])
            what = self.ctx.code(first)
            message = self.summary.format(what=what if len(what) <= 45 else what[:42] + "...")
            if others:
                lines = ", ".join(str(c.lineno) for c in others[:3]) + (", ..." if len(others) > 3 else "")
                message += f" (also line{'s' if len(others) > 1 else ''} {lines})"
            self.report(first, message)


def _comprehension(ctx, expr: ast.expr, depth: int = 0) -> ast.ListComp | ast.GeneratorExp | None:
    """The list comprehension or generator `expr` is, or a name holds (`ids = [...]; torch.cat(ids)`)."""
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return expr
    if isinstance(expr, ast.Name) and depth < 2:
        values = ctx.reaching_values(expr)
        if len(values) == 1:
            return _comprehension(ctx, values[0], depth + 1)
    return None


def _bound(comp: ast.AST) -> set[str]:
    assert isinstance(comp, COMPREHENSIONS)
    return {name for g in comp.generators for name in target_names(g.target)}


def _per_sample_field(expr: ast.expr, bound: set[str]) -> bool:
    """`v["labels"]`, `t["boxes"][i]`, `t["boxes"].to(device)`: a string-keyed field of a record the
    comprehension iterates (possibly indexed by another per-sample value, or cast)."""
    while True:
        if isinstance(expr, ast.Call) and method_name(expr) in _ROW_KEEPING:
            expr = receiver(expr)  # type: ignore[assignment]
        elif (
            isinstance(expr, ast.Subscript)
            and string_value(expr.slice) is None
            and isinstance(expr.value, ast.Subscript)
        ):
            expr = expr.value  # `t["boxes"][i]`: the rows a matcher picked
        else:
            break
    return isinstance(expr, ast.Subscript) and string_value(expr.slice) is not None and dotted_name(expr.value) in bound
