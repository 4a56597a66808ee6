"""Diagnostics and fixes: what a rule reports, in the shape Ruff's JSON output uses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = (
    "item_sync",
    "control_flow_on_tensor",
    "dynamic_shape",
    "varying_shape",
    "optimizer_step",
    "clip_grad_norm",
    "deprecated_xla_api",
    "other",
)

DOCS_URL = "https://github.com/xlalint/xlalint/blob/main/docs/rules/{name}.md"

# How sure a finding is (pylint's confidence): `high`, every link of its evidence chain was seen
# (a loop that trains or a framework role reaches it through resolved calls; the value's origin on
# the device is shown); `possible`, a link is guessed (a step function by its name only, an
# unresolved call, a value whose origin is not seen). Possible findings are off by default.
HIGH = "high"
POSSIBLE = "possible"
CONFIDENCE_LEVELS = (HIGH, POSSIBLE)


def shown_at(confidence: str, level: str) -> bool:
    """A finding of `confidence` is shown at the level asked for (`--confidence`)."""
    return confidence == HIGH or level == POSSIBLE


class Applicability(str, enum.Enum):
    """Ruff's fix applicability: safe fixes keep meaning, unsafe ones may change behaviour."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    DISPLAY_ONLY = "displayonly"

    def allowed(self, unsafe_fixes: bool) -> bool:
        return self is Applicability.SAFE or (unsafe_fixes and self is Applicability.UNSAFE)


@dataclass(frozen=True, order=True)
class Location:
    """1-based row and column, as Ruff reports them."""

    row: int
    column: int

    def to_json(self) -> dict:
        return {"column": self.column, "row": self.row}

    @classmethod
    def from_json(cls, data: dict) -> Location:
        return cls(data["row"], data["column"])


@dataclass(frozen=True)
class Edit:
    """Replace the text between two locations with `content`."""

    location: Location
    end_location: Location
    content: str

    def to_json(self) -> dict:
        return {
            "content": self.content,
            "end_location": self.end_location.to_json(),
            "location": self.location.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> Edit:
        return cls(Location.from_json(data["location"]), Location.from_json(data["end_location"]), data["content"])


@dataclass(frozen=True)
class ImportRequest:
    """An import a fix needs: `import module [as asname]` or `from module import obj [as asname]`.

    `beside` names an existing import binding (e.g. "xm"): the new import is placed right after
    that import statement, so it stays under the same guard (try/except ImportError, a function).
    Without it, imports go to the top of the module (libcst's AddImportsVisitor).
    """

    module: str
    obj: str | None = None
    asname: str | None = None
    beside: str | None = None


@dataclass
class Fix:
    """A fix as rules build it: node replacements (applied on the tree) plus needed imports.

    `edits` is filled in by the engine from the replacements, for reporting.
    """

    applicability: Applicability
    title: str
    replacements: dict = field(default_factory=dict)  # id(original node) -> (node, replacement)
    imports: tuple[ImportRequest, ...] = ()
    removed_imports: tuple[ImportRequest, ...] = ()
    edits: tuple[Edit, ...] = ()

    @classmethod
    def replace(cls, node, replacement, *, title: str, safe: bool, imports=(), removed_imports=()) -> Fix:
        return cls(
            Applicability.SAFE if safe else Applicability.UNSAFE,
            title,
            {id(node): (node, replacement)},
            tuple(imports),
            tuple(removed_imports),
        )

    def to_json(self) -> dict:
        return {
            "applicability": self.applicability.value,
            "edits": [e.to_json() for e in self.edits],
            "message": self.title,
        }

    @classmethod
    def from_json(cls, data: dict) -> Fix:
        """A reported fix (applicability, title, edits), as read back from the cache."""
        return cls(
            Applicability(data["applicability"]), data["message"], edits=tuple(Edit.from_json(e) for e in data["edits"])
        )


@dataclass(frozen=True)
class Step:
    """One link of a finding's evidence chain: where (`path`; None for the finding's own file) and
    what it shows (`training loop at line 120 (backward at 131)`, `calls `log` (line 140)`)."""

    location: Location
    message: str
    path: str | None = None

    def to_json(self, filename: str) -> dict:
        return {"filename": self.path or filename, "location": self.location.to_json(), "message": self.message}

    @classmethod
    def from_json(cls, data: dict, filename: str) -> Step:
        path = data.get("filename")
        return cls(Location.from_json(data["location"]), data.get("message", ""), None if path == filename else path)

    def short(self) -> str:
        """`message`, with the place when the message does not say it (text output's `via` line)."""
        if self.path:
            return f"{self.message} ({Path(self.path).name}:{self.location.row})"
        return self.message if str(self.location.row) in self.message else f"{self.message} (line {self.location.row})"


@dataclass
class Diagnostic:
    code: str
    name: str
    message: str
    category: str
    path: Path
    location: Location
    end_location: Location
    fix: Fix | None = None
    noqa_row: int | None = None
    cell: int | None = None  # in a notebook: the cell (from 1), and rows count in that cell
    hint: str | None = None  # what to do instead, where the context changes the rule's own hint
    # the evidence chain, in order (the loop or role that runs it, the calls on the way, where the
    # value comes from), then other places of the same cause (the per-step calls of a helper whose
    # read this is)
    related: tuple[Step, ...] = ()
    confidence: str = HIGH

    @property
    def url(self) -> str:
        return DOCS_URL.format(name=self.name)

    def sort_key(self):
        return (str(self.path), self.cell or 0, self.location, self.code)

    @property
    def where(self) -> str:
        """`row:col`, or `cell N:row:col` in a notebook (Ruff's spelling)."""
        at = f"{self.location.row}:{self.location.column}"
        return f"cell {self.cell}:{at}" if self.cell is not None else at

    def to_json(self) -> dict:
        return {
            "category": self.category,
            "cell": self.cell,
            "code": self.code,
            "end_location": self.end_location.to_json(),
            "filename": str(self.path),
            "fix": self.fix.to_json() if self.fix else None,
            "location": self.location.to_json(),
            "message": self.message,
            "name": self.name,
            "noqa_row": self.noqa_row,
            "severity": "error",
            "url": self.url,
            **({"hint": self.hint} if self.hint else {}),
            "confidence": self.confidence,
            **({"related": [r.to_json(str(self.path)) for r in self.related]} if self.related else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> Diagnostic:
        return cls(
            data["code"],
            data["name"],
            data["message"],
            data["category"],
            Path(data["filename"]),
            Location.from_json(data["location"]),
            Location.from_json(data["end_location"]),
            Fix.from_json(data["fix"]) if data["fix"] else None,
            data["noqa_row"],
            data.get("cell"),
            data.get("hint"),
            tuple(Step.from_json(r, data["filename"]) for r in data.get("related", ())),
            data.get("confidence", HIGH),
        )
