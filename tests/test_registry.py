"""The rule registry finds every rule by itself and fails loudly on a rules package it would misread."""

from __future__ import annotations

import importlib
import itertools
import textwrap

import pytest

import xlalint.rules
from xlalint.rules import ALL_RULES, RegistryError, discover

_names = itertools.count()

RULE = '''\
from xlalint.rule import Invalid, Rule, Valid


class {cls}(Rule):
    """A rule."""

    code, name, category = "{code}", "{name}", "{category}"
    summary = "a finding"
'''


def rule_module(code, name, category="dynamic_shape", cls="SomeRule"):
    return RULE.format(code=code, name=name, category=category, cls=cls)


FAMILY = 'CODES = "{codes}"\nCATEGORIES = {categories!r}\n'


def package(tmp_path, monkeypatch, files):
    """A throwaway rules package made of `files` ({relative path: source}), imported; returns it."""
    name = f"throwaway_rules_{next(_names)}"
    for relative, source in {"__init__.py": "", **files}.items():
        path = tmp_path / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def shapes(codes="XLA30", categories=("dynamic_shape",)):
    return {"shapes/__init__.py": FAMILY.format(codes=codes, categories=categories)}


def test_a_well_formed_package_is_found_in_code_order(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {
        **shapes(),
        "shapes/_common.py": "HELPER = 1\n",  # shared: no rule, and none expected
        "shapes/second_op.py": rule_module("XLA302", "second-op", cls="Second"),
        "shapes/first_op.py": rule_module("XLA301", "first-op", cls="First"),
    })
    assert [r.code for r in discover(pkg)] == ["XLA301", "XLA302"]


def test_a_rule_module_that_registers_no_rule(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {**shapes(), "shapes/forgotten.py": "HELPER = 1\n"})
    with pytest.raises(RegistryError, match=r"shapes\.forgotten: a rule module must define exactly one .* found 0"):
        discover(pkg)


def test_a_rule_module_with_two_rules(tmp_path, monkeypatch):
    two = rule_module("XLA301", "first-op", cls="First") + rule_module("XLA302", "second-op", cls="Second")
    pkg = package(tmp_path, monkeypatch, {**shapes(), "shapes/first_op.py": two})
    with pytest.raises(RegistryError, match=r"shapes\.first_op: .*found 2 \(XLA301, XLA302\)"):
        discover(pkg)


def test_a_duplicate_code(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {
        **shapes(),
        "shapes/first_op.py": rule_module("XLA301", "first-op", cls="First"),
        "shapes/second_op.py": rule_module("XLA301", "second-op", cls="Second"),
    })
    with pytest.raises(RegistryError, match=r"shapes\.second_op: code XLA301 is already taken by .*shapes\.first_op"):
        discover(pkg)


def test_a_code_outside_its_family(tmp_path, monkeypatch):
    # XLA311 (a varying shape) filed with the dynamic shapes (XLA30x), as it once was
    pkg = package(tmp_path, monkeypatch, {**shapes(), "shapes/loader.py": rule_module("XLA311", "loader")})
    with pytest.raises(RegistryError, match=r"shapes\.loader: code XLA311 is not of family .*XLA30"):
        discover(pkg)


def test_a_category_outside_its_family(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {**shapes(), "shapes/loader.py": rule_module("XLA301", "loader", "varying_shape")})
    with pytest.raises(RegistryError, match=r"shapes\.loader: category 'varying_shape' of XLA301 is not one of"):
        discover(pkg)


def test_a_module_named_otherwise_than_its_rule(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {**shapes(), "shapes/misc.py": rule_module("XLA301", "first-op")})
    with pytest.raises(RegistryError, match=r"shapes\.misc: .*must be named after it: first_op\.py"):
        discover(pkg)


def test_a_family_file_instead_of_a_family_package(tmp_path, monkeypatch):
    # the old layout: a new family file was silently ignored and every test stayed green
    pkg = package(tmp_path, monkeypatch, {"compile_family.py": rule_module("XLA801", "graph-break", "other")})
    with pytest.raises(RegistryError, match=r"compile_family: a module outside a family package"):
        discover(pkg)


def test_a_family_without_its_declaration(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {"shapes/__init__.py": "", "shapes/first_op.py": rule_module("XLA301", "first-op")})
    with pytest.raises(RegistryError, match=r"shapes: a family package must declare CODES"):
        discover(pkg)


def test_families_with_overlapping_codes(tmp_path, monkeypatch):
    pkg = package(tmp_path, monkeypatch, {
        **shapes(codes="XLA3"),
        "varying/__init__.py": FAMILY.format(codes="XLA31", categories=("varying_shape",)),
    })
    with pytest.raises(RegistryError, match=r"varying: its CODES 'XLA31' overlap those of .*shapes"):
        discover(pkg)


# The shipped rules -------------------------------------------------------------------------------

def test_every_shipped_rule_sits_in_the_module_named_after_it_in_the_family_of_its_code():
    families = {}
    for rule in ALL_RULES:
        package_name, family, module = rule.__module__.rsplit(".", 2)
        assert package_name == "xlalint.rules" and module == rule.name.replace("-", "_"), rule.__module__
        declared = importlib.import_module(f"xlalint.rules.{family}")
        assert rule.code.startswith(declared.CODES) and rule.category in declared.CATEGORIES, rule.code
        families.setdefault(family, []).append(rule.code)
    assert "XLA311" in families["varying_shapes"]  # a varying shape, with the other XLA31x
    assert discover(xlalint.rules) == ALL_RULES
