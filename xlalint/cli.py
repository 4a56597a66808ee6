"""The `xlalint` command line (click), with Ruff's conventions.

Exit codes: 0 nothing found (or all fixed), 1 findings remain, 2 usage/config/IO/parse error.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from . import __version__
from .config import ConfigError, Settings, load_settings, parse_target, pinned_torch_xla, validate_selectors
from .diagnostics import Diagnostic
from .discovery import discover, is_excluded
from .explain import explain_text, rules_table
from .progress import Progress
from .reporters import FORMATS, WITH_EDITS, printable, render, statistics
from .rules import ALL_RULES, RULES_BY_CODE
from .noqa import add_noqa
from .analysis.project import project_root
from .source import SourceError, Stamp, decode_source, read_bounded, write_fixed
from .workspace import Workspace, crash_report

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _error(message: str) -> None:
    message = printable(message)  # file names and contents may hold control characters
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


def _prepare(paths, config, select, extend_select, ignore, force_exclude, assume_xla, stdin: Stdin | None = None,
             target_version: str | None = None, preview: bool | None = None):
    if stdin is not None and stdin.wanted:
        paths = (str(stdin.path.parent),) if stdin.path.name != STDIN else ()
    targets = [Path(p) for p in paths] or [Path(".")]
    settings: Settings = load_settings(Path(config) if config else None, targets, ALL_RULES)
    settings.assume_xla = settings.assume_xla or assume_xla
    if target_version is not None:
        settings.target_version, settings.target_source = parse_target(target_version), "--target-version"
        if settings.target_version is None:
            raise ConfigError(f"--target-version: `{target_version}` is no torch_xla version (e.g. 2.5 or torch_xla>=2.5)")
    elif settings.target_version is None:
        pinned = pinned_torch_xla(settings.root)
        if pinned is not None:
            settings.target_version, settings.target_source = pinned[0], f"the pin in {pinned[1]}"
    if select:
        settings.select = validate_selectors(_split(select), ALL_RULES, "--select")
        settings.explicit_select = list(settings.select)
    if extend_select:
        chosen = validate_selectors(_split(extend_select), ALL_RULES, "--extend-select")
        settings.extend_select += chosen
        settings.explicit_select += chosen
    if preview is not None:
        settings.preview = preview
    if ignore:
        settings.ignore += validate_selectors(_split(ignore), ALL_RULES, "--ignore")
    if stdin is not None and stdin.wanted:
        stdin.read()
        # Ruff's rule: an excluded name is skipped only with --force-exclude
        excluded = force_exclude and stdin.path.name != STDIN and is_excluded(stdin.path, settings)
        return settings, settings.selected_rules(ALL_RULES), [] if excluded else [stdin.path], 0
    missing: list[str] = []
    files = discover(targets, settings, force_exclude=force_exclude, missing=missing)
    for message in missing:  # reported, and the other paths still checked (exit 2 at the end)
        _error(message)
    if not files and not missing:
        click.echo("warning: no Python files found under the given paths", err=True)
    return settings, settings.selected_rules(ALL_RULES), files, len(missing)


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


def _selection_options(func):
    for option in reversed(
        [
            click.argument("paths", nargs=-1, type=click.Path(path_type=str)),
            click.option("--config", type=click.Path(dir_okay=False), help="Use this TOML file instead of discovery."),
            click.option("--select", multiple=True, help="Rule codes or prefixes to enable (e.g. XLA1,XLA401)."),
            click.option("--extend-select", multiple=True, help="Codes or prefixes to enable in addition."),
            click.option("--ignore", multiple=True, help="Codes or prefixes to disable."),
            click.option("--preview/--no-preview", default=None,
                         help="Enable preview rules (on real code their precision is not yet shown; `xlalint "
                              "rules` marks them). Selecting a rule or its family explicitly enables it too."),
            click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too."),
            click.option("--assume-xla", is_flag=True,
                         help="Treat every file as code that runs on an XLA device (migration mode): XLA-only "
                              "rules also fire in files that do not import torch_xla or torchax."),
            click.option("-q", "--quiet", is_flag=True, help="Print diagnostics only: no hints, no summary."),
            click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                         help="Processes to check files with (default: one per core; never more than cores or files)."),
            click.option("--no-cache", is_flag=True, help="Neither read nor write the cache."),
            click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="XLALINT_CACHE_DIR",
                         help="Where to keep the cache (default: .xlalint_cache in each project's root)."),
            click.option("--target-version", default=None,
                         help="The oldest torch_xla the code must run on (e.g. 2.5): no replacement newer than it "
                              "is suggested. Default: the project's pin in requirements*.txt or pyproject.toml, "
                              "else the newest."),
            click.option("--stdin-filename", default=None,
                         help="The name of the file read from standard input (`-`): its configuration, per-file "
                              "ignores and excludes apply, and findings carry it."),
            click.option("--color", type=click.Choice(["auto", "always", "never"]), default=None,
                         help="Colour the output: auto (on a terminal; the default), always, never. Without it, "
                              "NO_COLOR turns colour off and FORCE_COLOR on."),
        ]
    ):
        func = option(func)
    return func


class _Guarded(click.Group):
    """A crash is one line naming a file with its traceback, exit 2 (never "findings remain"); Ctrl-C
    is exit 130 and nothing more (the workers ignore it; the parent stops them)."""

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
@_selection_options
@click.option("--output-format", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain (errors still exit 2).")
@click.option("--unsafe-fixes", is_flag=True, help="Show unsafe fixes as available (with --fix: apply them).")
@click.option("--statistics", "show_statistics", is_flag=True,
              help="Count findings per rule, with how many are fixable (JSON with --output-format json).")
@click.option("--fix", "apply_fixes", is_flag=True, help="Apply the fixes, as `xlalint fix --write` (Ruff's spelling).")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff and change nothing, as `xlalint fix`.")
@click.option("--add-noqa", is_flag=True,
              help="Add `# noqa: CODES` to every line with a finding (merged with those there), to baseline a code base.")
@click.option("--show-files", is_flag=True, help="List the files that would be checked, and stop.")
@click.option("--show-settings", is_flag=True,
              help="Print the settings in force for the first file (and the file they came from), and stop.")
@click.pass_context
def check(ctx, paths, config, select, extend_select, ignore, preview, force_exclude, assume_xla, quiet, jobs, no_cache,
          cache_dir, target_version, stdin_filename, color, output_format, exit_zero, unsafe_fixes, show_statistics, apply_fixes,
          diff, add_noqa, show_files, show_settings):
    """Lint PATHS (default: the current directory; `-`: standard input)."""
    _apply_color(color)
    if apply_fixes or diff:  # Ruff's `check --fix` / `check --diff`
        ctx.invoke(fix, paths=paths, config=config, select=select, extend_select=extend_select, ignore=ignore,
                   preview=preview, force_exclude=force_exclude, assume_xla=assume_xla, quiet=quiet, jobs=jobs, no_cache=no_cache,
                   cache_dir=cache_dir, target_version=target_version, stdin_filename=stdin_filename, color=color,
                   write=not diff, diff=diff,
                   unsafe_fixes=unsafe_fixes)
        return
    try:
        stdin = Stdin(paths, stdin_filename)
        settings, rules, files, missing = _prepare(paths, config, select, extend_select, ignore, force_exclude,
                                                   assume_xla, stdin, target_version, preview)
    except ConfigError as exc:
        _error(str(exc))
        sys.exit(EXIT_ERROR)
    if show_files or show_settings:
        click.echo(show_settings_text(settings, rules, files) if show_settings
                   else "".join(f"{printable(str(f))}\n" for f in files), nl=False)
        sys.exit(EXIT_ERROR if missing else EXIT_OK)
    # only JSON and SARIF show each fix's edits: computing them generates each fix's statements again
    workspace = Workspace(settings, rules, jobs=jobs, cache=not no_cache, cache_dir=cache_dir,
                          with_edits=output_format in WITH_EDITS and not show_statistics, progress=_progress(quiet))
    try:
        outcomes = workspace.check(files, given={stdin.path: stdin.raw} if stdin.wanted else None)
    finally:
        _close(workspace)
    diagnostics: list[Diagnostic] = []
    failed = missing  # files that could not be checked
    for outcome in outcomes:
        if outcome.error:
            _error(outcome.error)
            failed += 1
        diagnostics += outcome.diagnostics
    diagnostics.sort(key=Diagnostic.sort_key)
    if add_noqa:
        failed += _add_noqa(diagnostics, stdin)
        sys.exit(EXIT_ERROR if failed else EXIT_OK)
    unsafe = unsafe_fixes or settings.unsafe_fixes
    click.echo(statistics(diagnostics, output_format, unsafe_fixes=unsafe) if show_statistics else render(
        diagnostics, output_format, quiet=quiet, unsafe_fixes=unsafe, failed_files=failed), nl=False)
    if failed:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if diagnostics and not exit_zero else EXIT_OK)


@main.command()
@_selection_options
@click.option("--write", is_flag=True, help="Apply the fixes to the files (default: print a diff, change nothing).")
@click.option("--diff", is_flag=True, help="Print a unified diff and change nothing (the default without --write).")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour.")
def fix(paths, config, select, extend_select, ignore, preview, force_exclude, assume_xla, quiet, jobs, no_cache, cache_dir,
        target_version, stdin_filename, color, write, diff, unsafe_fixes):
    """Fix what can be fixed in PATHS. Prints a diff unless --write is given. With `-` (standard
    input), prints the fixed source (a diff with --diff), and what remains on standard error."""
    _apply_color(color)
    if write and diff:
        _error("--write and --diff are mutually exclusive")
        sys.exit(EXIT_ERROR)
    try:
        stdin = Stdin(paths, stdin_filename)
        settings, rules, files, missing = _prepare(paths, config, select, extend_select, ignore, force_exclude,
                                                   assume_xla, stdin, target_version, preview)
    except ConfigError as exc:
        _error(str(exc))
        sys.exit(EXIT_ERROR)
    unsafe = unsafe_fixes or settings.unsafe_fixes
    if stdin.wanted:
        _fix_stdin(stdin, settings, rules, files, unsafe=unsafe, diff=diff, quiet=quiet, jobs=jobs, no_cache=no_cache,
                   cache_dir=cache_dir)
    failed = missing > 0
    changed_files = fixed = unwritten = 0
    remaining: list[Diagnostic] = []
    written: set[Path] = set()  # files written, by their real path (a symbolic link and its target: once)
    workspace = Workspace(settings, rules, jobs=jobs, cache=not no_cache, cache_dir=cache_dir,
                          progress=_progress(quiet))
    try:
        outcomes = workspace.fix(files, unsafe=unsafe)
    finally:
        _close(workspace)
    for outcome in outcomes:
        if outcome.error:
            _error(outcome.error)
            failed = True
            continue
        result = outcome.result
        if result.fixed is not None:
            if write:
                if outcome.path.resolve() in written:
                    remaining += result.diagnostics
                    continue
                try:
                    written.add(write_fixed(outcome.path, result.fixed, outcome.stamp,
                                            project_root(outcome.path, follow=False)))
                except OSError as exc:
                    _error(f"{outcome.path}: error: cannot write: {exc.strerror or exc}")
                    failed = True
                    remaining += result.diagnostics
                    unwritten += result.fixed_count  # still in the file
                    continue
            else:
                from .fixing.apply import unified_diff

                click.echo(unified_diff(str(outcome.path), *result.diff_texts()), nl=False)
            changed_files += 1
            fixed += result.fixed_count
        remaining += result.diagnostics
    remaining.sort(key=Diagnostic.sort_key)
    if write:
        if remaining:
            click.echo(render(remaining, "concise", quiet=True, unsafe_fixes=unsafe), nl=False)
        if not quiet:
            click.echo(f"Fixed {fixed} error{'s' if fixed != 1 else ''} in {changed_files} "
                       f"file{'s' if changed_files != 1 else ''}; {len(remaining) + unwritten} remaining.", err=True)
    elif not quiet:
        click.echo(f"Would fix {fixed} error{'s' if fixed != 1 else ''} in {changed_files} "
                   f"file{'s' if changed_files != 1 else ''} (run with --write to apply).", err=True)
    if failed:
        sys.exit(EXIT_ERROR)
    if write:
        sys.exit(EXIT_FINDINGS if remaining else EXIT_OK)
    sys.exit(EXIT_FINDINGS if changed_files else EXIT_OK)


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
            _error(str(exc) if isinstance(exc, SourceError) else f"{path}: error: cannot write: {exc.strerror or exc}")
            failed += 1
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    return failed


def show_settings_text(settings: Settings, rules, files: list[Path]) -> str:
    """The resolved settings, as `key = value` lines under the file they came from."""
    first = files[0] if files else None
    codes = [r.code for r in settings.rules_for(first, rules)] if first is not None else [r.code for r in rules]
    values = {
        "root": str(settings.root),
        "select": settings.select, "extend-select": settings.extend_select, "ignore": settings.ignore,
        "per-file-ignores": settings.per_file_ignores,
        "exclude": settings.exclude, "extend-exclude": settings.extend_exclude,
        "respect-gitignore": settings.respect_gitignore, "unsafe-fixes": settings.unsafe_fixes,
        "assume-xla": settings.assume_xla, "preview": settings.preview,
        "target-version": settings.target_version or "(the newest)",
    }
    lines = [f"Resolved settings for: {first if first is not None else '(no file)'}",
             f"Settings path: {settings.config_file or '(none: defaults and the command line)'}", ""]
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


def _fix_stdin(stdin: Stdin, settings, rules, files, *, unsafe, diff, quiet, jobs, no_cache, cache_dir):
    """Editors' and formatters' mode: the fixed source on standard output (unchanged when nothing is
    fixed, or when the name is excluded), findings that remain on standard error."""
    if not files:
        _write_stdout(b"" if diff else stdin.raw)
        sys.exit(EXIT_OK)
    workspace = Workspace(settings, rules, jobs=1, cache=not no_cache, cache_dir=cache_dir)
    try:
        (outcome,) = workspace.fix(files, unsafe=unsafe, given={stdin.path: stdin.raw})
    finally:
        _close(workspace)
    if outcome.error:
        _error(outcome.error)
        sys.exit(EXIT_ERROR)
    result = outcome.result
    fixed = result.fixed if result.fixed is not None else stdin.raw
    if diff:
        from .fixing.apply import unified_diff

        if result.fixed is not None:
            click.echo(unified_diff(str(stdin.path), *result.diff_texts()), nl=False)
    else:
        _write_stdout(fixed)
    remaining = sorted(result.diagnostics, key=Diagnostic.sort_key)
    if remaining and not quiet:
        click.echo(render(remaining, "concise", quiet=True, unsafe_fixes=unsafe), nl=False, err=True)
    if diff:
        sys.exit(EXIT_FINDINGS if result.fixed is not None else EXIT_OK)
    sys.exit(EXIT_FINDINGS if remaining else EXIT_OK)


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


@main.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_rules(output_format):
    """List every rule: code, name, category, fix availability, summary."""
    click.echo(rules_table(ALL_RULES, output_format))
