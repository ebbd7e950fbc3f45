"""The commands shown in README.md and docs/*.md, parsed and run (docs/extending.md, "Commands
in the docs").

A fenced ``console`` block is run: each line starting with ``$ `` is a command, the lines
after it (up to the next command) are output it must print, in that order, each a whole
line, with gaps allowed; ``...`` inside a line matches any text and a line of only ``...``
marks elided lines for the reader. ``[exit N]`` asserts the exit status (default 0). An HTML
comment ``<!-- docs-test: skip REASON -->`` on the line before a block keeps it from being
run, with the reason stated. A ``bash`` (``sh``, ``shell``) block is never run here: each of
its lines (``\\`` continued) is a command that must carry such a reason. ``text`` blocks are
not commands, and ``python`` blocks are doctests (tests/test_docs.py).

Run as a script (``python tests/docs_commands.py PLAN.json RESULT.json``) in a copy of the
checkout, it runs every command of the plan there: ``python -m pipeline ...`` in this one
process (one import of the pipeline for all of them), anything else through the shell.
``/tmp/`` in a command is the run's own temporary folder (shown as ``/tmp/`` in the output).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\S*)\s*$")
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\s*(.*?)\s*-->\s*$")
EXIT = re.compile(r"^\[exit (\d+)\]$")
#: blocks of shell lines shown but not run here: each needs a skip comment saying why
SHELL = ("bash", "sh", "shell")
PIPELINE_PREFIXES = (["python", "-m", "pipeline"], ["python3", "-m", "pipeline"],
                     [".venv/bin/python", "-m", "pipeline"], ["kvlab"])


@dataclass
class Command:
    """One ``$ `` line of a console block and what it must print."""

    page: str
    line: int
    text: str
    expected: list[str] = field(default_factory=list)
    status: int = 0
    skip: str | None = None          # the stated reason when the block is not run

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def page_commands(path: Path, root: Path) -> list[Command]:
    """Every command of the console blocks of one Markdown page."""
    page = str(path.relative_to(root))
    commands: list[Command] = []
    lines = path.read_text().splitlines()
    in_block, kind, skip, previous, continued = False, "", None, "", False
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if fence and not in_block:
            in_block, kind = True, fence.group(1)
            reason = SKIP.match(previous.strip())
            skip = (reason.group(1) or "no reason given") if reason else None
        elif line.startswith("```") and in_block:
            in_block = False
        elif in_block and kind in SHELL and line.strip() and not line.startswith("#"):
            text = line.strip().removesuffix("\\").strip()
            if continued:
                commands[-1].text += " " + text
            else:
                commands.append(Command(page, number, text, skip=skip or "no reason given"))
            continued = line.rstrip().endswith("\\")
        elif in_block and kind == "console":
            if line.startswith("$ "):
                commands.append(Command(page, number, line[2:].strip(), skip=skip))
            elif commands and commands[-1].line < number and line.strip():
                status = EXIT.match(line.strip())
                if status:
                    commands[-1].status = int(status.group(1))
                else:
                    commands[-1].expected.append(line.rstrip())
        if line.strip():
            previous = line
    return commands


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines not found in ``output`` in order (``...`` matches any text)."""
    got = [line.rstrip() for line in output.splitlines()]
    position, missing = 0, []
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + r"\Z")
        for index in range(position, len(got)):
            if pattern.match(got[index]):
                position = index + 1
                break
        else:
            missing.append(want)
    return missing


def pipeline_argv(text: str) -> list[str] | None:
    """The pipeline CLI's arguments when ``text`` is ``python -m pipeline ...`` (else None)."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    for prefix in PIPELINE_PREFIXES:
        if words[:len(prefix)] == prefix:
            return words[len(prefix):]
    return None


def run_in_process(argv: list[str]) -> tuple[int, str]:
    """``python -m pipeline ARGV`` in this process: exit status and stdout + stderr."""
    from pipeline.cli import main
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            status = main(argv, prog="python -m pipeline")
        except SystemExit as exc:           # argparse's usage errors and --help
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return status, buffer.getvalue()


def run_plan(commands: list[dict], tmp: str) -> list[dict]:
    """Run every command in the current folder; ``/tmp/`` becomes ``tmp`` (and back again in
    what they print)."""
    results, tmp = [], tmp.rstrip("/") + "/"
    for command in commands:
        text = command["text"].replace("/tmp/", tmp)
        argv = pipeline_argv(text)
        if argv is not None:
            status, output = run_in_process(argv)
        else:
            done = subprocess.run(["bash", "-c", text], capture_output=True, text=True,
                                  timeout=120)
            status, output = done.returncode, done.stdout + done.stderr
        results.append({"name": command["name"], "status": status,
                        "output": output.replace(tmp, "/tmp/")})
    return results


def as_plan(commands: list[Command]) -> list[dict]:
    """The commands to run, as JSON for the script."""
    return [asdict(c) | {"name": c.name} for c in commands if c.skip is None]


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))
    plan_path, result_path, tmp_dir = sys.argv[1:4]
    plan = json.loads(Path(plan_path).read_text())
    Path(result_path).write_text(json.dumps(run_plan(plan, tmp_dir)))
