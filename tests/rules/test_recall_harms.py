"""The harm behind issue 30's recall classes, shown under torch itself: host reads counted with the
audit's recorder (`xlalint.runtime._hostreads`, on CPU tensors: it watches `xla` tensors the same
way), recompilations with Dynamo's `CompileCounter` and `dynamic=False` (XLA's static shapes). Each
test runs the helper code of a rule's own example and checks the linter reports its call."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from xlalint.rules.control_flow.helper_branch_in_step import HelperBranchInStep  # noqa: E402
from xlalint.rules.host_sync.helper_read_in_step import HelperReadInStep  # noqa: E402
from xlalint.rules.host_sync.python_builtin_over_tensor import PythonBuiltinOverTensor  # noqa: E402
from xlalint.runtime._hostreads import HostReadRecorder  # noqa: E402
from xlalint.testing import lint_code  # noqa: E402


def load(tmp_path, name: str, source: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reads(tmp_path, run) -> dict[tuple[int, str], int]:
    with HostReadRecorder([tmp_path], device_types=("cpu",)) as recorder:
        run()
    return {(row["line"], row["kind"]): row["count"] for row in recorder.rows()}


def test_meters_that_convert_what_they_are_given_read_it_every_call(tmp_path):
    invalid = HelperReadInStep.INVALID[0]
    meters = load(tmp_path, "meters.py", invalid.modules["meters.py"])
    losses = {"loss_box": torch.tensor(0.5), "loss_cls": torch.tensor(1.5)}
    logger, meter, lazy = meters.MetricLogger(), meters.AverageMeter(), meters.LazyMeter()

    def three_steps():
        for _ in range(3):
            logger.update(loss=sum(losses.values()), **losses)
            meter.update(losses["loss_box"].detach(), 8)
            lazy.update(losses["loss_cls"])

    got = reads(tmp_path, three_steps)
    # MetricLogger: one `.item()` per value per call; AverageMeter: one `float()` per call; LazyMeter: none
    assert got == {(10, "item"): 9, (18, "float"): 3}
    findings = lint_code(invalid.code, [HelperReadInStep], modules=invalid.modules)
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA109")]
    assert "`**kwargs`" in findings[0].message and "meters.py:10" in findings[0].message


def test_a_helper_that_hands_its_argument_to_a_branching_helper_reads_it_every_call(tmp_path):
    invalid = HelperBranchInStep.INVALID[0]
    audio = load(tmp_path, "audio.py", invalid.modules["audio.py"])
    pred, target = torch.randn(4, 3), torch.randn(4, 3)
    got = reads(tmp_path, lambda: [audio.masked_l1(pred, target, target > 0) for _ in range(3)])
    branch = next(i for i, line in enumerate(invalid.modules["audio.py"].splitlines(), 1) if "not mask.any()" in line)
    assert got == {(branch, "bool"): 3}  # `if not mask.any():` in masked_mean, once per call of masked_l1
    findings = lint_code(invalid.code, [HelperBranchInStep], modules=invalid.modules)
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA203")]
    assert f"audio.py:{branch}" in findings[0].message


def test_a_numpy_array_indexed_with_each_element_of_a_device_tensor_reads_each_one(tmp_path):
    weights = np.array([1.0, 4.0, 2.0])
    labels = torch.tensor([2, 0, 1, 1])

    def per_element():
        total = 0.0
        for label in labels:
            total += weights[label]
        return total

    with HostReadRecorder([Path(__file__).parent], device_types=("cpu",)) as recorder:
        assert per_element() == 2.0 + 1.0 + 4.0 + 4.0
    assert sum(row["count"] for row in recorder.rows() if row["kind"] == "index") == len(labels)
    invalid = next(c for c in PythonBuiltinOverTensor.INVALID if "CLASS_WEIGHTS[label]" in c.code)
    findings = lint_code(invalid.code, [PythonBuiltinOverTensor])
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA107")]
    assert "indexing a numpy array" in findings[0].message


def compiles(step, inputs) -> int:
    """Graphs Dynamo compiles for `step` over `inputs` with static shapes (what XLA does)."""
    from tests.rules.dynamo_helpers import dynamo_usable, observe

    if not dynamo_usable():
        pytest.skip("Dynamo cannot compile in this process (torchax took the accelerator slot)")

    def body(backend):
        compiled = torch.compile(step, backend=backend, dynamic=False)
        for args in inputs:
            compiled(*args)

    return observe(body).graphs


def test_concatenated_per_sample_targets_compile_once_per_number_of_objects():
    from xlalint.rules.varying_shapes.per_sample_targets_concatenated import PerSampleTargetsConcatenated

    def match(pred_logits, targets):  # the example's matcher, without its module
        out_prob = pred_logits.flatten(0, 1).softmax(-1)
        tgt_ids = torch.cat([v["labels"] for v in targets])
        return -out_prob[:, tgt_ids]

    def batch(*objects):
        return torch.randn(2, 10, 5), [{"labels": torch.randint(0, 5, (n,))} for n in objects]

    assert compiles(match, [batch(2, 3), batch(4, 3), batch(1, 3)]) == 3  # 5, 7, 4 objects
    assert compiles(match, [batch(2, 3), batch(2, 3), batch(2, 3)]) == 1  # the same objects per image
    invalid = PerSampleTargetsConcatenated.INVALID[0]
    assert "torch.cat([v[\"labels\"] for v in targets])" in invalid.code
    findings = lint_code(invalid.code, [PerSampleTargetsConcatenated])
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA314")]
    assert findings[0].message.endswith(f"(also line {invalid.line + 1})")  # one finding per function


def test_a_chunk_clipped_against_the_data_left_compiles_once_more_for_the_last_one():
    from xlalint.rules.varying_shapes.shorter_last_chunk import ShorterLastChunk

    weight = torch.randn(4, 4)
    source = torch.randn(35, 4)  # 35 rows: chunks of 8 leave a last one of 2 (34 - 32)

    def step(data, target):
        return ((data @ weight - target) ** 2).mean()

    def get_batch(i, bptt=8):  # the example's get_batch
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len]

    assert compiles(step, [get_batch(i) for i in range(0, source.size(0) - 1, 8)]) == 2
    assert compiles(step, [get_batch(i) for i in range(0, source.size(0) - 1 - 8, 8)]) == 1  # remainder dropped
    invalid = ShorterLastChunk.INVALID[0]
    findings = lint_code(invalid.code, [ShorterLastChunk])
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA315")]


def test_the_row_count_of_concatenated_targets_sizes_a_new_graph_per_batch(tmp_path):
    from xlalint.rules.varying_shapes.row_count_as_size import RowCountAsSize

    datasets = load(tmp_path, "datasets.py", RowCountAsSize.DATASETS["datasets.py"])
    loss = load(tmp_path, "loss.py", RowCountAsSize.DATASETS["loss.py"])
    collate = datasets.ListDataset.__new__(datasets.ListDataset).collate_fn

    def batch(*objects):  # samples (path, image, rows of (index, class, x, y, w, h)) as the example's dataset
        _, imgs, targets = collate([("p", torch.randn(3, 8, 8), torch.rand(n, 6)) for n in objects])
        return [imgs], targets, None

    assert compiles(loss.build_targets, [batch(2, 3), batch(4, 3), batch(1, 3)]) == 3  # 5, 7, 4 objects
    assert compiles(loss.build_targets, [batch(2, 3), batch(3, 2), batch(1, 4)]) == 1  # always 5
    invalid = RowCountAsSize.INVALID[2]
    findings = lint_code(invalid.code, [RowCountAsSize], modules=invalid.modules)
    assert [(d.location.row, d.code) for d in findings] == [(invalid.line, "XLA316")]
    assert "datasets.py:8" in findings[0].message
