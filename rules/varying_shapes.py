"""Shapes that change from step to step: batches padded to their own longest example, and sizes
read from tensor data (a new compiled graph for every distinct value)."""

from __future__ import annotations

import re

import libcst as cst

from xlalint.analysis.names import dotted_name, keyword, last_part, method_name, positional, receiver, string_value
from xlalint.analysis.tensors import Kind
from xlalint.rule import Invalid, Rule, Valid

from ._common import code

# -- shared helpers ------------------------------------------------------------------------------

# Functions that pad a list of sequences to the longest one in it (no fixed target length).
_PAD_TO_LONGEST_FUNCS = {
    "torch.nn.utils.rnn.pad_sequence": "pad_sequence",
    "pad_sequence": "pad_sequence",
    "batch_pad_right": "batch_pad_right",  # speechbrain.utils.data_utils
    "speechbrain.utils.data_utils.batch_pad_right": "batch_pad_right",
}
# Keywords that fix the padded length or round it up to a bucket.
_FIXED_LENGTH_KEYWORDS = ("pad_to_multiple_of", "pad_to_length", "pad_to_multiple", "padding_length", "total_length")
_COLLATOR_CLASS = re.compile(r"Collat|Batch|Padd", re.I)
_COLLATE_FUNCTION = re.compile(r"collat|^__call__$|(^|_)batchify|(^|_)pad_batch", re.I)
_HF_PADDING_COLLATORS = {"DataCollatorWithPadding", "DataCollatorForTokenClassification", "DataCollatorForSeq2Seq",
                         "DataCollatorForMultipleChoice", "DataCollatorForLanguageModeling",
                         "DataCollatorForWholeWordMask", "DataCollatorForPermutationLanguageModeling",
                         "DataCollatorSpeechSeq2SeqWithPadding", "DataCollatorCTCWithPadding"}
# collators whose `padding` defaults to False / which pad only with pad_to_multiple_of
_HF_NO_PADDING_DEFAULT = {"DataCollatorForLanguageModeling", "DataCollatorForWholeWordMask",
                          "DataCollatorForPermutationLanguageModeling"}
_TOKENIZER_CALLEE = re.compile(r"(^|_)(tokenizer|tokeniser|tok|processor|feature_extractor)s?$", re.I)
_TOKENIZER_METHODS = {"pad", "encode_plus", "batch_encode_plus", "__call__", "apply_chat_template"}


def _longest_padding(value: cst.BaseExpression) -> bool:
    """`True`, `"longest"`, `PaddingStrategy.LONGEST`: pad to the longest sequence of the batch."""
    if isinstance(value, cst.Name):
        return value.value == "True"
    if string_value(value) == "longest":
        return True
    return last_part(dotted_name(value)) == "LONGEST"


def _fixed_padding(call: cst.Call) -> bool:
    """The call pads to a fixed length or a bucket: `padding="max_length"`, `pad_to_multiple_of=`..."""
    if any(keyword(call, k) is not None for k in _FIXED_LENGTH_KEYWORDS):
        return True
    padding = keyword(call, "padding")
    return padding is not None and not _longest_padding(padding.value)


def _enclosing(ctx, node: cst.CSTNode, kind):
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, kind):
            return anc
    return None


def _in_collate_path(ctx, node: cst.CSTNode) -> bool:
    """`node` builds a batch: a collate function (by name, or passed as `collate_fn=`), or a method of
    a collator / batch class."""
    func = _enclosing(ctx, node, cst.FunctionDef)
    if func is None:
        return False
    name = func.name.value
    if name in ctx.collate_functions:
        return True
    cls = ctx.index.enclosing_class(func)
    if cls is not None and _COLLATOR_CLASS.search(cls.name.value) and (name in ("__call__", "__init__") or
                                                                       _COLLATE_FUNCTION.search(name)):
        return True
    return bool(_COLLATE_FUNCTION.search(name)) and name != "__call__"


# -- XLA312 ----------------------------------------------------------------------------------------


class PadToLongestInBatch(Rule):
    """## What it does
    Flags batches padded to their own longest example instead of a fixed length or a bucket:
    collator classes whose `padding` defaults to `True`/`"longest"` (with no `pad_to_multiple_of`
    default), `DataCollatorWithPadding(...)`-style constructions without `padding="max_length"` or
    `pad_to_multiple_of`, tokenizer calls with `padding=True`/`"longest"`, `pad_sequence(...)` (or a
    pad-to-longest function such as `batch_pad_right`) in a collate path, and
    `max_len = max(len(x) for x in batch)` used to size a padded torch tensor.

    ## Why is this bad?
    The sequence length of the batch then changes from step to step. XLA compiles one program per
    input shape, so every new length traces and compiles the whole training step again (measured:
    a new batch shape cost a 6.9 s compile against a 38 ms step, 185x) until every length seen in
    the data has been compiled once. With `padding=True`, `max_length` only truncates: the batch is
    still padded to its longest example.

    ## Example
    ```python
    collator = DataCollatorWithPadding(tokenizer)
    train_loader = DataLoader(train_set, batch_size=32, collate_fn=collator, drop_last=True)
    ```

    Use instead:
    ```python
    collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=512)
    # or a few buckets: DataCollatorWithPadding(tokenizer, pad_to_multiple_of=128)
    train_loader = DataLoader(train_set, batch_size=32, collate_fn=collator, drop_last=True)
    ```

    ## Known problems
    Padding to a fixed length changes the model's inputs (more padding tokens): it is exact only when
    the model honours the attention/padding mask, so no automatic fix is offered.
    """

    code, name, category = "XLA312", "pad-to-longest-in-batch", "varying_shape"
    summary = "{what} pads each batch to its own longest example: a new sequence length, and a recompilation, per batch"
    hint = "pad to a fixed length (`padding=\"max_length\", max_length=L`) or to a few buckets (`pad_to_multiple_of=N`)"

    VALID = [
        Valid(
            """
            collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=512)
            seq2seq = DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=64)
            """
        ),
        Valid(
            """
            def collate_fn(examples):
                return tokenizer.pad(examples, padding="max_length", max_length=128, return_tensors="pt")
            """
        ),
        Valid(
            """
            def collate_fn(examples):
                if accelerator.distributed_type == DistributedType.XLA:
                    return tokenizer.pad(examples, padding="max_length", max_length=128, return_tensors="pt")
                return tokenizer.pad(examples, padding="longest", return_tensors="pt")  # never on XLA
            """
        ),
        Valid(
            """
            @dataclass
            class BucketCollator:
                tokenizer: PreTrainedTokenizerBase
                padding: bool | str = True
                pad_to_multiple_of: int | None = 64  # buckets of 64 tokens

                def __call__(self, features):
                    return self.tokenizer.pad(features, padding=self.padding, pad_to_multiple_of=self.pad_to_multiple_of)
            """
        ),
        Valid(
            """
            def collate(batch):
                width = max(len(x) for x in batch)
                print(f"longest example: {width}")  # only reported, not used as a size
                return torch.stack([torch.tensor(x[:64]) for x in batch])
            """
        ),
        Valid(
            """
            class Encoder(nn.Module):
                def forward(self, chunks):
                    # not a collate path: the list of chunks has a fixed structure
                    return self.rnn(pad_sequence(chunks, batch_first=True))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            collator = DataCollatorWithPadding(tokenizer)
            train_loader = DataLoader(train_set, batch_size=32, collate_fn=collator, drop_last=True)
            """,
            line=1,
        ),
        Invalid(
            """
            @dataclass
            class PaddingCollator:
                tokenizer: PreTrainedTokenizerBase
                padding: bool | str = True
                max_length: int | None = None

                def __call__(self, features):
                    return self.tokenizer.pad(features, padding=self.padding, max_length=self.max_length)
            """,
            line=4,
        ),
        Invalid(
            """
            def collate_batch(samples):
                tokens = pad_sequence([s["tokens"] for s in samples], batch_first=True, padding_value=0)
                return tokens, torch.tensor([s["label"] for s in samples])
            """,
            line=2,
        ),
        Invalid(
            """
            def encode(texts):
                return tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
            """,
            line=2,
        ),
        Invalid(
            """
            def collate(examples, pad_id):
                max_len = max(x.size(0) for x in examples)
                out = examples[0].new_full((len(examples), max_len), pad_id)
                for i, x in enumerate(examples):
                    out[i, : x.size(0)] = x
                return out
            """,
            line=2,
        ),
        Invalid(
            """
            class PaddedBatch:
                def __init__(self, examples, padding_func=batch_pad_right):
                    self.data = padding_func([e["wav"] for e in examples])
            """,
            line=2,
        ),
    ]

    # -- collator classes: `padding: ... = True` fields and `padding=True` parameters ---------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if not _COLLATOR_CLASS.search(node.name.value) and not self._pads_with_self_padding(node):
            return
        fields: dict[str, cst.BaseExpression] = {}
        spots: dict[str, cst.CSTNode] = {}
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
        for statement in body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
                        fields[small.target.value] = small.value
                        spots[small.target.value] = small
                    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                            isinstance(small.targets[0].target, cst.Name):
                        fields[small.targets[0].target.value] = small.value
                        spots[small.targets[0].target.value] = small
            elif isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
                for param in (*statement.params.params, *statement.params.kwonly_params):
                    if param.default is not None:
                        fields.setdefault(param.name.value, param.default)
                        spots.setdefault(param.name.value, param)
        padding = fields.get("padding")
        if padding is None or not _longest_padding(padding):
            return
        for name in _FIXED_LENGTH_KEYWORDS:
            value = fields.get(name)
            if value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
                return
        if self.ctx.in_non_xla_code(node):
            return
        self.report(spots["padding"], self.summary.format(what=f"`{node.name.value}` (default `padding={code(padding)}`)"))

    def _pads_with_self_padding(self, node: cst.ClassDef) -> bool:
        for call in self.ctx.calls_within(node):
            padding = keyword(call, "padding")
            if padding is not None and dotted_name(padding.value) == "self.padding":
                return True
        return False

    # -- parameters defaulting to a pad-to-longest function ----------------------------------------
    def visit_Param(self, node: cst.Param) -> None:
        if node.default is None:
            return
        func = self._pad_function(node.default)
        if func is None or self.ctx.in_non_xla_code(node):
            return
        self.report(node, self.summary.format(what=f"the default `{func}`"))

    def _pad_function(self, expr: cst.BaseExpression) -> str | None:
        name = dotted_name(expr)
        if not name:
            return None
        qualified = self.ctx.qualified_name(expr) or name
        return _PAD_TO_LONGEST_FUNCS.get(qualified) or (
            _PAD_TO_LONGEST_FUNCS.get(last_part(qualified)) if last_part(qualified) == "batch_pad_right" else None)

    # -- calls ----------------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        what = self._call_finding(node)
        if what is None or self.ctx.in_non_xla_code(node):
            return
        self.report(node, self.summary.format(what=what))

    def _call_finding(self, node: cst.Call) -> str | None:
        if any(a.star == "**" for a in node.args):
            return None  # `**kwargs` may carry `pad_to_multiple_of`
        name = dotted_name(node.func) or ""
        callee = last_part(name)
        if callee in _HF_PADDING_COLLATORS:
            if _fixed_padding(node):
                return None
            padding = keyword(node, "padding")
            if callee in _HF_NO_PADDING_DEFAULT and padding is None:
                if callee == "DataCollatorForLanguageModeling":
                    return f"`{callee}(...)` without `pad_to_multiple_of`"
                return None
            if padding is not None and not _longest_padding(padding.value):
                return None
            return f"`{callee}(...)`"
        func = self._pad_function(node.func)
        if func == "pad_sequence" and _in_collate_path(self.ctx, node) and not _fixed_padding(node):
            return "`pad_sequence(...)` in a collate function"
        if func == "batch_pad_right" and _in_collate_path(self.ctx, node):
            return "`batch_pad_right(...)` in a collate function"
        padding = keyword(node, "padding")
        if padding is not None and _longest_padding(padding.value) and not _fixed_padding(node) and \
                self._tokenizer_call(node):
            return f"`padding={code(padding.value)}`"
        return None

    def _tokenizer_call(self, node: cst.Call) -> bool:
        name = dotted_name(node.func)
        if name and _TOKENIZER_CALLEE.search(last_part(name)):
            return True  # tokenizer(texts, padding=True)
        method = method_name(node)
        if method in _TOKENIZER_METHODS:
            recv = dotted_name(receiver(node))
            return bool(recv) and bool(_TOKENIZER_CALLEE.search(last_part(recv)))
        return False

    # -- `max_len = max(len(x) for x in batch)` sizing a torch tensor -----------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        if not _batch_max(self.ctx, node.value):
            return
        target = node.targets[0].target.value
        func = _enclosing(self.ctx, node, cst.FunctionDef)
        if func is None or self.ctx.in_non_xla_code(node):
            return
        if not _sizes_torch_tensor(self.ctx, func, node, target):
            return
        self.report(node.value, self.summary.format(what=f"`{target} = {code(node.value)}`"))


_LEN_OF = re.compile(r"^(len\(\w+\)|\w+\.size\((0|dim=0)?\)|\w+\.shape\[0\]|\w+\.numel\(\))$")


def _batch_max(ctx, value: cst.BaseExpression) -> bool:
    """`max(len(x) for x in batch)`, `max(x.size(0) for x in examples)`, `max(lengths)` where lengths
    is a list of such lengths."""
    if not isinstance(value, cst.Call) or dotted_name(value.func) != "max" or len(value.args) != 1:
        return False
    arg = value.args[0].value
    if isinstance(arg, (cst.GeneratorExp, cst.ListComp)):
        return bool(_LEN_OF.match(code(arg.elt))) and arg.for_in.inner_for_in is None
    if isinstance(arg, cst.Name):
        for v in ctx.reaching_values(arg):
            if isinstance(v, cst.ListComp) and _LEN_OF.match(code(v.elt)):
                return True
    return False


_TORCH_SIZED = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange"}
_NEW_SIZED = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


def _sizes_torch_tensor(ctx, func: cst.FunctionDef, assign: cst.Assign, name: str) -> bool:
    """`name` (assigned by `assign`) is used, in `func`, as a size of a torch allocation or of an
    `F.pad`, and is not rounded up to a bucket unconditionally before."""
    order = ctx.index.order
    start = order.get(id(assign), 0)
    # an unconditional re-assignment in the same block (`n = ceil(n / 64) * 64`) buckets the size
    block = ctx.parent(ctx.parent(assign))
    if isinstance(block, (cst.IndentedBlock, cst.Module)):
        for statement in block.body:
            if order.get(id(statement), 0) <= start or not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, (cst.Assign, cst.AugAssign)) and name in code(small).split("=")[0]:
                    return False
    for call in ctx.calls_within(func.body):
        if order.get(id(call), 0) <= start:
            continue
        if not any(name in _names_in(a.value) for a in call.args):
            continue
        qualified = ctx.qualified_name(call.func) or ""
        head, _, tail = qualified.rpartition(".")
        if head == "torch" and tail in _TORCH_SIZED:
            return True
        if method_name(call) in _NEW_SIZED:
            return True
        if qualified in ("torch.nn.functional.pad", "F.pad"):
            return True
    return False


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        stack.extend(current.children)
    return found


# -- XLA313 ----------------------------------------------------------------------------------------

_LENGTHY = re.compile(r"(^|_)(lens|lengths|seq_lens|seqlens|sizes|counts|ntokens|n_tokens|num_tokens)$", re.I)
_TENSOR_ONLY_READS = {"item", "tolist", "int", "long"}
_TENSOR_SCALAR_METHODS = {"max", "min", "sum", "amax", "amin", "int", "long", "round", "ceil", "floor", "item",
                          "tolist", "count_nonzero", "argmax", "argmin", "cumsum", "prod"}
_SHAPE_METHODS = {"size", "dim", "numel", "nelement", "ndimension", "__len__"}
_TORCH_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint"}


class DataDependentSize(Rule):
    """## What it does
    Flags, on a per-step path, a slice or an allocation whose size comes from tensor data: `x[:n]`,
    `x[s:s + n]`, `x.narrow(0, s, n)`, `torch.zeros(n, device=...)`, `x.new_zeros(bs, n)` where `n`
    is `t.item()`, `int(t)`, `t.max()`, an element of a tensor (`lens[i]`, `counts[0]` of
    `t.tolist()`), or computed from one. Sizes from shapes (`x.shape[0]`, `x.size(1)`, `len(batch)`)
    and Python config values are not reported. One finding per data-dependent value and function.

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
    summary = "{what} takes its size from tensor data on a per-step path: one compilation per distinct value"
    hint = "keep a static size (the padded length, a fixed bound or bucket) and mask; gather a fixed-length window with `index_select(0, s + torch.arange(L))`"

    VALID = [
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
        self._seen: set[tuple[int, int]] = set()

    def visit_Subscript(self, node: cst.Subscript) -> None:
        bounds = []
        for element in node.slice:
            if isinstance(element.slice, cst.Slice):
                bounds.extend(b for b in (element.slice.lower, element.slice.upper) if b is not None)
        if not bounds:
            return
        if not self.ctx.on_device(node.value):
            return
        for bound in bounds:
            source = _data_dependent(self.ctx, bound)
            if source is not None:
                self._report(node, source, f"slicing `{_short(node)}`")
                return

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        sizes: list[cst.BaseExpression] = []
        what = None
        if method == "narrow":
            args = positional(node)
            if len(args) >= 3 and self.ctx.tensor_kind(receiver(node)) not in (Kind.NOT_TENSOR, Kind.CPU):
                sizes = [args[1].value, args[2].value]
                what = f"`.narrow(...)`"
        elif method in _NEW_SIZED - {"new_tensor"}:
            if self.ctx.tensor_kind(receiver(node)) not in (Kind.NOT_TENSOR, Kind.CPU):
                sizes = self._size_args(node, positional(node)[1:] if method == "new_full" else positional(node))
                what = f"`.{method}(...)`"
        else:
            qualified = self.ctx.qualified_name(node.func) or ""
            head, _, tail = qualified.rpartition(".")
            if head == "torch" and tail in _TORCH_FACTORIES and self.ctx.tensor_kind(node).on_device:
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
                self._report(node, source, what)
                return

    @staticmethod
    def _size_args(node: cst.Call, args: list[cst.Arg]) -> list[cst.BaseExpression]:
        values = [a.value for a in args]
        size = keyword(node, "size")
        if size is not None:
            values.append(size.value)
        flat: list[cst.BaseExpression] = []
        for v in values:
            if isinstance(v, (cst.Tuple, cst.List)):
                flat.extend(e.value for e in v.elements)
            else:
                flat.append(v)
        return flat

    def _report(self, node: cst.CSTNode, source: cst.CSTNode, what: str) -> None:
        if not self.ctx.runs_hot(node):
            return
        func = _enclosing(self.ctx, node, (cst.FunctionDef, cst.Module))
        key = (id(func), id(source))
        if key in self._seen:
            return
        self._seen.add(key)
        self.report(node, self.summary.format(what=what))


def _short(node: cst.Subscript) -> str:
    text = code(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_tensor(ctx, expr: cst.BaseExpression) -> bool:
    """A tensor whose values are data: on a device, on the host, or of unknown device."""
    return ctx.tensor_kind(expr) >= Kind.CPU


def _data_dependent(ctx, expr: cst.BaseExpression, depth: int = 0) -> cst.CSTNode | None:
    """The node the value of `expr` was read from when `expr` is an integer taken from tensor data
    (`t.item()`, `int(t)`, `t.max()`, `lens[i]`, `t.tolist()[0]`, or arithmetic on one); else None."""
    if depth > 6:
        return None
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return None
    if isinstance(expr, (cst.UnaryOperation,)):
        return _data_dependent(ctx, expr.expression, depth + 1)
    if isinstance(expr, cst.BinaryOperation):
        return _data_dependent(ctx, expr.left, depth + 1) or _data_dependent(ctx, expr.right, depth + 1)
    if isinstance(expr, cst.IfExp):
        return _data_dependent(ctx, expr.body, depth + 1) or _data_dependent(ctx, expr.orelse, depth + 1)
    if isinstance(expr, cst.Name):
        return _name_source(ctx, expr, depth)
    if isinstance(expr, cst.Attribute):
        return None  # `x.shape`, `self.max_len`, `cfg.seq_len`: shapes and configuration
    if isinstance(expr, cst.Subscript):
        return _subscript_source(ctx, expr, depth)
    if isinstance(expr, cst.Call):
        return _call_source(ctx, expr, depth)
    return None


def _name_source(ctx, name: cst.Name, depth: int) -> cst.CSTNode | None:
    if name.value in ("True", "False", "None"):
        return None
    values = ctx.reaching_values(name)
    if values:
        for value in values:
            value = _unpacked(ctx, name.value, value)
            source = _data_dependent(ctx, value, depth + 1)
            if source is not None:
                return source
        return None
    param = ctx.parameter(name)
    if param is not None:
        annotation = code(param.annotation.annotation) if param.annotation is not None else ""
        return param if "Tensor" in annotation else None
    return None


def _unpacked(ctx, name: str, value: cst.BaseExpression) -> cst.BaseExpression:
    """For `a, b = x, y`, the element bound to `name`."""
    assign = ctx.parent(value)
    if isinstance(assign, cst.Assign) and isinstance(value, cst.Tuple) and len(assign.targets) == 1:
        target = assign.targets[0].target
        if isinstance(target, cst.Tuple) and len(target.elements) == len(value.elements):
            for t, v in zip(target.elements, value.elements):
                if isinstance(t.value, cst.Name) and t.value.value == name:
                    return v.value
    return value


def _lengthy(ctx, expr: cst.BaseExpression) -> bool:
    """A per-sample length/count container of unknown type named like one (`lens`, `counts`)."""
    name = dotted_name(expr)
    return bool(name) and bool(_LENGTHY.search(last_part(name))) and ctx.tensor_kind(expr) != Kind.NOT_TENSOR


def _subscript_source(ctx, expr: cst.Subscript, depth: int) -> cst.CSTNode | None:
    base = expr.value
    if isinstance(base, cst.Attribute) and base.attr.value == "shape":
        return None
    if isinstance(base, cst.Call) and method_name(base) in _SHAPE_METHODS:
        return None
    if any(isinstance(e.slice, cst.Slice) for e in expr.slice):
        return None
    if _is_tensor(ctx, base) or _lengthy(ctx, base):
        return _root(ctx, base) or expr
    return _data_dependent(ctx, base, depth + 1)


def _root(ctx, expr: cst.BaseExpression) -> cst.CSTNode | None:
    """A stable node for the tensor spelled `expr` (its assignment, or its parameter)."""
    if isinstance(expr, cst.Name):
        values = ctx.reaching_values(expr)
        if values:
            return values[0]
        return ctx.parameter(expr)
    return None


def _call_source(ctx, call: cst.Call, depth: int) -> cst.CSTNode | None:
    func = dotted_name(call.func)
    if func in ("int", "float", "round", "math.ceil", "math.floor", "abs") and call.args:
        arg = call.args[0].value
        deeper = _data_dependent(ctx, arg, depth + 1)  # the tensor it was read from, when known
        if deeper is not None:
            return deeper
        return call if _is_tensor(ctx, arg) or _lengthy(ctx, arg) else None
    if func in ("max", "min", "sum") and call.args:
        for a in call.args:
            value = a.value
            if isinstance(value, (cst.GeneratorExp, cst.ListComp)):
                value = value.elt
            source = _data_dependent(ctx, value, depth + 1)
            if source is not None:
                return source
        return None
    method = method_name(call)
    if method in _TENSOR_SCALAR_METHODS:
        recv = receiver(call)
        deeper = _data_dependent(ctx, recv, depth + 1)
        if deeper is not None:
            return deeper
        if _is_tensor(ctx, recv) or _lengthy(ctx, recv):
            return _root(ctx, recv) or call
        if method in _TENSOR_ONLY_READS and ctx.tensor_kind(recv) != Kind.NOT_TENSOR:
            return _root(ctx, recv) or call  # `.item()`, `.int()` exist only on tensors (and arrays)
        return None
    return None
