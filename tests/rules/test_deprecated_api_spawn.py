"""XLA601 on `xmp.spawn(..., nprocs=N)`: PJRT accepts only None or 1 (ValueError since 2.6).

`xmp.spawn` itself is not deprecated, so no other use of it is reported and nothing rewrites it to
`torch_xla.launch`."""

import textwrap

import pytest

from xlalint.diagnostics import Applicability
from xlalint.rules.deprecated_api.deprecated_xla_api import DeprecatedXlaApi
from xlalint.rules.deprecated_api.removed_xla_api import RemovedXlaApi
from xlalint.testing import fix_code, lint_code

RULES = [RemovedXlaApi, DeprecatedXlaApi]
HEAD = "import torch_xla.distributed.xla_multiprocessing as xmp\n"


def findings(body, head=HEAD):
    return lint_code(head + textwrap.dedent(body), RULES)


@pytest.mark.parametrize(
    "call",
    [
        "xmp.spawn(_mp_fn)",
        "xmp.spawn(_mp_fn, args=(flags,))",
        "xmp.spawn(_mp_fn, (flags,), None)",
        "xmp.spawn(_mp_fn, args=(flags,), nprocs=1, start_method='fork')",
        "xmp.spawn(_mp_fn, args=(flags,), nprocs=1.0)",  # `nprocs == 1` holds
        "xmp.spawn(_mp_fn, *launch_args)",  # position unknown
        "context = xmp.spawn(_mp_fn, args=(), join=False)",
        "xmp.MpModelWrapper(model)",
    ],
)
def test_spawn_with_an_accepted_count_or_none_is_not_reported(call):
    assert findings(call + "\n") == []


@pytest.mark.parametrize("count", ["flags.num_cores", "len(devices)"])
def test_a_configured_count_is_reported_unless_configured_to_one(count):
    # passed to be configured, typically to the number of cores: it only works as 1
    (finding,) = findings(f"xmp.spawn(_mp_fn, args=(flags,), nprocs={count})\n")
    assert f"`nprocs={count}` unless it is None or 1" in finding.message
    assert finding.fix.applicability is Applicability.UNSAFE


def test_a_count_is_reported_with_what_pjrt_does():
    (finding,) = findings("xmp.spawn(_mp_fn, args=(flags,), nprocs=8)\n")
    assert finding.code == "XLA601"
    assert "`nprocs=8`" in finding.message and "2.6" in finding.message
    # what PJRT does with it is in the rule's explanation (a message is one short sentence)
    from xlalint.explain import explain_text
    from xlalint.rules import RULES_BY_CODE

    assert "raises ValueError for any other count" in explain_text(RULES_BY_CODE["XLA601"])
    assert finding.fix.applicability is Applicability.UNSAFE


@pytest.mark.parametrize(
    "body, row",
    [
        ("xmp.spawn(_mp_fn, (), 8)\n", 2),
        ("xmp.spawn(_mp_fn, (), -1)\n", 2),
        ("NPROCS = 8\n\ndef main():\n    xmp.spawn(_mp_fn, nprocs=NPROCS)\n", 5),
        ("def main(tpu):\n    n = 8 if tpu else 1\n    xmp.spawn(_mp_fn, nprocs=n)\n", 4),
        ("xmp.spawn(\n    _mp_fn,\n    args=(flags,),\n    nprocs=4,\n)\n", 2),  # reported where the call starts
    ],
)
def test_counts_through_names_branches_and_positions(body, row):
    assert [(d.code, d.location.row) for d in findings(body)] == [("XLA601", row)]


def test_every_spelling_of_spawn_resolves():
    assert len(findings("spawn(fn, nprocs=8)\n",
                        head="from torch_xla.distributed.xla_multiprocessing import spawn\n")) == 1
    assert len(findings("torch_xla.distributed.xla_multiprocessing.spawn(fn, nprocs=8)\n",
                        head="import torch_xla.distributed.xla_multiprocessing\n")) == 1
    # `xmp` handed in as a parameter, in a file that uses torch_xla
    assert len(findings("def run(xmp):\n    xmp.spawn(fn, nprocs=8)\n", head="import torch_xla\n")) == 1
    # a `spawn` of some other library
    assert findings("mp.spawn(fn, nprocs=8)\nspawn(fn, nprocs=8)\n",
                    head="import torch.multiprocessing as mp\nfrom multiprocessing_utils import spawn\n") == []


def test_the_unsafe_fix_drops_only_the_count():
    code = HEAD + 'xmp.spawn(_mp_fn, args=(flags,), nprocs=8, start_method="fork")\nxmp.spawn(_mp_fn, (), 8)\n'
    assert fix_code(code, RULES, unsafe=False) == code
    fixed = fix_code(code, RULES, unsafe=True)
    assert fixed == HEAD + 'xmp.spawn(_mp_fn, args=(flags,), start_method="fork")\nxmp.spawn(_mp_fn, ())\n'
    assert not lint_code(fixed, RULES)


def test_no_fix_when_dropping_would_shift_arguments():
    for call in ("xmp.spawn(_mp_fn, (), 8, False)\n", "xmp.spawn(_mp_fn, (), 8, **options)\n"):
        (finding,) = findings(call)
        assert finding.fix is None


def test_a_version_guarded_xrt_launch_is_not_reported():
    code = """
    if version.parse(torch_xla.__version__) < version.parse("2.1"):
        xmp.spawn(_mp_fn, args=(flags,), nprocs=8)
    else:
        xmp.spawn(_mp_fn, args=(flags,))
    """
    assert findings(code, head=HEAD + "import torch_xla\nfrom packaging import version\n") == []
