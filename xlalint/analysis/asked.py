"""What an analysis asked of its project facts: one analysis per file per run.

A cold run must analyse every file once to summarise the project, and only then knows each file's
`ProjectFacts`. The summary's analysis also checks the file, with its facts seen through
`AskedFacts`: they answer as the facts it wraps do and note each question (is `f` in `steps`?
which helper runs at line 12, column 4? all of `static_methods`, for an iteration). The check holds
for the real facts when they give every noted question the same answer (`holds_for`): the analysis
is a function of the file and of those answers, so its findings are then exactly those of a fresh
analysis with the real facts. Only a file whose answers differ is analysed again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields
from typing import cast

from .project import ProjectFacts


class AskedFacts:
    """`ProjectFacts` as the analysis sees them, noting what it asks (`questions`, picklable)."""

    def __init__(self, facts: ProjectFacts) -> None:
        self.facts = facts
        self.questions: set[tuple[str, str, object]] = set()
        for name in FIELDS:
            value = getattr(facts, name)
            asked = _AskedFlag if isinstance(value, bool) else _Asked
            setattr(self, name, asked(name, value, self.questions))

    def reads_at(self, at: tuple[int, int]):
        self.questions.add(("reads_at", "helper_reads", at))
        return self.facts.reads_at(at)

    def holds_for(self, facts: ProjectFacts) -> bool:
        """`facts` answer every question asked as the wrapped facts did."""
        return holds(self.facts, self.questions, facts)


def holds(asked_of: ProjectFacts, questions: Collection[tuple[str, str, object]] | None, facts: ProjectFacts) -> bool:
    """`questions` asked of `asked_of` get the same answers from `facts` (None: unknown questions)."""
    if facts == asked_of:
        return True
    if questions is None:
        return False
    return all(_answer(asked_of, question) == _answer(facts, question) for question in questions)


def _answer(facts: ProjectFacts, question: tuple[str, str, object]):
    kind, name, item = question
    if kind == "in":
        return item in getattr(facts, name)
    if kind == "reads_at":
        return facts.reads_at(cast("tuple[int, int]", item))  # `AskedFacts.reads_at` records a (line, column)
    return getattr(facts, name)  # "all": an iteration or a length depends on every element


FIELDS = tuple(f.name for f in fields(ProjectFacts))


class _Asked:
    """One collection of the facts. Truthiness is True (it may hold something): the analysis tests
    it only to skip asking, and `bool(x) and q in x` is `q in x`, so a membership is what gets
    noted, not the emptiness of the facts it happened to be asked with."""

    __slots__ = ("name", "base", "questions")

    def __init__(self, name: str, base, questions: set) -> None:
        self.name, self.base, self.questions = name, base, questions

    def __bool__(self) -> bool:
        return True

    def __contains__(self, item) -> bool:
        self.questions.add(("in", self.name, item))
        return item in self.base

    def __iter__(self):
        self.questions.add(("all", self.name, None))
        return iter(self.base)

    def __len__(self) -> int:
        self.questions.add(("all", self.name, None))
        return len(self.base)


class _AskedFlag:
    """A yes/no fact (`xla_device`, `replicas`): its truth is the answer, noted when asked."""

    __slots__ = ("name", "base", "questions")

    def __init__(self, name: str, base: bool, questions: set) -> None:
        self.name, self.base, self.questions = name, base, questions

    def __bool__(self) -> bool:
        self.questions.add(("all", self.name, None))
        return self.base
