"""Two facts about how library code reaches its helpers: a function picked from a dispatch table
(`MASKS[impl](...)`, a registry class's mapping) runs where the table is called, and a helper that
returns a tensor (`def fast_all(t): return t.all()`) gives a tensor to branch on."""

import json

import pytest

MASKS = """\
import torch


def fast_all(tensor):
    return tensor.all()


def _can_skip(padding_mask):
    if padding_mask is None or fast_all(padding_mask):
        return True
    return False


def sdpa_mask(padding_mask):
    if _can_skip(padding_mask):
        return None
    return padding_mask


def flash_mask(padding_mask):
    if padding_mask is not None and padding_mask.all():
        return None
    return padding_mask


def flex_mask(padding_mask):
    if padding_mask is not None and not fast_all(padding_mask):
        return padding_mask
    return None


class MaskInterface:
    _mapping = {"sdpa": sdpa_mask, "flash_attention_2": flash_mask, "flex_attention": flex_mask}

    def __getitem__(self, key):
        return self._mapping[key]


ALL_MASKS = MaskInterface()
"""

MODEL = """\
import torch
from torch import nn
from pkg.masks import ALL_MASKS, make_mask


class Attention(nn.Module):
    def forward(self, x, attention_mask, impl):
        mask = make_mask(attention_mask, impl)
        return x if mask is None else x * mask
"""

MAKE = """

def make_mask(attention_mask, impl):
    mask_interface = ALL_MASKS[impl]
    return mask_interface(attention_mask)
"""


@pytest.fixture
def package(project):
    project.write("pyproject.toml", "[project]\nname = 'pkg'\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/masks.py", MASKS + MAKE)
    project.write("pkg/model.py", MODEL)
    return project


def rows(run_cli, root, *extra):
    out = run_cli("check", "--output-format", "json", "--select", "XLA2", "--no-cache", *extra, root)[1]
    return sorted((d["filename"].rpartition("/")[2], d["location"]["row"], d["code"]) for d in json.loads(out))


def test_a_function_from_a_registry_runs_where_the_registry_is_called(run_cli, package):
    # sdpa_mask is reached only through ALL_MASKS[impl]; its helper branches on `fast_all(mask)`,
    # a tensor, on every forward. The flash and flex entries never run on XLA.
    assert rows(run_cli, package) == [("masks.py", 9, "XLA201")]


def test_a_dict_literal_dispatch_table_too(run_cli, package):
    make = (
        "\n\nMASK_FUNCTIONS = {'sdpa': sdpa_mask}\n\n\ndef make_mask(attention_mask, impl):\n"
        "    return MASK_FUNCTIONS.get(impl)(attention_mask)\n"
    )
    package.write("pkg/masks.py", MASKS + make)
    assert rows(run_cli, package) == [("masks.py", 9, "XLA201")]


def test_a_table_nobody_calls_per_step_is_quiet(run_cli, package):
    package.write("pkg/model.py", MODEL.replace("mask = make_mask(attention_mask, impl)", "mask = None"))
    assert rows(run_cli, package) == []


def test_a_helper_that_returns_a_python_value_is_no_tensor(run_cli, package):
    package.write("pkg/masks.py", (MASKS + MAKE).replace("return tensor.all()", "return bool(tensor.numel())"))
    assert rows(run_cli, package) == []
