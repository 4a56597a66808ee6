"""DYN204: batches padded to their own longest sequence, fed to a static compile."""

from __future__ import annotations

import ast

from xlalint.analysis.index import FUNCTIONS
from xlalint.analysis.names import dotted_name, keyword, keyword_value
from xlalint.rule import Invalid, Rule, Valid

from . import recompile_note

PAD_TO_LONGEST = {"torch.nn.utils.rnn.pad_sequence"}
FIXED = ("padding_value_to", "total_length", "pad_to_multiple_of", "max_length")


class VaryingShapeIntoStaticCompile(Rule):
    """## What it does
    Flags a call of a function compiled with `dynamic=False` (or `backend="tpu"`) on the batches
    of a `DataLoader` whose `collate_fn` pads each batch to its own longest sequence
    (`pad_sequence` in a collate function of this file).

    ## Why is this bad?
    Each batch has a new sequence length, and with static shapes every new shape compiles the
    function again (`tensor 'x' size mismatch at index 1`); after 8 of them
    (`recompile_limit`) Dynamo runs the function eagerly, with a warning, for the rest of the run.
    TorchTPU's `backend="tpu"` forces `dynamic=False`.

    ## Example
    ```python
    def collate(batch):
        return pad_sequence(batch, batch_first=True)

    loader = DataLoader(data, batch_size=8, collate_fn=collate)
    encode = torch.compile(model, backend="tpu")
    for batch in loader:
        encode(batch)
    ```

    Use instead:
    ```python
    def collate(batch):
        padded = pad_sequence(batch, batch_first=True)
        return F.pad(padded, (0, MAX_LEN - padded.shape[1]))  # one length for every batch (or a few buckets)
    ```
    or mark the dimension dynamic (`torch._dynamo.mark_dynamic(batch, 1)`) where the backend allows it.

    ## References
    - PyTorch docs, "torch.compile: dynamic shapes"; TorchTPU user guide: "You must set `dynamic=False`"
    """

    code, name, category = "DYN204", "varying-shape-into-static-compile", "varying_shape"
    preview = True
    summary = "`{func}` is compiled with static shapes and gets batches padded to their own longest sequence: {consequence}"
    hint = "pad to a fixed length or a few buckets (`xlalint.runtime.pad_to_bucket`), or mark the dimension dynamic"
    recompiles = True

    VALID = [
        Valid(
            """
            import torch
            import torch.nn.functional as F
            from torch.nn.utils.rnn import pad_sequence
            from torch.utils.data import DataLoader

            def collate(batch):
                padded = pad_sequence(batch, batch_first=True)
                return F.pad(padded, (0, 24 - padded.shape[1]))

            def encode(x):
                return x.cumsum(1)

            loader = DataLoader([torch.ones(n) for n in range(1, 25)], batch_size=2, collate_fn=collate)
            step = torch.compile(encode, dynamic=False)
            for batch in loader:
                step(batch)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.nn.utils.rnn import pad_sequence
            from torch.utils.data import DataLoader

            def collate(batch):
                return pad_sequence(batch, batch_first=True)

            def encode(x):
                return x.cumsum(1)

            loader = DataLoader([torch.ones(n) for n in range(1, 25)], batch_size=2, collate_fn=collate)
            step = torch.compile(encode, dynamic=False)
            for batch in loader:
                step(batch)
            """,
            line=14,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        regions = self.ctx.compiled
        if not regions.callables or regions.region(node) is not None:
            return
        target = regions.target(node)
        if target is None or not target[1].static:
            return
        for loop in self.ctx.index.ancestors(node):
            if isinstance(loop, (*FUNCTIONS, ast.Lambda)):
                return
            if isinstance(loop, ast.For) and self._padded_loader(loop.iter) and \
                    self._reads(node, {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}):
                self.report(node, self.summary.format(func=getattr(target[0], "name", "lambda"),
                                                      consequence=recompile_note(target[1])))
                return

    def _reads(self, call: ast.Call, names: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names for a in (*call.args, *call.keywords) for n in ast.walk(a))

    def _padded_loader(self, iterable: ast.expr) -> bool:
        values = [iterable] if isinstance(iterable, ast.Call) else self.ctx.assigned_values(iterable)
        for value in values:
            if not (isinstance(value, ast.Call) and (dotted_name(value.func) or "").endswith("DataLoader")):
                continue
            collate = keyword_value(value, "collate_fn")
            if isinstance(collate, ast.Name):
                for func in self.ctx.index.functions.get(collate.id, ()):
                    if self._pads_to_longest(func):
                        return True
        return False

    def _pads_to_longest(self, func: ast.AST) -> bool:
        """The collate function pads with `pad_sequence` and returns that length as it is (no
        padding to a fixed length after it)."""
        pads = fixed = False
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                name = self.ctx.qualified_name(node.func) or ""
                if name in PAD_TO_LONGEST:
                    pads = True
                elif name in ("torch.nn.functional.pad", "torch.constant_pad_nd") or \
                        any(keyword(node, k) is not None for k in FIXED):
                    fixed = True
        return pads and not fixed
