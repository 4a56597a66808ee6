"""The shape of a rule: one small libcst visitor class with its documentation and examples.

All selected rules share one tree walk (libcst's batched visitors, as in Fixit). A rule reads the
file's analysis through `self.ctx` and calls `self.report(...)`.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst
from libcst.metadata import PositionProvider

from .diagnostics import CATEGORIES, Applicability, Fix

if TYPE_CHECKING:
    from .analysis.context import FileContext

# The sections every rule docstring has, in this order (Ruff's rule docs); tests check them.
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "Use instead:")


@dataclass(frozen=True)
class Valid:
    """Code the rule must not report."""

    code: str

    def __post_init__(self):
        object.__setattr__(self, "code", _dedent(self.code))


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report exactly once, on 1-based `line`.

    `expected_replacement` is the whole file after applying the rule's fixes at `applicability`
    (None: the rule offers no fix for this case).
    """

    code: str
    line: int | None = None
    expected_replacement: str | None = None
    applicability: Applicability = Applicability.SAFE

    def __post_init__(self):
        object.__setattr__(self, "code", _dedent(self.code))
        if self.expected_replacement is not None:
            object.__setattr__(self, "expected_replacement", _dedent(self.expected_replacement))


def _dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


@dataclass(frozen=True)
class Report:
    node: cst.CSTNode
    message: str
    fix: Fix | None


class Rule(cst.BatchableCSTVisitor):
    """Base class. Subclasses set the class attributes below and define visit_* methods."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, names the pattern (a suppression reads "allow <name>")
    category: ClassVar[str]
    summary: ClassVar[str]  # one line; also the default message
    hint: ClassVar[str] = ""  # what to do instead, shown under the message
    xla_only: ClassVar[bool] = False  # fire only in files that import torch_xla / torchax
    fix_availability: ClassVar[str] = "none"  # none | sometimes | always
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, ctx: "FileContext") -> None:
        super().__init__()
        self.ctx = ctx
        self.reports: list[Report] = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if inspect.isabstract(cls) or not getattr(cls, "code", None):
            return
        assert re.fullmatch(r"XLA\d{3}", cls.code), cls.code
        assert cls.category in CATEGORIES, cls.category
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", cls.name), cls.name

    @classmethod
    def applies(cls, ctx: "FileContext") -> bool:
        """Whether to run on this file at all (XLA-only rules need a file that uses XLA)."""
        return ctx.uses_xla or not cls.xla_only

    def report(self, node: cst.CSTNode, message: str | None = None, *, fix: Fix | None = None) -> None:
        self.reports.append(Report(node, message or self.summary, fix))

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")
