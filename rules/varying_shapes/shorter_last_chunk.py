"""XLA315 shorter-last-chunk: Flags, on a per-step path, a slice of a sequence whose length is clipped
against what is left of it (`min(bptt, len(source) - 1 - i)`): the last chunk is shorter."""

from __future__ import annotations

import ast

from xlalint.analysis.names import dotted_name
from xlalint.analysis.rows import row_count
from xlalint.analysis.tensors import Kind
from xlalint.rule import Invalid, Rule, Valid


class ShorterLastChunk(Rule):
    """## What it does
    Flags, on a per-step path, a slice of a sequence whose length is clipped against what is left
    of that sequence: `seq_len = min(bptt, len(source) - 1 - i); data = source[i:i + seq_len]`
    (truncated backpropagation through time), `source[i:min(i + chunk, source.size(0))]`.

    ## Why is this bad?
    Every chunk but the last has the static length; the last one is shorter, a new input shape.
    XLA compiles one program per set of shapes, so each pass over the data compiles the whole step
    (forward and backward) once more for its last chunk, and again in evaluation (measured under
    Dynamo with static shapes: 35 tokens in chunks of 8, two compilations; without the remainder,
    one). It is the ragged last batch of a `DataLoader` without `drop_last`, in a hand-written loop.

    ## Example
    ```python
    def get_batch(source, i):
        seq_len = min(args.bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)

    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
    ```

    Use instead:
    ```python
    def get_batch(source, i):
        return source[i : i + args.bptt], source[i + 1 : i + 1 + args.bptt].view(-1)

    # drop the remainder: every chunk has `bptt` rows
    for batch, i in enumerate(range(0, train_data.size(0) - 1 - args.bptt, args.bptt)):
        data, targets = get_batch(train_data, i)
    ```
    """

    code, name, category = "XLA315", "shorter-last-chunk", "varying_shape"
    evidence = ("step",)
    xla_only = True
    summary = "`{clip}` clips the chunk of `{source}` to what is left: a shorter last chunk, one more shape (and compilation) per pass"
    hint = "drop the remainder (end the range `bptt` before the end) or pad the last chunk to the full length"

    VALID = [
        Valid(
            """
            import torch_xla

            def get_batch(source, i):
                return source[i : i + args.bptt], source[i + 1 : i + 1 + args.bptt].view(-1)

            for batch, i in enumerate(range(0, train_data.size(0) - 1 - args.bptt, args.bptt)):
                data, targets = get_batch(train_data, i)
                loss = criterion(model(data), targets)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import numpy as np
            import torch_xla

            def predictions(images, bs):  # numpy batches for another framework's session
                inps = [np.expand_dims(img, 0) for img in images]
                for i in range(math.ceil(len(inps) / bs)):
                    inp = np.concatenate(inps[i * bs : min((i + 1) * bs, len(inps))], 0)
                    preds.append(sess.run(softmax, {"input:0": inp}))

            class Windows(torch.utils.data.Dataset):
                def __getitem__(self, i):  # a sample on the host, not a step
                    n = min(self.block_size, len(self.tokens) - i)
                    return self.tokens[i : i + n]

            def forward(self, x):
                n = min(self.max_len, x.size(0))  # clipped against a shape, not against an offset
                return self.encoder(x[:n])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch_xla

            def get_batch(source, i):
                seq_len = min(args.bptt, len(source) - 1 - i)
                data = source[i : i + seq_len]
                target = source[i + 1 : i + 1 + seq_len].view(-1)
                return data, target

            for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
                data, targets = get_batch(train_data, i)
                loss = criterion(model(data), targets)
                loss.backward()
                optimizer.step()
            """,
            line=4,
        ),
        Invalid(
            """
            import torch_xla

            for i in range(0, stream.size(0), chunk):
                x = stream[i : min(i + chunk, stream.size(0))].to(device)
                loss = model(x).loss
                loss.backward()
                optimizer.step()
            """,
            line=4,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not (
            isinstance(node.func, ast.Name) and node.func.id == "min" and len(node.args) == 2 and not node.keywords
        ):
            return
        if node.func.id in self.ctx.index.imports:
            return
        lengths = [_length_left(a) for a in node.args]
        if (lengths[0] is None) == (lengths[1] is None):
            return  # both or neither clip against a length
        source = lengths[0] or lengths[1]
        if source is None:
            return
        offset_side = node.args[0] if lengths[0] is None else node.args[1]
        length_side = node.args[1] if lengths[0] is None else node.args[0]
        if not (_has_name(length_side, exclude=source) or _has_name(offset_side, exclude=source)):
            return  # `min(max_len, x.size(1))`: clipped against a shape, the same every step
        sliced = [s for s in self._slices_using(node) if dotted_name(s.value) == source]
        if not sliced or all(self.ctx.tensor_kind(s.value) == Kind.NOT_TENSOR for s in sliced):
            return  # a list of numpy arrays cut into batches for another framework: no XLA graph
        if self.ctx.runs_hot(node) and not self.ctx.in_non_xla_code(node):
            clip = self.ctx.code(node)
            self.report(node, self.summary.format(clip=clip if len(clip) <= 40 else clip[:37] + "...", source=source))

    def _slices_using(self, clip: ast.Call):
        """The subscripts whose slice bounds use `clip`, inline or through the name it is assigned."""
        parent = self.ctx.parent(clip)
        names: set[str] = set()
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            names.add(parent.targets[0].id)
        func = self.ctx.index.scope_of(clip)
        for sub in ast.walk(func):
            if not isinstance(sub, ast.Subscript):
                continue
            bounds = [sub.slice] if not isinstance(sub.slice, ast.Tuple) else list(sub.slice.elts)
            for bound in bounds:
                if not isinstance(bound, ast.Slice):
                    continue
                for part in (bound.lower, bound.upper):
                    if part is None:
                        continue
                    if any(n is clip or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(part)):
                        yield sub
                        break


def _length_left(expr: ast.expr) -> str | None:
    """The sequence whose first-dimension length `expr` uses (`len(source) - 1 - i`,
    `stream.size(0)`, `x.shape[0] - i`), else None."""
    for node in ast.walk(expr):
        measured = row_count(node)
        if measured is not None:
            return dotted_name(measured)
    return None


def _has_name(expr: ast.expr, exclude: str) -> bool:
    """`expr` is arithmetic on a variable other than the sequence measured (the offset `i` of
    `len(source) - 1 - i`, `i + chunk`), not a lone config value (`self.max_len`, `args.bptt`)."""
    if not isinstance(expr, ast.BinOp):
        return False
    attribute_roots = {id(n.value) for n in ast.walk(expr) if isinstance(n, ast.Attribute)}
    inner = {id(n) for call in ast.walk(expr) if isinstance(call, ast.Call) for n in ast.walk(call)}
    return any(
        isinstance(n, ast.Name) and n.id != exclude.split(".")[0] and id(n) not in inner | attribute_roots
        for n in ast.walk(expr)
    )
