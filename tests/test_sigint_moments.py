"""A real Ctrl-C at several moments of real ``python -m pipeline`` processes (while Python
imports, while the command runs, while the process exits): one line on stderr and exit 130,
or the command's own exit when it had finished; its outputs whole or absent, never a
temporary file (``pipeline.entry``, ``pipeline.base.staging``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import polars as pl
import pytest

from conftest import ROOT
from pipeline.entry import ENTRY_MODULES, _entry_module

SMALL = ["--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
         "--num-requests", "6"]
COMMANDS = {
    "trace": (["trace", *SMALL, "--no-report"],
              {"events.parquet", "points.parquet", "request_info.parquet", "requests.parquet"}),
    "simulate": (["simulate", *SMALL, "--gpu", "64blocks"],
                 {"metrics.json", "requests.parquet", "steps.parquet"}),
    "fleet": (["fleet", *SMALL, "--gpu", "64blocks", "--latency", "roofline", "--model",
               "qwen2.5-1.5b", "--jobs", "1"],
              None),
    "plan": (["plan", "--target-hit-ratio", "0.5", "--report"], {"plan.html"}),
}
#: seconds after Python has started (measured first, under the same load)
DELAYS = (0.0, 0.05, 0.3, 1.0)


def _startup_s(count: int) -> float:
    """How long ``count`` Pythons started at once take to reach ``pipeline.entry`` (before
    that no code of ours runs: Python itself is starting)."""
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", "import pipeline.entry"], cwd=ROOT)
             for _ in range(count)]
    assert [proc.wait() for proc in procs] == [0] * count
    return time.monotonic() - started


def _outputs(folder) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


#: what Python prints when the signal lands before its own start-up is done (no code of ours
#: has run yet: outside any program's reach)
PYTHON_STARTING = "Fatal Python error: init_import_site"


def _python_starting(err: str) -> bool:
    """The signal landed before any code of ours ran: in Python's own start-up, or in
    ``python -m``'s import machinery while it still compiles ``pipeline``'s first module
    (a KeyboardInterrupt whose every frame is frozen: no file of ours in it)."""
    if PYTHON_STARTING in err:
        return True
    frames = [line for line in err.splitlines() if line.strip().startswith("File ")]
    return ("KeyboardInterrupt" in err and bool(frames)
            and all('File "<frozen ' in line for line in frames))


def _interrupt(tmp_path, argv: list[str], command: str, delays, base: float, round_: int):
    """Start one process per delay, Ctrl-C each ``base + delay`` seconds after its start:
    [(delay, out, proc, stderr)]."""
    runs = []
    for delay in delays:
        out = tmp_path / f"at-{delay}-{round_}"
        target = out / "plan.html" if command == "plan" else out
        out.mkdir()
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", *argv,
                                 *([] if command == "plan" else ["--out"]), str(target)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        runs.append((delay, out, proc, time.monotonic()))
    for delay, out, proc, started in runs:            # all started: signal each on time
        time.sleep(max(0.0, started + base + delay - time.monotonic()))
        proc.send_signal(signal.SIGINT)
    return [(delay, out, proc, proc.communicate(timeout=120)[1].decode())
            for delay, out, proc, _ in runs]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_ctrl_c_at_any_moment_is_one_line_and_leaves_whole_outputs(tmp_path, command):
    argv, expected = COMMANDS[command]
    base = 1.5 * _startup_s(len(DELAYS))      # with a margin: load varies
    pending, finished = list(DELAYS), []
    for round_ in range(3):                    # a signal inside Python's own start-up: later
        runs = _interrupt(tmp_path, argv, command, pending, base, round_)
        finished += [run for run in runs if not _python_starting(run[3])]
        pending = [run[0] for run in runs if _python_starting(run[3])]
        if not pending:
            break
        base *= 2
    assert not pending, f"Python was still starting at {pending} s after {round_ + 1} tries"
    for delay, out, proc, err in finished:
        files = _outputs(out)
        assert not [f for f in files if ".tmp-" in f], (delay, files)
        if proc.returncode == 130:
            assert err.count("\n") == 1 and err.startswith("interrupted"), (delay, err)
        else:
            assert proc.returncode == 0 and "Traceback" not in err, (delay, err)
        if expected is not None:                      # all or nothing, as the line says
            assert files == expected if proc.returncode == 0 else \
                files == (set() if "nothing written" in err else expected), (delay, err, files)
        for parquet in (out / f for f in files if f.endswith(".parquet")):
            pl.read_parquet(parquet)                  # whole: every file reads


def test_the_entry_modules_are_the_run_command_modules():
    """Every command module whose ``__main__`` block runs the CLI is guarded from its first
    import (and only those: a benchmark module is no CLI)."""
    from pipeline.cli import COMMANDS as CLI

    running = {"pipeline", "pipeline.__main__"}
    for command in CLI.values():
        source = (ROOT / (command.module.replace(".", "/") + ".py")).read_text()
        if "run_command(" in source.split('if __name__ == "__main__":')[-1]:
            running.add(command.module)
    assert running == ENTRY_MODULES


@pytest.mark.parametrize(("argv", "module"), [
    (["python", "-m", "pipeline", "trace"], "pipeline"),
    (["python", "-X", "importtime", "-mpipeline.commands.plan"], "pipeline.commands.plan"),
    (["python", "-u", "-m", "pipeline.bench.fleet"], "pipeline.bench.fleet"),
    (["python", "-c", "import pipeline", "-m", "pipeline"], None),
    (["python", "script.py", "-m", "pipeline"], None),
    (["python", "-m"], None),
])
def test_the_module_python_runs_is_read_from_its_command_line(argv, module):
    assert _entry_module(argv) == module


@pytest.mark.parametrize(("argv", "orig", "guarded"), [
    (["/venv/bin/kvlab", "trace"], ["/venv/bin/python3", "/venv/bin/kvlab", "trace"], True),
    (["-m"], ["python", "-m", "pipeline.commands.plan"], True),
    (["x.py"], ["python", "-m", "pipeline.bench.fleet"], False),
    (["pytest"], ["python", "-m", "pytest"], False),
])
def test_the_kvlab_script_and_the_entry_modules_are_guarded(monkeypatch, argv, orig, guarded):
    from pipeline import entry

    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig, raising=False)
    monkeypatch.setattr(entry, "_guarded", False)
    before = signal.getsignal(signal.SIGINT)
    try:
        entry.guard_if_entry()
        assert (signal.getsignal(signal.SIGINT) is entry._before_main) is guarded
    finally:
        signal.signal(signal.SIGINT, before)


def test_only_a_signal_before_our_code_counts_as_python_starting():
    frozen = ('Traceback (most recent call last):\n  File "<frozen runpy>", line 189, in '
              '_run_module_as_main\n  File "<frozen importlib._bootstrap_external>", line '
              '729, in _compile_bytecode\nKeyboardInterrupt\n')
    ours = frozen.replace('File "<frozen runpy>"', 'File "/repo/pipeline/entry.py"')
    assert _python_starting(frozen) and _python_starting(PYTHON_STARTING)
    assert not _python_starting(ours) and not _python_starting("interrupted\n")
