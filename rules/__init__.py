"""xlalint rules: one module per rule family; `ALL_RULES` is the registry, ordered by code."""

from __future__ import annotations

from xlalint.rule import Rule

from . import (control_flow, deprecated_api, dynamic_shapes, grad_clipping, host_sync, jax_tracing, optimizer_step,
               quirks, varying_shapes)

FAMILIES = (host_sync, control_flow, dynamic_shapes, varying_shapes, optimizer_step, grad_clipping, deprecated_api,
            quirks, jax_tracing)


def _collect() -> list[type[Rule]]:
    rules = [
        obj
        for family in FAMILIES
        for obj in vars(family).values()
        # `issubclass(type(obj), type)`, not `isinstance`: that would touch the lazy `cst` module and load libcst
        if issubclass(type(obj), type) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == family.__name__
    ]
    rules.sort(key=lambda r: r.code)
    codes = [r.code for r in rules]
    assert len(codes) == len(set(codes)), "duplicate rule codes"
    return rules


ALL_RULES: list[type[Rule]] = _collect()
RULES_BY_CODE: dict[str, type[Rule]] = {r.code: r for r in ALL_RULES}
