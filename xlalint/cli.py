"""The `xlalint` command line (click), with Ruff's conventions.

Exit codes: 0 nothing found (or all fixed), 1 findings remain, 2 usage/config/IO/parse error.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import click

from . import __version__
from .analysis.project import project_root
from .cache import CACHE_DIR_NAME
from .cache import clean as clean_cache
from .config import (
    ConfigError,
    Settings,
    load_settings,
    parse_confidence,
    parse_platform,
    parse_target,
    pinned_torch_xla,
    validate_selectors,
)
from .diagnostics import CONFIDENCE_LEVELS, Diagnostic, shown_at
from .discovery import discover, is_excluded
from .explain import explain_text, rules_table
from .noqa import add_noqa
from .progress import Progress
from .reporters import FORMATS, WITH_EDITS, SourceLines, colour_diff, printable, render, shown, statistics
from .rules import ALL_RULES, RULES_BY_CODE
from .source import (
    TEMPORARY_SUFFIX,
    SourceError,
    Stamp,
    decode_source,
    is_dir,
    read_bounded,
    stale_temporary,
    stat_or_none,
    write_fixed,
)
from .workspace import GC_THRESHOLD, Workspace, crash_report, run_root

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _error(message: str) -> None:
    message = printable(message, line=True)  # one line: file names and contents may hold control characters
    click.echo(message if ": error:" in message else f"xlalint: error: {message}", err=True)


def _split(values: tuple[str, ...]) -> list[str]:
    return [part for value in values for part in value.split(",") if part.strip()]


STDIN = "-"


class Stdin:
    """Standard input as one file: `xlalint check -` / `fix -`, named by `--stdin-filename` (its
    configuration, per-file ignores and excludes apply by that name)."""

    def __init__(self, paths: tuple[str, ...], stdin_filename: str | None) -> None:
        self.wanted = paths == (STDIN,) or (not paths and stdin_filename is not None)
        if STDIN in paths and not self.wanted:
            raise ConfigError("`-` (standard input) cannot be combined with other paths")
        self.path = Path(stdin_filename) if stdin_filename else Path(STDIN)
        self.raw = b""

    def read(self) -> None:
        self.raw = sys.stdin.buffer.read()


@dataclass
class Options:
    """The command line of `check` and `fix`, built once from click's parameters (`from_params`); both
    commands read it, and `check --fix`/`--diff` hand it on to `fix` as it is."""

    paths: tuple[str, ...] = ()
    config: str | None = None
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[str, ...] = ()
    fixable: tuple[str, ...] = ()
    unfixable: tuple[str, ...] = ()
    preview: bool | None = None
    force_exclude: bool = False
    assume_xla: bool = False
    assume_compiled: bool = False
    quiet: bool = False
    jobs: int | None = None
    no_cache: bool = False
    cache_dir: Path | None = None
    target_version: str | None = None
    target: str | None = None  # the platform the code moves to (`torchtpu`)
    confidence: str | None = None  # the lowest confidence shown (`high`, `possible`)
    stdin_filename: str | None = None
    color: str | None = None
    unsafe_fixes: bool = False
    output_file: str | None = None
    show_fixes: bool = False
    exit_non_zero_on_fix: bool = False
    # check
    output_format: str = "text"
    exit_zero: bool = False
    show_statistics: bool = False
    add_noqa: bool = False
    show_files: bool = False
    show_settings: bool = False
    watch: bool = False
    # fix (and check --fix / --diff)
    write: bool = False
    diff: bool = False

    @classmethod
    def from_params(cls, params: dict) -> Options:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in params.items() if key in known})


@dataclass
class Prepared:
    """What a run works on: the settings (configuration + command line), the rules, the files."""

    settings: Settings
    rules: list
    files: list[Path]
    missing: int  # paths that could not be found or read (reported; exit 2 at the end)
    stdin: Stdin
    # a folder given alone (resolved) -> the files found under it: the project index of a run on its
    # project's root reads the same listing, not a second walk of the tree
    discovered: dict[Path, list[Path]] = field(default_factory=dict)

    @property
    def unsafe(self) -> bool:
        return self.settings.unsafe_fixes


def _per_file_ignores(values: tuple[str, ...]) -> dict[str, list[str]]:
    """`--per-file-ignores PATTERN:CODES` (Ruff's spelling), repeated or comma-separated codes."""
    table: dict[str, list[str]] = {}
    for value in values:
        pattern, sep, codes = value.rpartition(":")
        if not sep or not pattern.strip() or not codes.strip():
            raise ConfigError(f'--per-file-ignores: `{value}` is not PATTERN:CODES (e.g. "tests/*:XLA1,XLA2")')
        table.setdefault(pattern.strip(), []).extend(_split((codes,)))
    return table


def resolve_settings(opts: Options, targets: list[Path]) -> Settings:
    """The settings for files under `targets`: the configuration found from them (or `--config`),
    then the command line's options in `opts`. `check`, `fix` and the language server (`xlalint
    server`, with the settings of each document's folder) all resolve them here. ConfigError: one line."""
    settings: Settings = load_settings(Path(opts.config) if opts.config else None, targets, ALL_RULES)
    settings.assume_xla = settings.assume_xla or opts.assume_xla
    settings.assume_compiled = settings.assume_compiled or opts.assume_compiled
    settings.unsafe_fixes = settings.unsafe_fixes or opts.unsafe_fixes
    if opts.target is not None:
        settings.target_platform = parse_platform(opts.target, "--target")
    if opts.confidence is not None:
        settings.confidence = parse_confidence(opts.confidence, "--confidence")
    if opts.target_version is not None:
        settings.target_version, settings.target_source = parse_target(opts.target_version), "--target-version"
        if settings.target_version is None:
            raise ConfigError(
                f"--target-version: `{opts.target_version}` is no torch_xla version (e.g. 2.5 or torch_xla>=2.5)"
            )
    elif settings.target_version is None:
        pinned = pinned_torch_xla(settings.root)
        if pinned is not None:
            settings.target_version, settings.target_source = pinned[0], f"the pin in {pinned[1]}"
    if opts.select:
        settings.select = validate_selectors(_split(opts.select), ALL_RULES, "--select")
        settings.explicit_select = list(settings.select)
    if opts.extend_select:
        chosen = validate_selectors(_split(opts.extend_select), ALL_RULES, "--extend-select")
        settings.extend_select += chosen
        settings.explicit_select += chosen
    if opts.preview is not None:
        settings.preview = opts.preview
    if opts.ignore:
        settings.ignore += validate_selectors(_split(opts.ignore), ALL_RULES, "--ignore")
    if opts.per_file_ignores:  # replaces the configuration's table, as Ruff's option does
        settings.per_file_ignores = {
            pattern: validate_selectors(codes, ALL_RULES, "--per-file-ignores")
            for pattern, codes in _per_file_ignores(opts.per_file_ignores).items()
        }
    if opts.fixable:
        settings.fixable = validate_selectors(_split(opts.fixable), ALL_RULES, "--fixable")
    if opts.unfixable:
        settings.unfixable += validate_selectors(_split(opts.unfixable), ALL_RULES, "--unfixable")
    return settings


def prepare(opts: Options) -> Prepared:
    """The settings from the configuration and `opts`, and the files to check. ConfigError: one line."""
    stdin = Stdin(opts.paths, opts.stdin_filename)
    paths = opts.paths
    if stdin.wanted:
        paths = (str(stdin.path.parent),) if stdin.path.name != STDIN else ()
    targets = [Path(p) for p in paths] or [Path(".")]
    settings = resolve_settings(opts, targets)
    rules = settings.selected_rules(ALL_RULES)
    if settings.target_platform and not any(r.target == settings.target_platform for r in rules):
        families = sorted({r.code[:4] for r in ALL_RULES if r.target == settings.target_platform})
        click.echo(
            f"warning: the target {settings.target_platform} runs none of its migration rules: the selection "
            f"leaves out {', '.join(families)}",
            err=True,
        )
    if stdin.wanted:
        stdin.read()
        # Ruff's rule: an excluded name is skipped only with --force-exclude
        excluded = opts.force_exclude and stdin.path.name != STDIN and is_excluded(stdin.path, settings)
        return Prepared(settings, rules, [] if excluded else [stdin.path], 0, stdin)
    missing: list[str] = []
    skipped: list[Path] = []
    leftovers: list[Path] = []
    files = discover(
        targets, settings, force_exclude=opts.force_exclude, missing=missing, skipped=skipped, leftovers=leftovers
    )
    for message in missing:  # reported, and the other paths still checked (exit 2 at the end)
        _error(message)
    for path in skipped:  # Ruff's warning for a named file it does not lint; the exit code is the others'
        click.echo(
            f"warning: {shown(path)}: not checked: not a Python file (.py, .pyi, .ipynb, or a `#!` line naming python)",
            err=True,
        )
    if leftovers:
        count = len(leftovers)
        click.echo(
            f"warning: {count} temporary file{'s' if count != 1 else ''} left by an interrupted xlalint run "
            f"({shown(leftovers[0])}{', ...' if count > 1 else ''}); `xlalint clean` removes {'them' if count > 1 else 'it'}",
            err=True,
        )
    if not files and not missing and not skipped:
        click.echo("warning: no Python files found under the given paths", err=True)
    discovered = {targets[0].resolve(): files} if len(targets) == 1 and not missing and is_dir(targets[0]) else {}
    return Prepared(settings, rules, files, len(missing), stdin, discovered)


def _prepare_or_exit(opts: Options) -> Prepared:
    try:
        return prepare(opts)
    except ConfigError as exc:
        _error(str(exc))
        sys.exit(EXIT_ERROR)


class Report:
    """Standard output, or the file `-o/--output-file` names (written once, at the end; no colour)."""

    def __init__(self, output_file: str | None) -> None:
        self.output_file = output_file
        self.parts: list[str] = []

    def echo(self, text: str) -> None:
        if self.output_file is None:
            click.echo(text, nl=False)
        else:
            self.parts.append(click.unstyle(text))

    def close(self) -> None:
        if self.output_file is None:
            return
        path = Path(self.output_file)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(self.parts), encoding="utf-8", errors="backslashreplace")
        except OSError as exc:
            _error(f"{path}: error: cannot write the report: {exc.strerror or exc}")
            sys.exit(EXIT_ERROR)


def _root(paths: tuple[str, ...]) -> Path:
    """The run's one root (the cache lives there; see `workspace.run_root`)."""
    return run_root([Path(p) for p in paths] or [Path(".")])


def _close(workspace: Workspace) -> None:
    workspace.close()
    for warning in workspace.warnings:
        click.echo(printable(f"warning: {warning}"), err=True)


def _progress(quiet: bool) -> Progress | None:
    """A progress line on standard error when it is a terminal (never when piped or quiet)."""
    stream = sys.stderr
    return Progress(stream) if not quiet and hasattr(stream, "isatty") and stream.isatty() else None


def _apply_color(choice: str | None) -> None:
    """--color, else the NO_COLOR / FORCE_COLOR conventions (no-color.org, force-color.org), else a
    terminal check (click's default)."""
    if choice is None:
        if os.environ.get("NO_COLOR"):
            choice = "never"
        elif os.environ.get("FORCE_COLOR"):
            choice = "always"
    click.get_current_context().color = {"always": True, "never": False}.get(choice or "auto")


def _options(options):
    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


_shared_options = _options(
    [
        click.argument("paths", nargs=-1, type=click.Path(path_type=str)),
        click.option("--config", type=click.Path(dir_okay=False), help="Use this TOML file instead of discovery."),
        click.option("--select", multiple=True, help="Rule codes or prefixes to enable (e.g. XLA1,XLA401)."),
        click.option("--extend-select", multiple=True, help="Codes or prefixes to enable in addition."),
        click.option("--ignore", multiple=True, help="Codes or prefixes to disable."),
        click.option(
            "--per-file-ignores",
            multiple=True,
            metavar="PATTERN:CODES",
            help='Disable CODES in files matching PATTERN (e.g. "tests/*:XLA1"); repeatable; replaces the '
            "configuration's table.",
        ),
        click.option("--fixable", multiple=True, help="Only these codes or prefixes may be fixed (default: all)."),
        click.option("--unfixable", multiple=True, help="Codes or prefixes never fixed (reported without a fix)."),
        click.option(
            "--preview/--no-preview",
            default=None,
            help="Enable preview rules (on real code their precision is not yet shown; `xlalint "
            "rules` marks them). Selecting a rule or its family explicitly enables it too.",
        ),
        click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too."),
        click.option(
            "--assume-xla",
            is_flag=True,
            help="Treat every file as code that runs on an XLA device (migration mode): XLA-only "
            "rules also fire in files that do not import torch_xla or torchax.",
        ),
        click.option(
            "--assume-compiled",
            is_flag=True,
            help="Treat every nn.Module's forward (and what it calls) as compiled by torch.compile, "
            "for model code its users compile: the DYN rules judge it without a torch.compile call.",
        ),
        click.option("-q", "--quiet", is_flag=True, help="Print diagnostics only: no hints, no summary."),
        click.option(
            "--jobs",
            "-j",
            type=click.IntRange(min=1),
            default=None,
            help="Processes to check files with (default: one per core; never more than cores or files).",
        ),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the cache."),
        click.option(
            "--cache-dir",
            type=click.Path(file_okay=False, path_type=Path),
            envvar="XLALINT_CACHE_DIR",
            help="Where to keep the cache (default: .xlalint_cache in each project's root).",
        ),
        click.option(
            "--confidence",
            type=click.Choice(CONFIDENCE_LEVELS, case_sensitive=False),
            default=None,
            help="The lowest confidence to report: `high` (default), findings whose evidence chain was "
            "seen; `possible`, also findings with a guessed link (a step function by its name only, a "
            "value whose origin is not seen). `xlalint explain` says more.",
        ),
        click.option(
            "--target",
            default=None,
            metavar="PLATFORM",
            help="The platform the code is being moved to (`torchtpu`): its migration rules (TPU1xx) "
            "run, and torch_xla advice (XLA601/XLA602/XLA701) steps aside.",
        ),
        click.option(
            "--target-version",
            default=None,
            help="The oldest torch_xla the code must run on (e.g. 2.5): no replacement newer than it "
            "is suggested. Default: the project's pin in requirements*.txt or pyproject.toml, "
            "else the newest.",
        ),
        click.option(
            "--stdin-filename",
            default=None,
            help="The name of the file read from standard input (`-`): its configuration, per-file "
            "ignores and excludes apply, and findings carry it.",
        ),
        click.option(
            "--color",
            type=click.Choice(["auto", "always", "never"]),
            default=None,
            help="Colour the output: auto (on a terminal; the default), always, never. Without it, "
            "NO_COLOR turns colour off and FORCE_COLOR on.",
        ),
        click.option(
            "-o",
            "--output-file",
            type=click.Path(dir_okay=False),
            default=None,
            help="Write the report (or the diff) to this file instead of standard output.",
        ),
        click.option("--show-fixes", is_flag=True, help="When fixing, list the fixed findings per file and code."),
        click.option(
            "--exit-non-zero-on-fix",
            is_flag=True,
            help="When fixing, exit 1 if anything was fixed, even when no finding remains.",
        ),
        # the report of the findings (for `fix --write`: of those that remain), and the listings
        click.option(
            "--output-format",
            type=click.Choice(FORMATS),
            default=None,
            help="text (check's default): each finding with its source line; concise (the default for what "
            "`fix --write` leaves): one line each; the others are for tools.",
        ),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain (errors still exit 2)."),
        click.option(
            "--statistics",
            "show_statistics",
            is_flag=True,
            help="Count findings per rule, with how many are fixable (JSON with --output-format json).",
        ),
        click.option("--show-files", is_flag=True, help="List the files that would be checked, and stop."),
        click.option(
            "--show-settings",
            is_flag=True,
            help="Print the settings in force for the first file (and the file they came from), and stop.",
        ),
    ]
)

# `check` options that `fix` does not take, and why (README, "Command line")
CHECK_ONLY = {
    "--fix": "`fix --write`",
    "--add-noqa": "baselining marks findings; it fixes none",
    "--watch": "re-running on every save would rewrite files as they are edited",
}


class _PipeEnd(io.RawIOBase):
    """A standard stream's file descriptor that drops what a closed pipe no longer takes (`xlalint
    check . | head -1`): the run goes on quietly to its own exit code, as if the reader had read it
    all; no BrokenPipeError, nor "Exception ignored" when the interpreter flushes it at exit."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.broken = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data) -> int | None:
        if not self.broken:
            try:
                return os.write(self.fd, data)
            except BrokenPipeError:
                self.broken = True
            except BlockingIOError:  # a non-blocking descriptor that is full: as io.FileIO says it
                return None
        return len(data)


def _pipe_safe_streams() -> None:
    """Standard output and error of the process (not a test runner's), through `_PipeEnd`, and never
    failing to encode: a lone surrogate that reached them (a name's byte that is not UTF-8, which
    the reports escape) is written as an escape rather than ending the run."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or stream is not getattr(sys, f"__{name}__") or not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            fd = stream.fileno()
            stream.flush()
        except (OSError, ValueError):
            continue
        wrapper = io.TextIOWrapper(
            io.BufferedWriter(_PipeEnd(fd)),
            encoding=stream.encoding,
            errors="backslashreplace",
            line_buffering=stream.line_buffering,
            write_through=name == "stderr",
        )
        setattr(sys, name, wrapper)


def _stdout_closed() -> bool:
    """Standard output was a pipe whose reader has gone."""
    raw = getattr(getattr(sys.stdout, "buffer", None), "raw", None)
    return isinstance(raw, _PipeEnd) and raw.broken


class _Guarded(click.Group):
    """A crash is one line naming a file with its traceback, exit 2 (never "findings remain"); Ctrl-C
    is exit 130 and nothing more (the workers ignore it; the parent stops them); a closed pipe on
    standard output or error is no crash (see `_PipeEnd`)."""

    def main(self, *args, **kwargs):
        _pipe_safe_streams()
        # A run allocates millions of tree nodes that live until its end: at the default threshold
        # (700) the collector walks them again and again (12 % of a cold pytorch/xla check; the
        # peak memory is the same). Workers forked from here inherit it (spawned ones: `workspace._worker_init`).
        gc.set_threshold(GC_THRESHOLD)
        return super().main(*args, **kwargs)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in xlalint
            if os.environ.get("XLALINT_DEBUG"):
                raise
            _error(f"internal error ({type(exc).__name__}: {exc}); {crash_report(exc)}")
            sys.exit(EXIT_ERROR)


@click.group(cls=_Guarded, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xlalint")
def main() -> None:
    """xlalint: find and fix PyTorch/XLA and JAX performance hazards before they burn TPU hours."""


@main.command()
@_shared_options
@click.option("--unsafe-fixes", is_flag=True, help="Show unsafe fixes as available (with --fix: apply them).")
@click.option("--fix", "apply_fixes", is_flag=True, help="Apply the fixes, as `xlalint fix --write` (Ruff's spelling).")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff and change nothing, as `xlalint fix`.")
@click.option(
    "--add-noqa",
    is_flag=True,
    help="Add `# noqa: CODES` to every line with a finding (merged with those there), to baseline a code base.",
)
@click.option("--watch", is_flag=True, help="Check again whenever a file changes (polls; Ctrl-C stops).")
def check(apply_fixes, **params):
    """Lint PATHS (default: the current directory; `-`: standard input)."""
    opts = Options.from_params(params)
    _apply_color(opts.color)
    if apply_fixes or opts.diff:  # Ruff's `check --fix` / `check --diff`
        sys.exit(run_fix(replace(opts, write=not opts.diff)))
    opts = replace(opts, output_format=opts.output_format or "text")
    if opts.watch:
        sys.exit(_watch(opts))
    sys.exit(run_check(opts))


def run_check(opts: Options) -> int:
    """`check`: print the report, return the exit code."""
    run = _prepare_or_exit(opts)
    settings, rules, files, stdin = run.settings, run.rules, run.files, run.stdin
    if opts.show_files or opts.show_settings:
        return _listing(opts, run)
    # only JSON and SARIF show each fix's edits: computing them generates each fix's statements again
    workspace = Workspace(
        settings,
        rules,
        jobs=opts.jobs,
        cache=not opts.no_cache,
        cache_dir=opts.cache_dir,
        with_edits=opts.output_format in WITH_EDITS and not opts.show_statistics,
        progress=_progress(opts.quiet),
        root=None if stdin.wanted else _root(opts.paths),
        discovered=run.discovered,
    )
    try:
        outcomes = workspace.check(files, given={stdin.path: stdin.raw} if stdin.wanted else None)
    finally:
        _close(workspace)
    diagnostics: list[Diagnostic] = []
    failed = run.missing  # files that could not be checked
    for outcome in outcomes:
        if outcome.error:
            failed += _outcome_error(outcome.error)
        diagnostics += outcome.diagnostics
    diagnostics, hidden = _at_confidence(diagnostics, settings.confidence)
    diagnostics.sort(key=Diagnostic.sort_key)
    if opts.add_noqa:
        failed += _add_noqa(diagnostics, stdin)
        return EXIT_ERROR if failed else EXIT_OK
    report = Report(opts.output_file)
    sources = SourceLines({stdin.path: stdin.raw} if stdin.wanted else None)
    report.echo(
        statistics(diagnostics, opts.output_format, unsafe_fixes=run.unsafe)
        if opts.show_statistics
        else render(
            diagnostics,
            opts.output_format,
            quiet=opts.quiet,
            unsafe_fixes=run.unsafe,
            failed_files=failed,
            sources=sources,
            hidden=hidden,
        )
    )
    report.close()
    if failed:
        return EXIT_ERROR
    return EXIT_FINDINGS if diagnostics and not opts.exit_zero else EXIT_OK


def _listing(opts: Options, run: Prepared) -> int:
    """`--show-files` / `--show-settings`: what a run would check, or the settings in force."""
    click.echo(
        show_settings_text(run.settings, run.rules, run.files)
        if opts.show_settings
        else "".join(f"{shown(f)}\n" for f in run.files),
        nl=False,
    )
    return EXIT_ERROR if run.missing else EXIT_OK


def _at_confidence(diagnostics: list[Diagnostic], level: str) -> tuple[list[Diagnostic], int]:
    """The findings shown at confidence `level`, and how many possible ones are hidden."""
    kept = [d for d in diagnostics if shown_at(d.confidence, level)]
    return kept, len(diagnostics) - len(kept)


def _outcome_error(message: str) -> int:
    """Print a file's error; 1 when the file could not be checked, 0 for a notice (newer syntax)."""
    if ": warning: " in message:
        click.echo(printable(message, line=True), err=True)
        return 0
    _error(message)
    return 1


def _watch(opts: Options) -> int:
    """Check, then poll the files (and the configuration) and check again when one changes.
    XLALINT_WATCH_CYCLES=N stops after N checks (tests); XLALINT_WATCH_INTERVAL the poll in seconds."""
    import time

    if STDIN in opts.paths or (not opts.paths and opts.stdin_filename is not None):
        _error("--watch checks files: it cannot be used with standard input")
        return EXIT_ERROR
    cycles = int(os.environ.get("XLALINT_WATCH_CYCLES") or 0)
    interval = float(os.environ.get("XLALINT_WATCH_INTERVAL") or 0.5)
    done = 0
    while True:
        state = _watched_state(opts)  # before the check: a change made during it triggers the next one
        try:
            code = run_check(opts)
        except SystemExit as exc:  # a configuration error: reported; wait for the fix
            code = exc.code if isinstance(exc.code, int) else EXIT_ERROR
        done += 1
        if (cycles and done >= cycles) or _stdout_closed():  # no reader left: stop watching
            return code
        click.echo("Watching for file changes (Ctrl-C stops).", err=True)
        while _watched_state(opts) == state:
            time.sleep(interval)
        click.echo("File change detected: checking again.", err=True)


def _watched_state(opts: Options) -> frozenset:
    """(path, mtime, size) of every file a check would read: the targets and the configuration files."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            run = prepare(opts)
        paths = list(run.files) + ([run.settings.config_file] if run.settings.config_file else [])
    except (ConfigError, SystemExit):
        paths = []
    paths += [Path(p) / name for p in (opts.paths or (".",)) for name in ("pyproject.toml", "xlalint.toml")]
    state = set()
    for path in paths:
        info = stat_or_none(path)
        state.add((str(path), info.st_mtime_ns if info else None, info.st_size if info else None))
    return frozenset(state)


@main.command()
@_shared_options
@click.option("--write", is_flag=True, help="Apply the fixes to the files (default: print a diff, change nothing).")
@click.option("--diff", is_flag=True, help="Print a unified diff and change nothing (the default without --write).")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour.")
def fix(**params):
    """Fix what can be fixed in PATHS. Prints a diff unless --write is given. With `-` (standard
    input), prints the fixed source (a diff with --diff), and what remains on standard error."""
    opts = Options.from_params(params)
    _apply_color(opts.color)
    if opts.write and opts.diff:
        _error("--write and --diff are mutually exclusive")
        sys.exit(EXIT_ERROR)
    sys.exit(run_fix(opts))


def run_fix(opts: Options) -> int:
    """`fix` (and `check --fix`/`--diff`): write the fixes or print their diff; the exit code."""
    run = _prepare_or_exit(opts)
    settings, rules, files, stdin = run.settings, run.rules, run.files, run.stdin
    unsafe, write = run.unsafe, opts.write
    if opts.show_files or opts.show_settings:
        return _listing(opts, run)
    if (opts.output_format or opts.show_statistics) and (opts.diff if stdin.wanted else not write):
        given = "--output-format" if opts.output_format else "--statistics"
        _error(f"{given} formats the findings that remain after --write; without it, fix prints a diff")
        return EXIT_ERROR
    if stdin.wanted:
        return _fix_stdin(opts, run)
    failed = run.missing > 0
    changed_files = fixed = 0
    remaining: list[Diagnostic] = []
    fixed_codes: dict[Path, list[str]] = {}
    written: set[Path] = set()  # files written, by their real path (a symbolic link and its target: once)
    workspace = Workspace(
        settings,
        rules,
        jobs=opts.jobs,
        cache=not opts.no_cache,
        cache_dir=opts.cache_dir,
        progress=_progress(opts.quiet),
        root=_root(opts.paths),
        discovered=run.discovered,
    )
    try:
        outcomes = workspace.fix(files, unsafe=unsafe)
    finally:
        _close(workspace)
    report = Report(opts.output_file)
    for outcome in outcomes:
        if outcome.error:
            failed = _outcome_error(outcome.error) > 0 or failed
            continue
        result, stamp = outcome.result, outcome.stamp
        assert result is not None  # `fix` gives each file without an error its result
        if result.fixed is not None:
            if write:
                if outcome.path.resolve() in written:  # (the file's other name wrote it)
                    remaining += result.diagnostics
                    continue
                assert stamp is not None  # a file read from disk (nothing `given`): what it held
                try:
                    written.add(
                        write_fixed(outcome.path, result.fixed, stamp, project_root(outcome.path, follow=False))
                    )
                except OSError as exc:
                    _error(f"{outcome.path}: error: cannot write: {exc.strerror or exc}")
                    failed = True
                    remaining += result.found  # the file as it is, at its own positions
                    continue
            else:
                from .fixing.apply import unified_diff

                report.echo(colour_diff(unified_diff(shown(outcome.path), *result.diff_texts())))
            changed_files += 1
            fixed += result.fixed_count
            fixed_codes[outcome.path] = result.fixed_codes
        remaining += result.diagnostics
    remaining, _ = _at_confidence(remaining, settings.confidence)
    remaining.sort(key=Diagnostic.sort_key)
    if write and opts.show_statistics:
        report.echo(statistics(remaining, opts.output_format or "concise", unsafe_fixes=unsafe))
    elif write and (remaining or opts.output_format not in (None, "text", "concise")):  # tools' formats: also empty
        report.echo(render(remaining, opts.output_format or "concise", quiet=True, unsafe_fixes=unsafe))
    report.close()
    if opts.show_fixes and fixed_codes:
        click.echo(fixed_enumeration(fixed_codes, done=write), nl=False, err=True)
    if not opts.quiet:
        errors = f"{fixed} error{'s' if fixed != 1 else ''} in {changed_files} file{'s' if changed_files != 1 else ''}"
        if write:
            click.echo(f"Fixed {errors}; {len(remaining)} remaining.", err=True)
        else:
            click.echo(f"Would fix {errors}.", err=True)
    if failed:
        return EXIT_ERROR
    if opts.exit_zero:
        return EXIT_OK
    if write:
        return EXIT_FINDINGS if remaining or (opts.exit_non_zero_on_fix and fixed) else EXIT_OK
    return EXIT_FINDINGS if changed_files else EXIT_OK


def fixed_enumeration(fixed_codes: dict[Path, list[str]], *, done: bool) -> str:
    """Ruff's `--show-fixes` list: per file, how many findings of each rule were (or would be) fixed."""
    total = sum(len(codes) for codes in fixed_codes.values())
    lines = [f"{'Fixed' if done else 'Would fix'} {total} error{'s' if total != 1 else ''}:"]
    for path in sorted(fixed_codes, key=str):
        lines.append(f"- {shown(path)}:")
        for code, count in sorted(Counter(fixed_codes[path]).items()):
            name = RULES_BY_CODE[code].name if code in RULES_BY_CODE else ""
            lines.append(f"    {count} \u00d7 {code} ({name})")
    return "\n".join(lines) + "\n"


def _add_noqa(diagnostics: list[Diagnostic], stdin: Stdin) -> int:
    """Write `# noqa` comments for `diagnostics` into their files; the number of files that failed."""
    if stdin.wanted:
        _error("--add-noqa changes files: it cannot be used with standard input")
        return 1
    by_path: dict[Path, list[tuple[int, int, str]]] = {}
    for d in diagnostics:
        if d.cell is None:  # a notebook's cells keep their own layout: not annotated
            by_path.setdefault(d.path, []).append((d.location.row, d.end_location.row, d.code))
    added = failed = 0
    for path, findings in by_path.items():
        try:
            raw, info = read_bounded(path)
            source = decode_source(path, raw)
            text, count = add_noqa(source.text, findings)
            if count:  # "utf-8-sig" writes the BOM back
                write_fixed(path, text.encode(source.encoding), Stamp.of(raw, info), project_root(path, follow=False))
                added += count
        except (SourceError, OSError, UnicodeEncodeError) as exc:
            # (a UnicodeEncodeError has no strerror: the text encoding the file's own declared one refuses)
            reason = (exc.strerror if isinstance(exc, OSError) else None) or exc
            _error(str(exc) if isinstance(exc, SourceError) else f"{path}: error: cannot write: {reason}")
            failed += 1
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    return failed


def show_settings_text(settings: Settings, rules, files: list[Path]) -> str:
    """The resolved settings, as `key = value` lines under the file they came from."""
    first = files[0] if files else None
    codes = [r.code for r in settings.rules_for(first, rules)] if first is not None else [r.code for r in rules]
    values = {
        "root": str(settings.root),
        "select": settings.select,
        "extend-select": settings.extend_select,
        "ignore": settings.ignore,
        "per-file-ignores": settings.per_file_ignores,
        "exclude": settings.exclude,
        "extend-exclude": settings.extend_exclude,
        "respect-gitignore": settings.respect_gitignore,
        "unsafe-fixes": settings.unsafe_fixes,
        "fixable": settings.fixable,
        "unfixable": settings.unfixable,
        "assume-xla": settings.assume_xla,
        "assume-compiled": settings.assume_compiled,
        "compiled": settings.compiled,
        "preview": settings.preview,
        "target-version": settings.target_version or "(the newest)",
        "target": settings.target_platform or "(none)",
        "confidence": settings.confidence,
    }
    lines = [
        f"Resolved settings for: {shown(first) if first is not None else '(no file)'}",
        f"Settings path: {settings.config_file or '(none: defaults and the command line)'}",
        "",
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    if settings.target_source:
        lines.append(f"# target-version from {settings.target_source}")
    lines.append(f"rules in force ({len(codes)}) = {json.dumps(codes)}")
    return printable("\n".join(lines)) + "\n"


def _write_stdout(data: bytes) -> None:
    """The source as bytes: its encoding, BOM and line endings exactly as fixed."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _fix_stdin(opts: Options, run: Prepared) -> int:
    """Editors' and formatters' mode: the fixed source on standard output (unchanged when nothing is
    fixed, or when the name is excluded), findings that remain on standard error."""
    stdin, diff = run.stdin, opts.diff
    if not run.files:
        _write_stdout(b"" if diff else stdin.raw)
        return EXIT_OK
    workspace = Workspace(run.settings, run.rules, jobs=1, cache=not opts.no_cache, cache_dir=opts.cache_dir)
    try:
        (outcome,) = workspace.fix(run.files, unsafe=run.unsafe, given={stdin.path: stdin.raw})
    finally:
        _close(workspace)
    if outcome.error and _outcome_error(outcome.error):
        return EXIT_ERROR
    result = outcome.result
    if result is None:  # a notice (newer syntax): the source unchanged
        _write_stdout(b"" if diff else stdin.raw)
        return EXIT_OK
    fixed = result.fixed if result.fixed is not None else stdin.raw
    if diff:
        from .fixing.apply import unified_diff

        if result.fixed is not None:
            click.echo(colour_diff(unified_diff(shown(stdin.path), *result.diff_texts())), nl=False)
    else:
        _write_stdout(fixed)
    remaining = sorted(_at_confidence(result.diagnostics, run.settings.confidence)[0], key=Diagnostic.sort_key)
    if opts.show_statistics and not diff:
        click.echo(statistics(remaining, opts.output_format or "concise", unsafe_fixes=run.unsafe), nl=False, err=True)
    elif remaining and not opts.quiet:
        fmt, sources = opts.output_format or "concise", SourceLines({stdin.path: fixed})
        click.echo(render(remaining, fmt, quiet=True, unsafe_fixes=run.unsafe, sources=sources), nl=False, err=True)
    if opts.exit_zero:
        return EXIT_OK
    if diff:
        return EXIT_FINDINGS if result.fixed is not None else EXIT_OK
    return EXIT_FINDINGS if remaining or (opts.exit_non_zero_on_fix and result.fixed is not None) else EXIT_OK


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="XLALINT_CACHE_DIR",
    help="The cache folder to remove (default: .xlalint_cache in the root of PATHS, and any below it).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing.")
def clean(paths, cache_dir, quiet):
    """Remove the cache of a run over PATHS (default: the current directory), and the temporary files
    that runs killed while writing a fix left under PATHS (only stale ones: not a running run's)."""
    for path in paths:
        if not path.exists():
            _error(f"{path}: error: no such file or directory")
            sys.exit(EXIT_ERROR)
    root = _root(tuple(map(str, paths)))
    below, leftovers = _clean_walk(root)
    # below: one cache per folder, as earlier versions wrote them
    folders = [cache_dir] if cache_dir is not None else [root / CACHE_DIR_NAME, *below]
    try:
        removed = clean_cache(folders)
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):  # (another clean was first)
                leftover.unlink()
            removed.append(leftover)
    except OSError as exc:
        _error(f"{exc.filename}: error: cannot remove: {exc.strerror or exc}")
        sys.exit(EXIT_ERROR)
    if not quiet:
        for path in removed:
            click.echo(f"removed {shown(path)}", err=True)


def _clean_walk(root: Path) -> tuple[list[Path], list[Path]]:
    """The cache folders below `root`, and the stale temporary files of killed runs under it."""
    caches, leftovers = [], []
    for folder, dirs, files in os.walk(root):  # links to folders are not followed
        if CACHE_DIR_NAME in dirs and Path(folder) != root:
            caches.append(Path(folder) / CACHE_DIR_NAME)
        dirs[:] = [d for d in dirs if d not in (CACHE_DIR_NAME, ".git")]
        leftovers += [Path(folder) / name for name in files if name.endswith(TEMPORARY_SUFFIX)]
    return caches, [path for path in leftovers if stale_temporary(path)]


@main.command()
@click.argument("code")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def explain(code, output_format):
    """Explain rule CODE (or its name): what it finds, why it is slow on XLA, an example, the fix."""
    rule = RULES_BY_CODE.get(code.upper()) or next((r for r in ALL_RULES if r.name == code), None)
    if rule is None:
        _error(f"unknown rule `{code}` (see `xlalint rules`)")
        sys.exit(EXIT_ERROR)
    click.echo(explain_text(rule, output_format))


@main.command()
def server():
    """Run the language server for editors: the Language Server Protocol on standard input and output
    (findings as you type, fixes as code actions, `explain` on hover). Needs `pip install 'xlalint[lsp]'`."""
    try:
        from .server import serve
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in ("pygls", "lsprotocol", "cattrs", "attrs"):
            raise
        _error("`xlalint server` needs the language server extra: pip install 'xlalint[lsp]'")
        sys.exit(EXIT_ERROR)
    serve()


@main.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_rules(output_format):
    """List every rule: code, name, category, fix availability, summary."""
    click.echo(rules_table(ALL_RULES, output_format))
