"""``python -m pipeline policies``: the lab's cyclic workload per policy, a trace, tiers, and
bad input (one line naming the argument, non-zero exit, nothing written)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline.catalog import POLICIES
from pipeline.cli import main


def mooncake_line(input_length, hash_ids):
    return json.dumps({"timestamp": 0, "input_length": input_length, "output_length": 1,
                       "hash_ids": hash_ids}) + "\n"


def run_json(capsys, *argv):
    assert main(["policies", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_lab_cyclic_workload(tmp_path, capsys):
    out = run_json(capsys, "--out", str(tmp_path))
    rows = {(r["policy"], r["capacity"]): r for r in out["curves"]}
    # LRU, the lab's contract: 0 second-pass hits below 50110, the reverse pass finds 4 at 21520
    assert rows["lru", 21520]["pass_hits"] == [0, 0, 4]
    assert rows["lru", 50109]["pass_hits"] == [0, 0, 9]
    assert rows["lru", 50110]["pass_hits"] == [0, 10, 10]
    # OPT keeps what fits: 4 documents of 5011 in 21520 tokens, hit in passes 2 and 3
    assert rows["opt", 21520]["pass_hits"] == [0, 4, 4]
    for (name, capacity), row in rows.items():
        assert row["gpu_hits"] <= rows["opt", capacity]["gpu_hits"], (name, capacity)
    curves = pl.read_parquet(tmp_path / "curves.parquet")
    assert set(curves["policy"]) == set(POLICIES) >= {"lru", "fifo", "mru", "lfu", "clock",
                                                      "sieve", "s3fifo", "arc", "opt"}
    events = pl.read_parquet(tmp_path / "events.parquet")
    assert events.height == len(POLICIES) * 6 * 30     # every registered policy, by default


def test_table_output(tmp_path, capsys):
    assert main(["policies", "--gpu-policy", "lru,opt", "--capacities", "21520",
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "lru          13.3" in text and "opt          26.7" in text
    assert "0/0/4" in text and "0/4/4" in text


def test_trace_and_cpu_tier(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(mooncake_line(length, ids) for length, ids in
                             [(1024, [1, 2]), (1500, [1, 2, 3]), (600, [4, 5]), (1024, [1, 2])]))
    out = run_json(capsys, "--trace", str(trace), "--capacities", "2,5",
                   "--gpu-policy", "fifo,opt", "--cpu", "3", "--out", str(tmp_path / "o"))
    rows = {(r["policy"], r["capacity"]): r for r in out["curves"]}
    assert rows["fifo", 5]["gpu_hits"] == 4 and rows["fifo", 5]["accesses"] == 9
    assert rows["fifo", 2]["gpu_hits"] + rows["fifo", 2]["cpu_hits"] <= 4
    assert not (tmp_path / "o" / "events.parquet").exists()     # traces: only with --events
    out = run_json(capsys, "--trace", str(trace), "--sizes", "tokens", "--capacities", "1024",
                   "--gpu-policy", "lru", "--events", "--out", str(tmp_path / "o"))
    assert out["curves"][0]["gpu_hits"] == 2 and (tmp_path / "o" / "events.parquet").exists()


@pytest.mark.parametrize("argv, status, message", [
    (["--gpu-policy", "lru,belady"], 2,
     f"unknown policy 'belady'; accepted: {', '.join(POLICIES)}, all"),
    (["--cpu-policy", "x", "--cpu", "5"], 2, "unknown policy 'x'; accepted: lru, fifo"),
    (["--capacities", "10,-5"], 2, "argument --capacities: a capacity must be >= 0"),
    (["--cpu", "-1"], 2, "argument --cpu: a capacity must be >= 0"),
    (["--method", "onepass", "--gpu-policy", "lru,arc"], 1,
     "--method onepass: exact only for lru, mru, opt, not arc"),
    (["--trace", "/nonexistent.jsonl"], 1, "--trace /nonexistent.jsonl: no such file"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, status, message):
    out = tmp_path / "out"
    if status == 2:
        with pytest.raises(SystemExit) as exit_info:
            main(["policies", *argv, "--out", str(out)])
        code = exit_info.value.code
    else:
        code = main(["policies", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == status and message in err and err.count("\n") == 1
    assert not out.exists()


def test_bad_trace_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "output_length": 1, "input_length": 5}\n')
    assert main(["policies", "--trace", str(bad), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert f"--trace {bad}" in err and err.count("\n") == 1 and not (tmp_path / "o").exists()
