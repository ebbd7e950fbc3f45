"""``trace --tier``: LMCache's stack with its CPU tier alone is trace's ``lmcache`` CPU model
under the ``vllm`` GPU model point by point; the inclusive stack's one pass equals a literal
replay of its LRU tiers; each tier's tokens are its part of what vLLM loads (hand
arithmetic); bad input is one line naming the option, exit 2, nothing written."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import polars as pl
import pytest
from test_cli_bad_arguments import usage_error

from pipeline.cli import main
from pipeline.trace.tiers import loaded_per_tier

PATTERN = ["--pattern", "long-doc-qa", "--num-documents", "6", "--document-length", "600",
           "--block-size", "16", "--chunk-size", "64"]


def _trace(tmp_path, name, *argv) -> pl.DataFrame:
    out = tmp_path / name
    assert main(["trace", *PATTERN, *argv, "--no-report", "--out", str(out)]) == 0
    return pl.read_parquet(out / ("tiers.parquet" if "--tier" in argv else "points.parquet"))


def test_a_cpu_only_stack_is_traces_lmcache_model(tmp_path):
    sizes = "640,1280,4000"
    stack = _trace(tmp_path, "stack", "--tier", f"cpu:{sizes}", "--gpu", "0,320")
    plain = _trace(tmp_path, "plain", "--gpu", "0,320", "--cpu", sizes, "--gpu-model", "vllm",
                   "--cpu-model", "lmcache")
    keys = ["gpu_capacity", "cpu_capacity"]
    joined = stack.join(plain, on=keys, suffix="_plain")
    assert joined.height == 6
    for column in ("gpu_tokens", "cpu_tokens", "recomputed_tokens"):
        assert joined[column].to_list() == joined[f"{column}_plain"].to_list()
    assert (joined["cpu_tokens"] > 0).any()


def test_a_disk_below_the_cpu_tier_serves_what_it_evicted(tmp_path):
    stack = _trace(tmp_path, "disk", "--tier", "cpu:640", "--tier", "disk:0,40000")
    without, with_disk = stack.sort("disk_capacity").iter_rows(named=True)
    assert without["disk_tokens"] == 0 and with_disk["disk_tokens"] > 0
    assert with_disk["hit_ratio"] > without["hit_ratio"]


def _literal_inclusive(keys, capacities) -> list[int]:
    tiers = [OrderedDict() for _ in capacities]
    served = [0] * (len(capacities) + 1)
    for key in keys.tolist():
        level = next((t for t, tier in enumerate(tiers) if key in tier), len(tiers))
        served[level] += 1
        for tier, cap in zip(tiers, capacities):
            tier[key] = None
            tier.move_to_end(key)
            while len(tier) > cap:
                tier.popitem(last=False)
    return served


def test_the_inclusive_pass_equals_a_literal_replay(tmp_path):
    from pipeline.components.lmcache import lmcache_chunks
    from pipeline.workloads.sources import load_workload
    from pipeline.cli import build_parser
    points = _trace(tmp_path, "inclusive", "--tier", "cpu:128,640", "--tier",
                    "disk:128,1280,6400", "--tier-stack", "inclusive")
    assert points.height == 5                         # (640, 128) shrinks: skipped
    args = build_parser().parse_args(["trace", *PATTERN])
    chunks = lmcache_chunks(load_workload(args).block_stream(), 64, False)
    for row in points.iter_rows(named=True):
        caps = (row["cpu_capacity"] // 64, row["disk_capacity"] // 64)
        served = _literal_inclusive(chunks.codes, caps)
        assert [row["cpu_tokens"], row["disk_tokens"]] == [64 * s for s in served[:2]]


def test_each_tier_loads_its_part_beyond_the_gpu_hit():
    # chunks of 4: 2 CPU, 1 disk, 1 remote chunk hit; GPU hit 5 tokens; prompt 20 tokens
    split = np.array([[2, 1, 1], [2, 1, 1], [0, 2, 0]])
    prompt = np.array([20, 16, 8])
    gpu = np.array([5, 0, 0])
    loaded = loaded_per_tier(split, 4, prompt, gpu)
    assert loaded.tolist() == [[3, 4, 4],           # 5..8 CPU, 8..12 disk, 12..16 remote
                               [8, 4, 3],           # the whole prompt hit: one fewer
                               [0, 7, 0]]


@pytest.mark.parametrize("argv, message", [
    (["--tier", "disk:640"], "--tier disk:640: the cpu tier comes first"),
    (["--tier", "cpu:640:5:0.2"], "trace counts hits, not time"),
    (["--tier", "cpu:640", "--tier", "remote:640:shared"], "trace counts hits, not time"),
    (["--tier", "cpu:1GiB"], "--tier cpu:1GiB needs --model"),
    (["--tier", "cpu:-64"], "a capacity must be >= 0"),
    (["--tier", "cpu:32"], "--tier cpu:32: a CPU tier under 64 tokens holds no chunk"),
    (["--tier", "cpu:640", "--tier", "cpu:1280"], "a second cpu tier"),
    (["--tier-stack", "inclusive"], "--tier-stack: it is the --tier stack's kind"),
    (["--tier", "cpu:640", "--cpu", "640"], "--cpu: not with --tier"),
    (["--tier", "cpu:640", "--tier-stack", "inclusive", "--gpu", "64"],
     "--gpu: the inclusive stack has no GPU tier"),
])
def test_bad_tiers_are_usage_errors(tmp_path, capsys, argv, message):
    from conftest import folder_snapshot
    usage_error(capsys, ["trace", *PATTERN, *argv, "--out", str(tmp_path / "out")], message)
    assert folder_snapshot(tmp_path) == {}
