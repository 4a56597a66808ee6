"""The linter's layers, read from the source with `ast` (nothing is imported): the analysis judges
code and knows no rule and no fix; a rule holds its pattern, message and fix, and reaches only the
analysis, the engine's rule API and the fixing toolkit. (The runtime's own check:
tests/runtime/test_runtime_imports.py.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import xlalint
import xlalint.rules

PACKAGES = {"xlalint": Path(xlalint.__file__).parent, "xlalint.rules": Path(xlalint.rules.__file__).parent}

# What a rule module may import besides the standard library, the analysis, the fixing toolkit and its own package.
# (torch_version: which graph-break ids the installed torch prints, for the DYN rules' messages)
RULE_API = ("xlalint.rule", "xlalint.diagnostics", "xlalint.config", "xlalint.torch_version")
THIRD_PARTY_FOR_RULES = ("tomli",)  # the migration table's parser before Python 3.11


def module_name(path: Path) -> str:
    for package, folder in sorted(PACKAGES.items(), key=lambda item: -len(str(item[1]))):
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    raise AssertionError(path)


def imports(path: Path, *, type_only: bool = True):
    """(absolute module imported, line) for every import of `path`, function-level ones included (and
    those under `if TYPE_CHECKING:` unless `type_only` is False); `from . import x` also yields
    `package.x`, the submodule it may be."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped = set() if type_only else {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                                       and ast.unparse(block.test).endswith("TYPE_CHECKING") for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, node.lineno
            for alias in node.names:  # `from . import steps`: the submodule itself
                yield f"{module}.{alias.name}", node.lineno


def sources(folder: Path):
    return sorted(folder.rglob("*.py"))


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_analysis_knows_no_rule_and_no_fix():
    analysis = PACKAGES["xlalint"] / "analysis"
    wrong = [(module_name(path), module, line) for path in sources(analysis) for module, line in imports(path)
             if within(module, "xlalint.rules", "xlalint.fixing", "libcst")]
    assert len(sources(analysis)) >= 5
    assert not wrong


def test_rules_reach_only_the_analysis_the_rule_api_and_fixing():
    allowed = ("xlalint.analysis", "xlalint.fixing", "xlalint.rules", *RULE_API)
    wrong = []
    for path in sources(PACKAGES["xlalint.rules"]):
        for module, line in imports(path):
            root = module.partition(".")[0]
            if root in sys.stdlib_module_names or root in THIRD_PARTY_FOR_RULES:
                continue
            if within(module, *allowed):
                continue
            wrong.append((module_name(path), module, line))
    assert len(sources(PACKAGES["xlalint.rules"])) >= 40
    assert not wrong  # libcst only through xlalint.fixing.lazy; never the CLI, the engine or the cache


def test_imports_are_resolved_to_absolute_names(tmp_path, monkeypatch):
    # What the checks read: relative and function-level imports, as absolute module names.
    fake = tmp_path / "rules"
    (fake / "family").mkdir(parents=True)
    (fake / "family" / "rule_x.py").write_text("from ..analysis_x import y\n\ndef f():\n    from xlalint.engine import lint\n")
    monkeypatch.setitem(PACKAGES, "xlalint.rules", fake)
    found = {module for module, _ in imports(fake / "family" / "rule_x.py")}
    assert "xlalint.engine" in found and "xlalint.rules.analysis_x" in found


def test_no_import_cycle_among_the_analysis_modules(type_only: bool = False):
    """The analysis is layered: names/index/vocabulary at the bottom, `file` (what an analysis may
    ask of the file it judges), the per-topic analyses above, `context` (the facade rules use) on
    top. Imports inside functions count: deferring an import hides a cycle, it does not remove it."""
    analysis = PACKAGES["xlalint"] / "analysis"
    names = {module_name(path) for path in sources(analysis)}
    graph = {module_name(path): {m for m, _ in imports(path, type_only=type_only) if m in names and m != module_name(path)}
             for path in sources(analysis)}
    graph = {m: deps - {"xlalint.analysis"} for m, deps in graph.items()}  # the package's own __init__
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module, path):
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert "xlalint.analysis.barriers" in graph["xlalint.analysis.context"]  # the graph is read, not empty


def test_no_import_cycle_among_the_analysis_modules_for_the_type_checker():
    """Nor for the type checker: imports under `if TYPE_CHECKING:` count too. An analysis below
    `context` names the file it judges as `file.File` (a Protocol that `FileContext` implements),
    not as `FileContext`, so each layer is understood, and checked, without the ones above it."""
    test_no_import_cycle_among_the_analysis_modules(type_only=True)


def test_a_cycle_through_a_function_level_import_is_seen(tmp_path, monkeypatch):
    fake = tmp_path / "xlalint"
    (fake / "analysis").mkdir(parents=True)
    (fake / "analysis" / "a.py").write_text("from . import b\n")
    (fake / "analysis" / "b.py").write_text("def f():\n    from .a import x\n")
    (fake / "analysis" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    monkeypatch.setitem(PACKAGES, "xlalint", fake)
    assert {m for m, _ in imports(fake / "analysis" / "b.py", type_only=False)} >= {"xlalint.analysis.a"}
    assert not {m for m, _ in imports(fake / "analysis" / "c.py", type_only=False)} & {"xlalint.analysis.a"}
    with pytest.raises(AssertionError, match="import cycle: xlalint.analysis.a -> xlalint.analysis.b -> xlalint.analysis.a"):
        test_no_import_cycle_among_the_analysis_modules()


def test_a_cycle_through_a_type_checking_import_is_seen_by_the_type_checker_check(tmp_path, monkeypatch):
    fake = tmp_path / "xlalint"
    (fake / "analysis").mkdir(parents=True)
    (fake / "analysis" / "a.py").write_text("from . import b\n")
    (fake / "analysis" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    monkeypatch.setitem(PACKAGES, "xlalint", fake)
    with pytest.raises(AssertionError, match="import cycle: xlalint.analysis.a -> xlalint.analysis.b -> xlalint.analysis.a"):
        test_no_import_cycle_among_the_analysis_modules_for_the_type_checker()
