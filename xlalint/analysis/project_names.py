"""What a project's files could name, read from their paths and text before any is summarised: the
calls a module's summary cannot resolve to a project function are not judged (two in three calls of
a real project: `torch.zeros(...)`, `self.assertEqual(...)`), and a cached summary stays valid while
the project still names none of what it skipped (`ProjectNames.names_any`).

Each test over-approximates how `ProjectIndex.resolve_call` finds a function (a name it may find is
never skipped): an imported `a.b.f` resolves only through a module named `a` or `a.b` (`symbol`), a
file `a.py`, `a/b.py` or `a/b/__init__.py` (`namespace_module`), or a module whose name ends with
`a`, `a.b` or `a_b` and that defines the next part (`unresolved_import`); a method (`self.m`,
`super().m`, `x.m` of a typed `x`) only through a `def m` in some class of the project. And what a
function tells its callers (its reads, optimizer steps, returned loaders and devices) is asked only
at a call resolved to it, which names it (`f(...)`, `self.f`, `from m import f`, `{"k": f}`), dunder
methods aside (`Cls()` runs `__init__`): a function whose name the project's text holds only at its
`def`s (a test method) is never asked."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"\w+")
# a `def`/`class` at any depth (a superset of the functions and classes a module defines), its name
# as the token after the keyword: a continuation line may stand between them. Lines end as Python
# ends them: `\n`, `\r\n` or a lone `\r`
_DEFINITION = re.compile(
    r"(?:^|(?<=\r))[ \t\f]*(?:async(?:[ \t\f]|\\(?:\r\n?|\n))+)?(?:def|class)(?:[ \t\f]|\\(?:\r\n?|\n))+([^\s(:\[\\]+)",
    re.M,
)


def _normal(name: str) -> str:
    """A name as Python binds it (NFKC: `ﬁle` is `file`)."""
    return name if name.isascii() else unicodedata.normalize("NFKC", name)


def _last_part(dotted: str) -> str:
    return dotted.rpartition(".")[2]


@dataclass(frozen=True)
class ProjectNames:
    modules: frozenset[str]  # the last part of each module's name (a file's stem, a package's folder)
    defined: frozenset[str]  # every name some `def` or `class` of the project binds
    # each `_`-suffix of a module's last part (`kwt_utils_trainer`: also `utils_trainer`, `trainer`)
    # -> the names defined in the modules with it
    defined_in: dict[str, frozenset[str]]
    # the defined names the text holds more often than `def`/`class` statements bind them
    referenced: frozenset[str]

    @classmethod
    def of(cls, modules: Iterable[tuple[str, str]]) -> ProjectNames:
        """From each module's (dotted name, text)."""
        lasts: set[str] = set()
        everything: set[str] = set()
        by_suffix: dict[str, set[str]] = defaultdict(set)
        words: Counter[str] = Counter()
        definitions: Counter[str] = Counter()
        for name, text in modules:
            found = _DEFINITION.findall(text)
            last, defined = _last_part(name), set(map(_normal, found))
            words.update(_WORD.findall(text))
            definitions.update(found)
            lasts.add(last)
            everything |= defined
            pieces = last.split("_")
            for i in range(len(pieces)):
                by_suffix["_".join(pieces[i:])] |= defined
        # (a name written in two forms NFKC makes one: each form counted apart, as if referenced)
        referenced = {_normal(w) for w, n in words.items() if n > definitions[w] or not w.isascii()} & everything
        return cls(
            frozenset(lasts),
            frozenset(everything),
            {k: frozenset(v) for k, v in by_suffix.items()},
            frozenset(referenced),
        )

    def may_import(self, qualified: str) -> bool:
        """Some module of the project could define what the imported `qualified` names."""
        parts = qualified.split(".")
        return any(
            parts[i] in self.modules or parts[i + 1] in self.defined_in.get(parts[i], ()) for i in range(len(parts) - 1)
        )

    def may_define_method(self, name: str) -> bool:
        return name in self.defined

    def may_call(self, name: str) -> bool:
        """Some call of the project may resolve to a function `name` (see above); a name no `def`
        was read for is taken as called."""
        return name in self.referenced or name not in self.defined or (name.startswith("__") and name.endswith("__"))

    def names_any(self, outside: Iterable[str]) -> bool:
        """Some entry of a summary's `outside` (an imported name, a `.method`, a `~function` it told
        nothing of) may now be the project's: the summary skipped what this project could ask."""
        return any(
            self.may_define_method(entry[1:])
            if entry.startswith(".")
            else self.may_call(entry[1:])
            if entry.startswith("~")
            else self.may_import(entry)
            for entry in outside
        )
