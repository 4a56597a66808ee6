"""`xlalint server` end to end: a real LSP client (pytest-lsp) drives the server over stdio, and
what it publishes is held against what `xlalint check` and `xlalint fix` say about the same text."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120  # seconds for one answer: a loaded CI machine; a hang fails the test instead of blocking it

TRAIN = """\
import torch
import torch_xla.core.xla_model as xm

NAME = "modèle 🚀"


def train(model, loader, optimizer):
    device = xm.xla_device()
    for step, (x, y) in enumerate(loader):
        loss = model(x.to(device)).sum()
        loss.backward()
        optimizer.step()
        xm.mark_step()
        print("perte 🚀 é", loss.item())  # noqa: E501
"""

# a helper reads a device tensor to the host and returns it: reported at its per-step calls, with the
# read as their related location (one finding per root cause)
GRID = """\
import torch.nn as nn


def grid_sizes(coords):
    return [int(n.item()) for n in coords.amax(dim=1) + 1]


class PosEmbed(nn.Module):
    def forward(self, x, coords):
        label = "€😀"; sizes = grid_sizes(coords)
        return x + self.interpolate(sizes)
"""


def env() -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if k not in ("XLALINT_CACHE_DIR", "XLALINT_DEBUG")}
    return values


def cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlalint", *args],
        cwd=cwd,
        input=stdin.encode("utf-8") if stdin is not None else None,
        capture_output=True,
        env=env(),
        timeout=300,
    )


def check_json(path: Path, text: str, *extra: str) -> list[dict]:
    done = cli("check", "--no-cache", "--output-format", "json", *extra, "--stdin-filename", str(path), "-", cwd=path.parent, stdin=text)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def fixed_by_cli(path: Path, text: str, *extra: str) -> str:
    done = cli("fix", "--no-cache", *extra, "--stdin-filename", str(path), "-", cwd=path.parent, stdin=text)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.decode("utf-8")


# -- positions, computed here independently of the server: UTF-16 through Python's codec -------------

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def lsp_position(text: str, row: int, column: int) -> tuple[int, int]:
    """xlalint's 1-based row and character column as LSP's (line, UTF-16 character)."""
    line = _LINES.findall(text)[row - 1]
    return row - 1, utf16(line[: column - 1])


def offset(text: str, position: lsp.Position) -> int:
    lines = _LINES.findall(text)
    start = sum(len(line) for line in lines[: position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    return start + len(line.encode("utf-16-le")[: 2 * position.character].decode("utf-16-le"))


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    spans = sorted(((offset(text, e.range.start), offset(text, e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


# -- a session with the server -----------------------------------------------------------------------------


class Session:
    def __init__(self, client) -> None:
        self.client = client
        self.published: list[lsp.PublishDiagnosticsParams] = []
        self.arrived = asyncio.Event()
        self.versions: dict[str, int] = {}
        self.registered: list[str] = []  # what the server asked the client to watch

    def record(self, params: lsp.PublishDiagnosticsParams) -> None:
        self.published.append(params)
        self.arrived.set()

    async def diagnostics(self, uri: str, *, after: int = 0, version: int | None = None) -> list[lsp.Diagnostic]:
        """The first diagnostics published for `uri` after the `after`-th notification (of that
        version, when given)."""

        async def wait() -> list[lsp.Diagnostic]:
            seen = after
            while True:
                for params in self.published[seen:]:
                    if params.uri == uri and (version is None or params.version == version):
                        return list(params.diagnostics)
                seen = len(self.published)
                self.arrived.clear()
                await self.arrived.wait()

        return await asyncio.wait_for(wait(), TIMEOUT)

    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.resolve().as_uri()
        self.versions[uri] = 1
        text = path.read_text(encoding="utf-8") if text is None else text
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", 1, text)))
        return uri

    def change(self, uri: str, text: str, at: lsp.Range | None = None) -> int:
        """Replace `at` (default: the whole text) with `text`; the new version."""
        self.versions[uri] += 1
        change = (
            lsp.TextDocumentContentChangeWholeDocument(text)
            if at is None
            else lsp.TextDocumentContentChangePartial(at, text)
        )
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(lsp.VersionedTextDocumentIdentifier(self.versions[uri], uri), [change])
        )
        return self.versions[uri]

    async def actions(self, uri: str, at: lsp.Range, only: list[str] | None = None) -> list[lsp.CodeAction]:
        params = lsp.CodeActionParams(lsp.TextDocumentIdentifier(uri), at, lsp.CodeActionContext([], only=only))
        found = await asyncio.wait_for(self.client.text_document_code_action_async(params), TIMEOUT)
        return [a for a in found or [] if isinstance(a, lsp.CodeAction)]


@contextlib.asynccontextmanager
async def session(cwd: Path, folders: list[Path] | None = None, capabilities: str = "visual-studio-code"):
    client = pytest_lsp.make_test_lsp_client()
    await client.start_io(sys.executable, "-m", "xlalint", "server", cwd=str(cwd), env=env())
    state = Session(client)

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register(params: lsp.RegistrationParams) -> None:
        state.registered += [r.method for r in params.registrations]
    handler = client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(params):
        handler(params)
        state.record(params)

    client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    folders = folders or [cwd]
    await asyncio.wait_for(
        client.initialize_session(
            lsp.InitializeParams(
                capabilities=pytest_lsp.client_capabilities(capabilities),
                root_uri=folders[0].as_uri(),
                workspace_folders=[lsp.WorkspaceFolder(f.as_uri(), f.name) for f in folders],
            )
        ),
        TIMEOUT,
    )
    try:
        yield state
        await asyncio.wait_for(client.shutdown_session(), TIMEOUT)
        # shutdown, then exit: the process ends by itself, with 0 (LSP: 1 without the shutdown)
        assert client._server.returncode == 0
    finally:
        if client._server is not None and client._server.returncode is None:
            client._server.kill()  # a failed test: no shutdown was sent, the server would wait for one
        await client.stop()


def project(tmp_path: Path, files: dict[str, str], config: str = "") -> Path:
    root = tmp_path / "project"
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n{config}", encoding="utf-8")
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def codes(diagnostics: list[lsp.Diagnostic]) -> list[tuple[str, int, int]]:
    return sorted((str(d.code), d.range.start.line, d.range.start.character) for d in diagnostics)


# -- the tests --------------------------------------------------------------------------------------------


def test_positions_and_fix_edits_convert_across_line_conventions():
    # a form feed ends a line for str.splitlines (the rows of fix edits) but not for Python or LSP;
    # an emoji is one character and two UTF-16 units; \r\n is one line end
    from xlalint.diagnostics import Location
    from xlalint.fixing.apply import text_edits as fix_edits
    from xlalint.server import Lines, text_edits

    before = "a = 1\x0c  # feed\r\nb = '😀'; c = x.item()\r\nd = 2\n"
    after = before.replace("x.item()", "x.tolist()").replace("d = 2", "d = 3")
    lines = Lines(before)
    assert lines.position(Location(2, before.splitlines()[2].index("x.item") + 1)) == lsp.Position(1, 14)  # 13 characters, 14 units
    edits = fix_edits(before, after)
    assert edits[0].location.row == 3  # the second line for Python and LSP, the third for splitlines
    converted = text_edits(before, edits, lines)
    assert converted[0].range.start.line == 1
    assert apply(before, converted) == after


@pytest.mark.asyncio
async def test_open_publishes_the_checks_findings_with_utf16_ranges_and_related_places(tmp_path):
    root = project(tmp_path, {"train.py": TRAIN, "model.py": GRID})
    published = {}
    async with session(root) as s:
        for name, text in (("train.py", TRAIN), ("model.py", GRID)):
            uri = s.open(root / name)
            got = published[name] = await s.diagnostics(uri)
            expected = check_json(root / name, text)
            assert expected  # the example has findings to compare
            # the same findings as `check`, each range converted to 0-based lines and UTF-16 units
            assert [
                (str(d.code), (d.range.start.line, d.range.start.character), (d.range.end.line, d.range.end.character))
                for d in sorted(got, key=lambda d: (d.range.start.line, d.range.start.character, str(d.code)))
            ] == [
                (
                    f["code"],
                    lsp_position(text, f["location"]["row"], f["location"]["column"]),
                    lsp_position(text, f["end_location"]["row"], f["end_location"]["column"]),
                )
                for f in expected
            ]
            for d in got:
                assert d.source == "xlalint"
                assert d.severity == lsp.DiagnosticSeverity.Warning
                assert d.code_description is not None
                assert d.code_description.href.endswith(".md") and "/docs/rules/" in d.code_description.href
    # the `.item()` after "perte 🚀 é" (the rocket is two UTF-16 units): character 28 of line 13
    train = TRAIN.splitlines()[13]
    assert train.index("loss.item()") == 27 and utf16(train[:27]) == 28
    (item,) = [d for d in published["train.py"] if d.code == "XLA101"]
    assert item.range.start == lsp.Position(13, 28)
    # the call at line 10 comes after "€😀" (one emoji: one more unit than characters)
    line = GRID.splitlines()[9]
    model = [d for d in published["model.py"] if d.code == "XLA109"]
    assert len(model) == 1 and model[0].range.start == lsp.Position(9, utf16(line[: line.index("grid_sizes")]))
    assert model[0].range.start.character == line.index("grid_sizes") + 1
    # the evidence chain and the related place: the `.item()` in `grid_sizes`, row 5, among them
    related = model[0].related_information or []
    assert related and all(r.message for r in related)
    assert all(r.location.uri == (root / "model.py").resolve().as_uri() for r in related)
    assert 4 in [r.location.range.start.line for r in related]


@pytest.mark.asyncio
async def test_a_quick_fix_edit_is_what_xlalint_fix_writes(tmp_path):
    one = TRAIN.replace("import torch\n", "import torch\nimport torch_xla\n", 1).replace("xm.mark_step()", "torch_xla.sync()")
    root = project(tmp_path, {"train.py": one})
    path = root / "train.py"
    assert [f["code"] for f in check_json(path, one) if f["fix"]] == ["XLA602"]  # one safe fix in the file
    async with session(root) as s:
        uri = s.open(path)
        found = await s.diagnostics(uri)
        (finding,) = [d for d in found if d.code == "XLA602"]
        actions = await s.actions(uri, finding.range)
        (quick,) = [a for a in actions if a.kind == lsp.CodeActionKind.QuickFix and "suppress" not in a.title]
        assert "(unsafe)" not in quick.title and quick.is_preferred
        assert quick.edit is not None and quick.edit.changes is not None
        after = apply(one, list(quick.edit.changes[uri]))
        assert after != one
        assert after == fixed_by_cli(path, one)
        ast.parse(after)


@pytest.mark.asyncio
async def test_an_unsafe_fix_is_labelled_and_is_what_fix_unsafe_writes(tmp_path):
    text = TRAIN.replace("        xm.mark_step()\n", "")  # no step barrier: XLA401, an unsafe fix
    root = project(tmp_path, {"train.py": text})
    path = root / "train.py"
    async with session(root) as s:
        uri = s.open(path)
        found = await s.diagnostics(uri)
        (finding,) = [d for d in found if d.code == "XLA401"]
        actions = await s.actions(uri, finding.range, only=[lsp.CodeActionKind.QuickFix])
        (unsafe,) = [a for a in actions if a.diagnostics and a.diagnostics[0].code == "XLA401" and "suppress" not in a.title]
        assert unsafe.title.endswith("(unsafe)") and not unsafe.is_preferred
        after = apply(text, list(unsafe.edit.changes[uri]))
        assert after == fixed_by_cli(path, text, "--unsafe-fixes", "--select", "XLA401")
        ast.parse(after)


@pytest.mark.asyncio
async def test_fix_all_safe_findings_is_what_xlalint_fix_writes(tmp_path):
    text = TRAIN.replace("        xm.mark_step()\n", "")  # two safe fixes (XLA602) and an unsafe one (XLA401)
    root = project(tmp_path, {"train.py": text})
    path = root / "train.py"
    async with session(root) as s:
        uri = s.open(path)
        await s.diagnostics(uri)
        everything = lsp.Range(lsp.Position(0, 0), lsp.Position(len(text.splitlines()), 0))
        (action,) = await s.actions(uri, everything, only=[lsp.CodeActionKind.SourceFixAll])
        assert action.kind == "source.fixAll.xlalint" and action.title == "xlalint: fix all safe findings"
        if action.edit is None:  # resolved when chosen (the client can resolve an action's edit)
            action = await asyncio.wait_for(s.client.code_action_resolve_async(action), TIMEOUT)
        after = apply(text, list(action.edit.changes[uri]))
        expected = fixed_by_cli(path, text)
        assert expected != text and after == expected
        ast.parse(after)
        assert "xlalint.runtime" not in after  # the unsafe fix (XLA401) is not applied


@pytest.mark.asyncio
async def test_suppress_on_this_line_merges_with_the_noqa_there(tmp_path):
    root = project(tmp_path, {"train.py": TRAIN})
    path = root / "train.py"
    async with session(root) as s:
        uri = s.open(path)
        found = await s.diagnostics(uri)
        (item,) = [d for d in found if d.code == "XLA101"]
        actions = await s.actions(uri, item.range)
        (suppress,) = [a for a in actions if a.title.startswith("xlalint: suppress XLA101")]
        after = apply(TRAIN, list(suppress.edit.changes[uri]))
        assert after.splitlines()[13].endswith("loss.item())  # noqa: E501, XLA101")
        assert [f["code"] for f in check_json(path, after)] == ["XLA602", "XLA602"]
        # and the server, told of the edit, agrees
        version = s.change(uri, after)
        assert sorted(str(d.code) for d in await s.diagnostics(uri, version=version)) == ["XLA602", "XLA602"]


@pytest.mark.asyncio
async def test_a_change_updates_the_diagnostics_and_stale_checks_are_dropped(tmp_path):
    root = project(tmp_path, {"train.py": TRAIN})
    path = root / "train.py"
    async with session(root) as s:
        uri = s.open(path)
        assert "XLA101" in [d.code for d in await s.diagnostics(uri)]
        seen = len(s.published)
        # typing: three edits in quick succession, only the last checked and published
        line = len(TRAIN.splitlines())
        end = lsp.Range(lsp.Position(line, 0), lsp.Position(line, 0))
        s.change(uri, "        if loss > 0:\n", end)
        s.change(uri, "            pass\n", lsp.Range(lsp.Position(line + 1, 0), lsp.Position(line + 1, 0)))
        last = s.change(uri, "", lsp.Range(lsp.Position(13, 0), lsp.Position(14, 0)))  # drop the `.item()` line
        got = await s.diagnostics(uri, after=seen)
        assert [p.version for p in s.published[seen:] if p.uri == uri] == [last]
        assert sorted(str(d.code) for d in got) == ["XLA201", "XLA602", "XLA602"]
        # the hover on a finding is `xlalint explain`
        (branch,) = [d for d in got if d.code == "XLA201"]
        hover = await asyncio.wait_for(
            s.client.text_document_hover_async(lsp.HoverParams(lsp.TextDocumentIdentifier(uri), branch.range.start)),
            TIMEOUT,
        )
        assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
        assert hover.contents.value.strip() == cli("explain", "XLA201", cwd=root).stdout.decode().strip()
        # saving re-checks from the buffer too
        s.client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
        assert sorted(str(d.code) for d in await s.diagnostics(uri, after=len(s.published))) == [
            "XLA201",
            "XLA602",
            "XLA602",
        ]


@pytest.mark.asyncio
async def test_a_finding_from_another_modules_facts_follows_the_lines_of_the_buffer(tmp_path):
    helper = "def grid_sizes(coords):\n    return [int(n.item()) for n in coords.amax(dim=1) + 1]\n"
    caller = GRID.replace("def grid_sizes", "def _unused").replace("import torch.nn as nn\n", "import torch.nn as nn\n\nfrom helpers import grid_sizes\n")
    root = project(tmp_path, {"helpers.py": helper, "model.py": caller})
    async with session(root) as s:
        uri = s.open(root / "model.py")
        (call,) = [d for d in await s.diagnostics(uri) if d.code == "XLA109"]
        # two lines typed above it, not saved: the project's facts (read from the saved file) follow
        version = s.change(uri, "# one\n# two\n", lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)))
        (moved,) = [d for d in await s.diagnostics(uri, version=version) if d.code == "XLA109"]
        assert moved.range.start == lsp.Position(call.range.start.line + 2, call.range.start.character)


@pytest.mark.asyncio
async def test_a_broken_document_gets_one_diagnostic_and_the_server_goes_on(tmp_path):
    latin = "# -*- coding: latin-1 -*-\nimport torch\nprice = '5 €'\n"  # € is not in latin-1
    root = project(tmp_path, {"train.py": TRAIN, "broken.py": "import torch\n\ndef f(:\n    pass\n", "latin.py": latin})
    async with session(root) as s:
        broken = s.open(root / "broken.py")
        (error,) = await s.diagnostics(broken)
        assert error.severity == lsp.DiagnosticSeverity.Error and "syntax" in error.message
        assert error.range.start.line == 2  # `def f(:`
        (bad,) = await s.diagnostics(s.open(root / "latin.py", latin))
        assert bad.severity == lsp.DiagnosticSeverity.Error and "cannot encode as iso-8859-1" in bad.message
        assert bad.range.start.line == 2 and "'€'" in bad.message
        nul = s.open(root / "nul.py", "import torch\nx = 1\0\n")
        (null,) = await s.diagnostics(nul)
        assert null.severity == lsp.DiagnosticSeverity.Error
        # the other documents are still served
        train = s.open(root / "train.py")
        assert "XLA101" in [d.code for d in await s.diagnostics(train)]
        # and the broken one, repaired in the editor, is checked again
        version = s.change(broken, "import torch\n\n\ndef f(x):\n    return x.item()\n")
        assert await s.diagnostics(broken, version=version) == []


@pytest.mark.asyncio
async def test_settings_come_from_each_documents_configuration_and_follow_its_changes(tmp_path):
    first = project(tmp_path / "a", {"train.py": TRAIN}, "[tool.xlalint]\nignore = ['XLA602']\n")
    second = project(tmp_path / "b", {"train.py": TRAIN})
    async with session(tmp_path, folders=[first, second]) as s:
        one, two = s.open(first / "train.py"), s.open(second / "train.py")
        assert sorted(str(d.code) for d in await s.diagnostics(one)) == ["XLA101"]
        assert sorted(str(d.code) for d in await s.diagnostics(two)) == ["XLA101", "XLA602", "XLA602"]
        # the second folder's configuration changes: its document is checked again with it
        config = second / "pyproject.toml"
        config.write_text(config.read_text() + "[tool.xlalint]\nignore = ['XLA101']\n", encoding="utf-8")
        seen = len(s.published)
        s.client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams([lsp.FileEvent(config.as_uri(), lsp.FileChangeType.Changed)])
        )
        assert sorted(str(d.code) for d in await s.diagnostics(two, after=seen)) == ["XLA602", "XLA602"]
        assert sorted(str(d.code) for d in await s.diagnostics(one, after=seen)) == ["XLA101"]
        # a configuration error is one diagnostic, not a dead server
        config.write_text("[tool.xlalint]\nselect = 'XLA'\n", encoding="utf-8")
        seen = len(s.published)
        s.client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams([lsp.FileEvent(config.as_uri(), lsp.FileChangeType.Changed)])
        )
        (error,) = await s.diagnostics(two, after=seen)
        assert error.severity == lsp.DiagnosticSeverity.Error and "must be a list of strings" in error.message


@pytest.mark.asyncio
async def test_unsaved_buffers_never_reach_the_cache_on_disk(tmp_path):
    root = project(tmp_path, {"train.py": TRAIN, "model.py": GRID})
    done = cli("check", ".", cwd=root)  # a warm project: its cache written by `check`
    assert done.returncode == 1, done.stderr
    (cache,) = (root / ".xlalint_cache").glob("*.json")
    before = cache.read_bytes()
    async with session(root) as s:
        uri = s.open(root / "train.py")
        await s.diagnostics(uri)
        version = s.change(uri, TRAIN + "\n\ndef other(t):\n    return t.item()\n")
        await s.diagnostics(uri, version=version)
        (root / "new.py").write_text("")  # a file the server never wrote: the folder is as `check` left it
    assert cache.read_bytes() == before
    assert sorted(p.name for p in (root / ".xlalint_cache").iterdir()) == sorted(
        [cache.name, ".gitignore", "CACHEDIR.TAG"]
    )


def test_without_the_extra_the_command_says_what_to_install(tmp_path):
    code = (
        "import sys; sys.modules['pygls'] = sys.modules['lsprotocol'] = None; "
        "sys.argv = ['xlalint', 'server']; from xlalint.cli import main; main()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "xlalint: error: `xlalint server` needs the language server extra: pip install 'xlalint[lsp]'"
    ]
    assert done.stdout == ""


@pytest.mark.asyncio
async def test_exit_without_shutdown_is_exit_code_1(tmp_path):
    client = pytest_lsp.make_test_lsp_client()
    await client.start_io(sys.executable, "-m", "xlalint", "server", cwd=str(tmp_path), env=env())
    try:
        await asyncio.wait_for(
            client.initialize_session(lsp.InitializeParams(capabilities=lsp.ClientCapabilities())), TIMEOUT
        )
        client.exit(None)
        assert await asyncio.wait_for(client._server.wait(), TIMEOUT) == 1
    finally:
        if client._server is not None and client._server.returncode is None:
            client._server.kill()  # a failed test: no shutdown was sent, the server would wait for one
        await client.stop()


# -- a real editor: headless Neovim with the README's snippet -----------------------------------------------


def readme_neovim_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- neovim-snippet -->\s*```lua\n(.*?)```", text, re.S)
    assert match is not None, "README.md lost its Neovim snippet (marked <!-- neovim-snippet -->)"
    return match.group(1)


WAIT_LUA = """\
local out = os.getenv("XLALINT_NVIM_OUT")
local ok = vim.wait(120000, function() return #vim.diagnostic.get(0) > 0 end, 100)
local lines = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(lines, string.format("%s %d %d %s", d.code or d.user_data and d.user_data.lsp and d.user_data.lsp.code or "?", d.lnum, d.col, d.source or ""))
end
if not ok then table.insert(lines, "timeout") end
vim.fn.writefile(lines, out)
vim.cmd("qa!")
"""


def test_headless_neovim_reads_the_diagnostics_of_a_bundled_example(tmp_path):
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.skip("nvim is not installed (CI installs the Debian package `neovim`)")
    example = ROOT / "examples" / "xla_project"
    work = tmp_path / "xla_project"
    shutil.copytree(example, work, ignore=shutil.ignore_patterns(".xlalint_cache", "__pycache__"))
    (work / "pyproject.toml").write_text("[project]\nname = 'example'\n", encoding="utf-8")
    target = work / "train_lm.py"
    (tmp_path / "init.lua").write_text(readme_neovim_snippet(), encoding="utf-8")
    (tmp_path / "wait.lua").write_text(WAIT_LUA, encoding="utf-8")
    out = tmp_path / "diagnostics.txt"
    environment = env()
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["XLALINT_NVIM_OUT"] = str(out)
    environment["HOME"] = str(tmp_path)  # no user configuration, no shada in the real home
    environment["XDG_CONFIG_HOME"] = environment["XDG_DATA_HOME"] = environment["XDG_STATE_HOME"] = str(tmp_path)
    if shutil.which("xlalint", path=environment["PATH"]) is None:
        pytest.skip("no `xlalint` command beside the running Python")
    done = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", str(tmp_path / "init.lua"), str(target), "-c", f"luafile {tmp_path / 'wait.lua'}"],
        cwd=work,
        env=environment,
        capture_output=True,
        timeout=300,
    )
    assert out.exists(), done.stderr.decode(errors="replace")
    got = sorted(
        (code, int(line) + 1) for code, line, _, source in (row.split(" ") for row in out.read_text().splitlines()) if source == "xlalint"
    )
    assert "timeout" not in out.read_text()
    expected = sorted((f["code"], f["location"]["row"]) for f in check_json(target, target.read_text(encoding="utf-8")))
    assert expected and got == expected
