"""`xlalint server`: the Language Server Protocol over standard input and output (pygls + lsprotocol,
the `xlalint[lsp]` extra).

One path, not two: a document's unsaved text is checked as `xlalint check --stdin-filename PATH -`
checks it (`Workspace.check` with the text `given`, the settings `cli.resolve_settings` finds from the
document's folder, the project's facts, `# noqa`), and fixed as `xlalint fix` fixes it
(`Workspace.fix`). What the server adds is only the protocol: positions (xlalint's 1-based rows and
character columns to LSP's 0-based lines and UTF-16 code units), debouncing, code actions, hover.

The server reads the project's cache (`.xlalint_cache`, written by `check`) but never writes it:
what is computed for an unsaved buffer stays in memory, and leaves with the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from . import __version__
from .cache import ProjectCache
from .cli import Options, resolve_settings
from .config import CONFIG_FILES, ConfigError
from .diagnostics import Applicability, Diagnostic, Edit, Location, shown_at
from .explain import explain_text
from .noqa import add_noqa
from .notebook import is_notebook
from .rules import RULES_BY_CODE
from .workspace import Workspace, run_root

log = logging.getLogger(__name__)

SOURCE = "xlalint"
DEBOUNCE_S = 0.25  # after a change, wait this long for the next before checking (typing)
FIX_ALL_KIND = "source.fixAll.xlalint"
PYTHON_SUFFIXES = (".py", ".pyi")
# files whose change can change an open document's findings: its settings, the pin `target-version`
# falls back to, and the other modules of its project (their summaries)
WATCHED = [*(f"**/{name}" for name in CONFIG_FILES), "**/requirements*.txt", "**/setup.py", "**/*.py"]
RELATED_MESSAGE = "another place of the same cause"


# -- positions: xlalint's 1-based rows and character columns <-> LSP's 0-based lines and code units ----

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # LSP's line ends: \r\n, \r, \n (as Python's)


def _units(text: str, encoding: str) -> int:
    """The length of `text` in the negotiated position encoding's code units (UTF-16 by default)."""
    if encoding == lsp.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8", errors="surrogatepass"))
    if encoding == lsp.PositionEncodingKind.Utf32:
        return len(text)
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


class Lines:
    """A document's text as the protocol counts it: lines split at \\r\\n, \\r and \\n only (as
    Python's tokenizer and LSP do; not at \\f or \\u2028), columns in `encoding`'s code units."""

    def __init__(self, text: str, encoding: str = lsp.PositionEncodingKind.Utf16) -> None:
        self.text = text
        self.encoding = encoding
        self.lines = _LINE.findall(text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def position(self, location: Location) -> lsp.Position:
        """xlalint's `Location` (1-based row, 1-based character column) as an LSP position."""
        line = location.row - 1
        if line < 0:
            return lsp.Position(0, 0)
        if line >= len(self.lines):
            return self.offset_position(len(self.text))
        body = self.lines[line].rstrip("\r\n")
        return lsp.Position(line, _units(body[: max(location.column - 1, 0)], self.encoding))

    def range(self, start: Location, end: Location) -> lsp.Range:
        return lsp.Range(self.position(start), self.position(end))

    def offset_position(self, offset: int) -> lsp.Position:
        """The LSP position of a character offset into the text."""
        offset = max(0, min(offset, len(self.text)))
        line = _bisect(self.starts, offset)
        if line >= len(self.lines):  # the end of a text that ends with a newline: the empty last line
            return lsp.Position(len(self.lines), 0)
        return lsp.Position(line, _units(self.text[self.starts[line] : offset], self.encoding))

    def line_range(self, row: int) -> lsp.Range:
        """The whole of 1-based `row` (clamped to the text), without its line end."""
        line = min(max(row - 1, 0), max(len(self.lines) - 1, 0))
        body = self.lines[line].rstrip("\r\n") if self.lines else ""
        return lsp.Range(lsp.Position(line, 0), lsp.Position(line, _units(body, self.encoding)))


def _bisect(starts: list[int], offset: int) -> int:
    low, high = 0, len(starts) - 1
    while low < high:  # the last start <= offset
        middle = (low + high + 1) // 2
        if starts[middle] <= offset:
            low = middle
        else:
            high = middle - 1
    return low


def _edit_offset(lines: list[str], starts: list[int], location: Location) -> int:
    """A fix edit's `Location` as a character offset. Fix edits count rows as `str.splitlines`
    splits the text (see `fixing.apply.text_edits`): their own convention, read back here with it."""
    if location.row - 1 >= len(lines):
        return starts[-1]
    return starts[location.row - 1] + location.column - 1


def text_edits(text: str, edits: tuple[Edit, ...], lines: Lines) -> list[lsp.TextEdit]:
    """A fix's edits (xlalint's `Edit`s on `text`) as LSP text edits."""
    split = text.splitlines(keepends=True)
    starts = [0]
    for line in split:
        starts.append(starts[-1] + len(line))
    found = []
    for edit in edits:
        start, end = _edit_offset(split, starts, edit.location), _edit_offset(split, starts, edit.end_location)
        found.append(lsp.TextEdit(lsp.Range(lines.offset_position(start), lines.offset_position(end)), edit.content))
    return found


def replace_edit(before: str, after: str, lines: Lines) -> list[lsp.TextEdit]:
    """One edit turning `before` into `after`: the span between their common prefix and suffix."""
    if before == after:
        return []
    prefix = 0
    limit = min(len(before), len(after))
    while prefix < limit and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and before[len(before) - 1 - suffix] == after[len(after) - 1 - suffix]:
        suffix += 1
    new = after[prefix : len(after) - suffix]
    return [lsp.TextEdit(lsp.Range(lines.offset_position(prefix), lines.offset_position(len(before) - suffix)), new)]


# -- findings as LSP diagnostics ------------------------------------------------------------------------


def related_information(finding: Diagnostic, uri: str, lines: Lines) -> list[lsp.DiagnosticRelatedInformation]:
    """A finding's evidence chain (`Diagnostic.related`: each step's place, in this file or another,
    and what it shows) as `relatedInformation`."""
    found = []
    for step in finding.related:
        start = end = step.location
        message = step.message or RELATED_MESSAGE
        if step.path is None or Path(step.path) == finding.path:
            where = lsp.Location(uri, lines.range(start, end))
        else:
            other = Path(step.path) if Path(step.path).is_absolute() else finding.path.parent / step.path
            where = lsp.Location(other.resolve().as_uri(), _other_file_range(other, start, end))
        found.append(lsp.DiagnosticRelatedInformation(where, message))
    return found


def _other_file_range(path: Path, start: Location, end: Location) -> lsp.Range:
    """A range in another file, converted with that file's own text (as saved) where it can be read."""
    try:
        from .source import read_source

        return Lines(read_source(path).text).range(start, end)
    except Exception:  # noqa: BLE001 - unreadable: the rows are right, columns as characters
        return lsp.Range(
            lsp.Position(start.row - 1, max(start.column - 1, 0)), lsp.Position(end.row - 1, max(end.column - 1, 0))
        )


def to_lsp(finding: Diagnostic, uri: str, lines: Lines) -> lsp.Diagnostic:
    rule = RULES_BY_CODE.get(finding.code)
    message = finding.message
    if finding.hint:
        message += f"\nhint: {finding.hint}"
    elif rule is not None and getattr(rule, "hint", None):
        message += f"\nhint: {rule.hint}"
    return lsp.Diagnostic(
        range=lines.range(finding.location, finding.end_location),
        message=message,
        severity=lsp.DiagnosticSeverity.Warning,  # Ruff's choice for lint findings: errors are parse errors
        code=finding.code,
        code_description=lsp.CodeDescription(href=finding.url),
        source=SOURCE,
        tags=[lsp.DiagnosticTag.Deprecated] if finding.category == "deprecated_xla_api" else None,
        related_information=related_information(finding, uri, lines) or None,
        data={"code": finding.code, "row": finding.location.row, "column": finding.location.column},
    )


_WHERE = re.compile(r":(?P<row>\d+):(?P<col>\d+): (?P<kind>error|warning): (?P<message>.*)\Z", re.S)
_NOWHERE = re.compile(r": (?P<kind>error|warning): (?P<message>.*)\Z", re.S)


def problem_diagnostic(error: str, path: Path, lines: Lines) -> lsp.Diagnostic:
    """The one diagnostic of a document that cannot be checked (a syntax error, bytes its encoding
    cannot hold, syntax newer than the running Python): `check`'s one-line error, at its line."""
    rest = error[len(str(path)) :] if error.startswith(str(path)) else f": error: {error}"
    match = _WHERE.match(rest) or _NOWHERE.match(rest)
    kind, message, row = "error", rest.lstrip(": "), 1
    if match is not None:
        kind, message = match["kind"], match["message"]
        row = int(match.groupdict().get("row") or 1)
    return lsp.Diagnostic(
        range=lines.line_range(row),
        message=message,
        severity=lsp.DiagnosticSeverity.Error if kind == "error" else lsp.DiagnosticSeverity.Information,
        source=SOURCE,
    )


def _contains(outer: lsp.Range, inner: lsp.Range) -> bool:
    """The ranges overlap (a point range touching the other counts)."""
    start, end = (outer.start.line, outer.start.character), (outer.end.line, outer.end.character)
    a, b = (inner.start.line, inner.start.character), (inner.end.line, inner.end.character)
    return a <= end and start <= b


# -- the server -------------------------------------------------------------------------------------------


@dataclass
class Checked:
    """A document as last checked: its version and text, the findings and what was published."""

    version: int | None
    text: str
    path: Path
    findings: list[tuple[Diagnostic, lsp.Diagnostic]] = field(default_factory=list)
    published: list[lsp.Diagnostic] = field(default_factory=list)
    unsafe_fixes: bool = False


class XlalintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("xlalint", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        # one thread checks: the workspaces and their caches are not shared between threads; a check
        # waiting there when a newer edit arrives is cancelled before it starts
        self.checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xlalint-check")
        self.caches: dict[Path, dict[Path, ProjectCache]] = {}  # per run root: the in-memory caches
        self.pending: dict[str, asyncio.Task] = {}
        # by URI, the last check of each document: without fixes (the diagnostics), with them (code actions)
        self.checked: dict[str, Checked] = {}
        self.with_fixes: dict[str, Checked] = {}
        self.debounce = DEBOUNCE_S  # `initializationOptions: {"debounce": seconds}` changes it

    # -- running the engine (in the checker thread) ------------------------------------------------------
    def _workspace(self, path: Path, settings, rules, *, with_edits: bool = True) -> Workspace:
        root = run_root([path.parent if path.parent.exists() else Path.cwd()])
        cache_dir = os.environ.get("XLALINT_CACHE_DIR")
        return Workspace(
            settings,
            rules,
            jobs=1,  # in this process: no pool forked from a threaded server
            cache=True,  # read: what `check` cached is used; never saved (see the module's docstring)
            cache_dir=Path(cache_dir) if cache_dir else None,
            with_edits=with_edits,  # code actions apply each fix's edits
            root=root,
            caches=self.caches.setdefault(root, {}),
        )

    @staticmethod
    def _settings(path: Path):
        """The settings of a document: as `check --stdin-filename PATH -` finds them (from its folder)."""
        settings = resolve_settings(Options(stdin_filename=str(path)), [path.parent])
        from .rules import ALL_RULES

        return settings, settings.selected_rules(ALL_RULES)

    def _check(self, uri: str, path: Path, text: str, version: int | None, fixes: bool = False) -> Checked:
        """`check` on the buffer. Without `fixes`, no fix is built (`fixable` empty, Ruff's meaning:
        the findings are the same): building them on libcst is most of a check's time, and only a
        code action needs them, so they are built when one is asked for."""
        lines = Lines(text, self._encoding())
        done = Checked(version, text, path)
        try:
            settings, rules = self._settings(path)
        except ConfigError as exc:
            done.published = [problem_diagnostic(str(exc), path, lines)]
            return done
        done.unsafe_fixes = settings.unsafe_fixes
        raw = _encode(path, text)
        if isinstance(raw, str):  # a character the file's declared encoding cannot hold
            done.published = [problem_diagnostic(raw, path, lines)]
            return done
        if not fixes:
            settings = dataclasses.replace(settings, fixable=[], unfixable=[])
        workspace = self._workspace(path, settings, rules, with_edits=fixes)
        (outcome,) = workspace.check([path], given={path: raw})
        if outcome.error:
            done.published = [problem_diagnostic(outcome.error, path, lines)]
            return done
        for finding in outcome.diagnostics:
            if shown_at(finding.confidence, settings.confidence):  # what `check` shows, possible ones as it does
                done.findings.append((finding, to_lsp(finding, uri, lines)))
        done.published = [published for _, published in done.findings]
        return done

    def _fix_all(self, path: Path, text: str) -> str | None:
        """The document's text fixed as `xlalint fix` fixes it (its settings decide unsafe fixes);
        None when it cannot be fixed."""
        settings, rules = self._settings(path)
        raw = _encode(path, text)
        if isinstance(raw, str):
            return None
        (outcome,) = self._workspace(path, settings, rules).fix([path], unsafe=settings.unsafe_fixes, given={path: raw})
        if outcome.error or outcome.result is None or outcome.result.fixed is None:
            return None
        from .source import decode_source

        return decode_source(path, outcome.result.fixed).text

    def _encoding(self) -> str:
        try:
            return str(self.workspace.position_encoding or lsp.PositionEncodingKind.Utf16)
        except Exception:  # noqa: BLE001 - before `initialize`
            return lsp.PositionEncodingKind.Utf16

    # -- scheduling (on the event loop) -------------------------------------------------------------------
    def schedule(self, uri: str, delay: float) -> None:
        """Check the document after `delay` seconds, replacing a check of it not yet published."""
        stale = self.pending.pop(uri, None)
        if stale is not None:
            stale.cancel()
        self.pending[uri] = asyncio.get_running_loop().create_task(self._run(uri, delay))

    async def _run(self, uri: str, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            done = await self.check_now(uri)
            if done is not None:
                self.text_document_publish_diagnostics(
                    lsp.PublishDiagnosticsParams(uri=uri, diagnostics=done.published, version=done.version)
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in xlalint on one document: the server goes on
            log.exception("checking %s failed", uri)
            self.window_log_message(lsp.LogMessageParams(lsp.MessageType.Error, f"xlalint: {uri}: {exc!r}"))
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                del self.pending[uri]

    async def check_now(self, uri: str, *, fixes: bool = False) -> Checked | None:
        """The document's findings at its current version (checked again only if it changed);
        `fixes`: with their fixes and edits (for code actions)."""
        document = self.workspace.text_documents.get(uri)
        path = document_path(uri, document.language_id if document is not None else None)
        if document is None or path is None:
            return None
        version, text = document.version, document.source
        store = self.with_fixes if fixes else self.checked
        known = store.get(uri)
        if known is not None and known.version == version and known.text == text:
            return known
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(self.checker, self._check, uri, path, text, version, fixes)
        current = self.workspace.text_documents.get(uri)
        if current is None or current.version != version:
            return None  # edited (or closed) meanwhile: a newer check follows
        store[uri] = done
        return done

    def forget(self, uri: str) -> None:
        self.checked.pop(uri, None)
        self.with_fixes.pop(uri, None)

    def recheck_all(self) -> None:
        for uri in list(self.workspace.text_documents):
            self.forget(uri)
            self.schedule(uri, self.debounce)


def document_path(uri: str, language_id: str | None) -> Path | None:
    """The file a document is (its path names its configuration and project), or None for one the
    server does not check: not a file, a notebook, not Python."""
    if not uri.startswith("file:"):
        return None
    fs_path = to_fs_path(uri)
    if fs_path is None:
        return None
    path = Path(fs_path)
    if is_notebook(path) or (path.suffix not in PYTHON_SUFFIXES and language_id != "python"):
        return None
    return path


def _encode(path: Path, text: str) -> bytes | str:
    """The buffer as the file's bytes: in the encoding its coding declaration names (UTF-8 without
    one), as `check` would read them from disk; else the one-line error `check` gives a file that
    cannot be read, at the first character the encoding cannot hold."""
    import io
    import tokenize

    raw = text.encode("utf-8", errors="surrogatepass")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError:
        return raw  # `check` reports the declaration
    if encoding in ("utf-8", "utf-8-sig"):
        return raw
    try:
        return text.encode(encoding)
    except LookupError:
        return raw  # `check` reports the unknown encoding
    except UnicodeEncodeError as exc:
        row = text.count("\n", 0, exc.start) + 1
        column = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        return f"{path}:{row}:{column}: error: cannot encode as {encoding} (the file's coding declaration): {text[exc.start]!r} is not in it"


server = XlalintServer()


@server.feature(lsp.INITIALIZE)
def initialize(ls: XlalintServer, params: lsp.InitializeParams) -> None:
    options = params.initialization_options
    value = options.get("debounce") if isinstance(options, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 10:
        ls.debounce = float(value)


@server.feature(lsp.INITIALIZED)
async def initialized(ls: XlalintServer, params: lsp.InitializedParams) -> None:
    """Watch the files whose change changes findings (settings, the project's modules) where the
    client can; otherwise the settings are still found afresh at every check."""
    workspace = ls.client_capabilities.workspace
    watch = workspace.did_change_watched_files if workspace is not None else None
    if watch is None or not watch.dynamic_registration:
        return
    options = lsp.DidChangeWatchedFilesRegistrationOptions(watchers=[lsp.FileSystemWatcher(g) for g in WATCHED])
    try:
        await ls.client_register_capability_async(
            lsp.RegistrationParams([lsp.Registration("xlalint-watch", lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES, options)])
        )
    except Exception:  # noqa: BLE001 - a client that refuses: settings are re-read at each check anyway
        log.warning("the client did not register the file watchers")


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: XlalintServer, params: lsp.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: XlalintServer, params: lsp.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, ls.debounce)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: XlalintServer, params: lsp.DidSaveTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)  # the project's facts may read the saved file
    ls.schedule(params.text_document.uri, 0)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: XlalintServer, params: lsp.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    task = ls.pending.pop(uri, None)
    if task is not None:
        task.cancel()
    ls.forget(uri)
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: XlalintServer, params: lsp.DidChangeWatchedFilesParams) -> None:
    ls.recheck_all()  # a configuration or another module changed: every open document again


@server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
def did_change_folders(ls: XlalintServer, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
    ls.recheck_all()


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
async def hover(ls: XlalintServer, params: lsp.HoverParams) -> lsp.Hover | None:
    """On a finding: its rule's explanation, the text of `xlalint explain CODE`."""
    done = await ls.check_now(params.text_document.uri)
    if done is None:
        return None
    at = lsp.Range(params.position, params.position)
    shown = [(finding, published) for finding, published in done.findings if _contains(published.range, at)]
    codes = list(dict.fromkeys(finding.code for finding, _ in shown))
    if not codes:
        return None
    text = "\n\n---\n\n".join(explain_text(RULES_BY_CODE[code]) for code in codes if code in RULES_BY_CODE)
    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), range=shown[0][1].range)


CODE_ACTION_KINDS = [lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.SourceFixAll, FIX_ALL_KIND]


@server.feature(
    lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=CODE_ACTION_KINDS, resolve_provider=True)
)
async def code_action(ls: XlalintServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
    uri = params.text_document.uri
    done = await ls.check_now(uri, fixes=True)
    if done is None:
        return None
    only = params.context.only
    lines = Lines(done.text, ls._encoding())
    actions: list[lsp.CodeAction] = []
    if _wanted(only, lsp.CodeActionKind.QuickFix):
        for finding, published in done.findings:
            if not _contains(params.range, published.range):
                continue
            fix = finding.fix
            if fix is not None and fix.edits and fix.applicability is not Applicability.DISPLAY_ONLY:
                unsafe = fix.applicability is Applicability.UNSAFE
                actions.append(
                    lsp.CodeAction(
                        title=f"xlalint ({finding.code}): {fix.title}" + (" (unsafe)" if unsafe else ""),
                        kind=lsp.CodeActionKind.QuickFix,
                        diagnostics=[published],
                        is_preferred=not unsafe,
                        edit=lsp.WorkspaceEdit(changes={uri: text_edits(done.text, fix.edits, lines)}),
                    )
                )
        for finding, published in done.findings:
            if not _contains(params.range, published.range):
                continue
            suppressed, count = add_noqa(done.text, [(finding.location.row, finding.end_location.row, finding.code)])
            if count:
                actions.append(
                    lsp.CodeAction(
                        title=f"xlalint: suppress {finding.code} on this line (# noqa: {finding.code})",
                        kind=lsp.CodeActionKind.QuickFix,
                        diagnostics=[published],
                        edit=lsp.WorkspaceEdit(changes={uri: replace_edit(done.text, suppressed, lines)}),
                    )
                )
    fixable = any(
        f.fix is not None and f.fix.applicability.allowed(done.unsafe_fixes) and f.fix.edits for f, _ in done.findings
    )
    if fixable and (_wanted(only, FIX_ALL_KIND) or _wanted(only, lsp.CodeActionKind.SourceFixAll)):
        title = (
            "xlalint: fix all findings (unsafe fixes included)"
            if done.unsafe_fixes
            else "xlalint: fix all safe findings"
        )
        action = lsp.CodeAction(title=title, kind=FIX_ALL_KIND, data={"uri": uri, "version": done.version})
        if not _resolves_edits(ls):
            action = await _resolve_fix_all(ls, action)
        actions.append(action)
    return actions


def _wanted(only: Sequence[str] | None, kind: str) -> bool:
    """`kind` is asked for: no `only`, or a kind in it that `kind` is (`source` covers `source.fixAll`)."""
    return not only or any(kind == wanted or kind.startswith(f"{wanted}.") for wanted in only)


def _resolves_edits(ls: XlalintServer) -> bool:
    text = ls.client_capabilities.text_document
    resolve = text.code_action.resolve_support if text is not None and text.code_action is not None else None
    return resolve is not None and "edit" in resolve.properties


@server.feature(lsp.CODE_ACTION_RESOLVE)
async def resolve_code_action(ls: XlalintServer, action: lsp.CodeAction) -> lsp.CodeAction:
    return await _resolve_fix_all(ls, action)


async def _resolve_fix_all(ls: XlalintServer, action: lsp.CodeAction) -> lsp.CodeAction:
    """The edit of "fix all": the document fixed as `xlalint fix` fixes it (computed when chosen:
    building every fix, pass after pass, costs more than a check)."""
    data: Any = action.data
    if action.kind != FIX_ALL_KIND or not isinstance(data, dict) or action.edit is not None:
        return action
    uri = data.get("uri")
    if not isinstance(uri, str):
        return action
    document = ls.workspace.text_documents.get(uri)
    path = document_path(uri, document.language_id) if document is not None else None
    if document is None or path is None:
        return action
    text = document.source
    loop = asyncio.get_running_loop()
    fixed = await loop.run_in_executor(ls.checker, ls._fix_all, path, text)
    if fixed is not None:
        action.edit = lsp.WorkspaceEdit(changes={uri: replace_edit(text, fixed, Lines(text, ls._encoding()))})
    return action


def serve() -> None:
    """Serve the protocol on standard input and output until the client says `exit`."""
    text_out = sys.stdout  # kept: a text stream dropped closes its buffer, the protocol's stream
    stdin, stdout = sys.stdin.buffer, text_out.buffer
    sys.stdout = sys.stderr  # anything printed by mistake must not corrupt the protocol's stream
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="xlalint server: %(levelname)s: %(message)s")
    # A long-lived process holding each open document's analysis: with the default thresholds the
    # collector scans that whole heap again and again while a check allocates its trees (a quarter
    # of an edit's CPU time on a 10,000-line file). What is loaded at start is never scanned again,
    # and the young generations are collected less often (the trees hold no cycles to free early).
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    server.start_io(stdin, stdout)
    server.checker.shutdown(wait=False, cancel_futures=True)  # a check still running is not waited for
    # LSP: exit code 0 after a `shutdown` request, 1 when the client exits without one (pygls's own
    # `sys.exit` inside its loop is caught by its runner)
    sys.exit(0 if server.protocol._shutdown else 1)
