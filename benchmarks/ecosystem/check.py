"""Ecosystem check: run two versions of xlalint over real repositories and compare their findings.

Built like Ruff's ecosystem check and mypy_primer. The corpus is a list of public repositories
pinned to commits (REPOS.tsv: repo, commit, kind, ...); each is extracted from a local git mirror
into `<corpus>/<owner>+<name>/` (its Python, TOML and CFG files and requirements, with an empty
`.git` folder as the checkout's root marker) and checked from its root as a user would:

    <version> check --output-format json --exit-zero --no-cache [ARGS] .

A version is an xlalint command (`--base /path/venv/bin/xlalint`, `--head xlalint`), a git
revision of this repository installed into a throwaway environment (`--base-rev COMMIT`), or a
folder of reports saved by an earlier run (`--base-reports DIR`, written by `--save DIR`).

The report lists, per rule, the findings that appeared and disappeared (path:line and message),
then totals; with the ledger (ledger.tsv next to this script: one judged finding per row) it says
how many of the head's findings are unjudged and the precision of each rule family. `--json`
prints the same as one JSON object. `--update-ledger` appends the head's unjudged findings to the
ledger as `unjudged` rows, for a judge to read.

Findings are keyed by (repo, path, code, stripped source line) and matched by nearest line, so a
verdict survives lines shifting above it.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_LEDGER = os.path.join(HERE, "ledger.tsv")
DEFAULT_LOOPS = os.path.join(HERE, "loops.tsv")


def _find_repos_list() -> str:
    """`shared/ecosystem/REPOS.tsv` beside this checkout or one of its parents (../shared)."""
    here = ROOT
    while True:
        cand = os.path.join(os.path.dirname(here), "shared", "ecosystem", "REPOS.tsv")
        if os.path.isfile(cand) or os.path.dirname(here) == here:
            return (
                cand
                if os.path.isfile(cand)
                else os.path.join(os.path.dirname(ROOT), "shared", "ecosystem", "REPOS.tsv")
            )
        here = os.path.dirname(here)


DEFAULT_REPOS = _find_repos_list()
DEFAULT_CORPUS = os.path.join(os.path.expanduser("~"), ".cache", "xlalint-ecosystem")
DEFAULT_MIRRORS = os.path.join(os.sep, "work", ".mirror")

VERDICTS = ("right", "wrong", "debatable", "unjudged")
LEDGER_COLUMNS = ("repo", "path", "line", "code", "preview", "verdict", "reason", "text", "message")
FAMILIES = ("XLA", "XLA-migration", "DYN", "TPU", "JAX", "other")
KEEP_SUFFIXES = (".py", ".toml", ".cfg")


class CheckError(Exception):
    """A bad input: reported as one line, exit status 2."""


# --------------------------------------------------------------------------------------------
# Findings and keys


@dataclass(frozen=True)
class Finding:
    repo: str
    path: str
    line: int
    code: str
    message: str
    text: str  # the finding's source line, stripped: what a verdict is attached to
    confidence: str = "high"  # "possible": shown only with --confidence possible (issue 37)

    @property
    def anchor(self) -> tuple[str, str, str, str]:
        """What survives a line shift: the place without its line number."""
        return (self.repo, self.path, self.code, self.text)


# XLA7xx rules that judge run-time cost (as the performance rules do), not portability: per step
# (XLA703 gc, XLA704 batch uploads, XLA705/XLA708 redundant all-reduces, XLA707 host-built
# constants uploaded), or the whole run's input work repeated on every replica (XLA706)
PER_STEP_QUIRKS = {"XLA703", "XLA704", "XLA705", "XLA706", "XLA707", "XLA708"}


def family(code: str) -> str:
    """The rule family a code belongs to, for precision: XLA6xx/7xx are migrations (but for the
    XLA7xx rules about per-step cost, which count with the performance rules)."""
    for prefix in ("DYN", "TPU", "JAX"):
        if code.startswith(prefix):
            return prefix
    if code.startswith("XLA"):
        return "XLA-migration" if code[3:4] in ("6", "7") and code not in PER_STEP_QUIRKS else "XLA"
    return "other"


def _source_line(lines_of, repo: str, path: str, line: int) -> str:
    lines = lines_of(repo, path)
    if 1 <= line <= len(lines):
        return " ".join(lines[line - 1].split())
    return ""


def parse_report(repo: str, raw: str | bytes, lines_of) -> list[Finding]:
    """Findings of one repository's JSON report; `lines_of(repo, path)` gives a file's lines."""
    try:
        items = json.loads(raw or "[]")
    except json.JSONDecodeError as exc:
        raise CheckError(f"{repo}: the report is not JSON ({exc.msg} at {exc.pos})") from None
    if isinstance(items, dict):  # a wrapper object, should a version write one
        items = items.get("findings") or items.get("diagnostics") or []
    if not isinstance(items, list):
        raise CheckError(f"{repo}: the report is not a list of findings")
    found = []
    for item in items:
        path = str(item.get("filename", "")).replace(os.sep, "/")
        path = path.removeprefix("./")
        line = int((item.get("location") or {}).get("row") or 0)
        code = str(item.get("code") or "")
        found.append(
            Finding(
                repo,
                path,
                line,
                code,
                " ".join(str(item.get("message", "")).split()),
                _source_line(lines_of, repo, path, line),
                str(item.get("confidence") or "high"),
            )
        )
    return sorted(found, key=lambda f: (f.repo, f.path, f.line, f.code, f.message))


def match(old: list, new: list, key=lambda x: x) -> tuple[list[tuple], list, list]:
    """Pair `old` with `new` items on the same anchor, nearest line first (a multiset match).

    Returns (pairs, only_old, only_new). `key(x)` gives the Finding-like object of an item.
    """
    by_anchor: dict[tuple, list[int]] = defaultdict(list)
    for i, item in enumerate(old):
        by_anchor[key(item).anchor].append(i)
    candidates = []
    for j, item in enumerate(new):
        k = key(item)
        for i in by_anchor.get(k.anchor, ()):
            o = key(old[i])
            candidates.append((abs(o.line - k.line), o.message != k.message, i, j))
    candidates.sort()
    used_old: set[int] = set()
    used_new: set[int] = set()
    pairs = []
    for _dist, _msg, i, j in candidates:
        if i in used_old or j in used_new:
            continue
        used_old.add(i)
        used_new.add(j)
        pairs.append((old[i], new[j]))
    only_old = [x for i, x in enumerate(old) if i not in used_old]
    only_new = [x for j, x in enumerate(new) if j not in used_new]
    return pairs, only_old, only_new


@dataclass
class Diff:
    appeared: list[Finding]
    disappeared: list[Finding]
    unchanged: int
    base_total: int
    head_total: int


def diff(base: list[Finding], head: list[Finding]) -> Diff:
    pairs, gone, new = match(base, head)
    return Diff(new, gone, len(pairs), len(base), len(head))


# --------------------------------------------------------------------------------------------
# The ledger


@dataclass
class Entry:
    repo: str
    path: str
    line: int
    code: str
    preview: str
    verdict: str
    reason: str
    text: str
    message: str

    @property
    def anchor(self) -> tuple[str, str, str, str]:
        return (self.repo, self.path, self.code, self.text)


def read_ledger(path: str) -> list[Entry]:
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    entries = []
    for n, row in enumerate(rows, start=2):
        missing = [c for c in LEDGER_COLUMNS if row.get(c) is None]
        if missing:
            raise CheckError(f"{path}:{n}: missing column(s) {', '.join(missing)}")
        verdict = row["verdict"].strip()
        if verdict not in VERDICTS:
            raise CheckError(f"{path}:{n}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        try:
            line = int(row["line"])
        except ValueError:
            raise CheckError(f"{path}:{n}: line {row['line']!r} is not a number") from None
        entries.append(Entry(**{**{c: row[c] for c in LEDGER_COLUMNS}, "line": line, "verdict": verdict}))
    return entries


def _cell(value: object) -> str:
    return " ".join(str(value).replace("\t", " ").split())


def write_ledger(path: str, entries: list[Entry]) -> None:
    """Write atomically, sorted by place, so a diff of the ledger reads like a diff of findings."""
    out = io.StringIO()
    out.write("\t".join(LEDGER_COLUMNS) + "\n")
    for e in sorted(entries, key=lambda e: (e.repo, e.path, e.line, e.code, e.preview, e.text)):
        out.write("\t".join(_cell(getattr(e, c)) for c in LEDGER_COLUMNS) + "\n")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".ledger-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(out.getvalue())
    os.replace(tmp, path)


def judge(findings: list[Finding], ledger: list[Entry]) -> list[tuple[Finding, Entry | None]]:
    """Each finding with its ledger entry (None: not in the ledger)."""
    pairs, _, _ = match(ledger, findings)
    verdict_of = {id(f): e for e, f in pairs}
    return [(f, verdict_of.get(id(f))) for f in findings]


@dataclass
class Tally:
    right: int = 0
    wrong: int = 0
    debatable: int = 0
    unjudged: int = 0

    @property
    def judged(self) -> int:
        return self.right + self.wrong + self.debatable

    @property
    def precision(self) -> float | None:
        """right / (right + wrong); debatable findings are counted apart, not in either."""
        decided = self.right + self.wrong
        return self.right / decided if decided else None


def precision_by_family(judged: list[tuple[Finding, Entry | None]]) -> dict[str, Tally]:
    """Per family (and "all") for the default findings; a possible finding (a run with
    `--confidence possible`) counts under "possible:<family>", apart: its precision is its own."""
    tallies: dict[str, Tally] = {}
    for f, entry in judged:
        prefix = "" if f.confidence == "high" else f"{f.confidence}:"
        for name in (prefix + family(f.code), prefix + "all"):
            t = tallies.setdefault(name, Tally())
            verdict = entry.verdict if entry is not None else "unjudged"
            setattr(t, verdict, getattr(t, verdict) + 1)
    return tallies


LOOP_STATES = ("found", "possible", "missed")


def loop_recall(loops: list[dict[str, str]], head: list[Finding]) -> dict[str, dict[str, int]]:
    """The hazards read in training loops (`loops.tsv`: repo, path, line, category, ...) against the
    head's findings: `found` when a default finding is on that line, `possible` when only a possible
    one is, else `missed`; per repository kind of code ("all" and each repo) and overall. A loop read and
    found clean (category `none`, its line naming the loop or not) is no hazard: left out."""
    at: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for f in head:
        at[(f.repo, f.path, f.line)].add(f.confidence)
    out: dict[str, dict[str, int]] = {}
    for row in loops:
        # a loop read and found clean (category "none") is no hazard, whether or not it names the loop's line
        if row.get("category") == "none" or not str(row.get("line", "")).strip().isdigit():
            continue
        seen = at.get((local_name(row["repo"]), row["path"], int(row["line"])), set()) | at.get(
            (row["repo"], row["path"], int(row["line"])), set()
        )
        state = "found" if "high" in seen else "possible" if seen else "missed"
        for key in ("all", row["repo"]):
            counts = out.setdefault(key, dict.fromkeys(LOOP_STATES, 0))
            counts[state] += 1
    return out


def read_loops(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def new_entries(judged: list[tuple[Finding, Entry | None]], preview: bool) -> list[Entry]:
    return [
        Entry(f.repo, f.path, f.line, f.code, "yes" if preview else "no", "unjudged", "", f.text, f.message)
        for f, entry in judged
        if entry is None
    ]


# --------------------------------------------------------------------------------------------
# The corpus


def read_repos(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path):
        raise CheckError(f"no repository list at {path} (give --repos)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows or "repo" not in rows[0] or "commit" not in rows[0]:
        raise CheckError(f"{path}: needs the columns repo and commit")
    return rows


def local_name(repo: str) -> str:
    return repo.replace("/", "+")


def _git_dir(mirrors: str, repo: str) -> str:
    base = os.path.join(mirrors, local_name(repo), "repo")
    for cand in (base, os.path.join(base, ".git")):
        if os.path.isfile(os.path.join(cand, "HEAD")):
            return cand
    raise CheckError(f"no mirror of {repo} under {mirrors}")


def _wanted(name: str) -> bool:
    return name.endswith(KEEP_SUFFIXES) or "requirements" in os.path.basename(name)


def extract(git_dir: str, commit: str, dest: str) -> int:
    """Write the commit's Python and project files under `dest` (an empty `.git` marks the root).

    Mirrors may lack other blobs (data files), so only what a linter reads is taken. Returns the
    number of files written. The folder is replaced whole, through a temporary sibling.
    """
    listing = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "-r", "-z", commit], capture_output=True, check=False
    )
    if listing.returncode:
        raise CheckError(f"{git_dir}: cannot list {commit}: {listing.stderr.decode(errors='replace').strip()}")
    wanted = []
    for entry in listing.stdout.split(b"\0"):
        if not entry:
            continue
        meta, raw_path = entry.split(b"\t", 1)
        mode, kind, sha = meta.split()
        name = raw_path.decode("utf-8", "surrogateescape")
        if kind == b"blob" and mode != b"120000" and _wanted(name):
            wanted.append((sha, name))
    blobs = subprocess.run(
        ["git", "--git-dir", git_dir, "cat-file", "--batch"],
        input=b"".join(sha + b"\n" for sha, _ in wanted),
        capture_output=True,
        check=True,
    ).stdout
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".extract-")
    os.makedirs(os.path.join(tmp, ".git"))
    pos = written = 0
    for sha, name in wanted:
        end = blobs.index(b"\n", pos)
        header = blobs[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":
            continue
        size = int(header[2])
        data, pos = blobs[pos : pos + size], pos + size + 1
        target = os.path.normpath(os.path.join(tmp, name))
        if not target.startswith(tmp + os.sep):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
        written += 1
    with open(os.path.join(tmp, ".ecosystem-commit"), "w") as f:
        f.write(commit + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return written


def ensure_checkouts(repos: list[dict[str, str]], corpus: str, mirrors: str | None) -> dict[str, str]:
    """{repo: its checkout}; a checkout missing or at another commit is extracted from its mirror."""
    where = {}
    for row in repos:
        dest = os.path.join(corpus, local_name(row["repo"]))
        stamp = os.path.join(dest, ".ecosystem-commit")
        current = None
        if os.path.isfile(stamp):
            with open(stamp, encoding="utf-8") as f:
                current = f.read().strip()
        if current != row["commit"] and not (current is None and os.path.isdir(os.path.join(dest, ".git"))):
            if mirrors is None:
                raise CheckError(f"no checkout of {row['repo']} at {row['commit'][:12]} in {corpus} (give --mirrors)")
            n = extract(_git_dir(mirrors, row["repo"]), row["commit"], dest)
            print(f"extracted {row['repo']} @ {row['commit'][:12]}: {n} files", file=sys.stderr)
        where[row["repo"]] = dest
    return where


class Lines:
    """File lines of the checkouts, read once."""

    def __init__(self, where: dict[str, str]):
        self.where = where
        self.cache: dict[tuple[str, str], list[str]] = {}

    def __call__(self, repo: str, path: str) -> list[str]:
        key = (repo, path)
        if key not in self.cache:
            full = os.path.join(self.where.get(repo, ""), path)
            try:
                with open(full, encoding="utf-8", errors="replace") as f:
                    self.cache[key] = f.read().splitlines()
            except OSError:
                self.cache[key] = []
        return self.cache[key]


# --------------------------------------------------------------------------------------------
# Versions


@dataclass
class Version:
    label: str
    command: list[str] | None = None  # None: read saved reports
    reports: str | None = None
    args: list[str] = field(default_factory=list)


def _command(text: str) -> list[str]:
    argv = shlex.split(text)
    if not argv:
        raise CheckError("an empty xlalint command")
    exe = argv[0]
    if os.sep in exe:
        exe = os.path.abspath(exe)
        if not os.access(exe, os.X_OK):
            raise CheckError(f"{argv[0]}: not an executable")
    elif shutil.which(exe) is None:
        raise CheckError(f"{exe}: not found on PATH")
    return [exe, *argv[1:]]


# How the source folders install (setup.py's ROOTS and DATA), should a revision's setup.py not say.
DEFAULT_LAYOUT = {
    "xlalint": "xlalint",
    "xlalint.rules": "rules",
    "xlalint.runtime": "runtime",
    "xlalint.docs": "docs",
}


def package_layout(setup_py: str) -> dict[str, str]:
    """{import name: source folder} from the literal ROOTS and DATA dicts of a revision's setup.py."""
    layout: dict[str, str] = {}
    try:
        with open(setup_py, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return dict(DEFAULT_LAYOUT)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("ROOTS", "DATA") for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, dict):
                layout.update({str(k): str(v) for k, v in value.items()})
    if "xlalint" not in layout:
        return dict(DEFAULT_LAYOUT)
    # A nested data folder (docs/rules) comes with its parent.
    return {
        name: folder
        for name, folder in layout.items()
        if not any(folder.startswith(other + "/") for other in layout.values())
    }


def build_rev(rev: str, workdir: str) -> list[str]:
    """Lay out this repository's package at `rev` as it installs; return a command that runs it.

    The revision's tree (`git archive`) is arranged as setup.py maps it (`rules/` as
    `xlalint.rules`, ...) under `workdir/pkg`, which goes first on the import path of the running
    interpreter, whose environment provides the dependencies (libcst, click, ...). No build step,
    so no build backend or network is needed.
    """
    src = os.path.join(workdir, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=False)
    if archive.returncode:
        raise CheckError(f"no revision {rev!r} in {ROOT}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
    pkg = os.path.join(workdir, "pkg")
    for name, folder in sorted(package_layout(os.path.join(src, "setup.py")).items(), key=lambda kv: kv[0].count(".")):
        origin = os.path.join(src, folder)
        if os.path.isdir(origin):
            shutil.copytree(origin, os.path.join(pkg, *name.split(".")), dirs_exist_ok=True)
    if not os.path.isfile(os.path.join(pkg, "xlalint", "__main__.py")):
        raise CheckError(f"revision {rev!r} has no runnable xlalint package (xlalint/__main__.py)")
    launcher = os.path.join(workdir, "xlalint")
    with open(launcher, "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\nPYTHONPATH={shlex.quote(pkg)} exec {shlex.quote(sys.executable)} -m xlalint "$@"\n')
    os.chmod(launcher, 0o755)
    return [launcher]


def run_version(version: Version, repo: str, checkout: str, save: str | None) -> str:
    """The raw JSON report of one version on one repository."""
    if version.command is None:
        path = os.path.join(version.reports or "", local_name(repo) + ".json")
        if not os.path.isfile(path):
            raise CheckError(f"{version.label}: no saved report {path}")
        with open(path, encoding="utf-8") as f:
            return f.read()
    argv = [*version.command, "check", "--output-format", "json", "--exit-zero", "--no-cache", *version.args, "."]
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, check=False)
    if save:
        folder = os.path.join(save, version.label)
        os.makedirs(folder, exist_ok=True)
        for suffix, content in ((".json", proc.stdout), (".err", proc.stderr)):
            _write_atomic(os.path.join(folder, local_name(repo) + suffix), content)
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckError(f"{version.label} failed on {repo} (exit {proc.returncode}): {tail}")
    return proc.stdout


def _write_atomic(path: str, content: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(content)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# Reports


def summarize(d: Diff, tallies: dict[str, Tally] | None, loops: dict[str, dict[str, int]] | None = None) -> dict:
    per_rule: dict[str, dict[str, list[dict]]] = defaultdict(lambda: {"appeared": [], "disappeared": []})
    for kind, items in (("appeared", d.appeared), ("disappeared", d.disappeared)):
        for f in items:
            per_rule[f.code][kind].append(asdict(f))
    out = {
        "totals": {
            "base": d.base_total,
            "head": d.head_total,
            "appeared": len(d.appeared),
            "disappeared": len(d.disappeared),
            "unchanged": d.unchanged,
        },
        "rules": {code: per_rule[code] for code in sorted(per_rule)},
    }
    if tallies is not None:
        out["ledger"] = {
            name: {**asdict(t), "precision": t.precision}
            for name, t in sorted(tallies.items(), key=lambda kv: (":" in kv[0], kv[0].endswith("all"), kv[0]))
        }
    if loops:
        out["loops"] = loops
    return out


def render(summary: dict, labels: tuple[str, str]) -> str:
    t = summary["totals"]
    lines = []
    for code, changes in summary["rules"].items():
        lines.append(f"## {code}: +{len(changes['appeared'])} -{len(changes['disappeared'])}")
        for sign, kind in (("+", "appeared"), ("-", "disappeared")):
            for f in changes[kind]:
                lines.append(f"{sign} {f['repo']}:{f['path']}:{f['line']}: {f['code']} {f['message']}")
        lines.append("")
    lines.append(
        f"{labels[0]}: {t['base']} findings; {labels[1]}: {t['head']} findings; "
        f"+{t['appeared']} -{t['disappeared']} ({t['unchanged']} unchanged)"
    )
    if "ledger" in summary:
        lines.append("")
        lines.append(f"ledger verdicts of {labels[1]}'s findings (precision = right / (right + wrong)):")
        lines.append(
            f"{'family':<14}{'findings':>9}{'right':>7}{'wrong':>7}{'debat.':>7}{'unjudged':>9}{'precision':>10}"
        )
        for name, row in summary["ledger"].items():
            total = row["right"] + row["wrong"] + row["debatable"] + row["unjudged"]
            p = "-" if row["precision"] is None else f"{row['precision']:.3f}"
            lines.append(
                f"{name:<14}{total:>9}{row['right']:>7}{row['wrong']:>7}{row['debatable']:>7}{row['unjudged']:>9}{p:>10}"
            )
    if "loops" in summary:
        c = summary["loops"]["all"]
        read = sum(c.values())
        lines.append("")
        lines.append(
            f"hazards read in training loops: {read}; reported {c['found']} ({c['found'] / read:.2f}), "
            f"possible only {c['possible']}, missed {c['missed']}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------


def _version(
    label: str, command: str | None, rev: str | None, reports: str | None, args: list[str], workdir: str
) -> Version:
    chosen = [x for x in (command, rev, reports) if x]
    if len(chosen) != 1:
        raise CheckError(f"give exactly one of --{label}, --{label}-rev, --{label}-reports")
    if reports:
        if not os.path.isdir(reports):
            raise CheckError(f"--{label}-reports: no folder {reports}")
        return Version(label, None, reports, args)
    if rev:
        return Version(label, build_rev(rev, os.path.join(workdir, label)), None, args)
    return Version(label, _command(command or ""), None, args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--base", help="the base xlalint command")
    p.add_argument("--base-rev", help="a revision of this repository to build and run as the base")
    p.add_argument("--base-reports", help="a folder of saved reports to read as the base")
    p.add_argument("--head", help="the head xlalint command")
    p.add_argument("--head-rev", help="a revision of this repository to build and run as the head")
    p.add_argument("--head-reports", help="a folder of saved reports to read as the head")
    p.add_argument("--args", default="", help='extra arguments for both versions, e.g. "--preview"')
    p.add_argument("--base-args", default=None, help="extra arguments for the base only (default: --args)")
    p.add_argument("--head-args", default=None, help="extra arguments for the head only (default: --args)")
    p.add_argument("--repos", default=DEFAULT_REPOS, help="the repository list (TSV with repo and commit)")
    p.add_argument("--only", action="append", default=[], help="check only this repository (repeatable)")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="where the checkouts are (default: %(default)s)")
    p.add_argument("--mirrors", default=None, help="git mirrors to extract missing checkouts from")
    p.add_argument("--save", help="keep each version's raw reports under DIR/base and DIR/head")
    p.add_argument("--ledger", default=DEFAULT_LEDGER, help="the verdicts (default: %(default)s)")
    p.add_argument("--loops", default=DEFAULT_LOOPS, help="hazards read in training loops (default: %(default)s)")
    p.add_argument("--update-ledger", action="store_true", help="append the head's unjudged findings as rows")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-j", "--jobs", type=int, default=1, help="repositories checked at once")
    ns = p.parse_args(argv)
    try:
        repos = read_repos(ns.repos)
        if ns.only:
            known = {r["repo"] for r in repos}
            unknown = [r for r in ns.only if r not in known]
            if unknown:
                raise CheckError(f"not in {ns.repos}: {', '.join(unknown)}")
            repos = [r for r in repos if r["repo"] in ns.only]
        where = ensure_checkouts(repos, ns.corpus, ns.mirrors)
        lines_of = Lines(where)
        with tempfile.TemporaryDirectory(prefix="xlalint-eco-") as workdir:
            base_args = shlex.split(ns.args if ns.base_args is None else ns.base_args)
            head_args = shlex.split(ns.args if ns.head_args is None else ns.head_args)
            versions = (
                _version("base", ns.base, ns.base_rev, ns.base_reports, base_args, workdir),
                _version("head", ns.head, ns.head_rev, ns.head_reports, head_args, workdir),
            )
            results: dict[str, list[Finding]] = {"base": [], "head": []}

            def one(item):
                version, row = item
                raw = run_version(version, row["repo"], where[row["repo"]], ns.save)
                return version.label, parse_report(row["repo"], raw, lines_of)

            work = [(v, r) for r in repos for v in versions]
            with ThreadPoolExecutor(max_workers=max(1, ns.jobs)) as pool:
                for label, found in pool.map(one, work):
                    results[label].extend(found)
        d = diff(results["base"], results["head"])
        ledger = read_ledger(ns.ledger)
        judged = judge(results["head"], ledger)
        tallies = precision_by_family(judged)
        if ns.update_ledger:
            added = new_entries(judged, preview="--preview" in head_args)
            if added:
                write_ledger(ns.ledger, ledger + added)
            print(f"ledger: {len(added)} unjudged row(s) added to {ns.ledger}", file=sys.stderr)
        summary = summarize(d, tallies, loop_recall(read_loops(ns.loops), results["head"]))
        print(json.dumps(summary, indent=1) if ns.json else render(summary, ("base", "head")))
        return 0
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
