"""`--assume-compiled` (issue 38): model code its users compile. A library never calls
`torch.compile`; with the option (or `assume-compiled = true`), every `nn.Module.forward` and what it
calls, and the functions `compiled = [...]` names, are judged by the DYN rules as compiled code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xlalint.analysis.compiled import CompileOptions

BASE = """
    import torch
    from torch import nn


    class Base(nn.Module):
        pass


    def helper(x):
        return x.sum().item()
"""
MODEL = """
    import torch
    from .base import Base, helper


    class Net(Base):
        def forward(self, x):
            def inner(y):
                return y.tolist()

            inner(x)
            return helper(x)


    class Plain:
        def forward(self, x):
            return x.sum().item()


    def standalone(x):
        return x.max().item()


    class Disabled(Base):
        @torch.compiler.disable
        def forward(self, x):
            return x.sum().item()
"""


def make_library(root: Path, config: str = "") -> Path:
    package = root / "mylib"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"[tool.xlalint]\n{config}")
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(textwrap.dedent(BASE))
    (package / "model.py").write_text(textwrap.dedent(MODEL))
    return root


def findings(root: Path, *args: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlalint",
            "check",
            "--select",
            "DYN",
            "--output-format",
            "json",
            "--exit-zero",
            "--no-cache",
            *args,
            ".",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def places(found: list[dict]) -> set[tuple[str, int, str]]:
    return {(Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in found}


def test_a_library_without_torch_compile_has_no_dyn_finding_by_default(tmp_path):
    assert findings(make_library(tmp_path)) == []


def test_assume_compiled_traces_module_forwards_their_helpers_and_nested_functions(tmp_path):
    found = findings(make_library(tmp_path), "--assume-compiled")
    # the helper in another module (through a project base of nn.Module) and the nested function;
    # not the plain class's `forward`, not a free function nobody compiles, not a disabled forward
    assert places(found) == {("base.py", 11, "DYN101"), ("model.py", 9, "DYN101")}
    for finding in found:
        messages = [r["message"] for r in finding.get("related", [])]
        assert any("forward of nn.Module `Net`, compiled under --assume-compiled" in m for m in messages), messages


def test_the_configuration_key_turns_it_on(tmp_path):
    found = findings(make_library(tmp_path, "assume-compiled = true\n"))
    assert places(found) == {("base.py", 11, "DYN101"), ("model.py", 9, "DYN101")}


def test_a_named_function_is_compiled_and_says_why(tmp_path):
    found = findings(make_library(tmp_path, 'compiled = ["mylib.model:standalone", "mylib.model:Plain.forward"]\n'))
    assert places(found) == {("model.py", 17, "DYN101"), ("model.py", 21, "DYN101")}
    messages = {m for d in found for m in (r["message"] for r in d["related"])}
    assert any("`mylib.model:standalone`, named in `compiled`" in m for m in messages), messages


def test_a_malformed_compiled_name_is_a_one_line_error(tmp_path):
    root = make_library(tmp_path, 'compiled = ["mylib.model.standalone"]\n')
    proc = subprocess.run(
        [sys.executable, "-m", "xlalint", "check", "."], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "pkg.module:function" in proc.stderr, proc.stderr


def test_a_torch_compile_of_the_project_outranks_the_assumption(tmp_path):
    root = make_library(tmp_path)
    (root / "train.py").write_text("import torch\nfrom mylib.model import Net\n\nmodel = torch.compile(Net())\n")
    found = findings(root, "--assume-compiled")
    assert places(found) == {("base.py", 11, "DYN101"), ("model.py", 9, "DYN101")}
    assert all("assume-compiled" not in json.dumps(d.get("related", [])) for d in found)


@pytest.mark.parametrize("options", [CompileOptions(), CompileOptions(False, "tpu", True, "forward of nn.Module `A`")])
def test_options_round_trip_through_their_key(options):
    assert CompileOptions.from_key(options.key()) == options


def test_a_real_compile_and_an_assumption_merge_to_the_real_one():
    real, assumed = CompileOptions(dynamic=False), CompileOptions(assumed="forward of nn.Module `A`")
    assert real.merge(assumed).assumed is None and assumed.merge(real).dynamic is False
    assert CompileOptions(assumed="b").merge(CompileOptions(assumed="a")).assumed == "a"


def test_explain_names_the_option_for_the_compile_family():
    from xlalint.explain import explain_text
    from xlalint.rules import ALL_RULES

    for rule in ALL_RULES:
        said = "--assume-compiled" in explain_text(rule)
        assert said == rule.code.startswith("DYN"), rule.code


def test_a_jit_tracing_guard_is_neither_a_tensor_branch_nor_compiled_code(tmp_path):
    # Dynamo folds `torch._C._get_tracing_state()` to None: one graph, the branch not traced
    # (measured, torch 2.13); the guard is a state query, not a tensor
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "heads.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn


        class Head(nn.Module):
            def forward(self, x):
                if torch._C._get_tracing_state():
                    print(x.sum().item())
                if torch.jit.is_scripting():
                    return x.tolist()
                return x.max().item()
    """))
    assert places(findings(root, "--assume-compiled")) == {("heads.py", 12, "DYN101")}


def test_a_function_annotated_to_return_a_python_scalar_is_no_tensor_branch(tmp_path):
    root = tmp_path / "lib"
    root.mkdir()
    (root / "pyproject.toml").write_text("")
    (root / "norms.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn


        def channels_last(t: torch.Tensor) -> bool:
            return t.is_contiguous(memory_format=torch.channels_last)


        def any_nan(t: torch.Tensor):
            return torch.isnan(t).any()


        class Norm(nn.Module):
            def forward(self, x):
                if channels_last(x):
                    x = x.permute(0, 2, 3, 1)
                if any_nan(x):
                    x = torch.zeros_like(x)
                return x
    """))
    # the annotated query is a Python bool; the unannotated one returns a tensor: a real break
    assert places(findings(root, "--assume-compiled")) == {("norms.py", 18, "DYN104")}
