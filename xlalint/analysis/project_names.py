"""What a project's files could name, read from their paths and text before any is summarised: the
calls a module's summary cannot resolve to a project function are not judged (two in three calls of
a real project: `torch.zeros(...)`, `self.assertEqual(...)`), and a cached summary stays valid while
the project still names none of what it skipped (`ProjectNames.names_any`).

Each test over-approximates how `ProjectIndex.resolve_call` finds a function (a name it may find is
never skipped): an imported `a.b.f` resolves only through a module named `a` or `a.b` (`symbol`), a
file `a.py`, `a/b.py` or `a/b/__init__.py` (`namespace_module`), or a module whose name ends with
`a`, `a.b` or `a_b` and that defines the next part (`unresolved_import`); a method (`self.m`,
`super().m`, `x.m` of a typed `x`) only through a `def m` in some class of the project."""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

# a `def`/`class` at any depth (a superset of the functions and classes a module defines), its name
# as the token after the keyword: a continuation line may stand between them
_DEFINITION = re.compile(
    r"^[ \t\f]*(?:async(?:[ \t\f]|\\\r?\n)+)?(?:def|class)(?:[ \t\f]|\\\r?\n)+([^\s(:\[\\]+)", re.M
)


def defined_names(text: str) -> set[str]:
    """Every name a `def` or `class` of `text` binds, normalised as Python does (NFKC)."""
    return {n if n.isascii() else unicodedata.normalize("NFKC", n) for n in _DEFINITION.findall(text)}


def _last_part(dotted: str) -> str:
    return dotted.rpartition(".")[2]


@dataclass(frozen=True)
class ProjectNames:
    modules: frozenset[str]  # the last part of each module's name (a file's stem, a package's folder)
    defined: frozenset[str]  # every name some `def` or `class` of the project binds
    # each `_`-suffix of a module's last part (`kwt_utils_trainer`: also `utils_trainer`, `trainer`)
    # -> the names defined in the modules with it
    defined_in: dict[str, frozenset[str]]

    @classmethod
    def of(cls, modules: Iterable[tuple[str, str]]) -> ProjectNames:
        """From each module's (dotted name, text)."""
        lasts: set[str] = set()
        everything: set[str] = set()
        by_suffix: dict[str, set[str]] = defaultdict(set)
        for name, text in modules:
            last, defined = _last_part(name), defined_names(text)
            lasts.add(last)
            everything |= defined
            pieces = last.split("_")
            for i in range(len(pieces)):
                by_suffix["_".join(pieces[i:])] |= defined
        return cls(frozenset(lasts), frozenset(everything), {k: frozenset(v) for k, v in by_suffix.items()})

    def may_import(self, qualified: str) -> bool:
        """Some module of the project could define what the imported `qualified` names."""
        parts = qualified.split(".")
        return any(
            parts[i] in self.modules or parts[i + 1] in self.defined_in.get(parts[i], ()) for i in range(len(parts) - 1)
        )

    def may_define_method(self, name: str) -> bool:
        return name in self.defined

    def names_any(self, outside: Iterable[str]) -> bool:
        """Some entry of a summary's `outside` (an imported name, or `.method`) may now be the
        project's: the summary skipped a call this project could resolve."""
        return any(
            self.may_define_method(entry[1:]) if entry.startswith(".") else self.may_import(entry) for entry in outside
        )
