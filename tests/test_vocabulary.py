"""One vocabulary across commands: ``--gpu``/``--cpu SIZE[,SIZE...]`` in tokens, blocks and
bytes give the same answer for the same capacity; the old spellings are aliases that print one
deprecation line and change nothing else; a size or a TTFT without ``--model`` is a usage
error naming ``--model``."""

from __future__ import annotations

import argparse
import json

import polars as pl
import pytest

from conftest import cli_in_process
from pipeline.base.errors import UsageError
from pipeline.sizes import units

#: 8192 tokens of Qwen2.5-1.5B (28,672 B each) = 234,881,024 B = 224 MiB = 0.21875 GiB
CPU_SPELLINGS = [["--cpu", "8192"], ["--cpu", "512blocks"],
                 ["--cpu", "224MiB", "--model", "qwen2.5-1.5b"],
                 ["--cpu", "0.21875GiB", "--model", "qwen2.5-1.5b"],
                 ["--cpu", "0.234881024GB", "--model", "qwen2.5-1.5b"]]
SIM = ["simulate", "--pattern", "long-doc-qa", "--num-documents", "3", "--document-length",
       "1000", "--output-tokens", "2", "--repeat-count", "2"]
FLEET = ["fleet", "--pattern", "groups", "--groups", "2", "--users", "2", "--questions", "1",
         "--system-prompt-length", "64", "--question-length", "16", "--output-tokens", "2",
         "--model", "qwen2.5-1.5b", "--jobs", "1", "--json"]
GROUPS = ["--pattern", "groups", "--groups", "2", "--users", "1", "--questions", "1",
          "--system-prompt-length", "32", "--question-length", "16", "--jobs", "1"]
TRACE = ["trace", "--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
         "--num-requests", "6", "--block-size", "16", "--no-report", "--json"]


def _ok(*argv):
    done = cli_in_process(*argv)
    assert done.returncode == 0, done.stderr
    return done


def test_blocks_are_a_unit_of_the_block_size():
    cap = units.parse_capacity("5860blocks")
    assert cap.unit == units.BLOCKS and not cap.is_size and cap.size_bytes is None
    assert cap.tokens(None, 16) == 93_760 and cap.tokens(None, 512) == 5860 * 512
    with pytest.raises(ValueError, match="whole number"):
        units.parse_capacity("1.5blocks")
    args = argparse.Namespace(model=None, kv_shape=None, kv_bytes_per_token=None,
                              gpu=units.capacities("10blocks,32"))
    with pytest.raises(UsageError, match="--gpu 10blocks: blocks need a block size"):
        units.resolve_capacities(args, "gpu")
    args, sizes = units.resolve_capacities(args, "gpu", block_size=16)
    assert args.gpu == [160, 32] and sizes["options"]["--gpu"][0]["blocks"] == 10


def test_simulate_cpu_spellings_give_one_answer(tmp_path):
    runs = [_ok(*SIM, "--gpu", "100blocks", *spelling, "--out", str(tmp_path / str(i)))
            for i, spelling in enumerate(CPU_SPELLINGS)]
    frames = [pl.read_parquet(tmp_path / str(i) / "requests.parquet")
              for i in range(len(runs))]
    assert frames[0]["cpu_hit_tokens"].sum() > 0           # the tier is used
    for frame in frames[1:]:
        assert frame.equals(frames[0])
    assert "--cpu 512blocks = 8,192 tokens (512 blocks of 16 tokens)" in runs[1].stdout
    assert "--cpu 224MiB = 8,192 tokens (234,881,024 bytes" in runs[2].stdout


def test_simulate_old_spellings_warn_once_and_change_nothing(tmp_path):
    new = _ok(*SIM, "--gpu", "200blocks", "--cpu", "8192", "--out", str(tmp_path / "new"))
    old = _ok(*SIM, "--num-gpu-blocks", "200", "--cpu-tokens", "8192", "--out",
              str(tmp_path / "old"))
    assert old.stderr.splitlines() == [
        "warning: --num-gpu-blocks is deprecated; use --gpu 200blocks (same meaning)",
        "warning: --cpu-tokens is deprecated; use --cpu (same meaning)"]
    assert new.stderr == ""
    assert old.stdout.replace("/old/", "/new/") == new.stdout
    assert pl.read_parquet(tmp_path / "old" / "requests.parquet").equals(
        pl.read_parquet(tmp_path / "new" / "requests.parquet"))


def test_simulate_gpu_in_tokens_is_blocks_of_the_block_size(tmp_path):
    blocks = _ok(*SIM, "--gpu", "200blocks", "--block-size", "32", "--out", str(tmp_path / "a"))
    tokens = _ok(*SIM, "--gpu", "6400", "--block-size", "32", "--out", str(tmp_path / "b"))
    assert pl.read_parquet(tmp_path / "a" / "requests.parquet").equals(
        pl.read_parquet(tmp_path / "b" / "requests.parquet"))
    assert blocks.stdout.splitlines()[0].split("; wrote")[0] == \
        tokens.stdout.splitlines()[0].split("; wrote")[0]


def test_fleet_gpu_spellings_and_old_names(tmp_path):
    rows = {}
    for name, argv in {"blocks": ["--gpu", "40blocks,80blocks", "--speed", "1,2"],
                       "tokens": ["--gpu", "640,1280", "--speed", "1,2"],
                       "bytes": ["--gpu", "17.5MiB,35MiB", "--speed", "1,2"],
                       "old": ["--gpu-blocks", "40,80", "--load", "1,2"]}.items():
        done = _ok(*FLEET, *argv, "--out", str(tmp_path / name))
        rows[name] = [json.loads(line) for line in done.stdout.splitlines()]
        if name == "old":
            assert done.stderr.splitlines() == [
                "warning: --gpu-blocks is deprecated; use --gpu 40blocks,80blocks (same "
                "meaning)", "warning: --load is deprecated; use --speed (same meaning)"]
    assert len(rows["blocks"]) == 2 * 2                      # blocks x loads
    assert {r["gpu_blocks"] for r in rows["blocks"]} == {40, 80}
    assert rows["tokens"] == rows["blocks"] == rows["bytes"] == rows["old"]


def test_fleet_cpu_tokens_alias(tmp_path):
    new = _ok(*FLEET, "--cpu", "2048", "--out", str(tmp_path / "new"))
    old = _ok(*FLEET, "--cpu-tokens", "2048", "--out", str(tmp_path / "old"))
    assert old.stderr == "warning: --cpu-tokens is deprecated; use --cpu (same meaning)\n"
    assert old.stdout == new.stdout


def test_fleet_model_names_the_roofline(tmp_path):
    done = _ok(*[a for a in FLEET if a != "--json"][:-4], "--model", "llama-3.1-8b",
               "--jobs", "1", "--out", str(tmp_path / "o"))
    assert "roofline (H100, Llama-3.1-8B" in done.stdout


def test_trace_blocks_and_sizes_equal_tokens(tmp_path):
    tokens = json.loads(_ok(*TRACE, "--gpu", "0,64,160", "--cpu", "0,32", "--out",
                            str(tmp_path / "a")).stdout)
    blocks = json.loads(_ok(*TRACE, "--gpu", "0blocks,4blocks,10blocks", "--cpu",
                            "0,2blocks", "--out", str(tmp_path / "b")).stdout)
    sized = json.loads(_ok(*TRACE, "--gpu", "0,1792KiB,4480KiB", "--cpu", "0,896KiB",
                           "--model", "qwen2.5-1.5b", "--out", str(tmp_path / "c")).stdout)
    assert tokens["points"] == blocks["points"] == sized["points"]
    assert sized["sizes"]["kv"]["bytes_per_token"] == 28_672


def test_plan_gpu_in_blocks(tmp_path):
    base = ["plan", "--target-hit-ratio", "0.5", "--block-size", "16", "--json"]
    tokens = json.loads(_ok(*base, "--gpu", "21520").stdout)
    blocks = json.loads(_ok(*base, "--gpu", "1345blocks").stdout)
    assert blocks["answer"] == tokens["answer"] and blocks["gpu"]["tokens"] == 21_520


@pytest.mark.parametrize("argv", [
    ["trace", "--pattern", "zipf", "--gpu", "20GiB", "--no-report"],
    ["plan", "--target-hit-ratio", "0.5", "--gpu", "200GB"],
    ["plan", "--target-hit-ratio", "0.5", "--measured-cpu", "5GiB"],
    ["simulate", "--pattern", "zipf", "--gpu", "1GiB", "--out", "o"],
    ["simulate", "--pattern", "zipf", "--gpu", "100blocks", "--cpu", "512MiB", "--out", "o"],
    ["fleet", *GROUPS, "--gpu", "1GiB", "--latency", "roofline", "--model-shape",
     "28,1536,8960,12,2,151936,tied", "--out", "o"],
    ["plan", "--fleet", "--instances", "1", "--target-hit-ratio", "0.5", *GROUPS,
     "--cpu", "2GiB", "--model-shape", "28,1536,8960,12,2,151936,tied"],
    # a TTFT needs the model too
    ["simulate", "--pattern", "zipf", "--gpu", "100blocks", "--latency", "roofline",
     "--concurrency", "1", "--out", "o"],
    ["fleet", *GROUPS, "--out", "o"],
    ["plan", "--target-ttft-p90-ms", "100", "--pattern", "long-doc-qa", "--latency",
     "roofline", "--concurrency", "1"],
])
def test_a_size_or_a_ttft_without_a_model_names_model(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    done = cli_in_process(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--model" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--pattern", "zipf", "--gpu", "64blocks", "--cpu", "1,2", "--out", "o"],
     "--cpu: one capacity, not a list"),
    (["plan", "--target-hit-ratio", "0.5", "--gpu", "100,200"],
     "--gpu: one capacity here (a list only with --fleet)"),
    (["fit", "x.jsonl", "--gpu", "1,2", "--output", "o"], "--gpu: one capacity, not a list"),
    (["simulate", "--pattern", "zipf", "--num-gpu-blocks", "64", "--gpu", "1024", "--out",
      "o"], "--num-gpu-blocks is the deprecated spelling of --gpu: give --gpu once"),
])
def test_a_list_where_one_capacity_goes_is_a_usage_error(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    done = cli_in_process(*argv)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("command, old", [
    ("simulate", ["--num-gpu-blocks", "--cpu-tokens"]),
    ("fleet", ["--gpu-blocks", "--cpu-tokens", "--load"]),
    ("plan", ["--gpu-blocks", "--cpu-tokens", "--num-gpu-blocks"]),
    ("fit", ["--num-gpu-blocks"]),
])
def test_help_shows_only_the_new_names(command, old):
    done = cli_in_process(command, "--help")
    assert done.returncode == 0 and "--gpu " in done.stdout
    for name in old:
        assert name not in done.stdout


def test_fit_gpu_is_num_gpu_blocks_in_any_spelling(capsys):
    from pipeline.cli import build_parser
    from pipeline.commands.fit import _engine

    parser = build_parser()
    run_model = {"max_num_seqs": 8, "max_num_batched_tokens": 512, "block_size": 16}
    blocks = {}
    for argv in (["--gpu", "4000blocks"], ["--gpu", "64000"], ["--num-gpu-blocks", "4000"],
                 ["--gpu", "250MiB", "--kv-bytes-per-token", "4096"]):
        args = parser.parse_args(["fit", "f.jsonl", "--output", "o.json", *argv])
        blocks[argv[1]] = _engine(run_model, args).num_gpu_blocks
    assert capsys.readouterr().err == \
        "warning: --num-gpu-blocks is deprecated; use --gpu 4000blocks (same meaning)\n"
    # 250 MiB / 4,096 bytes per token = 64,000 tokens = 4,000 blocks of 16
    assert set(blocks.values()) == {4000}
    args = parser.parse_args(["fit", "f.jsonl", "--output", "o.json", "--gpu", "250MiB"])
    with pytest.raises(UsageError, match="--kv-bytes-per-token"):
        _engine(run_model, args)


def test_plan_fleet_takes_the_grid_in_gpu_and_the_old_spelling():
    base = ["plan", *GROUPS, "--output-tokens", "2", "--fleet", "--instances", "1",
            "--target-hit-ratio", "0.3", "--model", "qwen2.5-1.5b", "--json"]
    new = cli_in_process(*base, "--gpu", "20blocks,40blocks", "--cpu", "64")
    old = cli_in_process(*base, "--gpu-blocks", "20,40", "--cpu-tokens", "64")
    assert old.returncode == new.returncode == 1      # no router meets 0.3 on this grid
    assert old.stderr.splitlines() == [
        "warning: --gpu-blocks is deprecated; use --gpu 20blocks,40blocks (same meaning)",
        "warning: --cpu-tokens is deprecated; use --cpu (same meaning)"]
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert json.loads(new.stdout)["grid"]["gpu_blocks"] == [20, 40]
