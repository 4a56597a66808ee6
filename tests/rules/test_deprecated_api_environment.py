"""XLA601/XLA602 on environment variables: every way of setting one is found, reads never are."""

import textwrap

import pytest

from xlalint.rules.deprecated_api.deprecated_xla_api import DeprecatedXlaApi
from xlalint.rules.deprecated_api.removed_xla_api import RemovedXlaApi
from xlalint.testing import fix_code, lint_code

RULES = [RemovedXlaApi, DeprecatedXlaApi]


def found(body, head="import os\nimport torch_xla\n", path="example.py"):
    code = head + textwrap.dedent(body)
    return [(d.code, d.location.row, d.message.split("`")[1]) for d in lint_code(code, RULES, path=path)]


@pytest.mark.parametrize(
    "setting",
    [
        'os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"',
        'os.environ.setdefault("XRT_TPU_CONFIG", "localservice;0;localhost:51011")',
        'os.environ.update({"XRT_TPU_CONFIG": "localservice;0;localhost:51011"})',
        'os.environ.update(XRT_TPU_CONFIG="localservice;0;localhost:51011")',
        'os.environ.update(dict(XRT_TPU_CONFIG="localservice;0;localhost:51011"))',
        'os.putenv("XRT_TPU_CONFIG", "localservice;0;localhost:51011")',
        'a = os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"',
    ],
)
def test_each_way_of_setting_is_reported(setting):
    assert found(setting + "\n") == [("XLA601", 3, "XRT_TPU_CONFIG")]


@pytest.mark.parametrize(
    "reading",
    [
        'config = os.environ["XRT_TPU_CONFIG"]',
        'config = os.environ.get("XRT_TPU_CONFIG")',
        'config = os.getenv("XRT_TPU_CONFIG", "")',
        'legacy = "XRT_TPU_CONFIG" in os.environ',
        'os.environ.pop("XRT_TPU_CONFIG", None)',
        'del os.environ["XRT_TPU_CONFIG"]',
        'env = {"XRT_TPU_CONFIG": "localservice;0;localhost:51011"}  # a dict of our own',
        'settings["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"  # not os.environ',
    ],
)
def test_reads_and_other_mappings_are_not_reported(reading):
    assert found(reading + "\n") == []


def test_imports_of_os_resolve_and_a_lookalike_does_not():
    assert found('environ["XLA_USE_BF16"] = "1"\nputenv("XRT_WORKERS", "w")\n',
                 head="from os import environ, putenv\nimport torch_xla\n") == [
        ("XLA602", 3, "XLA_USE_BF16"), ("XLA601", 4, "XRT_WORKERS")]
    assert found('import os as system\nsystem.environ["XLA_USE_BF16"] = "1"\n', head="import torch_xla\n") == [
        ("XLA602", 3, "XLA_USE_BF16")]
    # no `import os`: `os` is something of the file's own
    assert found('os = Config()\nos.environ["XLA_USE_BF16"] = "1"\n', head="import torch_xla\n") == []


def test_a_name_holding_the_variable_is_followed():
    code = """
    KEY = "XRT_DEVICE_MAP"

    def configure():
        os.environ[KEY] = "CPU:0;/job:localservice/replica:0/task:0/device:XLA_CPU:0"
    """
    assert found(code) == [("XLA601", 7, "XRT_DEVICE_MAP")]


def test_values_that_leave_the_flag_off_are_not_reported():
    code = """
    os.environ["XLA_USE_BF16"] = "0"
    os.environ["XLA_DOWNCAST_BF16"] = "false"
    os.environ.setdefault("XLA_USE_SPMD", "")
    os.environ["XLA_USE_FP16"] = "0" if cpu else "false"
    os.environ["XLA_DOWNCAST_BF16"] = str(0)
    os.environ["XLA_USE_BF16"] = "1" if bf16 else "0"
    os.environ["XLA_USE_BF16"] = str(int(args.bf16))
    os.environ["XLA_DOWNCAST_BF16"] = str(1)
    os.environ["XRT_TPU_CONFIG"] = ""
    """
    # the last four may turn the flag on (or set an XRT variable, which has no "off")
    assert found(code) == [("XLA602", 9, "XLA_USE_BF16"), ("XLA602", 10, "XLA_USE_BF16"),
                           ("XLA602", 11, "XLA_DOWNCAST_BF16"), ("XLA601", 12, "XRT_TPU_CONFIG")]


def test_each_entry_of_an_update_is_its_own_finding():
    code = """
    os.environ.update({
        "PJRT_DEVICE": "CPU",
        "XRT_DEVICE_MAP": "CPU:0;/job:localservice/replica:0/task:0/device:XLA_CPU:0",
        "XRT_WORKERS": "localservice:0;grpc://localhost:40934",
    })
    """
    assert found(code) == [("XLA601", 6, "XRT_DEVICE_MAP"), ("XLA601", 7, "XRT_WORKERS")]


def test_version_guarded_old_configuration_is_not_reported():
    code = """
    if XLA_VERSION < version.parse("2.1"):
        os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
    try:
        import torch_xla.runtime as xr
        xr.use_spmd()
    except (ImportError, AttributeError):
        os.environ["XLA_USE_SPMD"] = "1"
    """
    assert found(code) == []


def test_files_without_torch_xla_are_left_alone():
    code = 'import os\nos.environ["XLA_USE_BF16"] = "1"\n'
    assert lint_code(code, RULES) == []


def test_environment_findings_have_no_fix():
    code = 'import os\nimport torch_xla\nos.environ["XRT_TPU_CONFIG"] = "x"\nos.environ["XLA_USE_BF16"] = "1"\n'
    assert all(d.fix is None for d in lint_code(code, RULES))
    assert fix_code(code, RULES, unsafe=True) == code
