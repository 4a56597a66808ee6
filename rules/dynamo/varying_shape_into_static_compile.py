"""DYN204 varying-shape-into-static-compile: Flags a call of a function compiled with `dynamic=False` (or
`backend="tpu"`) on the batches of a `DataLoader` whose `collate_fn` pads each batch to its own longest
sequence (`pad_sequence` in a collate function of this file)."""

from __future__ import annotations

import ast

from xlalint.rules.dynamo._common import recompile_note

from xlalint.analysis.index import FUNCTIONS
from xlalint.analysis.names import dotted_name, keyword, keyword_value
from xlalint.rule import Invalid, Rule, Valid

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
    torch_proven = ("2.11", "2.13")  # where its Dynamo proofs (tests/rules/test_dynamo_rules.py) pass
    preview = True
    summary = (
        "`{func}` is compiled with static shapes and gets batches padded to their own longest sequence: {consequence}"
    )
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
            if isinstance(loop, ast.For) and self._reads(node, self._padded_names(loop)):
                self.report(
                    node,
                    self.summary.format(
                        func=getattr(target[0], "name", "lambda"), consequence=recompile_note(target[1])
                    ),
                )
                return

    @staticmethod
    def _reads(call: ast.Call, names: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names for a in (*call.args, *call.keywords) for n in ast.walk(a))

    def _padded_names(self, loop: ast.For) -> set[str]:
        """The loop variables that hold a batch padded to its longest sequence: the whole batch, or
        the elements of the collate function's returned tuple that come from `pad_sequence`."""
        iterable, target = loop.iter, loop.target
        while (
            isinstance(iterable, ast.Call)
            and dotted_name(iterable.func) in ("enumerate", "tqdm", "iter")
            and iterable.args
        ):
            if dotted_name(iterable.func) == "enumerate":
                if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
                    return set()
                target = target.elts[1]
            iterable = iterable.args[0]
        values = [iterable] if isinstance(iterable, ast.Call) else self.ctx.assigned_values(iterable)
        for value in values:
            if not (isinstance(value, ast.Call) and (dotted_name(value.func) or "").endswith("DataLoader")):
                continue
            collate = keyword_value(value, "collate_fn")
            for func in self.ctx.index.functions.get(collate.id, ()) if isinstance(collate, ast.Name) else ():
                padded = self._padded_positions(func)
                if padded is None:
                    continue
                if not padded or not isinstance(target, ast.Tuple):
                    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                return {
                    n.id
                    for i in padded
                    if i < len(target.elts)
                    for n in ast.walk(target.elts[i])
                    if isinstance(n, ast.Name)
                }
        return set()

    def _padded_positions(self, func: ast.AST) -> set[int] | None:
        """None: the collate function does not pad to the longest (or pads to a fixed length after);
        else the positions of its returned tuple that are padded (empty: the whole result)."""
        padded: set[str] = set()
        pads = False
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                name = self.ctx.qualified_name(node.func) or ""
                if name in ("torch.nn.functional.pad", "torch.constant_pad_nd") or any(
                    keyword(node, k) is not None for k in FIXED
                ):
                    return None
                if name in PAD_TO_LONGEST:
                    pads = True
                    parent = self.ctx.parent(node)
                    if (
                        isinstance(parent, ast.Assign)
                        and len(parent.targets) == 1
                        and isinstance(parent.targets[0], ast.Name)
                    ):
                        padded.add(parent.targets[0].id)
        if not pads:
            return None
        positions: set[int] = set()
        for node in ast.walk(func):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                positions |= {
                    i
                    for i, e in enumerate(node.value.elts)
                    if (isinstance(e, ast.Name) and e.id in padded)
                    or (isinstance(e, ast.Call) and (self.ctx.qualified_name(e.func) or "") in PAD_TO_LONGEST)
                }
        return positions
