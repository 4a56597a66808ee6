"""Preview rules (Ruff's preview mode): off by default, on with `--preview`, `preview = true`, or an
explicit selection of the rule or its family; `xlalint rules` and `explain` say which they are."""

import json

from xlalint.rules import ALL_RULES

JAX_SCRIPT = """\
import jax
import jax.numpy as jnp


@jax.jit
def clean(x):
    return x[x > 0].sum()
"""


def codes(stdout: str) -> list[str]:
    return sorted({d["code"] for d in json.loads(stdout)})


def test_preview_rules_are_off_by_default_and_on_when_asked(run_cli, project):
    project.write("train.py", JAX_SCRIPT)
    assert [r for r in ALL_RULES if r.preview], "no preview rule to test with"
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert (code, codes(out)) == (0, [])
    for flags in (["--preview"], ["--select", "JAX"], ["--select", "JAX105"], ["--extend-select", "JAX1"]):
        code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", *flags, project / "train.py")
        assert (code, codes(out)) == (1, ["JAX105"]), flags
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", "--select", "ALL", project / "train.py")
    assert codes(out) == []  # ALL is not an explicit choice of a preview rule


def test_preview_from_the_configuration_and_overridden_on_the_command_line(run_cli, project):
    project.write("pyproject.toml", "[tool.xlalint]\npreview = true\n")
    project.write("train.py", JAX_SCRIPT)
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", project / "train.py")
    assert codes(out) == ["JAX105"]
    code, out, _ = run_cli("check", "--no-cache", "--output-format", "json", "--no-preview", project / "train.py")
    assert codes(out) == []
    project.write("pyproject.toml", "[tool.xlalint]\npreview = \"yes\"\n")
    code, _, err = run_cli("check", "--no-cache", project / "train.py")
    assert code == 2 and "`preview` must be true or false" in err


def test_rules_and_explain_mark_preview_rules(run_cli):
    code, out, _ = run_cli("rules")
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    for rule in ALL_RULES:
        assert (" preview " in lines[rule.code]) == rule.preview, rule.code
    code, out, _ = run_cli("rules", "--output-format", "json")
    assert {r["code"]: r["preview"] for r in json.loads(out)} == {r.code: r.preview for r in ALL_RULES}
    preview = next(r for r in ALL_RULES if r.preview)
    code, out, _ = run_cli("explain", preview.code)
    assert "Preview: off by default" in out


def test_a_filter_jit_method_of_another_module_is_known_cold_and_warm(run_cli, project):
    from xlalint.rules.jax_tracing.static_argument_per_iteration import StaticArgumentPerIteration

    example = next(e for e in StaticArgumentPerIteration.INVALID if e.modules)
    project.write("pyproject.toml", "[project]\nname = 'inference'\n")
    project.write("pages.py", example.modules["pages.py"])
    project.write("engine.py", example.code)
    for run in ("cold", "warm"):
        code, out, _ = run_cli("check", "--preview", "--output-format", "json", project / "engine.py")
        assert [(d["code"], d["location"]["row"]) for d in json.loads(out)] == [("JAX109", 6)], run
    assert (project / ".xlalint_cache").is_dir()
