import json

import pytest
from click.testing import CliRunner

from xlalint.cli import main

@pytest.fixture
def run_cli():
    """Run `xlalint ARGS` in-process (`input`: standard input); returns (exit_code, stdout, stderr)."""

    def run(*args, cwd=None, input=None):
        runner = CliRunner()
        if cwd is not None:
            import os

            old = os.getcwd()
            os.chdir(cwd)
        try:
            result = runner.invoke(main, list(map(str, args)), input=input, catch_exceptions=False)
        finally:
            if cwd is not None:
                os.chdir(old)
        return result.exit_code, result.stdout, result.stderr

    return run


class Project(type(__import__("pathlib").Path())):
    """A throwaway project folder that can write files into itself."""

    def write(self, relative, content, encoding="utf-8"):
        path = self / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding=encoding, newline="")
        return path


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path)


def json_report(stdout):
    return json.loads(stdout)
