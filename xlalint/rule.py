"""The shape of a rule: one small visitor class with its documentation and examples (Fixit's model).

A rule finds its pattern in Python's `ast` (cheap: no rule needs a lossless tree to *find* a
hazard) through `visit_<NodeType>` methods, reads the file's analysis through `self.ctx`, and calls
`self.report(...)`. All selected rules share one pass: the engine hands each rule the nodes of the
types it visits, filed by the index's single walk. A fix is built on libcst, losslessly, and only
for files where a finding has one: `report(..., fix=builder)` with `builder(cst_ctx) -> Fix | None`
(see `xlalint.fixing`).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from .diagnostics import CATEGORIES, HIGH, Applicability, Fix, Step

if TYPE_CHECKING:
    from .analysis.context import FileContext
    from .analysis.evidence import Evidence
    from .fixing.context import CstContext

FixBuilder = Callable[["CstContext"], "Fix | None"]

# Categories of hazards that cost while the code runs (not a migration of its API): a test that runs
# them once is no training step.
RUN_TIME_CATEGORIES = ("item_sync", "control_flow_on_tensor", "dynamic_shape", "varying_shape")
# what XLA rules report that costs on XLA alone (not migrations, not noqa bookkeeping)
XLA_HAZARDS = (*RUN_TIME_CATEGORIES, "optimizer_step", "clip_grad_norm")

# The sections every rule docstring has, in this order (Ruff's rule docs); tests check them.
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "Use instead:")


@dataclass(frozen=True)
class Valid:
    """Code the rule must not report. `modules`: other modules of its project, by file name."""

    code: str
    modules: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "code", _dedent(self.code))
        object.__setattr__(self, "modules", {k: _dedent(v) for k, v in self.modules.items()})


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report exactly once, on 1-based `line`.

    `expected_replacement` is the whole file after applying the rule's fixes at `applicability`
    (None: the rule offers no fix for this case). `modules`: other modules of its project, by file name.
    """

    code: str
    line: int | None = None
    expected_replacement: str | None = None
    applicability: Applicability = Applicability.SAFE
    modules: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "code", _dedent(self.code))
        object.__setattr__(self, "modules", {k: _dedent(v) for k, v in self.modules.items()})
        if self.expected_replacement is not None:
            object.__setattr__(self, "expected_replacement", _dedent(self.expected_replacement))


def _dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


@dataclass(frozen=True)
class Report:
    node: ast.AST
    message: str
    fix: FixBuilder | None
    # the host read this finding is a consequence of: (its file, "" for this one; its line). The
    # engine reports one finding per cause (see `engine._one_per_cause`).
    cause: tuple[str, int] | None = None
    confidence: str = HIGH  # see `diagnostics.CONFIDENCE_LEVELS`
    chain: tuple[Step, ...] = ()  # the evidence: the loop or role, the calls, the value's origin


class Rule:
    """Base class. Subclasses set the class attributes below and define `visit_<ast node type>`
    methods (and optionally `finish()`, called once every node was visited)."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, names the pattern (a suppression reads "allow <name>")
    category: ClassVar[str]
    summary: ClassVar[str]  # one line; also the default message
    hint: ClassVar[str] = ""  # what to do instead, shown under the message
    xla_only: ClassVar[bool] = False  # fire only in files that import torch_xla / torchax
    fix_availability: ClassVar[str] = "none"  # none | sometimes | always
    _visited_types: ClassVar[dict[type, str] | None] = None  # each class's own (see `visited_types`)
    # preview: precision on real code not yet shown; off unless `--preview` or selected explicitly
    preview: ClassVar[bool] = False
    # a migration rule runs only when the user names its target platform (`--target torchtpu`)
    target: ClassVar[str | None] = None
    # targets under which this rule steps aside (its advice points to a platform being left)
    not_for_targets: ClassVar[tuple[str, ...]] = ()
    # codes of other families' rules this one reports better in its own context (a DYN rule inside
    # a compiled region): there, their finding on the same code gives way to this one, and when this
    # rule is not selected their hint becomes this one's (see `engine._in_compiled_regions`)
    covers: ClassVar[tuple[str, ...]] = ()
    # what a finding of this rule rests on, asked of the analysis at `report` (see
    # `analysis.evidence`): "step", the node runs every step; "value", the `value` given to
    # `report` is a device tensor. A link that is only guessed makes the finding `possible`.
    evidence: ClassVar[tuple[str, ...]] = ()
    # the torch releases ("2.11") a DYN rule's Dynamo proofs pass on; `torch_not_held` names the
    # examples ("VALID_2") whose claim does not hold on a proven release, with why
    torch_proven: ClassVar[tuple[str, ...]] = ()
    torch_not_held: ClassVar[dict[str, dict[str, str]]] = {}
    # the Pythons the hazard exists on (below this version); None: every Python. On others the rule
    # reports nothing and its INVALID examples are skipped
    python_below: ClassVar[tuple[int, int] | None] = None
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.reports: list[Report] = []

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if inspect.isabstract(cls) or not getattr(cls, "code", None):
            return
        assert re.fullmatch(r"(XLA|JAX|DYN|TPU)\d{3}", cls.code), cls.code
        assert cls.category in CATEGORIES, cls.category
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", cls.name), cls.name
        for attr in dir(cls):
            if attr.startswith("visit_"):
                assert isinstance(getattr(ast, attr[6:], None), type), f"{cls.__name__}.{attr}: no such ast node"

    @classmethod
    def gb_ids_by_torch(cls) -> dict[str, tuple[str, ...]]:
        """The graph-break ids its proofs saw on each proven torch release (the same on each,
        unless a rule's data says otherwise)."""
        ids = tuple(getattr(cls, "gb_ids", ()))
        return {version: ids for version in cls.torch_proven} if ids else {}

    @classmethod
    def visited_types(cls) -> dict[type, str]:
        """The `ast` node types this rule visits, with the method for each (found once per class:
        asked of every rule for every file)."""
        found = cls.__dict__.get("_visited_types")
        if found is None:
            found = {getattr(ast, attr[6:]): attr for attr in dir(cls) if attr.startswith("visit_")}
            cls._visited_types = found
        return found

    @classmethod
    def applies(cls, ctx: FileContext) -> bool:
        """Whether to run on this file at all (XLA-only rules need a file that uses XLA)."""
        if cls.code.startswith("XLA") and not cls.code.startswith("XLA9") and ctx.placed_off_xla:
            return False  # the project's CUDA path: it never runs on XLA
        return ctx.uses_xla or not cls.xla_only

    def report(
        self,
        node: ast.AST,
        message: str | None = None,
        *,
        fix: FixBuilder | None = None,
        cause: tuple[str, int] | None = None,
        value: ast.expr | None = None,
        evidence: Evidence | None = None,
    ) -> None:
        """Report `node`. The confidence and chain come from `evidence` when given, else from what
        the rule's `evidence` names: the per-step judgement of `node`, the origin of `value`."""
        if evidence is None:
            evidence = self.evidence_for(node, value)
        confidence, chain = (evidence.confidence, evidence.chain) if evidence is not None else (HIGH, ())
        if not chain and self.code.startswith("XLA") and self.category in XLA_HAZARDS and self.ctx.uses_xla:
            chain = self.ctx.xla_evidence.chain  # a pattern that harms on XLA alone: why this is XLA code
        if self.code.startswith("DYN") and self.ctx.project.compiled:  # compiled only under --assume-compiled
            chain = self.ctx.compiled.assumed_chain(node) + chain
        self.reports.append(Report(node, message or self.summary, fix, cause, confidence, chain))

    def evidence_for(self, node: ast.AST, value: ast.expr | None = None) -> Evidence | None:
        """The evidence this rule's findings rest on (None: the pattern alone is the finding). A
        hazard of the running code (not a migration) in code that runs only as tests is possible."""
        found: Evidence | None = None
        if "step" in self.evidence:
            found = self.ctx.step_evidence(node)
        elif self.category in RUN_TIME_CATEGORIES:
            found = self.ctx.test_evidence(node)
        if "value" in self.evidence and value is not None:
            judged = self.ctx.value_evidence(value)
            found = judged if found is None else found & judged
        return found

    def finish(self) -> None:
        """Called after every node was visited (for findings that need the whole file)."""

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")
