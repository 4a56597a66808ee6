"""Settings: `[tool.xlalint]` in the nearest pyproject.toml, or xlalint.toml, plus CLI overrides."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .rule import Rule
from .source import is_dir, is_file, read_bounded, stat_or_none

CONFIG_FILES = ("xlalint.toml", ".xlalint.toml", "pyproject.toml")
KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "respect-gitignore",
    "unsafe-fixes",
    "assume-xla",
    "assume-compiled",
    "compiled",
    "target-version",
    "preview",
    "fixable",
    "unfixable",
    "target",
    "confidence",
}
# platforms `--target` / `target = ...` can name: migration rules toward it turn on
TARGETS = ("torchtpu",)
DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".eggs",
    "*.egg-info",
    "site-packages",
    "_build",
    "buck-out",
    ".ipynb_checkpoints",
    ".direnv",
    "__pypackages__",
    ".xlalint_cache",
)


class ConfigError(Exception):
    """Bad configuration or CLI selection: one line, exit 2."""


@dataclass
class Settings:
    root: Path  # where relative patterns are anchored (the config file's folder, else cwd)
    config_file: Path | None = None
    select: list[str] = field(default_factory=lambda: ["XLA", "JAX", "DYN", "TPU"])
    extend_select: list[str] = field(default_factory=list)
    # selectors the user wrote (configuration or command line): they also enable preview rules
    explicit_select: list[str] = field(default_factory=list)
    preview: bool = False  # enable preview rules (Ruff's preview mode)
    ignore: list[str] = field(default_factory=list)
    # whose fixes may be applied or offered (Ruff's fixable/unfixable); a finding keeps its report
    fixable: list[str] = field(default_factory=lambda: ["ALL"])
    unfixable: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = field(default_factory=list)
    respect_gitignore: bool = True
    unsafe_fixes: bool = False
    assume_xla: bool = False  # treat every file as code that runs on an XLA device (migration mode)
    # treat every nn.Module's forward as compiled by torch.compile (model code compiled by its users)
    assume_compiled: bool = False
    # functions compiled elsewhere, as `pkg.module:function` or `pkg.module:Class.method`
    compiled: list[str] = field(default_factory=list)
    # the oldest torch_xla the code must run on: no replacement newer than it is suggested (None:
    # the newest); `target_source` says where it came from (the config, the command line, a pin)
    target_version: str | None = None
    target_source: str = ""
    # the platform the code is being moved to (`--target torchtpu`): its migration rules run, and
    # rules whose advice points to the platform being left step aside
    target_platform: str | None = None
    # the lowest confidence shown (`diagnostics.CONFIDENCE_LEVELS`): `high` hides possible findings
    confidence: str = "high"

    @property
    def target(self) -> tuple[int, ...] | None:
        return parse_version(self.target_version) if self.target_version else None

    def selected_rules(self, all_rules: list[type[Rule]]) -> list[type[Rule]]:
        chosen = [r for r in all_rules if _matches(r.code, self.select + self.extend_select)]
        chosen = [
            r
            for r in chosen
            if not r.preview
            or self.preview
            or self.explicitly_selected(r)
            or (r.target is not None and r.target == self.target_platform)
        ]
        chosen = [
            r
            for r in chosen
            if (r.target is None or r.target == self.target_platform or self.explicitly_selected(r))
            and self.target_platform not in r.not_for_targets
        ]
        return [r for r in chosen if not _matches(r.code, self.ignore)]

    def fixable_codes(self, rules: list[type[Rule]]) -> frozenset[str] | None:
        """The codes of `rules` whose fixes may be built (None: every rule's)."""
        if self.fixable == ["ALL"] and not self.unfixable:
            return None
        return frozenset(
            r.code for r in rules if _matches(r.code, self.fixable) and not _matches(r.code, self.unfixable)
        )

    def explicitly_selected(self, rule: type[Rule]) -> bool:
        """A selector the user wrote names the rule or its family (`JAX`, `JAX1`, `JAX110`); `ALL`
        and the defaults do not."""
        return any(s != "ALL" and rule.code.startswith(s) for s in self.explicit_select)

    def rules_for(self, path: Path, rules: list[type[Rule]]) -> list[type[Rule]]:
        ignored = self.ignored_codes(path)
        return [r for r in rules if not _matches(r.code, ignored)] if ignored else rules

    def ignored_codes(self, path: Path) -> list[str]:
        if not self.per_file_ignores:
            return []
        from .discovery import glob_matches

        codes: list[str] = []
        for pattern, pattern_codes in self.per_file_ignores.items():
            negated = pattern.startswith("!")
            hit = glob_matches(pattern.lstrip("!"), path, self.root)
            if hit != negated:
                codes.extend(pattern_codes)
        return codes


def _matches(code: str, selectors: list[str]) -> bool:
    return any(s == "ALL" or code.startswith(s) for s in selectors)


def validate_selectors(selectors: list[str], all_rules: list[type[Rule]], where: str) -> list[str]:
    cleaned = []
    for raw in selectors:
        selector = raw.strip().upper()
        if not selector:
            continue
        if selector != "ALL" and not any(r.code.startswith(selector) for r in all_rules):
            raise ConfigError(f"{where}: unknown rule selector `{raw}` (see `xlalint rules`)")
        cleaned.append(selector)
    return cleaned


def find_config(start: Path) -> tuple[Path, dict] | None:
    """The nearest xlalint.toml, or pyproject.toml with a [tool.xlalint] table, from `start` upwards."""
    start = start.resolve()
    for folder in [start, *start.parents] if is_dir(start) else [start.parent, *start.parent.parents]:
        for name in CONFIG_FILES:
            candidate = folder / name
            if not is_file(candidate):
                continue
            data = load_toml(candidate)
            if name == "pyproject.toml":
                table = data.get("tool", {}).get("xlalint")
                if table is None:
                    continue
                return candidate, table
            return candidate, data
    return None


def load_toml(path: Path) -> dict:
    try:
        return tomllib.loads(read_bounded(path)[0].decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: error: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(
            f"{path}: error: invalid TOML: {exc if not isinstance(exc, RecursionError) else 'nested too deep'}"
        ) from None


def _string_list(value, key: str, where: str) -> list[str]:
    if isinstance(value, str):  # `select = "XLA101"`: TOML allows it, Ruff rejects it, and so do we
        raise ConfigError(
            f"{where}: `{key}` must be a list of strings, not a string: write {key} = [{value!r}]".replace("'", '"')
        )
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


def settings_from_table(table: dict, root: Path, config_file: Path | None, all_rules: list[type[Rule]]) -> Settings:
    # `path: error: ...`, as every other error about a file (a TOML error too)
    where = f"{config_file}: error" if config_file else "configuration"
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = Settings(root=root, config_file=config_file)
    if "select" in table:
        settings.select = validate_selectors(_string_list(table["select"], "select", where), all_rules, where)
        settings.explicit_select += settings.select
    if "extend-select" in table:
        settings.extend_select = validate_selectors(
            _string_list(table["extend-select"], "extend-select", where), all_rules, where
        )
        settings.explicit_select += settings.extend_select
    for key in ("fixable", "unfixable"):
        if key in table:
            setattr(settings, key, validate_selectors(_string_list(table[key], key, where), all_rules, where))
    if "ignore" in table:
        settings.ignore = validate_selectors(_string_list(table["ignore"], "ignore", where), all_rules, where)
    if "per-file-ignores" in table:
        value = table["per-file-ignores"]
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        settings.per_file_ignores = {
            str(k): validate_selectors(_string_list(v, f"per-file-ignores.{k}", where), all_rules, where)
            for k, v in value.items()
        }
    if "exclude" in table:
        settings.exclude = _string_list(table["exclude"], "exclude", where)
    if "extend-exclude" in table:
        settings.extend_exclude = _string_list(table["extend-exclude"], "extend-exclude", where)
    for key, attr in (
        ("respect-gitignore", "respect_gitignore"),
        ("unsafe-fixes", "unsafe_fixes"),
        ("assume-xla", "assume_xla"),
        ("assume-compiled", "assume_compiled"),
        ("preview", "preview"),
    ):
        if key in table:
            if not isinstance(table[key], bool):
                raise ConfigError(f"{where}: `{key}` must be true or false")
            setattr(settings, attr, table[key])
    if "compiled" in table:
        settings.compiled = [
            parse_compiled(v, f"{where}: `compiled`") for v in _string_list(table["compiled"], "compiled", where)
        ]
    if "confidence" in table:
        settings.confidence = parse_confidence(table["confidence"], f"{where}: `confidence`")
    if "target" in table:
        settings.target_platform = parse_platform(table["target"], f"{where}: `target`")
    if "target-version" in table:
        value = table["target-version"]
        if not isinstance(value, str) or parse_target(value) is None:
            raise ConfigError(
                f'{where}: `target-version` must be a torch_xla version such as "2.5" or "torch_xla>=2.5"'
            )
        settings.target_version, settings.target_source = parse_target(value), str(config_file or "configuration")
    return settings


_VERSION = re.compile(r"^\s*(?:torch[_-]xla\s*(?:\[[^\]]*\])?\s*(?:==|~=|>=)?)?\s*v?(\d+(?:\.\d+){0,2})\s*$", re.I)
# a pin in requirements*.txt or pyproject.toml: `torch_xla==2.5.1`, `torch-xla[tpu]~=2.6.0`, `torch_xla>=2.4`
_PIN = re.compile(r"""(?:^|["'\s])torch[_-]xla\s*(?:\[[^\]]*\])?\s*(?:==|~=|>=)\s*(\d+(?:\.\d+){0,2})""", re.I | re.M)


def parse_confidence(value, where: str) -> str:
    """The lowest confidence to show (`high`, `possible`); a ConfigError naming `where` otherwise."""
    from .diagnostics import CONFIDENCE_LEVELS

    if not isinstance(value, str) or value.strip().lower() not in CONFIDENCE_LEVELS:
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, CONFIDENCE_LEVELS))}, got {value!r}")
    return value.strip().lower()


_COMPILED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)?")


def parse_compiled(value: str, where: str) -> str:
    """`pkg.module:function` or `pkg.module:Class.method` (a function the user compiles
    elsewhere); a ConfigError naming `where` otherwise."""
    if not _COMPILED_NAME.fullmatch(value.strip()):
        raise ConfigError(f'{where}: {value!r} is not "pkg.module:function" or "pkg.module:Class.method"')
    return value.strip()


def parse_platform(value, where: str) -> str:
    """The platform a migration targets (`torchtpu`); a ConfigError naming `where` otherwise."""
    if not isinstance(value, str) or value.strip().lower() not in TARGETS:
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, TARGETS))}, got {value!r}")
    return value.strip().lower()


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def parse_target(text: str) -> str | None:
    """`2.5`, `torch_xla>=2.5` -> "2.5"; None when it names no version."""
    match = _VERSION.match(text)
    return match.group(1) if match else None


def pinned_torch_xla(root: Path) -> tuple[str, Path] | None:
    """The lowest torch_xla version the project's requirements*.txt or pyproject.toml pin (==, ~=, >=),
    and the file, when one does."""
    found: list[tuple[tuple[int, ...], str, Path]] = []
    for path in sorted(root.glob("requirements*.txt")) + [root / "pyproject.toml", root / "setup.py"]:
        try:  # a FIFO or `requirements.txt -> /dev/zero` is never read
            text = read_bounded(path)[0].decode("utf-8", errors="replace")
        except OSError:
            continue
        text = re.sub(r"(?m)#.*$", "", text) if path.suffix == ".txt" else text
        found += [(parse_version(v), v, path) for v in _PIN.findall(text)]
    if not found:
        return None
    _, version, path = min(found)
    return version, path


def load_settings(config: Path | None, paths: list[Path], all_rules: list[type[Rule]]) -> Settings:
    if config is not None:
        if not is_file(config):
            raise ConfigError(f"{config}: error: config file not found")
        data = load_toml(config)
        table = data.get("tool", {}).get("xlalint", {}) if config.name == "pyproject.toml" else data
        return settings_from_table(table, config.resolve().parent, config.resolve(), all_rules)
    for start in [*(p for p in paths[:1] if stat_or_none(p) is not None), Path.cwd()]:
        found = find_config(start)
        if found:
            file, table = found
            return settings_from_table(table, file.parent, file, all_rules)
    return Settings(root=Path.cwd().resolve())
