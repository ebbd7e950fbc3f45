"""``--engine sglang`` in the commands: ``simulate`` and ``fleet`` run it and write vLLM's
engine's frames; its options are refused with vLLM's engine and vLLM's with it; a page size
off the block grid, a policy SGLang lacks (or has but is not modelled), vLLM's limits and
HiCache's options without it are one line naming the option, exit 2, nothing written; with
``--enable-hierarchical-cache`` the runs load from the host and say so."""

from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import refused
from pipeline.cli import main
from pipeline.engine.loop import REQUEST_COLUMNS, STEP_COLUMNS

WORKLOAD = ["--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "600",
            "--model", "qwen2.5-1.5b"]


def test_simulate_writes_vllms_frames(tmp_path, capsys):
    """Three documents read twice: the second pass hits the radix tree; vLLM's columns."""
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang",
                 "--schedule-policy", "lpm", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("models: engine sglang (SGLang 0.5.23's scheduler and radix "
                            "cache")
    assert " 0 retractions; wrote" in shown and "preemption" not in shown   # SGLang's word
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert tuple(requests.columns) == REQUEST_COLUMNS
    assert tuple(steps.columns) == STEP_COLUMNS
    assert requests["gpu_hit_tokens"].sum() > 0
    assert requests["finish_step"].null_count() == 0
    assert json.loads((out / "metrics.json").read_text())["models"]["engine"] == "sglang"


def test_the_models_line_names_the_loop(tmp_path, capsys):
    """The overlap loop by default (SGLang's), the non-overlap one with its flag."""
    for flag, loop in (([], "(overlap loop)"), (["--disable-overlap-schedule"],
                                                 "(non-overlap loop)")):
        assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang", *flag,
                     "--out", str(tmp_path / loop)]) == 0
        assert f"radix cache {loop}, compiled" in capsys.readouterr().out


def test_simulate_times_it(tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang",
                 "--latency", "roofline", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "SGLang would report cache_hit_rate" in shown and "vLLM would" not in shown
    assert not (out / "vllm_log.parquet").exists()            # vLLM's log, not SGLang's
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sglang_cache_hit_rate"] == metrics["gpu_hit_ratio"]
    assert not [key for key in metrics if key.startswith("vllm_")]
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert (requests["ttft_ms"] > 0).all()
    last = steps.filter(pl.col("step") == steps["step"].max())
    assert requests["finish_ms"].max() == pytest.approx(
        (last["start_ms"] + last["duration_ms"]).item())


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_hicache_loads_from_the_host(policy, tmp_path, capsys):
    """Three 600-token documents read twice through a 1,024-token pool: the second pass
    finds them on the host and loads them back; the columns say how much and how long."""
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang",
                 "--enable-hierarchical-cache", "--hicache-write-policy", policy,
                 "--latency", "roofline", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "radix cache with HiCache (overlap loop), compiled" in shown
    assert f"host tier HiCache (write policy {policy})" in shown
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert tuple(steps.columns[:len(STEP_COLUMNS)]) == STEP_COLUMNS
    assert requests["cpu_hit_tokens"].sum() > 0
    assert steps["reload_tokens"].sum() == requests["cpu_hit_tokens"].sum()
    per_token = 28 * 2 * 2 * 128 * 2     # qwen2.5-1.5b: layers, K and V, heads, dim, bf16
    assert steps["host_load_bytes"].to_list() == [n * per_token
                                                  for n in steps["reload_tokens"]]
    assert steps["host_write_bytes"].sum() > 0 and steps["host_load_bytes"].sum() > 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sglang_cache_hit_rate"] == pytest.approx(
        metrics["gpu_hit_ratio"] + metrics["cpu_hit_ratio"])      # SGLang counts loads
    assert metrics["cpu_hit_ratio"] > 0
    assert metrics["models"] == {"engine": "sglang", "gpu": None, "cpu": "hicache",
                                 "hicache_write_policy": policy}     # the host tier named
    loaded = requests.filter(pl.col("cpu_hit_tokens") > 0)
    assert (loaded["load_ms"] > 0).all()
    assert requests.filter(pl.col("cpu_hit_tokens") == 0)["load_ms"].null_count() == \
        len(requests) - len(loaded)
    fleet = tmp_path / "fleet"
    assert main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang",
                 "--enable-hierarchical-cache", "--hicache-write-policy", policy,
                 "--router", "round-robin", "--instances", "1", "--out", str(fleet)]) == 0
    capsys.readouterr()
    routed = pl.read_parquet(fleet / "requests").sort("request")
    assert routed["cpu_hit_tokens"].sum() > 0
    report = (fleet / "report.html").read_text()          # SGLang's names, not vLLM's
    assert "max_running_requests 256" in report and "max_num_seqs" not in report
    assert f"HiCache (write policy {policy})" in report
    assert "a model of SGLang 0.5.23&#x27;s scheduler" in report or \
        "a model of SGLang 0.5.23's scheduler" in report


def test_fleet_workers_answer_as_this_process(tmp_path, capsys):
    frames = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        assert main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--engine", "sglang",
                     "--router", "round-robin,prefix-precise", "--instances", "2",
                     "--jobs", jobs, "--out", str(out)]) == 0
        frames.append(pl.read_parquet(out / "requests").sort("point", "request"))
    capsys.readouterr()
    assert frames[0].equals(frames[1])
    assert frames[0]["gpu_hit_tokens"].sum() > 0


def test_a_mooncake_trace_on_pages(tmp_path, capsys):
    """Two prompts sharing two 512-token blocks: the second hits them (page 16)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, '
                     '"hash_ids": [1, 2, 3]}\n'
                     '{"timestamp": 500, "input_length": 1100, "output_length": 4, '
                     '"hash_ids": [1, 2, 4]}\n')
    out = tmp_path / "sim"
    assert main(["simulate", str(trace), "--format", "mooncake", "--block-size", "512",
                 "--gpu", "8192", "--engine", "sglang", "--page-size", "16",
                 "--latency", "roofline", "--model", "qwen2.5-1.5b", "--out", str(out)]) == 0
    capsys.readouterr()
    assert pl.read_parquet(out / "requests.parquet")["gpu_hit_tokens"].to_list() == [0, 1024]


@pytest.mark.parametrize("given, message", [
    (["--engine", "sglang", "--no-chunked-prefill"],
     "--no-chunked-prefill applies to the vllm engine, not --engine sglang"),
    (["--page-size", "4"], "--page-size applies to the sglang engine, not --engine vllm"),
    (["--schedule-policy", "lpm"],
     "--schedule-policy applies to the sglang engine, not --engine vllm"),
    (["--engine", "sglang", "--page-size", "3"],
     "--page-size 3: must divide the block size 16 (--block-size)"),
    (["--engine", "sglang", "--schedule-policy", "sjf"],
     "argument --schedule-policy: SGLang 0.5.23 has no schedule policy 'sjf'"),
    (["--engine", "sglang", "--schedule-policy", "hrrn"],
     "argument --schedule-policy: 'hrrn' is SGLang's but not modelled"),
    (["--engine", "sglang", "--max-num-seqs", "8"],
     "--max-num-seqs is vLLM's: with --engine sglang give --max-running-requests"),
    (["--engine", "sglang", "--hicache-ratio", "3"],
     "--hicache-ratio: needs --enable-hierarchical-cache"),
    (["--engine", "sglang", "--hicache-write-policy", "write_back"],
     "--hicache-write-policy: needs --enable-hierarchical-cache"),
    (["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-ratio", "0"],
     "argument --hicache-ratio: expected a number > 0, got '0'"),
    (["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-size", "-2"],
     "argument --hicache-size: expected whole gigabytes >= 0, got '-2'"),
    (["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-write-policy", "lazy"],
     "argument --hicache-write-policy: invalid choice: 'lazy'"),
    (["--hicache-ratio", "3"], "--hicache-ratio applies to the sglang engine, not --engine vllm"),
    (["--disable-overlap-schedule"],
     "--disable-overlap-schedule applies to the sglang engine, not --engine vllm"),
    (["--engine", "sglang", "--cpu", "1000"],
     "--cpu: the sglang engine has no CPU tier (its host tier: --enable-hierarchical-cache)"),
    (["--engine", "sglang", "--enable-hierarchical-cache", "--cpu", "1000"],
     "--cpu: the sglang engine has no CPU tier (its host tier: --enable-hierarchical-cache)"),
    (["--engine", "sglang", "--chunked-prefill-size", "24", "--page-size", "16"],
     "--chunked-prefill-size 24: must be a multiple of --page-size 16"),
])
@pytest.mark.parametrize("command", ["simulate", "fleet"])
def test_bad_input_is_one_line(command, given, message, tmp_path):
    out = tmp_path / "out"
    refused([command, *WORKLOAD, "--gpu", "64blocks", *given, "--out", str(out)], message, out)


def test_a_host_pool_in_gigabytes_needs_the_models_bytes(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["simulate", "data/simulate/chat.jsonl", "--format", "tokens", "--gpu", "120",
                 "--engine", "sglang", "--enable-hierarchical-cache", "--hicache-size", "2",
                 "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--hicache-size needs --model PRESET" in error[0]
    assert not out.exists()


def test_a_page_off_the_mooncake_block_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, '
                     '"hash_ids": [1, 2, 3]}\n')
    assert main(["simulate", str(trace), "--format", "mooncake", "--block-size", "512",
                 "--gpu", "8192", "--engine", "sglang", "--page-size", "24", "--latency",
                 "roofline", "--model", "qwen2.5-1.5b", "--out", str(tmp_path / "out")]) == 2
    assert "--page-size 24: must divide the block size 512" in capsys.readouterr().err


def test_a_routers_look_touches_nothing():
    """``cached_prefix_blocks`` (live and on a snapshot) counts the blocks the tree holds of
    a request's keys, and changes no access time, split or count."""
    import numpy as np

    from pipeline.components.sglang_kradix_layout import T_EVICT, T_PROT
    from pipeline.components.sglang_settings import SchedulerSettings
    from pipeline.engine.request import SimRequest
    from pipeline.engine.sglang import SGLangConfig
    from pipeline.engine.sglang_instance import SGLangInstance

    engine = SGLangInstance(SGLangConfig(64, 10 ** 6, 4, SchedulerSettings(
        max_total_tokens=256, page_size=2)))
    first = SimRequest(0, list(range(10)), 2)
    engine.add_request(first, np.array([11, 12, 13], np.uint64))     # blocks of 4 tokens
    while engine.has_work():
        engine.step()
    other = SimRequest(1, list(range(8)) + [99, 98], 2)
    engine.add_request(other, np.array([11, 12, 77], np.uint64))
    TG = engine.state.tree[1]
    before = TG.copy()                              # clock, sizes, counts
    snapshot = engine.cache_snapshot()
    assert engine.cached_prefix_blocks(np.array([11, 12, 77], np.uint64)) == 2
    assert snapshot.prefix_blocks(np.array([11, 12, 13], np.uint64)) == 2   # 13: no full block
    assert (TG == before).all()
    assert snapshot.key_count() == engine.cached_key_count() == \
        (TG[T_EVICT] + TG[T_PROT]) // 4 > 0


def test_a_cpu_tier_is_refused_naming_hicache():
    from pipeline.components.sglang_settings import SchedulerSettings
    from pipeline.engine.sglang import SGLangConfig
    from pipeline.engine.sglang_instance import SGLangInstance

    config = SGLangConfig(64, 10 ** 6, 4, SchedulerSettings(max_total_tokens=256))
    with pytest.raises(ValueError, match="--enable-hierarchical-cache") as error:
        SGLangInstance(config, cpu_tier=object())
    assert "not modelled" not in str(error.value)          # HiCache is, in the engine


def _tokens_trace(tmp_path, requests) -> str:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_step": a, "prompt_token_ids": p,
                                         "max_tokens": m}) + "\n" for p, m, a in requests))
    return str(trace)


@pytest.mark.parametrize("flags", [[], ["--disable-overlap-schedule"],
                                   ["--enable-hierarchical-cache"],
                                   ["--clock", "time", "--rate", "5", "--latency", "roofline"]])
def test_a_request_the_pool_never_admits_is_clipped_as_sglang_clips_it(flags, tmp_path,
                                                                       capsys):
    """A 40-token prompt asking 40 tokens of a 64-token pool: SGLang's intake clips
    ``max_new_tokens`` to 64 - 40 - 1 - 1 = 22 (``init_req_max_new_tokens``), so the run
    completes with that request cut by 18 tokens, said on stderr and in ``output_clipped``;
    the other request is untouched."""
    trace = _tokens_trace(tmp_path, [(list(range(40)), 40, 0), (list(range(100, 110)), 5, 0)])
    out = tmp_path / "out"
    assert main(["simulate", trace, "--format", "tokens", "--gpu", "64", "--block-size", "16",
                 "--engine", "sglang", *flags, "--model", "qwen2.5-1.5b",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 request clipped at intake: SGLang caps max_new_tokens" in err
    requests = pl.read_parquet(out / "requests.parquet")
    assert requests["output_clipped"].to_list() == [18, 0]
    assert requests["output_tokens"].to_list() == [22, 5]


def test_a_prompt_sglang_aborts_is_refused(tmp_path, capsys):
    """A prompt of ``max_req_len - 5`` tokens or more: SGLang aborts it with an error
    (``validate_input_length``); the run is refused (exit 1, as a request vLLM's pool
    never holds), one line naming the line."""
    trace = _tokens_trace(tmp_path, [(list(range(58)), 2, 0)])
    out = tmp_path / "out"
    assert main(["simulate", trace, "--format", "tokens", "--gpu", "64", "--block-size", "16",
                 "--engine", "sglang", "--out", str(out)]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and ":1: prompt of 58 tokens: SGLang aborts it" in error[0]
    assert not out.exists()


def test_fleet_runs_each_point_on_its_pool_and_clips_as_sglang(tmp_path, capsys):
    """Each ``--gpu`` point's instances get that pool (with the device pool and HiCache's
    host pool sized again), and SGLang's intake clips on it: 40 + 40 tokens on 64 run
    with 22 outputs, on 128 with all 40."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"prompt_token_ids": list(range(40)), "max_tokens": 40})
                     + "\n")
    out = tmp_path / "out"
    assert main(["fleet", str(trace), "--format", "tokens", "--gpu", "64,128",
                 "--block-size", "16", "--engine", "sglang", "--model", "qwen2.5-1.5b",
                 "--rate", "5", "--out", str(out)]) == 0
    frame = pl.read_parquet(out / "requests").sort("gpu_blocks")
    assert frame["output_tokens"].to_list() == [22, 40]


def test_the_pool_is_whole_pages_and_a_fleet_point_sizes_it_again():
    """``--max-total-tokens`` is floored to whole pages, as SGLang's pool configurator does
    (``calculate_pool_sizes_from_max_tokens``, pool_configurator.py:651-652); ``with_blocks``
    (a fleet point) sizes the pool again under the same cap."""
    import argparse

    from pipeline.engine.sglang_options import sglang_config

    args = argparse.Namespace(block_size=16, page_size=4, max_total_tokens=66,
                              chunked_prefill_size=-1)
    config = sglang_config(args, 8, 1000)
    assert config.settings.max_total_tokens == 64
    assert config.with_blocks(3).settings.max_total_tokens == 48
    assert config.with_blocks(30).settings.max_total_tokens == 64
