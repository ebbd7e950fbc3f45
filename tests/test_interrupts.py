"""Ctrl-C: one line (``interrupted; nothing written``), exit status 130, no traceback, and
every command that writes several files writes all of them or none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, folder_snapshot

from pipeline.base import staging
from pipeline.cli import main

SMALL = ["--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
         "--num-requests", "6"]


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def interrupted(capsys, argv) -> str:
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1, captured.err
    return captured.err.strip()


@pytest.fixture()
def old_outputs(tmp_path):
    """A trace run's outputs from before: a Ctrl-C must leave every one of them as it was."""
    out, report = tmp_path / "D", tmp_path / "D.html"
    assert main(["trace", *SMALL, "--out", str(out), "--report", str(report)]) == 0
    return out, report


def test_trace_interrupted_before_its_report_writes_nothing(tmp_path, capsys, monkeypatch,
                                                            old_outputs):
    out, report = old_outputs
    capsys.readouterr()
    before = folder_snapshot(tmp_path)
    monkeypatch.setattr("pipeline.commands.trace_outputs.report_page", interrupt)
    assert interrupted(capsys, ["trace", *SMALL, "--gpu", "0,7777777", "--out", str(out),
                                "--report", str(report)]) == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == before


def test_trace_interrupted_while_its_files_are_written(tmp_path, capsys, monkeypatch,
                                                       old_outputs):
    """Ctrl-C while the third of five temporary files is written: the two before are
    removed, the old outputs stay, no folder is left behind."""
    out, report = old_outputs
    capsys.readouterr()
    before = folder_snapshot(tmp_path)
    real_mkstemp, calls = staging.tempfile.mkstemp, []

    def mkstemp(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(staging.tempfile, "mkstemp", mkstemp)
    fresh = tmp_path / "new" / "D"
    assert interrupted(capsys, ["trace", *SMALL, "--gpu", "0,9", "--out", str(out),
                                "--report", str(fresh.parent / "r" / "D.html")]) \
        == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == before


def test_policies_writes_both_files_or_neither(tmp_path, capsys, monkeypatch):
    out = tmp_path / "p"
    argv = ["policies", "--docs", "3", "--tokens", "100", "--capacities", "100,200",
            "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    before = folder_snapshot(tmp_path)
    from pipeline.commands import policies as command

    real, calls = command.parquet_bytes, []

    def second_interrupts(frame):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(frame)

    monkeypatch.setattr(command, "parquet_bytes", second_interrupts)
    assert interrupted(capsys, [*argv[:-4], "--capacities", "150,250", "--out", str(out)]) \
        == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == before


def test_plan_report_interrupted_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("pipeline.charts.page_html", interrupt)
    assert interrupted(capsys, ["plan", "--target-ttft-ms", "100", "--report",
                                str(tmp_path / "plan.html")]) == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == {}


def test_run_interrupted_in_its_sweeps_writes_nothing(tmp_path, capsys, monkeypatch):
    from conftest import run_outputs

    monkeypatch.setattr("pipeline.sweeps.sweep_frames", interrupt)
    assert interrupted(capsys, ["run", "--docs", "3", "--tokens", "50", "--quiet",
                                *run_outputs(tmp_path)]) == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == {}


def test_measure_keeps_its_lines_and_says_so(tmp_path):
    from pipeline.commands.measure import interrupted as measure_line

    class Args:
        output = tmp_path / "m.jsonl"

    assert measure_line(Args) == "interrupted; nothing written"
    Args.output.write_text('{"config": "baseline"}\n')
    assert measure_line(Args).startswith(f"interrupted; the lines answered so far are kept in "
                                         f"{Args.output}: rerun with --resume")


def test_a_real_sigint_is_one_line_and_exit_130(tmp_path):
    """A real SIGINT while ``trace`` builds its report: one line on stderr, exit 130, and
    the old outputs untouched."""
    out, report, marker = tmp_path / "D", tmp_path / "D.html", tmp_path / "building"
    assert main(["trace", *SMALL, "--out", str(out), "--report", str(report)]) == 0
    before = folder_snapshot(out), report.read_bytes()
    script = (
        "import sys, time, pathlib\n"
        "import pipeline.commands.trace_outputs as outputs\n"
        "def slow(*args, **kwargs):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(60)\n"
        "outputs.report_page = slow\n"
        "from pipeline.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, "trace", *SMALL, "--gpu", "0,9",
                             "--out", str(out), "--report", str(report)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 130 and err == "interrupted; nothing written\n", err
    assert (folder_snapshot(out), report.read_bytes()) == before


def test_simulate_interrupted_says_what_was_written(tmp_path, capsys, monkeypatch):
    """Ctrl-C before the files: nothing written; Ctrl-C held through the renames (released
    as the commit ends): the CLI's line says the files were written, not "nothing"."""
    argv = ["simulate", *SMALL, "--gpu", "64blocks", "--out", str(tmp_path / "o")]
    monkeypatch.setattr("pipeline.engine.vllm.VLLM.simulate", interrupt)
    assert interrupted(capsys, argv) == "interrupted; nothing written"
    assert folder_snapshot(tmp_path) == {}
    monkeypatch.undo()
    real_commit = staging.Outputs.commit

    def commit_then_interrupt(self):
        real_commit(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(staging.Outputs, "commit", commit_then_interrupt)
    assert interrupted(capsys, argv) == "interrupted; 3 output file(s) were already written"
