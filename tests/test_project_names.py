"""`ProjectNames`: a module's summary does not judge the calls no project function can answer
(`torch.zeros(...)`, `self.assertEqual(...)`), by what the project's paths and `def`s could name.
Each test of it is a superset of how `ProjectIndex.resolve_call` resolves, so the project's facts
are the same as when every call is judged; a cached summary is judged again when a module added
since could hold what it skipped."""

import textwrap
from pathlib import Path

from xlalint.analysis.project import ProjectIndex, summarize
from xlalint.analysis.project_names import ProjectNames
from xlalint.config import Settings
from xlalint.engine import analyse
from xlalint.rules import ALL_RULES
from xlalint.source import decode_source
from xlalint.workspace import Workspace


def test_every_def_and_class_is_a_defined_name():
    text = textwrap.dedent(
        """\
        def top(): pass
        class Model:
            def forward(self): pass
            async def fetch(self): pass
        if True:
            def guarded(): pass
        def \\
            continued(): pass
        class Generic[T]: pass
        def ﬁle(): pass
        x = "def quoted"  # (a superset: a string's `def` may count, never too few)
        """
    )
    defined = ProjectNames.of([("m", text)]).defined
    assert {"top", "Model", "forward", "fetch", "guarded", "continued", "Generic", "file"} <= defined
    # lines ended as Python ends them, a lone carriage return too
    assert {"cr", "crlf", "method"} <= ProjectNames.of([("m", "x = 1\rdef cr(): pass\r\nclass crlf:\r\n    def method(self): pass\r")]).defined


def test_an_import_may_name_a_module_by_its_last_part_or_by_a_suffix_defining_the_next():
    names = ProjectNames.of(
        [("trainer.engine", "def train_step(): pass\n"), ("kwt_utils_trainer", "def check(): pass\n"), ("", "")]
    )
    assert names.may_import("trainer.engine.train_step")  # a module `trainer.engine`
    assert names.may_import("engine.train_step")  # a file engine.py on another `sys.path`
    assert names.may_import("utils.trainer.check")  # `kwt_utils_trainer` ends with `trainer`, defines check
    assert not names.may_import("utils.trainer.other")  # ... but no `other`
    assert not names.may_import("torch.zeros")
    assert not names.may_import("torch.nn.functional.relu")
    assert names.may_define_method("train_step") and not names.may_define_method("assertEqual")
    assert names.names_any(["x.engine.f"]) and names.names_any([".check"]) and not names.names_any(["os.path.join"])


def test_a_function_may_be_called_when_the_text_names_it_beyond_its_defs():
    names = ProjectNames.of(
        [
            ("a", "def used(): pass\ndef test_alone(): pass\ndef by_string(): pass\nclass K:\n    def __init__(self): pass\n"),
            ("b", "from a import used\nhandler = getattr(k, 'by_string')\n"),
        ]
    )
    assert names.may_call("used") and names.may_call("by_string") and names.may_call("__init__")
    assert not names.may_call("test_alone")
    assert names.may_call("never_read")  # a function whose `def` the text was not read for: asked
    assert names.names_any(["~used"]) and not names.names_any(["~test_alone"])


# What resolves in this project, each a way the project index has: an import of a module, a file
# on another `sys.path`, a name ending with the import (`my_torch` for `torch`, defining `zeros`), a
# method of a base class in another module, a typed receiver's `__call__`, a `super()` call.
PROJECT = {
    "my_torch.py": "import torch\n\ndef zeros(n):\n    return torch.zeros(n).sum().item()\n",
    "base.py": (
        "import torch\n\nclass Base(torch.nn.Module):\n"
        "    def log(self, value):\n        print(value.item())\n"
        "    def __call__(self, x):\n        return x.sum().item()\n"
    ),
    "train.py": textwrap.dedent(
        """\
        import os
        import torch
        import torch_xla.core.xla_model as xm
        from base import Base

        class Trainer(Base):
            def step(self, model, batch, optimizer):
                loss = model(batch).sum()
                loss.backward()
                optimizer.step()
                xm.mark_step()
                self.log(loss)
                self.assertEqual(1, 1)
                super().log(loss)
                zeros = torch.zeros(3)
                os.path.join("a", "b")

        def main(model, loader, optimizer):
            trainer = Trainer()
            scorer: Base = Base()
            for batch in loader:
                trainer.step(model, batch, optimizer)
                scorer(batch)
        """
    ),
}


def _summaries(root: Path, names: ProjectNames | None):
    found = []
    for rel in PROJECT:
        source = decode_source(root / rel, (root / rel).read_bytes())
        ctx = analyse(source)
        summary = summarize(ctx, rel.removesuffix(".py"), names)
        summary.path = str(root / rel)
        found.append(summary)
    return found


def test_the_facts_are_those_of_judging_every_call(tmp_path):
    for rel, text in PROJECT.items():
        (tmp_path / rel).write_text(text)
    names = ProjectNames.of((rel.removesuffix(".py"), text) for rel, text in PROJECT.items())
    judged, spared = _summaries(tmp_path, None), _summaries(tmp_path, names)
    assert ProjectIndex(spared).facts() == ProjectIndex(judged).facts()
    assert sum(len(s.calls) for s in spared) < sum(len(s.calls) for s in judged)
    outside = {entry for s in spared for entry in s.outside}
    assert {"os.path.join", ".assertEqual", "~main"} <= outside  # (`main`: nothing calls it)
    assert not outside & {"torch.zeros", ".log", ".__call__"}  # `my_torch` may hold `zeros`


def _facts(root: Path, cache_dir: Path, path: str):
    workspace = Workspace(Settings(root=root), ALL_RULES, jobs=1, cache_dir=cache_dir)
    try:
        return workspace.facts([root / path])[root / path]
    finally:
        workspace.close()


# a training loop whose last statement each test chooses
LOOP = """\
import torch
import torch_xla.core.xla_model as xm
{imports}

def main(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        xm.mark_step()
        {call}
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    return project


def test_a_module_added_later_is_seen_by_the_summaries_that_skipped_its_name(tmp_path):
    project, cache = _project(tmp_path), tmp_path / "cache"
    (project / "train.py").write_text(LOOP.format(imports="from helpers import report", call="report(loss)"))
    _facts(project, cache, "train.py")  # train.py's summary cached: `helpers.report` named no module
    (project / "helpers.py").write_text("import torch\n\ndef report(loss):\n    print(loss.item())\n")
    warm, cold = _facts(project, cache, "helpers.py"), _facts(project, tmp_path / "cold", "helpers.py")
    assert "report" in cold.steps  # it runs every step of train.py's loop
    assert warm == cold


def test_a_function_called_later_is_summarised_again(tmp_path):
    """helpers.report, named nowhere else when helpers.py was summarised, tells nothing; once train.py
    calls it every step, its read is what train.py's facts need."""
    project, cache = _project(tmp_path), tmp_path / "cache"
    (project / "helpers.py").write_text("import torch\n\ndef report(loss):\n    return loss.item()\n")
    (project / "train.py").write_text(LOOP.format(imports="import helpers", call="pass"))
    _facts(project, cache, "train.py")
    (project / "train.py").write_text(LOOP.format(imports="import helpers", call="value = helpers.report(loss)"))
    warm, cold = _facts(project, cache, "train.py"), _facts(project, tmp_path / "cold", "train.py")
    assert cold.helper_reads  # `report` reads its argument on the host, every step
    assert warm == cold
