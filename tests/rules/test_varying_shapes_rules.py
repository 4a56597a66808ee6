"""XLA312 pad-to-longest-in-batch and XLA313 data-dependent-size: look-alikes beyond the docstring examples."""

from __future__ import annotations

import textwrap

import pytest

from xlalint.rules.varying_shapes.data_dependent_size import DataDependentSize
from xlalint.rules.varying_shapes.pad_to_longest_in_batch import PadToLongestInBatch
from xlalint.rules.varying_shapes.train_loader_without_drop_last import TrainLoaderWithoutDropLast
from xlalint.testing import lint_code


def findings(rule, source: str) -> list[int]:
    return [d.location.row for d in lint_code(textwrap.dedent(source).lstrip("\n"), [rule])]


# -- XLA312 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        # fixed length or buckets
        'enc = tokenizer(texts, padding="max_length", max_length=256, truncation=True, return_tensors="pt")\n',
        'enc = tokenizer(texts, padding=True, pad_to_multiple_of=64, return_tensors="pt")\n',
        "enc = tokenizer(texts, padding=False)\n",
        # not a tokenizer: an image transform or a conv layer
        "img = transforms.Pad(4, padding_mode='edge')(img)\nconv = nn.Conv2d(3, 8, 3, padding=True)\n",
        # explicit configuration forwarded: the caller decides
        "collator = DataCollatorWithPadding(tokenizer, **collator_kwargs)\n",
        "collator = DataCollatorWithPadding(tokenizer, padding=args.padding)\n",
        # MLM collator with buckets
        "collator = DataCollatorForLanguageModeling(tokenizer, pad_to_multiple_of=8)\n",
        # a collator class that does not pad to the longest by default
        """
    @dataclass
    class FixedCollator:
        tokenizer: object
        padding: str = "max_length"
        max_length: int = 512
    """,
        # pad_sequence with a fixed total length, and pad_sequence outside a collate path
        """
    def collate_fn(batch):
        return pad_sequence(batch, batch_first=True, padding_value=0, total_length=128)
    """,
        """
    def forward(self, pieces):
        return pad_sequence(pieces, batch_first=True)
    """,
        # the longest length bucketed unconditionally before it sizes the batch
        """
    def collate(examples):
        n = max(len(x) for x in examples)
        n = (n + 63) // 64 * 64
        return torch.zeros(len(examples), n, dtype=torch.long)
    """,
        # the longest length sizes a NumPy array (not a torch tensor)
        """
    def collate(examples):
        n = max(len(x) for x in examples)
        return np.zeros((len(examples), n))
    """,
    ],
)
def test_pad_to_longest_valid(source):
    assert findings(PadToLongestInBatch, source) == []


@pytest.mark.parametrize(
    "source, line",
    [
        # (in a function: at module level, outside any loop, a call runs once)
        ('def collate(features):\n    return tokenizer.pad(features, padding="longest", return_tensors="pt")\n', 2),
        ("def encode(self, texts):\n    return self.tokenizer(texts, padding=PaddingStrategy.LONGEST)\n", 2),
        # with padding=True, max_length only truncates
        ("for texts in batches:\n    enc = tokenizer(texts, padding=True, truncation=True, max_length=128)\n", 2),
        ("collator = DataCollatorForSeq2Seq(tokenizer, model=model)\n", 1),
        ("collator = DataCollatorForTokenClassification(tokenizer, padding=True)\n", 1),
        ("collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)\n", 1),
        (
            """
        class SpeechCollator:
            def __init__(self, processor, padding="longest"):
                self.processor = processor
                self.padding = padding
        """,
            2,
        ),
        (
            """
        def make_batch(samples):
            return samples

        def batchify(samples):
            wavs = pad_sequence([s["wav"] for s in samples], batch_first=True)
            return wavs
        """,
            5,
        ),
        (
            """
        def merge(samples):
            return pad_sequence([s["ids"] for s in samples], batch_first=True)

        loader = DataLoader(ds, batch_size=8, collate_fn=merge)
        """,
            2,
        ),
        (
            """
        def collate(batch):
            lengths = [len(x) for x in batch]
            longest = max(lengths)
            out = torch.full((len(batch), longest), PAD)
            return out
        """,
            3,
        ),
    ],
)
def test_pad_to_longest_invalid(source, line):
    assert findings(PadToLongestInBatch, source) == [line]


def test_pad_to_longest_skips_non_xla_branch():
    source = """
    def collate(examples):
        if not use_tpu:
            return tokenizer.pad(examples, padding="longest")
        return tokenizer.pad(examples, padding="max_length", max_length=128)
    """
    assert findings(PadToLongestInBatch, source) == []


# -- XLA313 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        # sizes from shapes, len() and configuration
        """
    def forward(self, x, mask):
        bs, n = x.shape[:2]
        pad = x.new_zeros(bs, self.max_len - n, x.size(-1))
        return torch.cat([x, pad], 1)[:, : self.max_len]
    """,
        """
    def forward(self, x, seq_len=None):
        return self.cos_cached[:seq_len] * x  # a length the caller took from a shape
    """,
        # a host list of lengths in a collator: not a per-step path
        """
    def collate(batch, lengths):
        n = int(lengths.max())
        return [b[:n] for b in batch]
    """,
        # every N steps (logging)
        """
    for step, batch in enumerate(loader):
        out = model(batch["x"])
        out.loss.backward()
        optimizer.step()
        if step % 100 == 0:
            n = int(batch["len"].max())
            log_sample(out.logits[:n])
    """,
        # a static-shape gather instead of a slice
        """
    def forward(self, x, start):
        idx = start + torch.arange(self.window, device=x.device)
        return x.index_select(0, idx)
    """,
        # slicing a Python list by a data-dependent count is host work, not an XLA shape
        """
    def forward(self, x, lengths):
        names = list(self.names)
        return self.head(x), names[: int(lengths[0])]
    """,
    ],
)
def test_data_dependent_size_valid(source):
    assert findings(DataDependentSize, source) == []


@pytest.mark.parametrize(
    "source, line",
    [
        (
            """
        def forward(self, hidden, lengths):
            longest = lengths.max().item()
            return hidden[:, :longest]
        """,
            3,
        ),
        (
            """
        def compute_loss(self, logits, labels, label_lengths):
            total = 0
            for b in range(logits.shape[0]):
                end = (label_lengths[b] * logits.shape[1]).round().int()
                total = total + self.ce(logits[b, :end], labels[b, :end])
            return total
        """,
            5,
        ),
        (
            """
        def forward(self, x, counts):
            n = int(counts.sum())
            buf = torch.zeros(n, x.shape[-1], device=x.device)
            return buf
        """,
            3,
        ),
        (
            """
        def forward(self, x, offsets):
            start = offsets[0].item()
            return x.narrow(1, start, 16)
        """,
            3,
        ),
    ],
)
def test_data_dependent_size_invalid(source, line):
    assert findings(DataDependentSize, source) == [line]


def test_data_dependent_size_one_finding_per_source():
    source = """
    def forward(self, feats, groups):
        sizes = torch.bincount(groups).tolist()
        a = feats.new_zeros(len(sizes), sizes[0])
        b = feats.new_zeros(len(sizes), sizes[0], 4)
        i = 0
        while i < len(sizes):
            m = sizes[i]
            a[i, :m] = 1
            i += 1
        return a, b
    """
    assert findings(DataDependentSize, source) == [3]


def test_data_dependent_size_tensor_size_reported_at_every_use():
    # `n` is a 0-d device tensor: each allocation converts it to an int, a host read each time
    source = """
    def forward(self, x, tokens):
        n = (tokens == self.pad).sum(-1).max() + 1
        out = torch.zeros(x.shape[0], n, device=x.device)
        mask = torch.zeros(x.shape[0], n, dtype=torch.bool, device=x.device)
        return out, mask
    """
    assert findings(DataDependentSize, source) == [3, 4]


def test_data_dependent_size_host_int_reported_once():
    source = """
    def forward(self, x, tokens):
        n = int((tokens == self.pad).sum(-1).max()) + 1
        out = torch.zeros(x.shape[0], n, device=x.device)
        mask = torch.zeros(x.shape[0], n, dtype=torch.bool, device=x.device)
        return out, mask
    """
    assert findings(DataDependentSize, source) == [3]


# XLA311: keywords spread from a dict display are seen; so is a shuffle flag held by a name or
# chosen by a conditional.
SPREAD_LOADER = """
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size, train, workers):
    shuffle = train is True
    sampler = None
    kwargs = {}
    if workers:
        kwargs = {"num_workers": workers, "pin_memory": True}
    if xm.xrt_world_size() > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=shuffle)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False if sampler else shuffle, sampler=sampler, **kwargs)
    return loader
"""


def test_train_loader_keywords_spread_from_a_dict_display_are_seen():
    assert findings(TrainLoaderWithoutDropLast, SPREAD_LOADER) == [13]


@pytest.mark.parametrize(
    "change",
    [
        (
            'kwargs = {"num_workers": workers, "pin_memory": True}',
            'kwargs = {"num_workers": workers, "drop_last": True}',
        ),
        ("    loader = DataLoader", '    kwargs["drop_last"] = True\n    loader = DataLoader'),
        ("    loader = DataLoader", "    kwargs.update(extra)\n    loader = DataLoader"),
        ("    loader = DataLoader", "    configure(kwargs)\n    loader = DataLoader"),
        ("kwargs = {}", "kwargs = dict(base)"),
        ('kwargs = {"num_workers"', 'kwargs = {**base, "num_workers"'),
        ("shuffle = train is True", "shuffle = False"),
        ("    kwargs = {}\n", "    kwargs |= {}\n"),
    ],
)
def test_train_loader_spread_keywords_not_seen_or_not_training_are_left(change):
    old, new = change
    assert old in SPREAD_LOADER
    assert findings(TrainLoaderWithoutDropLast, SPREAD_LOADER.replace(old, new)) == []


# XLA311: the sampler built by a function of the module, which shuffles for training.
SAMPLER_HELPER = """
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_sampler(dataset, mode="train"):
    shuffle = mode == "train"
    return DistributedSampler(dataset, num_replicas=xm.xrt_world_size(), rank=xm.get_ordinal(), shuffle=shuffle)


def make_loader(dataset, cfg, mode="train"):
    sampler = make_sampler(dataset, mode=mode)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, drop_last=False, sampler=sampler)
    return loader
"""


def test_train_loader_whose_sampler_a_helper_builds_to_shuffle_for_training():
    assert findings(TrainLoaderWithoutDropLast, SAMPLER_HELPER) == [13]
    never = SAMPLER_HELPER.replace('shuffle = mode == "train"', "shuffle = False")
    assert never != SAMPLER_HELPER and findings(TrainLoaderWithoutDropLast, never) == []


@pytest.mark.parametrize(
    "source, why",
    [
        (SPREAD_LOADER, "shuffles its batches (`shuffle=False if sampler else shuffle`): a training loader"),
        (SAMPLER_HELPER, "its sampler shuffles (`shuffle=shuffle`): a training loader"),
        (
            "import torch_xla\ntrain_loader = DataLoader(ds, batch_size=8, sampler=sampler)\n",
            "named for training (`train_loader`)",
        ),
    ],
)
def test_train_loader_findings_show_why_the_loader_is_for_training(source, why):
    (found,) = lint_code(textwrap.dedent(source).lstrip("\n"), [TrainLoaderWithoutDropLast])
    assert [step.message for step in found.related] == [why]


def test_train_loader_keywords_spread_from_a_dict_bound_elsewhere_are_not_seen():
    module_level = (
        "import torch_xla\n"
        'LOADER_KWARGS = {"drop_last": True, "num_workers": 4}\n\n\n'
        "def make_loader(ds):\n"
        "    return DataLoader(ds, batch_size=64, shuffle=True, **LOADER_KWARGS)\n"
    )
    assert findings(TrainLoaderWithoutDropLast, module_level) == []


# -- XLA311 across modules -------------------------------------------------------------------------

HELPER_LOADERS = """
from torch.utils.data import DataLoader

def build_loaders(train_set, val_set, batch_size):
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=batch_size)
    return train_loader, val_loader
"""
XLA_SCRIPT = """
import torch_xla
from example import build_loaders

train_loader, val_loader = build_loaders(train_set, val_set, 32)
for x, y in {iterated}:
    optimizer.zero_grad()
    model(x).loss(y).backward()
    optimizer.step()
    torch_xla.sync()
"""


def _rows(code: str, modules: dict[str, str], path: str = "example.py") -> list[int]:
    found = lint_code(
        textwrap.dedent(code).lstrip("\n"),
        [TrainLoaderWithoutDropLast],
        path=path,
        modules={name: textwrap.dedent(text).lstrip("\n") for name, text in modules.items()},
    )
    return [d.location.row for d in found]


def test_helper_loader_trained_on_xla_is_reported_where_it_is_built():
    """A loop that trains in XLA code over what the helper returns: the finding is on the helper's
    `DataLoader(...)` (its chain names the loop), not again at the XLA call site."""
    script = XLA_SCRIPT.format(iterated="train_loader")
    assert _rows(HELPER_LOADERS, {"train.py": script}) == [4]
    assert _rows(script, {"example.py": HELPER_LOADERS}, path="train.py") == []
    (finding,) = lint_code(
        textwrap.dedent(HELPER_LOADERS).lstrip("\n"),
        [TrainLoaderWithoutDropLast],
        modules={"train.py": textwrap.dedent(script).lstrip("\n")},
    )
    assert [(step.path, step.location.row) for step in finding.related] == [("train.py", 5)]


def test_helper_loader_only_wrapped_on_xla_is_reported_at_the_call():
    """No loop that trains over it is seen in XLA code: the call site keeps the finding."""
    script = "import torch_xla\nfrom example import build_loaders\n\ntrain_loader, _ = build_loaders(a, b, 32)\n"
    assert _rows(HELPER_LOADERS, {"train.py": script}) == []
    assert _rows(script, {"example.py": HELPER_LOADERS}, path="train.py") == [4]


def test_helper_loader_trained_off_xla_is_not_reported():
    script = XLA_SCRIPT.format(iterated="train_loader").replace("import torch_xla\n", "import torch\n")
    script = script.replace("    torch_xla.sync()\n", "")
    assert _rows(HELPER_LOADERS, {"train.py": script}) == []
