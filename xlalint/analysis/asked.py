"""What an analysis asked of its project facts: one analysis per file per run.

A cold run must analyse every file once to summarise the project, and only then knows each file's
`ProjectFacts`. The summary's analysis also checks the file, with its facts seen through
`AskedFacts`: they answer as the facts it wraps do and note each question (is `f` in `steps`? the
whole of `helper_reads`?). The check holds for the real facts when they give every noted question
the same answer (`holds_for`); the analysis is a function of the file and of those answers, so its
findings are then exactly those of a fresh analysis with the real facts. Only a file whose answers
differ is analysed again.
"""

from __future__ import annotations

from dataclasses import fields

from .project import ProjectFacts

WHOLE = ("*",)  # the question "what does it hold, all of it?" (an iteration, a length)


class AskedFacts:
    """`ProjectFacts` as the analysis sees them, noting what it asks (`questions`, picklable)."""

    def __init__(self, facts: ProjectFacts) -> None:
        self.facts = facts
        self.questions: set[tuple[str, object]] = set()
        for name in FIELDS:
            setattr(self, name, _Asked(name, getattr(facts, name), self.questions))

    def holds_for(self, facts: ProjectFacts) -> bool:
        """`facts` answer every question asked as the wrapped facts did."""
        return holds(self.facts, self.questions, facts)


def holds(asked_of: ProjectFacts, questions: set[tuple[str, object]] | None, facts: ProjectFacts) -> bool:
    """`questions` asked of `asked_of` get the same answers from `facts` (None: unknown questions)."""
    if facts == asked_of:
        return True
    if questions is None:
        return False
    for name, item in questions:
        before, now = getattr(asked_of, name), getattr(facts, name)
        if item == WHOLE:
            if before != now:
                return False
        elif (item in before) != (item in now):
            return False
    return True


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
        self.questions.add((self.name, item))
        return item in self.base

    def __iter__(self):
        self.questions.add((self.name, WHOLE))
        return iter(self.base)

    def __len__(self) -> int:
        self.questions.add((self.name, WHOLE))
        return len(self.base)
