"""``simulate`` (and ``fleet``'s engine CPU tier) with bad arguments and bad lines: one line
on stderr, exit 2 for a usage error and 1 for bad data, nothing under ``--out``, never a
traceback (the other commands: tests/test_cli_bad_arguments.py)."""

from __future__ import annotations

import pytest
from test_cli_bad_arguments import usage_error

from pipeline.cli import main
from pipeline.sizes.limits import MAX_BLOCKS

# --- simulate: bad options and lines, one line each, nothing under --out ------------------

SIM_LINE = '{"arrival_step": 0, "prompt_token_ids": [1, 2, 3], "max_tokens": 1}'
UNTIMED_LINE = '{"prompt_token_ids": [1, 2, 3], "max_tokens": 1}'
SIM_PATTERN = ["--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
               "--num-requests", "6"]


@pytest.mark.parametrize("argv, lines, status, message", [
    # one arrival pattern at a time (usage: exit 2)
    (["TRACE", "--rate", "1", "--concurrency", "2"], [SIM_LINE], 2,
     "--concurrency: not allowed with argument --rate"),
    (["TRACE", "--speed", "2", "--concurrency", "2"], [SIM_LINE], 2,
     "--concurrency: not allowed with argument --speed"),
    (["TRACE", "--speed", "2", "--rate", "1"], [SIM_LINE], 2,
     "--rate: not allowed with argument --speed"),
    (["TRACE", "--speed", "0"], [SIM_LINE], 2, "--speed: must be > 0"),
    (["TRACE", "--rate", "-1"], [SIM_LINE], 2, "--rate: must be > 0"),
    (["TRACE", "--concurrency", "0"], [SIM_LINE], 2, "--concurrency: must be > 0"),
    (["TRACE", "--concurrency", "1.5"], [SIM_LINE], 2, "--concurrency: a whole number"),
    (["TRACE", *SIM_PATTERN], [SIM_LINE], 2, "give a trace PATH or --pattern"),
    (["TRACE", "--num-gpu-blocks", "8", "--gpu", "64,128", "--latency", "roofline"],
     [SIM_LINE], 2, "--num-gpu-blocks is the deprecated spelling of --gpu: give --gpu once"),
    ([], [SIM_LINE], 2, "give a trace PATH or --pattern"),
    # the null block inside: one usable block at least
    (["TRACE", "--gpu", "1blocks"], [SIM_LINE], 2, "--gpu: 16 tokens are 1 blocks of 16: "
     "at least 2 (block 0 is vLLM's null block)"),
    (["TRACE", "--gpu", f"{MAX_BLOCKS + 1}blocks"], [SIM_LINE], 2,
     f"--gpu: {MAX_BLOCKS + 1:,} blocks of 16: at most {MAX_BLOCKS:,}"),
    # --speed scales arrivals: a workload without any is refused, not run unscaled
    (["TRACE", "--speed", "2"], [UNTIMED_LINE], 1, "t.jsonl: --speed needs arrival times"),
    ([*SIM_PATTERN, "--speed", "2"], [], 1, "--pattern zipf: --speed needs arrival times"),
    # bad lines name file:line
    (["TRACE"], [SIM_LINE.replace('"max_tokens": 1', '"max_tokens": -2')], 1,
     "t.jsonl:1: max_tokens must be >= 1, got -2"),
    (["TRACE"], [SIM_LINE, SIM_LINE.replace('"max_tokens": 1', '"max_tokens": 1.5')], 1,
     "t.jsonl:2: max_tokens is not a 64-bit integer"),
    (["TRACE"], [SIM_LINE.replace('"max_tokens": 1', '"max_tokens": "3"')], 1,
     "t.jsonl:1: max_tokens is not a 64-bit integer"),
    (["TRACE"], [SIM_LINE.replace('"arrival_step": 0', '"arrival_step": "0"')], 1,
     "t.jsonl:1: arrival_step is not a 64-bit integer"),
    (["TRACE"], [SIM_LINE, "{not json"], 1, "t.jsonl:2: not JSON"),
    (["TRACE"], [SIM_LINE.replace('"max_tokens": 1', '"max_tokens": 0')] * 2, 1,
     "t.jsonl:1: max_tokens must be >= 1, got 0 (1 more bad lines)"),
    (["TRACE"], [], 1, "t.jsonl: no requests"),
    # vLLM refuses a prompt of max_model_len tokens (no room for an output token)
    (["TRACE", "--max-model-len", "3"], [SIM_LINE], 1,
     "t.jsonl:1: prompt of 3 tokens fills --max-model-len 3"),
    (["TRACE", "--max-model-len", "2"], [SIM_LINE], 1,
     "t.jsonl:1: prompt of 3 tokens is longer than --max-model-len 2"),
    (["TRACE", "--format", "mooncake", "--block-size", "48", "--rate", "1"],
     ['{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}'], 1,
     "t.jsonl: --block-size 48 must divide Mooncake's 512-token blocks"),
])
def test_simulate_bad_arguments(tmp_path, capsys, argv, lines, status, message):
    from conftest import folder_snapshot

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    before = folder_snapshot(tmp_path)
    argv = [str(trace) if arg == "TRACE" else arg for arg in argv]
    pool = [] if "--num-gpu-blocks" in argv or "--gpu" in argv else ["--gpu", "8blocks"]
    try:
        code = main(["simulate", *argv, *pool, "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == status, err
    assert "\n" not in err and "Traceback" not in err and message in err, err
    assert "--skip-bad-lines" not in err                 # trace's option, not simulate's
    assert folder_snapshot(tmp_path) == before


# --- the engine's CPU tier (simulate, fleet): a usage error, exit 2, nothing written -----

ENGINE = ["--pattern", "long-doc-qa", "--num-documents", "2", "--document-length", "64",
          "--cpu", "512"]


@pytest.mark.parametrize("command", ["simulate", "fleet"])
@pytest.mark.parametrize("argv, message", [
    (["--cpu-model", "nope"], "--cpu-model: invalid choice: 'nope'"),
    (["--cpu-model", "lru", "--cpu-chunk-size", "256"],
     "--cpu-chunk-size applies to the lmcache CPU model, not --cpu-model lru"),
    (["--cpu-model", "fifo", "--no-cpu-save-unfull-chunk"],
     "--cpu-save-unfull-chunk applies to the lmcache CPU model, not --cpu-model fifo"),
    (["--cpu-chunk-size", "100"], "--cpu-chunk-size 100: must be a multiple of the block size"),
    (["--cpu-model", "lmcache-replay", "--cpu-chunk-size", "24", "--block-size", "16"],
     "--cpu-chunk-size 24: must be a multiple of the block size 16"),
    (["--cpu-model", "lmcache", "--cpu-order", "tail-first"],
     "--cpu-order tail-first: the lmcache model is head-first"),
    (["--cpu-model", "opt"], "--cpu-model opt: opt needs the future of its placements"),
    (["--cpu-save-unfull-chunk"], "--cpu-save-unfull-chunk: the engine keys full chunks"),
])
def test_engine_cpu_tier_usage_errors(tmp_path, capsys, command, argv, message):
    from conftest import folder_snapshot

    extra = ["--gpu", "64blocks"] + ([] if command == "simulate" else  # fleet: a roofline
                                     ["--model", "qwen2.5-1.5b"])
    usage_error(capsys, [command, *ENGINE, *extra, *argv, "--out", str(tmp_path / "out")],
                message)
    assert folder_snapshot(tmp_path) == {}


def test_engine_cpu_model_without_a_tier_is_a_usage_error(tmp_path, capsys):
    usage_error(capsys, ["simulate", *ENGINE[:-2], "--gpu", "64blocks", "--cpu-model",
                         "lru", "--out", str(tmp_path / "out")],
                "--cpu-model lru needs --cpu SIZE")
