"""A newcomer's typical mistakes, one table over every command of ``python -m pipeline
--help``: a missing file, a folder as input, an empty file, a bad capacity or size unit, an
unknown model, an output path under a file. Each is one line on stderr naming the file or
the option, exit 2 for a usage error and 1 for bad data, no traceback, nothing written.
(Deeper tables per command: tests/test_cli_bad_arguments.py and each command's tests.)"""

from __future__ import annotations

import pytest
from conftest import ROOT, cli_in_process, folder_snapshot

from pipeline.cli import COMMANDS

TTFT = str(ROOT / "data" / "ttft.jsonl")
LAB_OUT = ["--events-dir", "o/e", "--exports-dir", "o/x", "--report", "o/r.html"]
#: the roofline (fleet's default step times) needs a model: none is assumed
QWEN = ["--model", "qwen2.5-1.5b"]

#: (argv, exit status, what the one line names); run in a folder holding ``empty.jsonl``,
#: the folder ``folder/`` and the file ``file``
MISTAKES = [
    (["run", "--docs", "0", *LAB_OUT], 2, "--docs"),
    (["run", "--measured", "missing.jsonl", *LAB_OUT], 1, "missing.jsonl"),
    (["run", "--measured", "folder", *LAB_OUT], 1, "folder"),
    (["run", "--report", "file/index.html", "--events-dir", "o/e", "--exports-dir", "o/x"], 1,
     "--report file/index.html"),
    (["measured", "missing.jsonl"], 1, "missing.jsonl"),
    (["measured", "folder"], 1, "folder: cannot read"),
    (["measured", "empty.jsonl"], 1, "empty.jsonl: no measurement records"),
    (["measured", TTFT, "--cpu", "-1"], 2, "--cpu"),
    (["measured", TTFT, "--model", "nope"], 2, "--model: unknown model preset 'nope'"),
    (["synth-ttft", "--output", "folder"], 1, "--output folder"),
    (["synth-ttft", "--seed", "x"], 2, "--seed"),
    (["bench", "--with", "nope"], 2, "unknown benchmark nope"),
    (["blocks", "--gpu", "-5"], 2, "--gpu"),
    (["blocks", "--gpu", "1.5XB"], 2, "unknown unit 'XB'"),
    (["blocks", "--gpu", "1GiB", "--model", "nope"], 2, "--model: unknown model preset"),
    (["blocks", "--gpu-model", "nope"], 2, "--gpu-model"),
    (["trace", "missing.jsonl", "--no-report", "--out", "o"], 1, "missing.jsonl"),
    (["trace", "folder", "--no-report", "--out", "o"], 1, "folder: cannot read"),
    (["trace", "empty.jsonl", "--no-report", "--out", "o"], 1, "empty.jsonl: no requests"),
    (["trace", "empty.jsonl", "--gpu", "1.5XB", "--no-report", "--out", "o"], 2, "--gpu"),
    (["trace", "--pattern", "zipf", "--model", "nope", "--no-report", "--out", "o"], 2,
     "--model"),
    (["policies", "--trace", "missing.jsonl"], 1, "--trace missing.jsonl: no such file"),
    (["policies", "--trace", "folder"], 1, "--trace folder: is a folder"),
    (["policies", "--trace", "empty.jsonl"], 1, "--trace empty.jsonl: no requests"),
    (["policies", "--capacities", "1.5XB"], 2, "--capacities"),
    (["policies", "--capacities", "100", "--out", "file"], 1, "--out"),
    (["measure", "--base-url", "http://127.0.0.1:9", "--output", "file"], 1, "--output file"),
    (["measure", "--base-url", "http://127.0.0.1:9"], 2, "--output"),
    (["plan", "missing.jsonl", "--target-hit-ratio", "0.5"], 1, "missing.jsonl"),
    (["plan", "folder", "--target-hit-ratio", "0.5"], 1, "folder: cannot read"),
    (["plan", "empty.jsonl", "--target-hit-ratio", "0.5"], 1, "empty.jsonl: no requests"),
    (["plan", "--target-hit-ratio", "0.5", "--model", "nope"], 2, "--model"),
    (["plan", "--target-hit-ratio", "0.5", "--kv-shape", "1,2"], 2, "--kv-shape"),
    (["plan", "--target-hit-ratio", "0.5", "--gpu", "1.5XB"], 2, "--gpu"),
    (["fit", "missing.jsonl", "--output", "o/fit.json"], 1, "missing.jsonl: cannot read"),
    (["fit", "folder", "--output", "o/fit.json"], 1, "folder: cannot read (is a folder)"),
    (["fit", "empty.jsonl", "--output", "o/fit.json"], 1, "empty.jsonl: no sidecar"),
    (["simulate", "missing.jsonl", "--gpu", "100blocks", "--out", "o"], 1, "missing.jsonl"),
    (["simulate", "--pattern", "zipf", "--gpu", "0blocks", "--out", "o"], 2, "--gpu"),
    (["simulate", "--pattern", "zipf", "--gpu", "1.5XB", "--out", "o"], 2, "--gpu"),
    (["fleet", "missing.jsonl", *QWEN, "--out", "o"], 1, "missing.jsonl"),
    (["fleet", "folder", *QWEN, "--out", "o"], 1, "folder: cannot read"),
    (["fleet", "empty.jsonl", *QWEN, "--out", "o"], 1, "empty.jsonl: no requests"),
    (["fleet", "--pattern", "groups", "--gpu", "-1", "--out", "o"], 2, "--gpu"),
    (["fleet", "--pattern", "groups", "--router", "nope", "--out", "o"], 2, "--router"),
]


def test_every_command_has_rows():
    assert {argv[0] for argv, _, _ in MISTAKES} == set(COMMANDS)


@pytest.mark.parametrize("argv, status, names", MISTAKES, ids=[" ".join(a[:3]) for a, _, _
                                                               in MISTAKES])
def test_a_typical_mistake_is_one_line(tmp_path, monkeypatch, argv, status, names):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x\n")
    before = folder_snapshot(tmp_path)
    done = cli_in_process(*argv)
    err = done.stderr.strip()
    assert done.returncode == status, (argv, err)
    assert err and "\n" not in err and "Traceback" not in err, err
    assert names in err, err
    assert done.stdout == ""
    assert folder_snapshot(tmp_path) == before          # nothing written, nothing replaced
