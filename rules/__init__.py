"""xlalint rules: a package per family, a module per rule, found by walking this package.

`rules/<family>/<rule_name>.py` holds one `Rule` subclass with its VALID/INVALID examples; what
the family's rules share lives in modules whose name starts with `_` (`_common.py`). A family's
`__init__.py` declares `CODES` (the prefix every code of the family starts with: `XLA1` host syncs,
`XLA2` control flow, `XLA30` dynamic shapes, `XLA31` varying shapes, `XLA4` optimizer steps,
`XLA5` clipping, `XLA6` API migrations, `XLA7` other, `JAX1` JAX) and `CATEGORIES` (the categories
its rules may have). Discovery fails loudly on anything that would otherwise be silently left out
or misfiled: a module here that is not a family, a family without its declaration, a rule module
that defines no rule or two, a module named otherwise than its rule, a code or category outside its
family, two rules with one code. `ALL_RULES` is the registry, ordered by code.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType

from xlalint.rule import Rule

# This folder is installed as the package `xlalint.rules` (setup.py maps it). With the checkout root on
# sys.path (`python -m pytest`, `python -c` there) it is also importable as a top-level `rules`, which
# would load every rule class a second time, as different classes: refuse that name.
if __name__ != "xlalint.rules":
    raise ImportError(f"import the rules as xlalint.rules, not as {__name__!r} (the source folder rules/)")


class RegistryError(Exception):
    """The rules package is malformed (names the module at fault)."""


def _rules_in(module: ModuleType) -> list[type[Rule]]:
    # `issubclass(type(obj), type)`, not `isinstance`: that would touch the lazy `cst` module and load libcst
    return [
        obj
        for obj in vars(module).values()
        if issubclass(type(obj), type)
        and issubclass(obj, Rule)
        and getattr(obj, "code", None)
        and obj.__module__ == module.__name__
    ]


def discover(package: ModuleType) -> list[type[Rule]]:
    """Every rule of `package` (a rules package laid out as above), ordered by code."""
    found: dict[str, type[Rule]] = {}
    prefixes: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        where = f"{package.__name__}.{info.name}"
        if not info.ispkg:
            raise RegistryError(
                f"{where}: a module outside a family package; rules live in {package.__name__}.<family>.<rule_name>"
            )
        family = importlib.import_module(where)
        codes, categories = getattr(family, "CODES", None), getattr(family, "CATEGORIES", None)
        if not isinstance(codes, str) or not codes or not isinstance(categories, tuple) or not categories:
            raise RegistryError(f"{where}: a family package must declare CODES (a code prefix) and CATEGORIES")
        for other, other_prefix in prefixes.items():
            if codes.startswith(other_prefix) or other_prefix.startswith(codes):
                raise RegistryError(f"{where}: its CODES {codes!r} overlap those of {other} ({other_prefix!r})")
        prefixes[where] = codes
        for sub in pkgutil.iter_modules(family.__path__):
            if sub.name.startswith("_"):
                continue  # what the family's rules share
            name = f"{where}.{sub.name}"
            if sub.ispkg:
                raise RegistryError(f"{name}: a package inside a family; a rule is one module")
            rules = _rules_in(importlib.import_module(name))
            if len(rules) != 1:
                raise RegistryError(
                    f"{name}: a rule module must define exactly one Rule subclass with a code, "
                    f"found {len(rules)}"
                    + (f" ({', '.join(r.code for r in rules)})" if rules else "")
                    + "; shared helpers go in a module whose name starts with `_`"
                )
            rule = rules[0]
            if rule.name.replace("-", "_") != sub.name:
                raise RegistryError(
                    f"{name}: the module of rule {rule.code} must be named after it: {rule.name.replace('-', '_')}.py"
                )
            if not rule.code.startswith(codes):
                raise RegistryError(
                    f"{name}: code {rule.code} is not of family {where} (its codes start with "
                    f"{codes}); move the module to the family of its code"
                )
            if rule.category not in categories:
                raise RegistryError(
                    f"{name}: category {rule.category!r} of {rule.code} is not one of family {where}'s {categories}"
                )
            if rule.code in found:
                raise RegistryError(f"{name}: code {rule.code} is already taken by {found[rule.code].__module__}")
            found[rule.code] = rule
    return sorted(found.values(), key=lambda r: r.code)


ALL_RULES: list[type[Rule]] = discover(sys.modules[__name__])
RULES_BY_CODE: dict[str, type[Rule]] = {r.code: r for r in ALL_RULES}
