"""The cache file's layout: the results (and the project's facts) first, the module summaries last and
parsed only when a summary is asked for (a warm run never needs them, and they are most of the file)."""

import json

from xlalint.cache import ProjectCache

TRAIN = """\
import torch
import torch_xla.core.xla_model as xm


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        xm.optimizer_step(optimizer)
        print(loss.item())
"""


def filled(tmp_path) -> tuple[ProjectCache, str]:
    cache = ProjectCache(tmp_path / "cache", tmp_path)
    cache.put_summary("a.py", "ca", {"path": "a.py"})
    cache.put_summary("b.py", "cb", {"path": "b.py"})
    cache.put_result("a.py", "ka", [[], None])
    cache.put_result("#facts", "kf", {"a.py": {}})
    cache.save()
    assert cache.file is not None
    return cache, cache.file.read_text()


def test_a_saved_cache_reads_back_whole(tmp_path):
    _, text = filled(tmp_path)
    assert text.startswith('{"code":"') and text.index('"results":') < text.index('"summaries":')
    data = json.loads(text)  # still one JSON document
    assert data["summaries"]["b.py"] == ["cb", {"path": "b.py"}]
    again = ProjectCache(tmp_path / "cache", tmp_path)
    assert again.result("a.py", "ka") == [[], None] and again.result("#facts", "kf") == {"a.py": {}}
    assert again.summary("a.py", "ca") == {"path": "a.py"} and again.summary("b.py", "stale") is None


def test_damaged_summaries_cost_only_the_summaries(tmp_path):
    """The results are read without parsing the summaries: a damaged summaries table loses them alone."""
    cache, text = filled(tmp_path)
    cache.file.write_text(text[: text.index('"summaries":')] + '"summaries":{"a.py": [oops}')
    again = ProjectCache(tmp_path / "cache", tmp_path)
    assert again.result("a.py", "ka") == [[], None]
    assert again.summary("a.py", "ca") is None


def test_unparsed_summaries_are_written_back_as_they_were(tmp_path):
    cache, text = filled(tmp_path)
    again = ProjectCache(tmp_path / "cache", tmp_path)
    again.put_result("b.py", "kb", [[], None])  # only a result changes: the summaries stay unparsed
    again.save()
    third = ProjectCache(tmp_path / "cache", tmp_path)
    assert third.result("b.py", "kb") == [[], None] and third.summary("b.py", "cb") == {"path": "b.py"}
    assert json.loads(cache.file.read_text())["summaries"] == json.loads(text)["summaries"]


def test_summaries_of_files_gone_are_forgotten_when_parsed(tmp_path):
    filled(tmp_path)
    again = ProjectCache(tmp_path / "cache", tmp_path)
    again.keep_only({"a.py"})
    assert again.summary("b.py", "cb") is None and again.summary("a.py", "ca") == {"path": "a.py"}
    again.save()
    assert set(json.loads(again.file.read_text())["summaries"]) == {"a.py"}


def test_a_cache_in_another_layout_is_still_read(tmp_path):
    """A file with its tables in another order (written by hand, or by a tool) is parsed whole."""
    cache, text = filled(tmp_path)
    data = json.loads(text)
    cache.file.write_text(json.dumps({"summaries": data["summaries"], "results": data["results"], "code": data["code"]}))
    again = ProjectCache(tmp_path / "cache", tmp_path)
    assert again.result("a.py", "ka") == [[], None] and again.summary("b.py", "cb") == {"path": "b.py"}


def test_a_warm_run_through_the_lazy_layout_answers_alike(run_cli, project):
    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    project.write("train.py", TRAIN)
    args = ("check", "--output-format", "json", project)
    cold = run_cli(*args)[1]
    (entry,) = (project / ".xlalint_cache").glob("*.json")
    assert entry.read_text().startswith('{"code":"')
    assert run_cli(*args)[1] == cold and '"XLA' in cold


def test_a_warm_run_imports_only_what_it_reads(project):
    """Every file cached: no fix is built (libcst stays the lazy module `xlalint.fixing.lazy` puts in
    its place: none of its modules loads), no torch or JAX is ever imported, and no package metadata
    is read (importlib.metadata is a start-up cost of its own)."""
    import subprocess
    import sys

    project.write("pyproject.toml", "[project]\nname = 'p'\n")
    project.write("train.py", TRAIN)
    project.write("old.py", "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\n")  # XLA602: a fix
    script = (
        "import sys\nfrom xlalint.cli import main\n"
        "try:\n    main(['check', sys.argv[1]])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "loaded = [m for m in sys.modules if m.startswith('libcst.') or m.split('.')[0] in ('torch', 'jax')]\n"
        "print(code, sorted(loaded + [m for m in sys.modules if m == 'importlib.metadata']))"
    )
    cold = subprocess.run([sys.executable, "-c", script, str(project)], capture_output=True, text=True)
    assert cold.stdout.splitlines()[-1].startswith("1 ['libcst."), cold.stdout + cold.stderr
    warm = subprocess.run([sys.executable, "-c", script, str(project)], capture_output=True, text=True)
    assert warm.stdout.splitlines()[-1] == "1 []", warm.stdout + warm.stderr
