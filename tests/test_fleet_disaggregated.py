"""A disaggregated fleet (``pipeline.fleet.disaggregated``) against the composition of its
two engines run alone, the transfer arithmetic, and the link option's bad input."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from conftest import cli_in_process
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.base.step_vectors import Rates
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.core import EngineSim
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.fleet.disaggregated import Link, RemotePrefill, Side, WithoutReload, \
    kv_bytes, parse_link, simulate_disaggregated
from pipeline.fleet.routers import make_router
from pipeline.sizes.gpus import gpu_preset
from pipeline.sizes.model_presets import model_shape
from pipeline.steptime.roofline import Roofline

MODEL = Roofline(model_shape("qwen2.5-1.5b"), gpu_preset("H100"))
KV = MODEL.kv_bytes_per_token


def _requests(draw_lengths, outputs, gaps, shared) -> list[SimRequest]:
    requests, t = [], 0.0
    for i, (length, out, gap) in enumerate(zip(draw_lengths, outputs, gaps)):
        t += gap
        prompt = list(range(shared)) + [10_000 + 1000 * i + j for j in range(length)]
        requests.append(SimRequest(i, prompt, out, arrival_s=t))
    return requests


workloads = st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(st.integers(1, 90), min_size=n, max_size=n),
    st.lists(st.integers(1, 12), min_size=n, max_size=n),
    st.lists(st.floats(0, 0.05), min_size=n, max_size=n),
    st.sampled_from([0, 16, 40])))


def holding_config(requests, blocks: int) -> SchedulerConfig | None:
    """A config of ``blocks`` GPU blocks of 8 tokens fitting the longest request; None
    where the pool cannot hold it."""
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=longest, block_size=8,
                             max_num_batched_tokens=64)
    return None if (longest - 1) // 8 + 2 > blocks else config


def decode_alone(requests, config, alone: pl.DataFrame):
    """The decode engine alone after a prefill engine's run ``alone`` (every request cut to
    its first token): each request arrives when its prefill finished (in that order), with
    every prompt token but the last loaded at no cost. (Prefill finish ms, the arrival
    order, the decode run's request frame.)"""
    done = alone["finish_ms"].to_numpy()
    order = np.lexsort((np.arange(done.size), done))
    moved = [replace(requests[i], index=k, arrival_s=done[i] / 1e3)
             for k, i in enumerate(order.tolist())]
    decode = simulate(moved, config, clock="time", step_ms=WithoutReload(MODEL).step_ms,
                      cpu_tier=RemotePrefill()).requests
    return done, order, decode


@settings(max_examples=25, deadline=None)
@given(workloads, st.integers(24, 60))
def test_one_prefill_one_decode_at_infinite_bandwidth_is_the_two_engines_composed(
        workload, blocks):
    requests = _requests(*workload)
    config = holding_config(requests, blocks)
    if config is None:
        return
    pd = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 8), MODEL),
        Side(config, make_router("round-robin", 1, 8), MODEL), Link(math.inf), KV).requests
    # the prefill engine alone, every request cut to its first token
    first = [replace(r, max_tokens=1) for r in requests]
    alone = simulate(first, config, clock="time", step_ms=MODEL.step_ms).requests
    assert pd["first_token_ms"].to_list() == pytest.approx(alone["first_token_ms"].to_list())
    assert pd["ttft_ms"].to_list() == pytest.approx(alone["ttft_ms"].to_list())
    assert pd["gpu_hit_tokens"].to_list() == alone["gpu_hit_tokens"].to_list()
    # the decode engine alone: each request arrives when its prefill finished, with every
    # prompt token but the last loaded, and loads cost nothing
    done, order, decode = decode_alone(requests, config, alone)
    finish = np.empty(len(requests))
    finish[order] = decode["finish_ms"].to_numpy()
    assert pd["finish_ms"].to_list() == pytest.approx(finish.tolist())
    assert pd["transfer_start_ms"].to_list() == pytest.approx(done.tolist())
    assert pd["transfer_end_ms"].to_list() == pytest.approx(done.tolist())
    loaded = np.empty(len(requests), np.int64)
    loaded[order] = decode["cpu_hit_tokens"].to_numpy() + decode["gpu_hit_tokens"].to_numpy()
    assert loaded.tolist() == [len(r.prompt_token_ids) - 1 for r in requests]
    tpot = pd.filter(pl.col("output_tokens") > 1)
    assert (tpot["tpot_ms"] > 0).all()


def test_transfers_queue_on_each_prefill_link():
    requests = [SimRequest(i, list(range(100 * i, 100 * i + 64)), 3, arrival_s=0.0)
                for i in range(4)]
    config = SchedulerConfig(num_gpu_blocks=200, max_model_len=80, block_size=16)
    link = Link(0.001, 2.0)                     # 1 MB/s: transfers dominate
    pd = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 2, 16), MODEL),
        Side(config, make_router("round-robin", 2, 16), MODEL), link, KV).requests
    assert pd["kv_bytes"].to_list() == [64 * KV] * 4
    one = link.ms(64 * KV)
    for instance, part in pd.group_by("instance"):
        part = part.sort("prefill_finish_ms")
        starts, ends = part["transfer_start_ms"].to_list(), part["transfer_end_ms"].to_list()
        assert ends[0] - starts[0] == pytest.approx(one)
        assert starts[1] == pytest.approx(max(ends[0], part["prefill_finish_ms"][1]))
    assert (pd["first_token_ms"] < pd["transfer_end_ms"]).all()
    assert (pd["finish_ms"] > pd["transfer_end_ms"]).all()


def test_kv_bytes_count_a_partial_last_block():
    assert kv_bytes(np.array([1, 16, 17]), 16, 10).tolist() == [160, 160, 320]
    assert kv_bytes(np.array([17, 40, 48]), 16, 10, np.array([16, 32, 32])).tolist() == \
        [160, 160, 160]


def test_only_the_blocks_the_decode_side_lacks_move():
    # request 1 re-sends request 0's first 48 tokens (3 blocks of 16) and 20 new ones; by
    # its arrival the decode engine holds request 0's blocks, so it loads 48 tokens from
    # its own cache and 5 - 3 = 2 blocks over the link
    requests = [SimRequest(0, list(range(64)), 3, arrival_s=0.0),
                SimRequest(1, list(range(48)) + list(range(500, 520)), 3, arrival_s=1.0)]
    config = SchedulerConfig(num_gpu_blocks=100, max_model_len=100, block_size=16)
    link = Link(1.0, 0.5)                                  # 1 GB/s + 0.5 ms
    pd = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 16), MODEL),
        Side(config, make_router("round-robin", 1, 16), MODEL), link, KV).requests
    assert pd["decode_gpu_hit_tokens"].to_list() == [0, 48]
    assert pd["kv_bytes"].to_list() == [4 * 16 * KV, 2 * 16 * KV]
    assert pd["kv_settled"].to_list() == [True, True]
    took = (pd["transfer_end_ms"] - pd["transfer_start_ms"]).to_list()
    assert took == pytest.approx([link.ms(4 * 16 * KV), link.ms(2 * 16 * KV)])


@settings(max_examples=15, deadline=None)
@given(workloads, st.sampled_from([0.5, 2.0, math.inf]))
def test_bytes_moved_are_the_blocks_beyond_the_decode_hit(workload, gbps):
    requests = _requests(*workload)
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    config = SchedulerConfig(num_gpu_blocks=40, max_model_len=longest, block_size=8,
                             max_num_batched_tokens=64)
    pd = simulate_disaggregated(
        requests, Side(config, make_router("round-robin", 1, 8), MODEL),
        Side(config, make_router("least-loaded", 2, 8), MODEL), Link(gbps, 0.1), KV).requests
    prompts = pd["prompt_tokens"].to_numpy()
    whole = kv_bytes(prompts, 8, KV)
    moved = pd["kv_bytes"].to_numpy()
    assert (moved <= whole).all()
    settled = pd["kv_settled"].to_numpy()
    uncached = kv_bytes(prompts, 8, KV, pd["decode_gpu_hit_tokens"].to_numpy())
    assert (moved[settled] == uncached[settled]).all()
    if workload[3] == 0:                   # no prompt shares a block: the decode side lacks all
        assert (moved == whole).all() and settled.all()
    if math.isinf(gbps):                   # transfers take the latency whatever they move
        assert settled.all()
    took = (pd["transfer_end_ms"] - pd["transfer_start_ms"]).to_numpy()
    assert took == pytest.approx([Link(gbps, 0.1).ms(b) for b in moved])


def test_a_request_preempted_after_its_load_recomputes():
    from pipeline.components.engine_layout import INDEX, NPROMPT, PREEMPT, R_COLUMNS
    R = np.zeros((1, R_COLUMNS), np.int64)
    R[0, INDEX], R[0, NPROMPT] = 0, 40
    tier = RemotePrefill()
    assert tier.lookup(R, None, 0, 16) == 39
    R[0, PREEMPT] = 1
    assert tier.lookup(R, None, 0, 16) == 0


@pytest.mark.parametrize("text,gbps,ms", [("25GB/s", 25, 0), ("200Gb/s:0.5ms", 25, 0.5),
                                          ("50GBps:20us", 50, 0.02), ("1.5GB/s:1s", 1.5, 1000)])
def test_link_option(text, gbps, ms):
    assert parse_link(text) == Link(pytest.approx(gbps), pytest.approx(ms))


@pytest.mark.parametrize("text", ["25", "25:1ms", "0GB/s", "fast", "25GB/s:1"])
def test_link_option_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_link(text)


def test_the_decode_side_prices_no_reload():
    engine_model = WithoutReload(MODEL)
    kind, values = engine_model.kernel_coefficients()
    reload = Rates._fields.index("per_reload")
    assert kind == "roofline" and values[reload] == 0.0 and MODEL.rates[reload] > 0
    assert EngineSim is not None


# ---------------------------------------------------------------- the commands
import json  # noqa: E402
import subprocess  # noqa: E402

WORKLOAD = ("--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "1000",
            "--repeat-count", "2", "--model", "llama-3.1-8b", "--jobs", "1")


def _run(*args: str) -> subprocess.CompletedProcess:
    return cli_in_process(*args)


def test_fleet_and_plan_disaggregated(tmp_path):
    out = tmp_path / "pd"
    done = _run("fleet", *WORKLOAD, "--prefill-instances", "1", "--decode-instances", "1,2",
                "--kv-transfer", "25GB/s:1ms", "--gpu-cost-per-hour", "2", "--out", str(out),
                "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["instances"], r["decode_instances"]) for r in rows] == [(1, 1), (1, 2)]
    assert [r["usd_per_hour"] for r in rows] == pytest.approx([4.0, 6.0])   # P + D GPUs
    assert all(r["tpot_p90_ms"] > 0 for r in rows)
    requests = pl.read_parquet(out / "requests")
    assert requests["kv_settled"].all()
    # the repeated documents hit the decode side's cache: only the rest moves
    assert (requests["decode_gpu_hit_tokens"] > 0).any()
    assert (requests["kv_bytes"] == kv_bytes(requests["prompt_tokens"].to_numpy(), 16,
                                             131072, requests["decode_gpu_hit_tokens"])).all()
    assert (requests["transfer_end_ms"] - requests["transfer_start_ms"]).min() >= 1.0
    plan = _run("plan", "--fleet", *WORKLOAD, "--prefill-instances", "1",
                "--decode-instances", "1", "--kv-transfer", "25GB/s", "--gpu", "300blocks",
                "--target-hit-ratio", "0.01", "--json")
    assert plan.returncode == 0, plan.stderr
    answer = json.loads(plan.stdout)["answers"][0]
    assert (answer["instances"], answer["decode_instances"]) == (1, 1)
    assert answer["gpu_tokens"] == 2 * 300 * 16                 # both engines' pools


@pytest.mark.parametrize("extra,named", [
    (("--prefill-instances", "0", "--decode-instances", "1", "--kv-transfer", "25GB/s"),
     "--prefill-instances"),
    (("--prefill-instances", "1", "--decode-instances", "1", "--kv-transfer", "25"),
     "--kv-transfer"),
    (("--prefill-instances", "1", "--decode-instances", "1"), "--kv-transfer"),
    (("--instances", "2", "--prefill-instances", "1", "--decode-instances", "1",
      "--kv-transfer", "25GB/s"), "--instances"),
    (("--decode-router", "least-loaded"), "--decode-router"),
    (("--pd-decider", "llm-d-prefix:16"), "--pd-decider"),
    (("--prefill-instances", "1", "--decode-instances", "1", "--kv-transfer", "25GB/s",
      "--pd-decider", "bogus"), "--pd-decider"),
    (("--prefill-instances", "1", "--decode-instances", "1", "--kv-transfer", "25GB/s",
      "--pd-decider", "llm-d-prefix:16", "--max-local-prefill-length", "5"), "--pd-decider"),
    (("--prefill-instances", "1", "--decode-instances", "1", "--kv-transfer", "25GB/s",
      "--engine", "sglang"), "not --engine sglang"),
])
def test_disaggregated_bad_input_is_one_line(tmp_path, extra, named):
    done = _run("fleet", *WORKLOAD, *extra, "--out", str(tmp_path / "f"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and named in done.stderr
    assert not (tmp_path / "f").exists()


def test_conditional_disaggregation_keeps_short_prompts_on_the_decode_side():
    requests = [SimRequest(i, list(range(100 * i, 100 * i + length)), 4, arrival_s=0.01 * i)
                for i, length in enumerate([10, 70, 20, 90])]
    config = SchedulerConfig(num_gpu_blocks=100, max_model_len=120, block_size=8)

    def run(threshold):
        return simulate_disaggregated(
            requests, Side(config, make_router("round-robin", 1, 8), MODEL),
            Side(config, make_router("round-robin", 1, 8), MODEL), Link(math.inf), KV,
            threshold)

    mixed = run(50)
    rows = mixed.requests
    assert rows["remote_prefill"].to_list() == [False, True, False, True]
    assert rows.filter(~pl.col("remote_prefill"))["instance"].to_list() == [-1, -1]
    assert rows.filter(~pl.col("remote_prefill"))["kv_bytes"].to_list() == [0, 0]
    local = rows.filter(~pl.col("remote_prefill"))
    assert (local["first_token_ms"] == local["decode_first_token_ms"]).all()
    # every prompt local: no prefill engine runs, and the decode engine is one aggregated
    # vLLM engine serving the workload
    every = run(1000)
    assert set(every.steps["side"].to_list()) == {"decode"}
    alone = simulate(requests, config, clock="time", step_ms=MODEL.step_ms).requests
    assert every.requests["ttft_ms"].to_list() == pytest.approx(alone["ttft_ms"].to_list())
    assert every.requests["finish_ms"].to_list() == pytest.approx(alone["finish_ms"].to_list())
    assert run(0).requests["remote_prefill"].all()


# ---------------------------------------------------------------- deciders
from pipeline.fleet.deciders import Always, LlmdPrefix, PromptLength, parse_decider  # noqa: E402


def test_llm_d_prefix_decider_as_its_disaggregate_reads():
    prompts, cached = np.array([10, 40, 40, 40, 16]), np.array([0, 0, 16, 32, 0])
    # nonCachedTokens 16: shorter prompts stay local; remote when prompt - cached >= 16
    assert LlmdPrefix(16).remote(prompts, cached).tolist() == [False, True, True, False, True]
    assert not LlmdPrefix().remote(prompts, cached).any()        # 0, its default: disabled
    assert Always().remote(prompts, cached).all()
    assert PromptLength(16).remote(prompts, cached).tolist() == [False, True, True, True, False]


def test_parse_decider():
    assert parse_decider("llm-d-prefix:16").describe() == "llm-d-prefix:16"
    assert parse_decider("prompt-length").tokens == 1000
    for bad in ("bogus", "llm-d-prefix:x", "llm-d-prefix:-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_decider(bad)


def test_llm_d_prefix_keeps_a_request_local_when_its_decode_engine_holds_the_prefix():
    # request 1 re-sends request 0's 64 tokens and 8 more: its decode engine holds 4 blocks
    # of them, so 72 - 64 = 8 < 16 tokens are uncached and it is prefilled locally
    requests = [SimRequest(0, list(range(64)), 3, arrival_s=0.0),
                SimRequest(1, list(range(64)) + list(range(900, 908)), 3, arrival_s=1.0),
                SimRequest(2, list(range(500, 540)), 3, arrival_s=2.0)]
    config = SchedulerConfig(num_gpu_blocks=100, max_model_len=100, block_size=16)

    def run(decider):
        return simulate_disaggregated(
            requests, Side(config, make_router("round-robin", 1, 16), MODEL),
            Side(config, make_router("round-robin", 1, 16), MODEL), Link(1.0, 0.5), KV,
            decider=decider).requests

    prefix = run(LlmdPrefix(16))
    assert prefix["remote_prefill"].to_list() == [True, False, True]
    assert prefix["instance"].to_list() == [0, -1, 0]
    assert prefix["decode_gpu_hit_tokens"].to_list() == [0, 64, 0]
    assert prefix["kv_bytes"].to_list() == [4 * 16 * KV, 0, 3 * 16 * KV]
    assert prefix["kv_settled"].all()
    assert run(Always())["remote_prefill"].all()


def test_fleet_with_llm_d_prefix_decider(tmp_path):
    # long-doc-qa repeats each document: a repeat finds it on its decode engine and is
    # prefilled there (llm-d-prefix:256), the first reading goes to the prefill side
    done = _run("fleet", *WORKLOAD, "--prefill-instances", "1", "--decode-instances", "1",
                "--kv-transfer", "25GB/s", "--pd-decider", "llm-d-prefix:256", "--out",
                str(tmp_path / "pd"))
    assert done.returncode == 0, done.stderr
    assert "P/D decider llm-d-prefix:256" in done.stdout
    rows = pl.read_parquet(tmp_path / "pd" / "requests")
    assert rows["remote_prefill"].any() and not rows["remote_prefill"].all()
    local = rows.filter(~pl.col("remote_prefill") & pl.col("kv_settled"))
    assert (local["prompt_tokens"] - local["gpu_hit_tokens"] < 256).all()
    assert (local["kv_bytes"] == 0).all()
