"""XLA703 gc-collect-in-step: what a full collection examines (the harm, shown with CPython's own
collector), and which calls the rule reports: the spellings of `gc.collect`, the generation
argument, and the places that do not run every step."""

from __future__ import annotations

import gc
import re
import textwrap

import pytest

from xlalint.rules import RULES_BY_CODE
from xlalint.testing import lint_code

XLA703 = RULES_BY_CODE["XLA703"]

STATS = re.compile(r"gc: collecting generation (\d)\.\.\.\ngc: objects in each generation: (\d+) (\d+) (\d+)")


def _examined(capsys, generation: int | None) -> tuple[int, int]:
    """(the generation collected, the objects it examined), as `gc.DEBUG_STATS` reports them: a
    collection of generation G walks the objects of generations 0..G."""
    capsys.readouterr()
    gc.set_debug(gc.DEBUG_STATS)
    try:
        gc.collect() if generation is None else gc.collect(generation)
    finally:
        gc.set_debug(0)
    found = STATS.search(capsys.readouterr().err)
    if found is None:
        pytest.skip("this interpreter's gc.DEBUG_STATS output has no per-generation counts")
    collected, *sizes = (int(g) for g in found.groups())
    return collected, sum(sizes[: collected + 1])


def test_a_full_collection_examines_the_whole_live_heap_however_little_garbage(capsys):
    gc.collect()
    _, before = _examined(capsys, None)
    heap = [[i] for i in range(50_000)]  # live containers, none of them garbage
    generation, examined = _examined(capsys, None)
    assert generation == 2
    # every one of them, on every call (give or take objects of the test run freed in between)
    assert examined - before > 49_000
    generation, again = _examined(capsys, None)
    assert again - before > 49_000
    del heap


def test_young_collections_and_a_frozen_heap_skip_the_long_lived_objects(capsys):
    heap = [[i] for i in range(50_000)]
    gc.collect()  # the heap is now in the oldest generation
    generation, young = _examined(capsys, 0)
    assert generation == 0 and young < 50_000
    generation, middle = _examined(capsys, 1)
    assert generation == 1 and middle < 50_000
    gc.freeze()  # the hint: set-up's objects move to the permanent generation
    try:
        generation, after_freeze = _examined(capsys, None)
        assert generation == 2 and after_freeze < 50_000
    finally:
        gc.unfreeze()
    del heap


def _rows(code: str) -> list[int]:
    return [d.location.row for d in lint_code(textwrap.dedent(code).lstrip(), [XLA703])]


LOOP = """
{imports}
import torch_xla.core.xla_model as xm

for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.optimizer_step(optimizer)
    {call}
"""


@pytest.mark.parametrize(
    "imports, call, reported",
    [
        ("import gc", "gc.collect()", True),
        ("import gc", "gc.collect(2)", True),
        ("import gc", "gc.collect(generation=2)", True),
        ("import gc as g", "g.collect()", True),
        ("from gc import collect", "collect()", True),
        ("from gc import collect as full_gc", "full_gc()", True),
        ("import gc", "gc.collect(0)", False),
        ("import gc", "gc.collect(1)", False),
        ("import gc", "gc.collect(generation)", False),  # not known to be a full collection
        ("import gc", "gc.collect(**options)", False),
        ("import gc", "gc.freeze()", False),
        ("import mygc as gc", "gc.collect()", False),  # another module's `collect`
        ("", "collect()", False),
    ],
)
def test_spellings_and_generations(imports, call, reported):
    assert _rows(LOOP.format(imports=imports, call=call)) == ([8] if reported else [])


@pytest.mark.parametrize(
    "code",
    [
        # every N steps
        """
        import gc
        import torch_xla.core.xla_model as xm
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)
            if step % 200 == 0:
                gc.collect()
        """,
        # once per epoch, and after training
        """
        import gc
        import torch_xla.core.xla_model as xm
        for epoch in range(epochs):
            for x, y in loader:
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            gc.collect()
        gc.collect()
        """,
        # out-of-memory recovery
        """
        import gc
        import torch_xla.core.xla_model as xm
        for x, y in loader:
            try:
                loss = loss_fn(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
            except RuntimeError:
                gc.collect()
                continue
        """,
        # the CUDA branch of a script that also runs on XLA
        """
        import gc
        import torch_xla.core.xla_model as xm
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                gc.collect()
        """,
        # a loop that does not train: preprocessing files one by one
        """
        import gc
        import torch_xla
        for path in paths:
            frame = load(path)
            frame.to_parquet(path + ".parquet")
            del frame
            gc.collect()
        """,
    ],
)
def test_not_per_step(code):
    assert _rows(code) == []


def test_a_helper_called_every_step_is_reported_at_the_collection_with_its_chain():
    code = """
    import gc
    import torch_xla

    def free_memory():
        gc.collect()

    def train(model, loader, optimizer):
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
            optimizer.step()
            torch_xla.sync()
            free_memory()
    """
    (finding,) = lint_code(textwrap.dedent(code).lstrip(), [XLA703])
    assert finding.location.row == 5
    assert finding.confidence == "high"
    rows = [step.location.row for step in finding.related]  # the loop and the call that make it per step
    assert 8 in rows and 13 in rows, finding.related


def test_a_helper_called_only_per_epoch_is_not_reported():
    code = """
    import gc
    import torch_xla

    def free_memory():
        gc.collect()

    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            for batch in loader:
                loss = model(batch).mean()
                loss.backward()
                optimizer.step()
                torch_xla.sync()
            free_memory()
    """
    assert _rows(code) == []
