"""XLA312 pad-to-longest-in-batch: Flags batches padded to their own longest example instead of a fixed
length or a bucket."""

from __future__ import annotations

import ast
import re

from xlalint.analysis.index import COMPREHENSIONS, FUNCTIONS, LOOPS
from xlalint.analysis.loaders import padded_to_fixed_length
from xlalint.analysis.names import (
    dotted_name,
    is_constant,
    keyword,
    last_part,
    method_name,
    param_default,
    receiver,
    string_value,
)
from xlalint.analysis.vocabulary import SIZED_FACTORIES
from xlalint.rule import Invalid, Rule, Valid

from ._common import NEW_SIZED, arg_values, enclosing

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
_HF_PADDING_COLLATORS = {
    "DataCollatorWithPadding",
    "DataCollatorForTokenClassification",
    "DataCollatorForSeq2Seq",
    "DataCollatorForMultipleChoice",
    "DataCollatorForLanguageModeling",
    "DataCollatorForWholeWordMask",
    "DataCollatorForPermutationLanguageModeling",
    "DataCollatorSpeechSeq2SeqWithPadding",
    "DataCollatorCTCWithPadding",
}
# collators whose `padding` defaults to False / which pad only with pad_to_multiple_of
_HF_NO_PADDING_DEFAULT = {
    "DataCollatorForLanguageModeling",
    "DataCollatorForWholeWordMask",
    "DataCollatorForPermutationLanguageModeling",
}
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


def _in_collate_path(ctx, node: ast.AST) -> bool:
    """`node` builds a batch: a collate function (by name, or passed as `collate_fn=`), or a method of
    a collator / batch class."""
    func = enclosing(ctx, node, FUNCTIONS)
    if func is None:
        return False
    name = func.name
    if name in ctx.collate_functions:
        return True
    cls = ctx.index.enclosing_class(func)
    if (
        cls is not None
        and _COLLATOR_CLASS.search(cls.name)
        and (name in ("__call__", "__init__") or _COLLATE_FUNCTION.search(name))
    ):
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
    while (
        isinstance(parent, (ast.Attribute, ast.Subscript))
        and parent.value is node
        or isinstance(parent, ast.Call)
        and isinstance(node, ast.Attribute)
        and node.attr == "to"
        and parent.func is node
    ):  # `.input_ids`, `["input_ids"]`, `.to(device)`
        node, parent = parent, ctx.parent(parent)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    func = enclosing(ctx, parent, FUNCTIONS)
    if func is None:
        return False
    return _host_only_uses(ctx, func, parent.targets[0].id, depth)


def _host_only_uses(ctx, func: ast.AST, name: str, depth: int) -> bool:
    uses = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    if not uses or depth > 2:
        return False
    node: ast.AST
    for use in uses:
        node, parent = use, ctx.parent(use)
        while isinstance(parent, ast.Subscript) and parent.value is node:  # `ids[i]`, `ids[:, n:]`
            node, parent = parent, ctx.parent(parent)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in ("shape", "ndim"):
            continue
        if (
            isinstance(parent, ast.Attribute)
            and parent.value is node
            and parent.attr in ("size", "numel")
            and isinstance(ctx.parent(parent), ast.Call)
        ):
            continue
        if isinstance(parent, ast.Call) and node in parent.args:
            callee = dotted_name(parent.func) or ""
            if (
                callee == "len"
                or last_part(callee) in _DECODE_METHODS
                or (ctx.qualified_name(parent.func) or "") == "torch.equal"
            ):
                continue
        if (
            isinstance(parent, ast.Assign)
            and parent.value is node
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
            and parent.targets[0].id != name
            and _host_only_uses(ctx, func, parent.targets[0].id, depth + 1)
        ):
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
    pad-to-longest function such as `batch_pad_right`) in a collate path, torchtext's
    `BucketIterator` (unless its `Field`s have a `fix_length`), and
    `max_len = max(len(x) for x in batch)` (or `max(len(t["boxes"]) for t in targets)`) used to size
    a padded torch tensor.

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
    hint = 'pad to a fixed length (`padding="max_length", max_length=L`) or to a few buckets (`pad_to_multiple_of=N`)'

    VALID = [
        Valid(
            """
            def collate(batch):
                tokens = pad_sequence([t for t, _ in batch], batch_first=True)
                return F.pad(tokens, (0, MAX_LEN - tokens.shape[1]))  # one length for every batch
            """
        ),
        Valid(
            """
            def collate_blocks(batch, block_size=128):
                return pad_sequence([ids[s : s + block_size] for ids, s in batch])  # fixed blocks
            """
        ),
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
            from torchtext.legacy import data

            TEXT = data.Field(tokenize="spacy", fix_length=256)  # every batch padded to 256 tokens
            train_iter = data.BucketIterator(train, batch_size=64, sort_key=lambda e: len(e.text))
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
            from torchtext.legacy import data

            TEXT = data.Field(tokenize="spacy", include_lengths=True)
            train_iter, valid_iter = data.BucketIterator.splits((train, valid), batch_size=64, device=device)
            """,
            line=4,
        ),
        Invalid(
            """
            def forward(self, outputs, targets):
                max_objects = max(len(t["boxes"]) for t in targets)
                boxes = outputs["pred_boxes"].new_zeros(len(targets), max_objects, 4)
                for i, t in enumerate(targets):
                    boxes[i, : len(t["boxes"])] = t["boxes"]
                return self.loss(outputs, boxes)
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
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.value is not None
            ):
                fields[statement.target.id] = statement.value
                spots[statement.target.id] = statement
            elif (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
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
            _PAD_TO_LONGEST_FUNCS.get(last_part(qualified)) if last_part(qualified) == "batch_pad_right" else None
        )

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
        if (callee == "BucketIterator" or name.endswith("BucketIterator.splits")) and not self._fixed_fields():
            return f"`{name}(...)`"  # torchtext's iterator pads each batch to its longest `Field`
        func = self._pad_function(node.func)
        if (
            func == "pad_sequence"
            and _in_collate_path(self.ctx, node)
            and not _fixed_padding(node)
            and not padded_to_fixed_length(self.ctx, node)
        ):
            return "`pad_sequence(...)` in a collate function"
        if func == "batch_pad_right" and _in_collate_path(self.ctx, node):
            return "`batch_pad_right(...)` in a collate function"
        padding = keyword(node, "padding")
        if (
            padding is not None
            and _longest_padding(padding.value)
            and not _fixed_padding(node)
            and self._tokenizer_call(node)
            and not _host_only_result(self.ctx, node)
            and not self._runs_once(node)
        ):
            return f"`padding={self.ctx.code(padding.value)}`"
        return None

    def _fixed_fields(self) -> bool:
        """A torchtext `Field(..., fix_length=N)` in the module: its batches have a fixed length."""
        return any(
            last_part(dotted_name(c.func)) == "Field" and keyword(c, "fix_length") is not None
            for c in self.ctx.index.calls
        )

    def _runs_once(self, node: ast.Call) -> bool:
        """Module-level code outside any loop: one call, one shape, one compilation."""
        return not any(
            isinstance(a, (*FUNCTIONS, ast.Lambda, *LOOPS, *COMPREHENSIONS)) for a in self.ctx.index.ancestors(node)
        )

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
        func = enclosing(self.ctx, node, FUNCTIONS)
        if func is None or self.ctx.in_non_xla_code(node):
            return
        if not _sizes_torch_tensor(self.ctx, func, node, target):
            return
        self.report(node.value, self.summary.format(what=f"`{target} = {self.ctx.code(node.value)}`"))


# `len(x)`, `x.size(0)`, `x.shape[0]`, `x.numel()`, of an element or of a string-keyed field of it
# (`len(t["boxes"])`: the number of objects of each target dict)
_ELEMENT = r"\w+(\[[\"'][\w ]+[\"']\])?"
_LEN_OF = re.compile(
    rf"^(len\({_ELEMENT}\)|{_ELEMENT}\.size\((0|dim=0)?\)|{_ELEMENT}\.shape\[0\]|{_ELEMENT}\.numel\(\))$"
)


def _batch_max(ctx, value: ast.expr) -> bool:
    """`max(len(x) for x in batch)`, `max(x.size(0) for x in examples)`, `max(lengths)` where lengths
    is a list of such lengths."""
    if not isinstance(value, ast.Call) or dotted_name(value.func) != "max" or len(arg_values(value)) != 1:
        return False
    arg = arg_values(value)[0]
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
        return bool(_LEN_OF.match(ctx.code(arg.elt))) and len(arg.generators) == 1
    if isinstance(arg, ast.Name):
        for v in ctx.reaching_values(arg):
            if isinstance(v, ast.ListComp) and _LEN_OF.match(ctx.code(v.elt)):
                return True
    return False


def _sizes_torch_tensor(ctx, func: ast.FunctionDef, assign: ast.Assign, name: str) -> bool:
    """`name` (assigned by `assign`) is used, in `func`, as a size of a torch allocation or of an
    `F.pad`, and is not rounded up to a bucket unconditionally before."""
    order = ctx.index.order
    start = order[assign]
    # an unconditional re-assignment in the same block (`n = ceil(n / 64) * 64`) buckets the size
    for statement in getattr(ctx.parent(assign), ctx.index.field_of(assign)):
        if (
            order[statement] > start
            and isinstance(statement, (ast.Assign, ast.AugAssign))
            and name in ctx.code(statement).split("=")[0]
        ):
            return False
    for call in ctx.calls_within(func):
        if order[call] <= start:
            continue
        if not any(name in _names_in(a) for a in arg_values(call)):
            continue
        qualified = ctx.qualified_name(call.func) or ""
        head, _, tail = qualified.rpartition(".")
        if head == "torch" and tail in SIZED_FACTORIES:
            return True
        if method_name(call) in NEW_SIZED:
            return True
        if qualified in ("torch.nn.functional.pad", "F.pad"):
            return True
    return False


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
