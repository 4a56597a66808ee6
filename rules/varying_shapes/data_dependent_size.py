"""XLA313 data-dependent-size: Flags, on a per-step path, a slice or an allocation whose size comes
from tensor data."""

from __future__ import annotations

import ast
import re

from xlalint.analysis.index import FUNCTIONS
from xlalint.analysis.names import dotted_name, keyword, last_part, method_name, positional, receiver, subscript_indices
from xlalint.analysis.reads import only_without
from xlalint.analysis.tensors import Kind
from xlalint.analysis.vocabulary import SIZED_FACTORIES
from xlalint.rule import Invalid, Rule, Valid

from ._common import NEW_SIZED, arg_values, enclosing

# -- XLA313 ----------------------------------------------------------------------------------------

_LENGTHY = re.compile(r"(^|_)(lens|lengths|seq_lens|seqlens|sizes|counts|ntokens|n_tokens|num_tokens)$", re.I)
_TENSOR_ONLY_READS = {"item", "tolist", "int", "long"}
_TENSOR_SCALAR_METHODS = {
    "max",
    "min",
    "sum",
    "amax",
    "amin",
    "int",
    "long",
    "round",
    "ceil",
    "floor",
    "item",
    "tolist",
    "count_nonzero",
    "argmax",
    "argmin",
    "cumsum",
    "prod",
}
_SHAPE_METHODS = {"size", "dim", "numel", "nelement", "ndimension", "__len__"}


class DataDependentSize(Rule):
    """## What it does
    Flags, on a per-step path, a slice or an allocation whose size comes from tensor data: `x[:n]`,
    `x[s:s + n]`, `x.narrow(0, s, n)`, `torch.zeros(n, device=...)`, `x.new_zeros(bs, n)` where `n`
    is `t.item()`, `int(t)`, `t.max()`, an element of a tensor (`lens[i]`, `counts[0]` of
    `t.tolist()`), or computed from one. Sizes from shapes (`x.shape[0]`, `x.size(1)`, `len(batch)`)
    and Python config values are not reported, nor a size read from the data only to default a
    parameter the caller left out (`if n is None: n = int(t.max()) + 1`). A Python int read from
    the data is reported once per function; a size that is still a device tensor
    (`n = lens.max() + 1`) is reported at every use, since each use converts it on the host again.

    ## Why is this bad?
    XLA compiles a program for each set of static shapes, and a slice bound or an allocation size is
    baked into the graph as a constant. Every distinct value read from the data is a new graph to
    trace and compile (measured: three values, three compilations), and reading the value from a
    device tensor is itself a host sync (`aten::_local_scalar_dense`) that cuts the step in two.

    ## Example
    ```python
    def forward(self, x, lengths):
        n = int(lengths.max())
        return self.encoder(x[:, :n])
    ```

    Use instead:
    ```python
    def forward(self, x, lengths):
        # keep the static length and mask the padding
        mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
        return self.encoder(x, mask=mask)
    ```

    For a window at a data-dependent offset, gather a fixed length:
    `x.index_select(0, s + torch.arange(L, device=x.device))`.
    """

    code, name, category = "XLA313", "data-dependent-size", "varying_shape"
    evidence = ("step",)
    summary = "{what} takes its size from tensor data on a per-step path: one compilation per distinct value"
    hint = "keep a static size (the padded length, a fixed bound or bucket) and mask; gather a fixed-length window with `index_select(0, s + torch.arange(L))`"

    VALID = [
        Valid(
            """
            def forward(self, x):
                height, width = x.shape[-2:]
                rope_sizes = [height // self.patch, width // self.patch]
                grids = [torch.arange(rope_sizes[i], device=x.device) for i in range(2)]
                return self.rope(x, grids)
            """
        ),
        Valid(
            """
            def forward(self, x):
                n = x.shape[1]
                return self.cos_cached[:n] * x
            """
        ),
        Valid(
            """
            def forward(self, x, lengths):
                mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
                return self.encoder(x, mask=mask)
            """
        ),
        Valid(
            """
            def collate(batch):
                lengths = torch.tensor([len(b) for b in batch])
                out = torch.zeros(len(batch), int(lengths.max()))  # host data in a collator, not per step
                return out
            """
        ),
        Valid(
            """
            for step, batch in enumerate(loader):
                loss = model(batch["x"][: args.max_len]).loss  # a Python config value
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            def forward(self, x, lengths):
                if x.device.type == "cuda":
                    return self.encoder(x[:, : int(lengths.max())])
                return self.encoder(x)
            """
        ),
        Valid(
            """
            def forward(self, labels, num_classes=None):
                if num_classes is None:  # a default the caller can pass instead
                    num_classes = int(labels.max()) + 1
                return torch.zeros(labels.shape[0], num_classes, device=labels.device)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def forward(self, x, lengths):
                n = int(lengths.max())
                return self.encoder(x[:, :n])
            """,
            line=3,
        ),
        Invalid(
            """
            def forward(self, logits, targets, target_lens):
                losses = []
                for i in range(logits.shape[0]):
                    t = targets[i, : target_lens[i]]
                    losses.append(self.criterion(logits[i], t))
                return torch.stack(losses).mean()
            """,
            line=4,
        ),
        Invalid(
            """
            def forward(self, feats, assign):
                counts = torch.bincount(assign, minlength=self.n).tolist()
                slots = feats.new_zeros(self.n, counts[0], feats.shape[-1])  # one finding per source
                extra = feats.new_zeros(self.n, counts[0])
                return slots, extra
            """,
            line=3,
        ),
        Invalid(
            """
            for batch in loader:
                keep = batch["valid"].sum().item()
                out = model(batch["x"].narrow(0, 0, keep))
                out.loss.backward()
                optimizer.step()
            """,
            line=3,
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # (node, function, key, what) per hot finding; `finish` keeps the first per function and key
        self._found: list[tuple[ast.AST, ast.AST, ast.AST | int, str]] = []

    def visit_Subscript(self, node: ast.Subscript) -> None:
        bounds: list[ast.expr] = []
        for element in subscript_indices(node):
            if isinstance(element, ast.Slice):
                bounds.extend(b for b in (element.lower, element.upper) if b is not None)
        if not bounds:
            return
        if not self.ctx.on_device(node.value):
            return
        for bound in bounds:
            source = _data_dependent(self.ctx, bound)
            if source is not None:
                self._report(node, source, bound, f"slicing `{_short(self.ctx, node)}`")
                return

    def visit_Call(self, node: ast.Call) -> None:
        method = method_name(node)
        sizes: list[ast.expr] = []
        what = None
        if method == "narrow":
            args = positional(node)
            if len(args) >= 3 and self.ctx.tensor_kind(receiver(node)) not in (Kind.NOT_TENSOR, Kind.CPU):
                sizes = [args[1], args[2]]
                what = "`.narrow(...)`"
        elif method in NEW_SIZED - {"new_tensor"}:
            if self.ctx.tensor_kind(receiver(node)) not in (Kind.NOT_TENSOR, Kind.CPU):
                sizes = self._size_args(node, positional(node)[1:] if method == "new_full" else positional(node))
                what = f"`.{method}(...)`"
        else:
            qualified = self.ctx.qualified_name(node.func) or ""
            head, _, tail = qualified.rpartition(".")
            if head == "torch" and tail in SIZED_FACTORIES and self.ctx.tensor_kind(node).on_device:
                args = positional(node)
                if tail == "full":
                    args = args[:1]
                elif tail == "randint":
                    args = args[-1:]
                sizes = self._size_args(node, args)
                what = f"`torch.{tail}(...)`"
        if what is None:
            return
        for size in sizes:
            source = _data_dependent(self.ctx, size)
            if source is not None:
                self._report(node, source, size, what)
                return

    @staticmethod
    def _size_args(node: ast.Call, args: list[ast.expr]) -> list[ast.expr]:
        values = list(args)
        size = keyword(node, "size")
        if size is not None:
            values.append(size.value)
        flat: list[ast.expr] = []
        for v in values:
            if isinstance(v, (ast.Tuple, ast.List)):
                flat.extend(e.value if isinstance(e, ast.Starred) else e for e in v.elts)
            else:
                flat.append(v)
        return flat

    def _report(self, node: ast.expr, source: ast.AST, size: ast.expr, what: str) -> None:
        if not self.ctx.runs_hot(node):
            return
        # a size that is still a device tensor is converted to an int (a host read) at every use, so
        # every line using it is a finding; a Python int read once varies the shape, reported at its
        # first use
        scope = enclosing(self.ctx, node, (*FUNCTIONS, ast.Module))
        key = node.lineno if self.ctx.tensor_kind(size).on_device else source
        self._found.append((node, scope, key, what))

    def finish(self) -> None:
        # calls and subscripts are visited type by type: "first" must mean first in the source
        seen: set[tuple[ast.AST, ast.AST | int]] = set()
        for node, func, key, what in sorted(self._found, key=lambda found: self.ctx.index.order[found[0]]):
            if (func, key) not in seen:
                seen.add((func, key))
                self.report(node, self.summary.format(what=what))


def _short(ctx, node: ast.Subscript) -> str:
    text = ctx.code(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_tensor(ctx, expr: ast.expr) -> bool:
    """A tensor whose values are data: on a device, on the host, or of unknown device."""
    return ctx.tensor_kind(expr) >= Kind.CPU


def _data_dependent(ctx, expr: ast.expr, depth: int = 0) -> ast.AST | None:
    """The node the value of `expr` was read from when `expr` is an integer taken from tensor data
    (`t.item()`, `int(t)`, `t.max()`, `lens[i]`, `t.tolist()[0]`, or arithmetic on one); else None."""
    if depth > 6:
        return None
    if isinstance(expr, ast.UnaryOp):
        return _data_dependent(ctx, expr.operand, depth + 1)
    if isinstance(expr, ast.BinOp):
        return _data_dependent(ctx, expr.left, depth + 1) or _data_dependent(ctx, expr.right, depth + 1)
    if isinstance(expr, ast.IfExp):
        return _data_dependent(ctx, expr.body, depth + 1) or _data_dependent(ctx, expr.orelse, depth + 1)
    if isinstance(expr, ast.Name):
        return _name_source(ctx, expr, depth)
    if isinstance(expr, ast.Subscript):
        return _subscript_source(ctx, expr, depth)
    if isinstance(expr, ast.Call):
        return _call_source(ctx, expr, depth)
    return None  # literals; attributes: `x.shape`, `self.max_len`, `cfg.seq_len` are shapes and configuration


def _name_source(ctx, name: ast.Name, depth: int) -> ast.AST | None:
    # `if num_classes is None: num_classes = int(t.max()) + 1` computes a default the caller can
    # pass instead: a size from the data only for callers that leave it out (not reported)
    values = [v for v in ctx.reaching_values(name) if not _default_for_missing(ctx, name, v)]
    if values:
        for value in values:
            value = _unpacked(ctx, name.id, value)
            source = _data_dependent(ctx, value, depth + 1)
            if source is not None:
                return source
        return None
    param = ctx.parameter(name)
    if param is not None:
        annotation = ctx.code(param.annotation) if param.annotation is not None else ""
        return param if "Tensor" in annotation else None
    return None


def _default_for_missing(ctx, name: ast.Name, value: ast.expr) -> bool:
    """`value` is assigned to the parameter `name` only when the call left it out (or passed None)."""
    func = ctx.index.enclosing_function(value)
    return func is not None and ctx.parameter(name) is not None and only_without(ctx, value, func, [name.id]) == name.id


def _unpacked(ctx, name: str, value: ast.expr) -> ast.expr:
    """For `a, b = x, y`, the element bound to `name`."""
    assign = ctx.parent(value)
    if isinstance(assign, ast.Assign) and isinstance(value, ast.Tuple) and len(assign.targets) == 1:
        target = assign.targets[0]
        if isinstance(target, ast.Tuple) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                if isinstance(t, ast.Name) and t.id == name:
                    return v
    return value


def _lengthy(ctx, expr: ast.expr) -> bool:
    """A per-sample length/count container of unknown type named like one (`lens`, `counts`)."""
    name = dotted_name(expr)
    if not name or not _LENGTHY.search(last_part(name)) or ctx.tensor_kind(expr) == Kind.NOT_TENSOR:
        return False
    # `sizes = [h // p, w // p]`: a list built right here holds what it was built from
    values = ctx.assigned_values(expr)
    return not (
        values
        and all(
            isinstance(v, (ast.List, ast.Tuple)) and not any(_data_dependent(ctx, e) for e in v.elts) for v in values
        )
    )


def _subscript_source(ctx, expr: ast.Subscript, depth: int) -> ast.AST | None:
    base = expr.value
    if isinstance(base, ast.Attribute) and base.attr == "shape":
        return None
    if isinstance(base, ast.Call) and method_name(base) in _SHAPE_METHODS:
        return None
    if any(isinstance(e, ast.Slice) for e in subscript_indices(expr)):
        return None
    if _is_tensor(ctx, base) or _lengthy(ctx, base):
        return _root(ctx, base) or expr
    return _data_dependent(ctx, base, depth + 1)


def _root(ctx, expr: ast.expr) -> ast.AST | None:
    """A stable node for the tensor spelled `expr` (its assignment, or its parameter)."""
    if isinstance(expr, ast.Name):
        values = ctx.reaching_values(expr)
        if values:
            return values[0]
        return ctx.parameter(expr)
    return None


def _call_source(ctx, call: ast.Call, depth: int) -> ast.AST | None:
    func = dotted_name(call.func)
    args = arg_values(call)
    if func in ("int", "float", "round", "math.ceil", "math.floor", "abs") and args:
        arg = args[0]
        deeper = _data_dependent(ctx, arg, depth + 1)  # the tensor it was read from, when known
        if deeper is not None:
            return deeper
        return call if _is_tensor(ctx, arg) or _lengthy(ctx, arg) else None
    if func in ("max", "min", "sum"):
        for value in args:
            if isinstance(value, (ast.GeneratorExp, ast.ListComp)):
                value = value.elt
            source = _data_dependent(ctx, value, depth + 1)
            if source is not None:
                return source
        return None
    method = method_name(call)
    if method in _TENSOR_SCALAR_METHODS:
        recv = receiver(call)
        if recv is None:
            return None  # (never: a method call has a receiver)
        deeper = _data_dependent(ctx, recv, depth + 1)
        if deeper is not None:
            return deeper
        if _is_tensor(ctx, recv) or _lengthy(ctx, recv):
            return _root(ctx, recv) or call
        if method in _TENSOR_ONLY_READS and ctx.tensor_kind(recv) != Kind.NOT_TENSOR:
            return _root(ctx, recv) or call  # `.item()`, `.int()` exist only on tensors (and arrays)
        return None
    return None
