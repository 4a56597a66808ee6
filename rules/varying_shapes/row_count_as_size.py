"""XLA316 row-count-as-size: Flags, on a per-step path, the row count of a batch's object table (the
samples' targets concatenated by the collate) used as a size (`nt = targets.shape[0]`, then
`.repeat(1, nt)`)."""

from __future__ import annotations

import ast
import os

from xlalint.analysis.names import argument, keyword_value
from xlalint.analysis.rows import ragged_rows, row_count, rows_of, sized_by
from xlalint.rule import Invalid, Rule, Valid


class RowCountAsSize(Rule):
    """## What it does
    Flags, on a per-step path, the number of rows of a batch's object table used as the size of a
    new tensor: `nt = targets.shape[0]` (or `targets.size(0)`, `len(targets)`) followed by
    `torch.arange(na).view(na, 1).repeat(1, nt)`, `torch.zeros(nt, 7)`. The table is the samples'
    targets concatenated by the loader's collate after it wrote each sample's index into a column
    (`for i, l in enumerate(label): l[:, 0] = i; torch.cat(label, 0)`, YOLO's `(image, class, x, y,
    w, h)` rows). The evidence is followed through the project: the collate, the `collate_fn=` of
    the loader a training loop iterates (built there or returned by a helper), and the calls that
    hand the batch element on, to a loss in another module. There the count is reported when XLA
    code feeds the loss; the call in XLA code that hands the table to it is reported too, with the
    line of the count, as XLA109 reports a helper's host read at its call.

    ## Why is this bad?
    The table has one row per object, and the number of objects changes with every batch. Every
    tensor sized by it has a new shape each step, and XLA compiles the step again for each new set of
    shapes (the same under `torch.compile` with `dynamic=False`): the loss's target building
    recompiles nearly every step.

    ## Example
    ```python
    # datasets.py
    def collate_fn(batch):
        imgs, labels = zip(*batch)
        for i, l in enumerate(labels):
            l[:, 0] = i  # the sample's index in the batch
        return torch.stack(imgs, 0), torch.cat(labels, 0)

    # loss.py
    def build_targets(p, targets):
        na, nt = 3, targets.shape[0]
        ai = torch.arange(na, device=targets.device).float().view(na, 1).repeat(1, nt)
    ```

    Use instead: pad each batch's targets to a fixed number of rows in the collate (`max_objects`,
    with a validity column or mask), and build the targets over all of them:
    ```python
    def collate_fn(batch):
        imgs, labels = zip(*batch)
        table = torch.zeros(len(labels) * MAX_OBJECTS, 7)  # last column: 1 for a real object
        ...
    ```

    ## Fix safety
    No automatic fix: the padding and the mask change the loss code.
    """

    code, name, category = "XLA316", "row-count-as-size", "varying_shape"
    evidence = ("step",)
    # a loss module need not import torch_xla: the evidence says whether XLA code feeds it
    summary = "`{count}` counts the batch's objects (rows concatenated at {where}); sizing `{use}` by it recompiles every batch"
    at_call = "`{helper}()` sizes a tensor by the row count of `{arg}` ({where}), the batch's objects (concatenated at {collate}): a recompile per batch"
    hint = "pad the targets to a fixed number of rows per batch in the collate (with a validity mask)"

    DATASETS = {
        "datasets.py": """
        import torch

        class ListDataset(torch.utils.data.Dataset):
            def collate_fn(self, batch):
                paths, imgs, targets = list(zip(*batch))
                for i, boxes in enumerate(targets):
                    boxes[:, 0] = i
                targets = torch.cat(targets, 0)
                return paths, torch.stack(imgs), targets
        """,
        "loss.py": """
        import torch

        def compute_loss(p, targets, model):
            tcls, indices = build_targets(p, targets, model)
            return sum(pi[indices].sum() for pi in p)

        def build_targets(p, targets, model):
            na, nt = 3, targets.shape[0]
            ai = torch.arange(na, device=targets.device).float().view(na, 1).repeat(1, nt)
            return targets.repeat(na, 1, 1), ai
        """,
    }

    VALID = [
        Valid(
            """
            import torch
            import torch_xla
            from torch.utils.data import DataLoader

            def collate(batch):  # one label per sample: as many rows as the batch has samples
                imgs, labels = zip(*batch)
                return torch.stack(imgs, 0), torch.cat(labels, 0)

            loader = DataLoader(dataset, batch_size=8, drop_last=True, collate_fn=collate)
            for imgs, labels in loader:
                labels = labels.to(torch_xla.device())
                onehot = torch.zeros(labels.shape[0], 10, device=labels.device)
                loss = model(imgs, onehot)
                loss.backward()
            """
        ),
        Valid(
            """
            import torch
            import torch_xla
            from torch.utils.data import DataLoader
            from datasets import ListDataset

            dataset = ListDataset("train.txt")
            loader = DataLoader(dataset, batch_size=8, collate_fn=dataset.collate_fn)
            for _, imgs, targets in loader:
                targets = targets.to(torch_xla.device())
                print(f"{len(targets)} boxes")  # a count, not a size
                loss = model(imgs, targets)
                loss.backward()
            """,
            modules=DATASETS,
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla
            from torch.utils.data import DataLoader
            from datasets import ListDataset
            from loss import compute_loss

            def train(model, optimizer):
                dataset = ListDataset("train.txt")
                loader = DataLoader(dataset, batch_size=8, collate_fn=dataset.collate_fn)
                for _, imgs, targets in loader:
                    loss = compute_loss(model(imgs), targets.to(torch_xla.device()), model)
                    loss.backward()
                    optimizer.step()
            """,
            line=10,
            modules=DATASETS,
        ),
        Invalid(
            """
            import torch
            import torch_xla
            from torch.utils.data import DataLoader
            from datasets import ListDataset

            dataset = ListDataset("train.txt")
            loader = DataLoader(dataset, batch_size=8, collate_fn=dataset.collate_fn)
            for _, imgs, targets in loader:
                targets = targets.to(torch_xla.device())
                nt = targets.shape[0]
                gain = torch.ones(nt, 7, device=targets.device)
                loss = model(imgs, targets * gain)
                loss.backward()
            """,
            line=10,
            modules=DATASETS,
        ),
        Invalid(
            """
            import torch
            import torch_xla

            def build_targets(p, targets, model):
                na, nt = 3, targets.shape[0]
                ai = torch.arange(na, device=targets.device).float().view(na, 1).repeat(1, nt)
                return targets.repeat(na, 1, 1), ai
            """,
            line=5,
            modules={
                "datasets.py": DATASETS["datasets.py"],
                "train.py": """
                import torch_xla
                from torch.utils.data import DataLoader
                from datasets import ListDataset
                from example import build_targets  # this module

                def train(model, optimizer):
                    dataset = ListDataset("train.txt")
                    dataloader = DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=dataset.collate_fn)
                    for batch_i, (_, imgs, targets) in enumerate(dataloader):
                        targets = targets.to(torch_xla.device())
                        tcls, ai = build_targets(model(imgs), targets, model)
                        loss = model.loss(tcls, ai)
                        loss.backward()
                        optimizer.step()
                """,
            },
        ),
    ]

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._check(node)

    def visit_Call(self, node: ast.Call) -> None:
        self._check(node)
        if self.ctx.uses_xla:
            self._check_call(node)

    def _check_call(self, call: ast.Call) -> None:
        """A call in XLA code handing a row table to a function of another module that sizes a
        tensor by its row count: reported here too, where the step hands the batch on."""
        for helper, path, detail in self.ctx.helper_calls(call, "sizes_by_rows"):
            key, _, line = detail.partition("@")
            given = argument(call, int(key), "") if key.isdigit() else keyword_value(call, key[2:])
            if given is None:
                continue
            found = ragged_rows(self.ctx, given)
            if found is None or not self.ctx.runs_hot(call):
                continue
            here = os.path.dirname(os.path.abspath(str(self.ctx.path)))
            shown = self.ctx.code(rows_of(given))
            self.report(
                call,
                self.at_call.format(
                    helper=helper,
                    arg=shown if len(shown) <= 20 else shown[:17] + "...",
                    where=f"{os.path.relpath(path, here)}:{line}",
                    collate=_shown_where(found[0], here),
                ),
            )
            return

    def _check(self, node: ast.expr) -> None:
        measured = row_count(node)
        if measured is None:
            return
        use = sized_by(self.ctx, node)
        if use is None or not self.ctx.runs_hot(node):
            return
        found = ragged_rows(self.ctx, measured)
        if found is None or not found[1]:
            return  # the batches reach no XLA code: eager CUDA/CPU runs any size
        here = os.path.dirname(os.path.abspath(str(self.ctx.path)))
        shown = _call_shown(self.ctx, use)
        self.report(
            node,
            self.summary.format(
                count=self.ctx.code(node),
                where=_shown_where(found[0], here),
                use=shown if len(shown) <= 24 else shown[:21] + "...",
            ),
        )


def _call_shown(ctx, call: ast.Call) -> str:
    """`.repeat(1, nt)` of `torch.arange(na).view(na, 1).repeat(1, nt)`: the call, not its chain."""
    args = ", ".join(ctx.code(a) for a in [*call.args, *call.keywords])
    name = (
        f".{call.func.attr}"
        if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call)
        else ctx.code(call.func)
    )
    return f"{name}({args})"


def _shown_where(where: str, here: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{os.path.relpath(path, here)}:{line}"
