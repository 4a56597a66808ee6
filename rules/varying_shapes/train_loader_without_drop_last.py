"""XLA311 train-loader-without-drop-last: Flags a training `DataLoader(...)` built without
`drop_last=True` in code that runs on XLA."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING

from xlalint.analysis.evidence import Evidence, seen
from xlalint.analysis.loaders import NOT_TRAIN, never_partial, ragged_loader, training_sign
from xlalint.analysis.names import last_part
from xlalint.diagnostics import HIGH, Applicability, Fix, Location, Step
from xlalint.fixing.lazy import cst
from xlalint.rule import Invalid, Rule, Valid

if TYPE_CHECKING:  # libcst loads on first use (xlalint.fixing.lazy)
    from xlalint.analysis.context import FileContext
    from xlalint.fixing.context import CstContext


class TrainLoaderWithoutDropLast(Rule):
    """## What it does
    Flags a training `DataLoader(...)` built without `drop_last=True` in code that runs on XLA: a
    loader that shuffles, takes a training sampler, or is named for training, or else one that a
    loop that trains iterates (in this file, or in the project function it is handed to, such as a
    `Trainer(cfg, model, data_iter)` that keeps it and trains over it), with a batch size other
    than 1. A helper of the project that builds such a loader in code with no XLA of its own
    (`train_loader, val_loader = setup_dataloaders(...)`) is reported where XLA code calls it; when
    a loop that trains in XLA code iterates what the helper returns (through any number of helpers'
    returns, `prepare_loaders()` returning `get_loader(ds, is_train=True)`), the loader is reported
    where it is built, with that loop in its chain. A loader that only code off XLA (a CUDA trainer)
    trains over is not reported.

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
    returned = (
        "`{helper}()` returns a training `DataLoader` without `drop_last=True` (built at {where}): "
        "the last partial batch recompiles the step"
    )
    xla_only = True
    fix_availability = "sometimes"

    LOADERS = {
        "loaders.py": """
        from torch.utils.data import DataLoader

        def setup_dataloaders(train_set, val_set, batch_size, collate_fn=None):
            train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, collate_fn=collate_fn)
            val_loader = DataLoader(val_set, batch_size=batch_size, shuffle=False, collate_fn=collate_fn)
            return train_loader, val_loader
        """
    }
    TRAINER = {
        "trainer.py": """
        class Trainer:
            def __init__(self, cfg, model, data_iter, optimizer, device):
                self.cfg = cfg
                self.model = model
                self.data_iter = data_iter
                self.optimizer = optimizer
                self.device = device

            def train(self, get_loss):
                for epoch in range(self.cfg.n_epochs):
                    for batch in tqdm(self.data_iter):
                        batch = [t.to(self.device) for t in batch]
                        self.optimizer.zero_grad()
                        get_loss(self.model, batch).backward()
                        self.optimizer.step()

            def evaluate(self, data_iter):
                for batch in data_iter:
                    self.model(*batch)
        """
    }

    # a helper module with no XLA, two levels below an XLA trainer that trains over what it returns
    HELPERS = {
        "data.py": """
        from example import get_loader

        def prepare_loaders(cfg, rank):
            train_loader = get_loader(cfg.train_set, rank, cfg.batch_size, is_train=True)
            val_loader = get_loader(cfg.val_set, rank, cfg.batch_size, is_train=False)
            return train_loader, val_loader
        """
    }
    XLA_TRAINER = """
        import torch_xla
        import torch_xla.runtime as xr
        from data import prepare_loaders

        class Trainer:
            def __init__(self, cfg, model, optimizer):
                self.model, self.optimizer = model, optimizer
                self.train_loader, self.val_loader = prepare_loaders(cfg, xr.global_ordinal())

            def train_epoch(self):
                for x, y in self.train_loader:
                    self.optimizer.zero_grad()
                    self.model(x).loss(y).backward()
                    self.optimizer.step()
                    torch_xla.sync()
        """
    CUDA_TRAINER = """
        import torch.distributed as dist
        from data import prepare_loaders

        def train(cfg, model, optimizer):
            train_loader, _ = prepare_loaders(cfg, dist.get_rank())
            for x, y in train_loader:
                optimizer.zero_grad()
                model(x.cuda()).loss(y.cuda()).backward()
                optimizer.step()
        """
    GET_LOADER = """
        from torch.utils.data import DataLoader, DistributedSampler

        def get_loader(ds, rank, batch_size, is_train):
            sampler = DistributedSampler(ds, rank=rank, shuffle=is_train)
            return DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=4)
        """

    VALID = [
        Valid(GET_LOADER, modules={**HELPERS, "trainer.py": CUDA_TRAINER}),
        Valid(  # XLA code only evaluates over what the helpers return
            GET_LOADER,
            modules={
                **HELPERS,
                "evaluate.py": """
                import torch_xla
                from data import prepare_loaders

                def evaluate(cfg, model):
                    _, val_loader = prepare_loaders(cfg, 0)
                    for x, y in val_loader:
                        model(x.to(torch_xla.device()))
                """,
            },
        ),
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
        Valid(
            """
            import torch_xla
            loader = DataLoader(dataset, batch_size=64)
            with torch.no_grad():
                for x, y in loader:  # an evaluation loop: no backward, no optimizer step
                    predictions.append(model(x))
            """
        ),
        Valid(
            """
            import torch_xla
            from trainer import Trainer

            data_iter = DataLoader(dataset, batch_size=cfg.batch_size, collate_fn=collate)
            trainer = Trainer(cfg, model, train_iter, optimizer, torch_xla.device())
            trainer.evaluate(data_iter)  # the trainer's evaluation loop iterates it
            """,
            modules=TRAINER,
        ),
        Valid(
            """
            import torch_xla
            from loaders import setup_dataloaders

            val_loader, _ = setup_dataloaders(val_set, val_set, batch_size=32)  # named for evaluation
            """,
            modules=LOADERS,
        ),
    ]
    INVALID = [
        Invalid(
            GET_LOADER,
            line=5,
            expected_replacement=GET_LOADER.replace("num_workers=4)", "num_workers=4, drop_last=True)"),
            applicability=Applicability.UNSAFE,
            modules={**HELPERS, "trainer.py": XLA_TRAINER},
        ),
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
        Invalid(
            """
            import torch_xla
            device = torch_xla.device()
            loader = DataLoader(dataset, batch_size=32, collate_fn=pad_collate)
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(model(x.to(device)), y.to(device)).backward()
                optimizer.step()
                torch_xla.sync()
            """,
            line=3,
            applicability=Applicability.UNSAFE,
        ),
        Invalid(
            """
            import torch_xla
            from trainer import Trainer

            data_iter = DataLoader(dataset, batch_size=cfg.batch_size, collate_fn=collate)
            trainer = Trainer(cfg, model, data_iter, optimizer, torch_xla.device())
            trainer.train(get_loss)
            """,
            line=4,
            expected_replacement="""
            import torch_xla
            from trainer import Trainer

            data_iter = DataLoader(dataset, batch_size=cfg.batch_size, collate_fn=collate, drop_last=True)
            trainer = Trainer(cfg, model, data_iter, optimizer, torch_xla.device())
            trainer.train(get_loss)
            """,
            applicability=Applicability.UNSAFE,
            modules=TRAINER,
        ),
        Invalid(
            """
            import torch_xla
            import torch_xla.distributed.parallel_loader as pl
            from loaders import setup_dataloaders

            train_loader, val_loader = setup_dataloaders(train_set, val_set, batch_size=32)
            device_loader = pl.MpDeviceLoader(train_loader, torch_xla.device())
            """,
            line=5,
            modules=LOADERS,
        ),
    ]

    @classmethod
    def applies(cls, ctx: FileContext) -> bool:
        """XLA code, and a module with no XLA of its own whose loader a loop on XLA trains over."""
        return super().applies(ctx) or (
            not ctx.placed_off_xla and any(kind == "xla_trained" for _, kind, *_ in ctx.project.helper_calls)
        )

    def visit_Call(self, node: ast.Call) -> None:
        if not self.ctx.uses_xla:
            self._trained_elsewhere(node)
            return
        sign = training_sign(self.ctx, node)
        if sign is not None and not self.ctx.in_non_xla_code(node):
            found, shown = self.evidence_for(node), seen(self.ctx, *sign)
            self.report(
                node, fix=lambda cctx: _drop_last(cctx, node), evidence=shown if found is None else found & shown
            )
            return
        for helper, path, detail in self.ctx.helper_calls(node, "ragged_loader"):
            line, _, index = detail.partition(":")
            if self._names_training(node, int(index)) and not self.ctx.in_non_xla_code(node):
                where = f"{os.path.relpath(path, os.path.dirname(os.path.abspath(str(self.ctx.path))))}:{line}"
                self.report(node, self.returned.format(helper=last_part(helper), where=where))
                return
        if not self.ctx.imports_xla:  # XLA by a device from elsewhere: its loaders may be trained elsewhere too
            self._trained_elsewhere(node)

    def _trained_elsewhere(self, node: ast.Call) -> None:
        """A loader of this module (no XLA of its own) that a loop that trains in XLA code iterates,
        reached through project functions' returns (`ProjectFacts.helper_calls`, "xla_trained")."""
        for _, path, detail in self.ctx.helper_calls(node, "xla_trained"):
            if not ragged_loader(self.ctx, node) or never_partial(self.ctx, node) or self.ctx.in_non_xla_code(node):
                return
            loop, _, helper = detail.partition(":")
            consumer = Step(
                Location(int(loop), 1),
                f"a loop that trains on XLA iterates it, returned by `{helper}()`",
                path,
            )
            self.report(node, fix=lambda cctx: _drop_last(cctx, node), evidence=Evidence(HIGH, (consumer,)))
            return

    def _names_training(self, node: ast.Call, index: int) -> bool:
        """The helper's loader is not assigned to a name for evaluation (`train_loader, val_loader = ...`)."""
        parent = self.ctx.parent(node)
        if not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
            return True
        target = parent.targets[0]
        if index >= 0 and isinstance(target, (ast.Tuple, ast.List)):
            if index >= len(target.elts):
                return False
            target = target.elts[index]
        return not NOT_TRAIN.search(self.ctx.code(target).replace(".", "_"))


def _drop_last(cctx: CstContext, node: ast.Call) -> Fix:
    call = cctx.find(node, cst.Call)
    from xlalint.fixing.cst_names import with_keyword  # libcst-side helpers load with the fix

    new = with_keyword(call, "drop_last", cst.Name("True"))
    return Fix.replace(call, new, title="Add `drop_last=True`", safe=False)
