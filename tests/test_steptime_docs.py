"""docs/latency.md: every command runs as shown, and prints what the page shows."""

import contextlib
import io
import shlex

from conftest import ROOT
from pipeline.cli import main
from pipeline.steptime import fitted, gpus, metrics, roofline, cost

import doctest


def _sessions():
    text = (ROOT / "docs" / "latency.md").read_text()
    for block in text.split("```")[1::2]:
        if not block.startswith("console\n"):
            continue
        lines = block.split("\n")[1:]
        for i, line in enumerate(lines):
            if line.startswith("$ "):
                shown = []
                for after in lines[i + 1:]:
                    if after.startswith("$ ") or not after.strip():
                        break
                    shown.append(after)
                yield line[2:], shown


def test_docs_commands_print_what_the_page_shows():
    sessions = list(_sessions())
    assert len(sessions) == 4
    for command, shown in sessions:
        words = shlex.split(command)
        assert words[:3] == [".venv/bin/python", "-m", "pipeline"], command
        out = io.StringIO()
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
            status = main(words[3:], prog="python -m pipeline")
        assert status == 0, command
        printed = out.getvalue().splitlines()
        assert printed[:len(shown)] == shown, command


def test_module_docstrings():
    for module in (fitted, gpus, metrics, roofline, cost):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
