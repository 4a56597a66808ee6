"""Shapes that change from step to step: batches padded to their own longest example, and sizes
read from tensor data (a new compiled graph for every distinct value)."""

from __future__ import annotations

import ast
import re

from xlalint.analysis.index import COMPREHENSIONS, FUNCTIONS, LOOPS
from xlalint.analysis.names import dotted_name, is_constant, keyword, last_part, method_name, param_default
from xlalint.analysis.names import positional, receiver, string_value, subscript_indices
from xlalint.analysis.reads import only_without
from xlalint.analysis.tensors import Kind
from xlalint.rule import Invalid, Rule, Valid

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


def _longest_padding(value: ast.expr) -> bool:
    """`True`, `"longest"`, `PaddingStrategy.LONGEST`: pad to the longest sequence of the batch."""
    if is_constant(value, True) or string_value(value) == "longest":
        return True
    return isinstance(value, ast.Attribute) and last_part(dotted_name(value)) == "LONGEST"


def _fixed_padding(call: ast.Call) -> bool:
    """The call pads to a fixed length or a bucket: `padding="max_length"`, `pad_to_multiple_of=`..."""
    if any(keyword(call, k) is not None for k in _FIXED_LENGTH_KEYWORDS):
        return True
    padding = keyword(call, "padding")
    return padding is not None and not _longest_padding(padding.value)


def _enclosing(ctx, node: ast.AST, kind):
    for anc in ctx.index.ancestors(node):
        if isinstance(anc, kind):
            return anc
    return None


def _in_collate_path(ctx, node: ast.AST) -> bool:
    """`node` builds a batch: a collate function (by name, or passed as `collate_fn=`), or a method of
    a collator / batch class."""
    func = _enclosing(ctx, node, FUNCTIONS)
    if func is None:
        return False
    name = func.name
    if name in ctx.collate_functions:
        return True
    cls = ctx.index.enclosing_class(func)
    if cls is not None and _COLLATOR_CLASS.search(cls.name) and (name in ("__call__", "__init__") or
                                                                       _COLLATE_FUNCTION.search(name)):
        return True
    return bool(_COLLATE_FUNCTION.search(name)) and name != "__call__"


_DECODE_METHODS = {"decode", "batch_decode", "convert_ids_to_tokens"}


def _host_only_result(ctx, call: ast.Call, depth: int = 0) -> bool:
    """The padded batch `call` returns never reaches a model: it is assigned to a name (possibly
    through `.input_ids` or `["input_ids"]`) that is only measured (`.shape`, `.size()`, `len()`),
    compared on the host (`torch.equal`) or decoded back to text. A truncation check such as
    `ids = tok(texts, padding="longest").input_ids; if ids.shape[-1] > limit: tok.batch_decode(ids[...])`
    compiles nothing, whatever its length."""
    node: ast.AST = call
    parent = ctx.parent(node)
    while isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node or \
            isinstance(parent, ast.Call) and isinstance(node, ast.Attribute) and node.attr == "to" and \
            parent.func is node:  # `.input_ids`, `["input_ids"]`, `.to(device)`
        node, parent = parent, ctx.parent(parent)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    func = _enclosing(ctx, parent, FUNCTIONS)
    if func is None:
        return False
    return _host_only_uses(ctx, func, parent.targets[0].id, depth)


def _host_only_uses(ctx, func: ast.AST, name: str, depth: int) -> bool:
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    if not uses or depth > 2:
        return False
    for use in uses:
        node, parent = use, ctx.parent(use)
        while isinstance(parent, ast.Subscript) and parent.value is node:  # `ids[i]`, `ids[:, n:]`
            node, parent = parent, ctx.parent(parent)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in ("shape", "ndim"):
            continue
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in ("size", "numel") and \
                isinstance(ctx.parent(parent), ast.Call):
            continue
        if isinstance(parent, ast.Call) and node in parent.args:
            callee = dotted_name(parent.func) or ""
            if callee == "len" or last_part(callee) in _DECODE_METHODS or \
                    (ctx.qualified_name(parent.func) or "") == "torch.equal":
                continue
        if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 and \
                isinstance(parent.targets[0], ast.Name) and parent.targets[0].id != name and \
                _host_only_uses(ctx, func, parent.targets[0].id, depth + 1):
            continue  # `tokens = ids[i][start:]`, then only decoded
        return False
    return True


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
            # module level, outside any loop: one call, one padded shape, one compilation
            prompts = tokenizer(["a prompt", "another prompt"], padding=True, return_tensors="pt")
            """
        ),
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
            def encode(texts, limit):
                ids = tokenizer(texts, padding="max_length", max_length=limit, return_tensors="pt").input_ids
                # padded to the longest only to see what truncation drops: measured and decoded, never run
                full = tokenizer(texts, padding="longest", return_tensors="pt").input_ids.to(device)
                if full.shape[-1] > ids.shape[-1] and not torch.equal(ids, full[:, :limit]):
                    print("truncated:", tokenizer.batch_decode(full[:, limit - 1 : -1]))
                return text_encoder(ids.to(device))
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
            def encode(texts):
                ids = tokenizer(texts, padding="longest", return_tensors="pt").input_ids
                if ids.shape[-1] > 77:
                    print("long prompt")
                return text_encoder(ids.to(device))  # the padded length reaches the model
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
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if not _COLLATOR_CLASS.search(node.name) and not self._pads_with_self_padding(node):
            return
        fields: dict[str, ast.expr] = {}
        spots: dict[str, ast.AST] = {}
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and \
                    statement.value is not None:
                fields[statement.target.id] = statement.value
                spots[statement.target.id] = statement
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                    isinstance(statement.targets[0], ast.Name):
                fields[statement.targets[0].id] = statement.value
                spots[statement.targets[0].id] = statement
            elif isinstance(statement, FUNCTIONS) and statement.name == "__init__":
                for param in (*statement.args.args, *statement.args.kwonlyargs):
                    default = param_default(statement, param)
                    if default is not None:
                        fields.setdefault(param.arg, default)
                        spots.setdefault(param.arg, param)
        padding = fields.get("padding")
        if padding is None or not _longest_padding(padding):
            return
        for name in _FIXED_LENGTH_KEYWORDS:
            value = fields.get(name)
            if value is not None and not is_constant(value, None):
                return
        if self.ctx.in_non_xla_code(node):
            return
        what = f"`{node.name}` (default `padding={self.ctx.code(padding)}`)"
        self.report(spots["padding"], self.summary.format(what=what))

    def _pads_with_self_padding(self, node: ast.ClassDef) -> bool:
        for call in self.ctx.calls_within(node):
            padding = keyword(call, "padding")
            if padding is not None and dotted_name(padding.value) == "self.padding":
                return True
        return False

    # -- parameters defaulting to a pad-to-longest function ----------------------------------------
    def visit_arg(self, node: ast.arg) -> None:
        default = param_default(self.ctx.parent(self.ctx.parent(node)), node)
        if default is None:
            return
        func = self._pad_function(default)
        if func is None or self.ctx.in_non_xla_code(node):
            return
        self.report(node, self.summary.format(what=f"the default `{func}`"))

    def _pad_function(self, expr: ast.expr) -> str | None:
        name = dotted_name(expr)
        if not name:
            return None
        qualified = self.ctx.qualified_name(expr) or name
        return _PAD_TO_LONGEST_FUNCS.get(qualified) or (
            _PAD_TO_LONGEST_FUNCS.get(last_part(qualified)) if last_part(qualified) == "batch_pad_right" else None)

    # -- calls ----------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        what = self._call_finding(node)
        if what is None or self.ctx.in_non_xla_code(node):
            return
        self.report(node, self.summary.format(what=what))

    def _call_finding(self, node: ast.Call) -> str | None:
        if any(k.arg is None for k in node.keywords):
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
                self._tokenizer_call(node) and not _host_only_result(self.ctx, node) and not self._runs_once(node):
            return f"`padding={self.ctx.code(padding.value)}`"
        return None

    def _runs_once(self, node: ast.Call) -> bool:
        """Module-level code outside any loop: one call, one shape, one compilation."""
        return not any(isinstance(a, (*FUNCTIONS, ast.Lambda, *LOOPS, *COMPREHENSIONS))
                       for a in self.ctx.index.ancestors(node))

    def _tokenizer_call(self, node: ast.Call) -> bool:
        name = dotted_name(node.func)
        if name and _TOKENIZER_CALLEE.search(last_part(name)):
            return True  # tokenizer(texts, padding=True)
        method = method_name(node)
        if method in _TOKENIZER_METHODS:
            recv = dotted_name(receiver(node))
            return bool(recv) and bool(_TOKENIZER_CALLEE.search(last_part(recv)))
        return False

    # -- `max_len = max(len(x) for x in batch)` sizing a torch tensor -----------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return
        if not _batch_max(self.ctx, node.value):
            return
        target = node.targets[0].id
        func = _enclosing(self.ctx, node, FUNCTIONS)
        if func is None or self.ctx.in_non_xla_code(node):
            return
        if not _sizes_torch_tensor(self.ctx, func, node, target):
            return
        self.report(node.value, self.summary.format(what=f"`{target} = {self.ctx.code(node.value)}`"))


_LEN_OF = re.compile(r"^(len\(\w+\)|\w+\.size\((0|dim=0)?\)|\w+\.shape\[0\]|\w+\.numel\(\))$")


def _batch_max(ctx, value: ast.expr) -> bool:
    """`max(len(x) for x in batch)`, `max(x.size(0) for x in examples)`, `max(lengths)` where lengths
    is a list of such lengths."""
    if not isinstance(value, ast.Call) or dotted_name(value.func) != "max" or len(_arg_values(value)) != 1:
        return False
    arg = _arg_values(value)[0]
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
        return bool(_LEN_OF.match(ctx.code(arg.elt))) and len(arg.generators) == 1
    if isinstance(arg, ast.Name):
        for v in ctx.reaching_values(arg):
            if isinstance(v, ast.ListComp) and _LEN_OF.match(ctx.code(v.elt)):
                return True
    return False


_TORCH_SIZED = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange"}
_NEW_SIZED = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


def _sizes_torch_tensor(ctx, func: ast.FunctionDef, assign: ast.Assign, name: str) -> bool:
    """`name` (assigned by `assign`) is used, in `func`, as a size of a torch allocation or of an
    `F.pad`, and is not rounded up to a bucket unconditionally before."""
    order = ctx.index.order
    start = order[assign]
    # an unconditional re-assignment in the same block (`n = ceil(n / 64) * 64`) buckets the size
    for statement in getattr(ctx.parent(assign), ctx.index.field_of(assign)):
        if order[statement] > start and isinstance(statement, (ast.Assign, ast.AugAssign)) and \
                name in ctx.code(statement).split("=")[0]:
            return False
    for call in ctx.calls_within(func):
        if order[call] <= start:
            continue
        if not any(name in _names_in(a) for a in _arg_values(call)):
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


def _arg_values(call: ast.Call) -> list[ast.expr]:
    """Every argument's value (`*xs` and `**kw` give `xs` and `kw`): positional ones, then keywords."""
    return [*(a.value if isinstance(a, ast.Starred) else a for a in call.args), *(k.value for k in call.keywords)]


def _names_in(node: ast.AST) -> set[str]:
    """Identifiers in `node`: names, attribute names (`cfg.n` mentions `n`) and keyword names."""
    found: set[str] = set()
    for current in ast.walk(node):
        if isinstance(current, ast.Name):
            found.add(current.id)
        elif isinstance(current, ast.Attribute):
            found.add(current.attr)
        elif isinstance(current, ast.keyword) and current.arg:
            found.add(current.arg)
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
        bounds = []
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

    def _report(self, node: ast.AST, source: ast.AST, size: ast.expr, what: str) -> None:
        if not self.ctx.runs_hot(node):
            return
        # a size that is still a device tensor is converted to an int (a host read) at every use, so
        # every line using it is a finding; a Python int read once varies the shape, reported at its
        # first use
        scope = _enclosing(self.ctx, node, (*FUNCTIONS, ast.Module))
        key = node.lineno if self.ctx.tensor_kind(size).on_device else source
        self._found.append((node, scope, key, what))

    def finish(self) -> None:
        # calls and subscripts are visited type by type: "first" must mean first in the source
        seen: set[tuple[ast.AST, ast.AST]] = set()
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
    return func is not None and ctx.parameter(name) is not None and \
        only_without(ctx, value, func, [name.id]) == name.id


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
    return not (values and all(isinstance(v, (ast.List, ast.Tuple)) and
                               not any(_data_dependent(ctx, e) for e in v.elts) for v in values))


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
    args = _arg_values(call)
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
        deeper = _data_dependent(ctx, recv, depth + 1)
        if deeper is not None:
            return deeper
        if _is_tensor(ctx, recv) or _lengthy(ctx, recv):
            return _root(ctx, recv) or call
        if method in _TENSOR_ONLY_READS and ctx.tensor_kind(recv) != Kind.NOT_TENSOR:
            return _root(ctx, recv) or call  # `.item()`, `.int()` exist only on tensors (and arrays)
        return None
    return None
