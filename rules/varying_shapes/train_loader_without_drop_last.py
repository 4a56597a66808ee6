"""XLA311 train-loader-without-drop-last: Flags a training `DataLoader(...)` built without
`drop_last=True` in code that runs on XLA."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from xlalint.analysis.names import (dotted_name, has_star_args, is_constant, keyword, keyword_value, last_part,
                                    positional)
from xlalint.diagnostics import Applicability, Fix
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.fixing.context import CstContext


# -- XLA311 ----------------------------------------------------------------------------------------

_TRAIN = re.compile(r"train", re.I)
_NOT_TRAIN = re.compile(r"(^|_|\b)(eval|evaluation|test|testing|val|valid|validation|dev|predict|prediction|"
                        r"inference|infer|calib|calibration)(_|$|\b|s\b)", re.I)


class TrainLoaderWithoutDropLast(Rule):
    """## What it does
    Flags a training `DataLoader(...)` built without `drop_last=True` in code that runs on XLA: a
    loader that shuffles, takes a training sampler, or is named for training, with a batch size
    other than 1.

    ## Why is this bad?
    When the dataset size is not a multiple of the batch size, the last batch of every epoch is
    smaller: a new input shape, so XLA traces and compiles the whole training step again (measured:
    a 6.9 s compile against a 38 ms step, 185x), and on multi-host TPU each host may compile at a
    different time.

    ## Example
    ```python
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
    ```

    Use instead:
    ```python
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, drop_last=True)
    ```

    Or pad the final batch to the full size and mask the padding.

    ## Fix safety
    Adding `drop_last=True` is unsafe: each epoch skips up to `batch_size - 1` samples (a different
    set each epoch when shuffling).
    """

    code, name, category = "XLA311", "train-loader-without-drop-last", "varying_shape"
    summary = "training `DataLoader` without `drop_last=True`: the last partial batch recompiles the step"
    hint = "pass `drop_last=True` (or pad the last batch to the full batch size)"
    xla_only = True
    fix_availability = "always"

    VALID = [
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)
            """
        ),
        Valid(
            """
            import torch_xla
            eval_loader = DataLoader(eval_set, batch_size=64, shuffle=False)
            val_loader = DataLoader(val_set, batch_size=64)
            """
        ),
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=1, shuffle=True)
            train_loader = DataLoader(train_set, batch_sampler=bucket_sampler)
            """
        ),
        Valid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=bs, shuffle=True, drop_last=args.drop_last)
            loader = DataLoader(train_set, **loader_kwargs)
            """
        ),
        Valid(
            """
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)  # no XLA in this file
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4)
            """,
            line=2,
            expected_replacement="""
            import torch_xla
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=4, drop_last=True)
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=args.batch_size,
                sampler=train_sampler,
                drop_last=False,
            )
            """,
            line=2,
            expected_replacement="""
            import torch_xla.core.xla_model as xm
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=args.batch_size,
                sampler=train_sampler,
                drop_last=True,
            )
            """,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla.core.xla_model as xm
            def make_loader(dataset, batch_size, is_train):
                sampler = DistributedSampler(dataset, shuffle=is_train, drop_last=False)
                return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=False)
            """,
            line=4,
            applicability=Applicability.UNSAFE,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted_name(node.func)
        if last_part(name) != "DataLoader":
            return
        qualified = self.ctx.qualified_name(node.func) or ""
        if qualified.split(".")[0] not in ("torch", "DataLoader") and qualified != name:
            return
        if has_star_args(node) or keyword(node, "batch_sampler"):
            return
        drop_last = keyword_value(node, "drop_last")
        if drop_last is not None and not is_constant(drop_last, False):
            return
        args = positional(node)
        batch = keyword_value(node, "batch_size")
        if batch is None and len(args) > 1:
            batch = args[1]
        if batch is None or is_constant(batch, None) or \
                (isinstance(batch, ast.Constant) and type(batch.value) is int and batch.value <= 1):
            return
        if len(args) > 2:  # positional shuffle/sampler...: unusual, leave it
            return
        if not self._training(node) or self.ctx.in_non_xla_code(node):
            return
        self.report(node, fix=lambda cctx: _drop_last(cctx, node))

    def _training(self, node: ast.Call) -> bool:
        code = self.ctx.code
        words = [code(a) for a in node.args] + [code(k.value) for k in node.keywords if k.arg in ("dataset", "sampler")]
        target = self._target_name(node)
        if target:
            words.append(target)
        text = " ".join(words)
        if _NOT_TRAIN.search(text.replace(".", "_")):
            return False
        shuffle = keyword_value(node, "shuffle")
        if shuffle is not None:
            if self._shuffles(shuffle):
                return True
            if is_constant(shuffle, False):
                return bool(_TRAIN.search(text))
        sampler = keyword_value(node, "sampler")
        if sampler is not None and re.search(r"train|RandomSampler", code(sampler)):
            return True
        # `sampler = DistributedSampler(ds, shuffle=train)`: a sampler that shuffles feeds training
        for value in self.ctx.reaching_values(sampler) if isinstance(sampler, ast.Name) else ():
            if isinstance(value, ast.Call) and last_part(dotted_name(value.func)).endswith("Sampler"):
                sampler_shuffle = keyword_value(value, "shuffle")
                if sampler_shuffle is not None and self._shuffles(sampler_shuffle):
                    return True
        return bool(_TRAIN.search(text))

    def _shuffles(self, shuffle: ast.expr) -> bool:
        """`shuffle=True`, `shuffle=is_train`: order is shuffled for training."""
        return is_constant(shuffle, True) or bool(_TRAIN.search(self.ctx.code(shuffle)))

    def _target_name(self, node: ast.Call) -> str | None:
        parent = self.ctx.parent(node)
        while isinstance(parent, (ast.Call, ast.keyword)):  # accelerator.prepare(DataLoader(...))
            parent = self.ctx.parent(parent)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            return self.ctx.code(parent.targets[0])
        return None


def _drop_last(cctx: CstContext, node: ast.Call) -> Fix:
    call = cctx.locate(node)
    from xlalint.fixing.cst_names import with_keyword  # libcst-side helpers load with the fix

    new = with_keyword(call, "drop_last", cst.Name("True"))
    return Fix.replace(call, new, title="Add `drop_last=True`", safe=False)
