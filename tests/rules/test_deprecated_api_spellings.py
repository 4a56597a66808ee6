"""Every row of the shipped migration table, through every way Python code can spell it: each is
reported once, with the row's code, and a safe fix leaves code that names the replacement."""

import ast

import pytest

from xlalint.rules.deprecated_api import TABLE
from xlalint.rules.deprecated_api.deprecated_xla_api import DeprecatedXlaApi
from xlalint.rules.deprecated_api.removed_xla_api import RemovedXlaApi
from xlalint.testing import fix_code, lint_code

RULES = [RemovedXlaApi, DeprecatedXlaApi]


def code_of(row) -> str:
    return "XLA601" if row.status == "removed" else "XLA602"


def function_spellings(name: str) -> list[str]:
    module, func = name.rsplit(".", 1)
    parent, last = module.rsplit(".", 1)
    return [
        f"import {module} as alias\n\nalias.{func}()\n",
        f"from {module} import {func}\n\n{func}()\n",
        f"from {module} import {func} as renamed\n\nrenamed()\n",
        f"import {module}\n\n{module}.{func}()\n",
        f"from {parent} import {last}\n\n{last}.{func}()\n",
        f"from {parent} import {last} as alias\n\ndef main():\n    return alias.{func}()\n",
    ]


def module_spellings(name: str) -> list[str]:
    spellings = [f"import {name}\n", f"import {name} as alias\n", f"from {name} import anything\n"]
    if "." in name:
        parent, last = name.rsplit(".", 1)
        spellings += [f"from {parent} import {last}\n", f"from {parent} import {last} as alias\n"]
    return spellings


def environment_spellings(name: str) -> list[str]:
    head = "import torch_xla\n"
    return [
        f'{head}import os\nos.environ["{name}"] = "1"\n',
        f'{head}import os\nos.environ.setdefault("{name}", "1")\n',
        f'{head}import os as system\nsystem.environ.update({{"{name}": "1"}})\n',
        f'{head}from os import environ\nenviron["{name}"] = "1"\n',
        f'{head}from os import putenv\nputenv("{name}", "1")\n',
    ]


def argument_spellings(row) -> list[str]:
    module, func = row.name.rsplit(".", 1)
    parent, last = module.rsplit(".", 1)
    call = f"(fn, {row.argument}=8)"
    return [
        f"import {module} as alias\n\nalias.{func}{call}\n",
        f"from {module} import {func}\n\n{func}{call}\n",
        f"import {module}\n\n{module}.{func}{call}\n",
        f"from {parent} import {last}\n\n{last}.{func}{call}\n",
    ]


CASES = []
for row in TABLE:
    spellings = {"function": lambda r: function_spellings(r.name), "module": lambda r: module_spellings(r.name),
                 "environment": lambda r: environment_spellings(r.name), "argument": argument_spellings}[row.kind](row)
    CASES += [pytest.param(row, source, id=f"{row.name}-{i}") for i, source in enumerate(spellings)]


def test_every_kind_of_row_is_covered():
    assert {row.kind for row in TABLE} == {"function", "module", "environment", "argument"}
    assert len(CASES) >= 4 * len(TABLE)


@pytest.mark.parametrize("row, source", CASES)
def test_each_spelling_is_reported_once_with_the_rows_code(row, source):
    found = lint_code(source, RULES)
    assert [d.code for d in found] == [code_of(row)], source
    assert row.name.rsplit(".", 1)[-1] in found[0].message


SAFE_FUNCTIONS = [pytest.param(row, source, id=f"{row.name}-{i}") for row in TABLE
                  if row.kind == "function" and row.fix == "safe"
                  for i, source in enumerate(function_spellings(row.name))]


@pytest.mark.parametrize("row, source", SAFE_FUNCTIONS)
def test_safe_fixes_name_the_replacement_in_every_spelling(row, source):
    fixed = fix_code(source, RULES, unsafe=False)
    ast.parse(fixed)
    assert lint_code(fixed, RULES) == [], fixed
    module, func = row.replacement.rsplit(".", 1)
    assert func in fixed and module.split(".")[0] in fixed, fixed
    assert fix_code(fixed, RULES, unsafe=False) == fixed  # a fixed point


def test_a_moved_module_imported_from_its_old_package_gets_its_own_row_and_fix():
    source = "from torch_xla_py import xla_model\n\nxla_model.xla_device()\n"
    assert [d.message.split("`")[1] for d in lint_code(source, RULES)] == ["torch_xla_py.xla_model", "xla_model.xla_device()"]
    assert fix_code(source, RULES, unsafe=False).startswith("from torch_xla.core import xla_model\n")
    mixed = lint_code("from torch_xla_py import xla_model, utils\n", RULES)
    assert [d.message.split("`")[1] for d in mixed] == ["torch_xla_py.xla_model", "torch_xla_py.utils"]


def test_a_removed_import_goes_even_when_the_replacement_has_the_same_last_name():
    fixed = fix_code("from torch_xla.experimental import compile\n\nstep = compile(train_step)\n", RULES, unsafe=False)
    assert fixed == "import torch_xla\n\nstep = torch_xla.compile(train_step)\n"
