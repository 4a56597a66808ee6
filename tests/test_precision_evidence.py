"""Judgement from evidence, not names (issue 30, classes 5-8): what a value was built from decides
its kind, findings are reported once per cause, values on the host stay on the host, and code is
per step by its callers rather than by its name."""

import ast
import json
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.context import FileContext
from xlalint.analysis.tensors import integer_index, is_bool_mask
from xlalint.source import SourceText


def context(code):
    code = textwrap.dedent(code)
    return FileContext(Path("t.py"), ast.parse(code), SourceText(code))


def index_named(ctx, name):
    """The last index expression `x[name]` of the file."""
    found = [
        n.slice
        for n in ast.walk(ctx.tree)
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id == name
    ]
    return max(found, key=lambda n: (n.lineno, n.col_offset))


def findings(run_cli, project, files, *args):
    """(file, row, code) of `xlalint check` over a project of `files` (name -> code)."""
    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    for name, code in files.items():
        project.write(name, textwrap.dedent(code))
    out = run_cli("check", "--no-cache", "--output-format", "json", *args, cwd=project)[1]
    return sorted((d["filename"], d["location"]["row"], d["code"]) for d in json.loads(out))


# -- class 5: names are not kinds ---------------------------------------------------------------------

INDEXED = """
import torch

def forward(self, x):
    h = self.encoder(x)
    mask = {value}
    return h[mask]
"""


@pytest.mark.parametrize(
    "value, boolean",
    [
        ("torch.argmax(h, dim=-1)", False),
        ("torch.arange(h.shape[0], device=h.device)", False),
        ("torch.randperm(h.shape[0], device=h.device)[:4]", False),
        ("h.topk(3).indices", False),
        ("h.max(dim=1)[1]", False),
        ("torch.where(h > 0)", False),  # the hazard is the `where` (XLA301), reported there
        ("torch.nonzero(h > 0, as_tuple=True)", False),
        ("(h > 0).long()", False),
        ("torch.zeros(3, dtype=torch.long, device=h.device)", False),
        ("h.argsort()[:, :8]", False),
        ("h > 0", True),
        ("(h > 0).bool()", True),
        ("torch.zeros(h.shape[0], dtype=torch.bool, device=h.device)", True),
        ("torch.isnan(h)", True),
        ("self.make(h)", True),  # nothing says integer: the name stays the evidence
    ],
)
def test_a_mask_is_a_mask_by_how_it_was_built(value, boolean):
    ctx = context(INDEXED.format(value=value))
    mask = index_named(ctx, "mask")
    assert is_bool_mask(ctx, mask) is boolean
    assert integer_index(ctx, mask) is not boolean or value == "self.make(h)"


def test_a_parameter_named_like_a_mask_takes_what_its_callers_pass():
    ctx = context(
        """
        import torch

        def pick(h, keep_mask):
            return h[keep_mask]

        def forward(self, x):
            h = self.encoder(x)
            return pick(h, h.topk(4, dim=0).indices)
        """
    )
    assert not is_bool_mask(ctx, index_named(ctx, "keep_mask"))


def test_integer_masks_are_gathers_under_the_rules(run_cli, project):
    code = """
    import torch

    def forward(self, x, y):
        h = self.encoder(x)
        idx_mask = torch.arange(h.shape[0], device=h.device)
        h[idx_mask] = 0
        sel_mask = torch.nonzero(y > 0, as_tuple=True)
        return h[idx_mask] + h[sel_mask].sum()
    """
    # one finding: the `nonzero` (XLA301); no XLA302/303 for the integer indices named like masks
    assert findings(run_cli, project, {"model.py": code}) == [("model.py", 8, "XLA301")]
