"""The planner's search against literal replays at every CPU capacity: kvlab's TwoTierCache
in document mode, the block model's reference replay (``tests/oracles/block_lru.py``) in block
mode."""

from __future__ import annotations

import statistics
from functools import cache

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from kvlab.kvsim import TwoTierCache
from oracles.block_lru import replay
from pipeline.workloads.stream import ORDERS, block_stream
from pipeline.plan.search import DocumentEvaluator, Target, plan
from pipeline.plan.blocks import BlockEvaluator
from pipeline.ttft.model import fit_configs, measured_requests
from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA, document_blocks
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.workload import Workload


@cache
def lab_models():
    return fit_configs(measured_requests(str(ROOT / "data" / "ttft.jsonl"), 21520, 56000, 5011))


def request_ttft(tokens: dict[str, int], cpu: int) -> float:
    """The per-tier medians model, written out: token shares of the three tier figures."""
    t = lab_models()["lmcache" if cpu else "baseline"].tier_ms
    context = sum(tokens.values())
    if context == 0:
        return t["gpu"]
    return (t["gpu"] + (t["cpu"] - t["gpu"]) * tokens["cpu"] / context
            + (t["miss"] - t["gpu"]) * tokens["miss"] / context)


def whole(tier: str, tokens: int) -> dict[str, int]:
    """A request served wholly by ``tier``."""
    return {t: tokens if t == tier else 0 for t in ("gpu", "cpu", "miss")}


def pass_figures(per_request: list[tuple[int, dict[str, int]]], cpu: int) -> dict:
    """pass -> (TTFTs, hit ratio) from (pass, tokens by tier) per request."""
    out: dict[int, tuple[list, list]] = {}
    for pass_index, tokens in per_request:
        ttfts, hits = out.setdefault(pass_index, ([], []))
        ttfts.append(request_ttft(tokens, cpu))
        hits.append((tokens["gpu"] + tokens["cpu"], sum(tokens.values())))
    return {p: (t, sum(h for h, _ in hs) / c if (c := sum(c for _, c in hs)) else None)
            for p, (t, hs) in out.items()}


def meets(figures: dict, target: Target) -> bool:
    for p in target.passes:
        ttfts, ratio = figures[p]
        if target.kind == "hit_ratio":
            if ratio is None or ratio < target.value - 1e-12:
                return False
            continue
        value = statistics.median(ttfts) if target.statistic == "p50" else statistics.fmean(ttfts)
        if value > target.value + 1e-9:
            return False
    return True


def check(result, figures_at, capacities, target):
    """The plan's answer is the first capacity whose literal figures meet the target, and the
    figures it reports there are the literal ones."""
    expected = next((c for c in capacities if meets(figures_at(c), target)), None)
    if expected is None:
        assert result.status == "unreachable"
    else:
        assert result.cpu_tokens == expected
        assert result.status == ("gpu_alone" if expected == 0 else "met")
    literal = figures_at(result.cpu_tokens)
    for row in result.figures.iter_rows(named=True):
        ttfts, ratio = literal[row["pass_index"]]
        assert row["hit_ratio"] == pytest.approx(ratio)
        assert row["p50_ms"] == pytest.approx(statistics.median(ttfts))
        assert row["mean_ms"] == pytest.approx(statistics.fmean(ttfts))


targets = st.builds(lambda kind, statistic, level: (kind, statistic, level),
                    st.sampled_from(["ttft", "hit_ratio"]), st.sampled_from(["p50", "mean"]),
                    st.floats(0.05, 1.0))


def make_target(spec, passes: int, which: int, figures_at, top: int) -> Target:
    """A target between the literal figures without a CPU tier and with the largest one
    (so most draws are met somewhere in between), or beyond either end (level near 0/1)."""
    kind, statistic, level = spec
    chosen = (1 + which % (passes - 1),) if passes > 1 else (0,)
    ends = []
    for cpu in (0, top):
        ttfts, ratio = figures_at(cpu)[chosen[0]]
        ends.append(ratio or 0.0 if kind == "hit_ratio" else
                    statistics.median(ttfts) if statistic == "p50" else statistics.fmean(ttfts))
    value = ends[0] + (level * 1.2 - 0.1) * (ends[1] - ends[0])
    if kind == "hit_ratio":
        value = min(max(value, 1e-3), 1.0)
    return Target(kind, max(value, 1e-3), statistic, chosen)


def lab_blocks(docs, tokens, orders, block):
    """Lab-style documents in blocks: (accesses, block frame, request frame, block stream)."""
    accesses = DocumentWorkload(docs, tokens, tuple(orders)).accesses()
    blocks = document_blocks(accesses["doc"].to_list(), tokens, block)
    requests = accesses.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("request"),
        pass_name=pl.format("p{}", pl.col("pass_index")), doc=pl.col("doc").cast(pl.Int64),
        prompt_tokens=pl.col("size").cast(pl.UInt64),
        timestamp_ms=pl.lit(None, pl.Float64)).match_to_schema(REQUEST_SCHEMA)
    return accesses, blocks, requests, block_stream(blocks, block)


@settings(max_examples=50)
@given(docs=st.integers(1, 5), tokens=st.integers(1, 12),
       orders=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4),
       gpu_share=st.floats(0, 1.2), spec=targets, which=st.integers(0, 3))
def test_document_mode_equals_two_tier_replay(docs, tokens, orders, gpu_share, spec, which):
    workload = DocumentWorkload(docs, tokens, tuple(orders))
    accesses = workload.accesses()
    gpu = int(gpu_share * workload.working_set)

    def figures_at(cpu: int) -> dict:
        cache_ = TwoTierCache(gpu, cpu)
        rows = [(p, whole(cache_.access(doc, tokens), tokens))
                for p, doc in accesses.select("pass_index", "doc").iter_rows()]
        return pass_figures(rows, cpu)

    target = make_target(spec, len(orders), which, figures_at, workload.working_set + 1)

    result = plan(DocumentEvaluator("t", workload.workload(None), gpu, lab_models()), target)
    check(result, figures_at, range(workload.working_set + 2), target)


@settings(max_examples=50)
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=6),
       stream=st.lists(st.integers(0, 5), min_size=1, max_size=25), gpu=st.integers(0, 20),
       level=st.floats(0.05, 1.0))
def test_oversize_bands_equal_two_tier_replay(sizes, stream, gpu, level):
    """Documents of different sizes (kvlab's oversize rule makes hits non-monotone below the
    largest one): the band candidates are scanned, so the answer is still the replay's."""
    keys = [k % len(sizes) for k in stream]
    n = len(keys)
    items = pl.DataFrame({"request": range(n), "block_index": [0] * n, "block_key": keys,
                          "block_tokens": [sizes[k] for k in keys]}, schema=BLOCK_SCHEMA)
    requests = pl.DataFrame({"request": range(n), "pass_name": [None] * n, "doc": keys,
                             "prompt_tokens": [sizes[k] for k in keys],
                             "timestamp_ms": [None] * n}, schema=REQUEST_SCHEMA)
    workload = Workload(items, requests, None)
    target = Target("hit_ratio", level, "p50", (0,))

    def figures_at(cpu: int) -> dict:
        cache_ = TwoTierCache(gpu, cpu)
        return pass_figures([(0, whole(cache_.access(k, sizes[k]), sizes[k])) for k in keys],
                            cpu)

    result = plan(DocumentEvaluator("t", workload, gpu, lab_models()), target)
    check(result, figures_at, range(sum(sizes) + 2), target)


@settings(max_examples=50)
@given(docs=st.integers(1, 5), per_doc=st.integers(1, 4), block=st.integers(1, 4),
       tail=st.integers(0, 3), orders=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1,
                                                max_size=3),
       gpu_share=st.floats(0, 0.99), gpu_order=st.sampled_from(ORDERS),
       cpu_order=st.sampled_from(ORDERS), spec=targets, which=st.integers(0, 3))
def test_block_mode_equals_the_block_model_replay(docs, per_doc, block, tail, orders,
                                                  gpu_share, gpu_order, cpu_order, spec, which):
    tokens = per_doc * block + tail % block
    accesses, blocks, requests, stream = lab_blocks(docs, tokens, orders, block)
    passes = accesses["pass_index"].to_list()
    gpu = int(gpu_share * docs * per_doc) * block

    def figures_at(cpu: int) -> dict:
        literal = replay(stream, gpu // block, cpu // block, gpu_order, cpu_order)
        rows = []
        for r, prompt in enumerate(stream.prompt_tokens):
            g, c = int(literal.gpu_prefix[r]), int(literal.cpu_prefix[r])
            served = max(0, c - g)
            rows.append((passes[r], {"gpu": g * block, "cpu": served * block,
                                     "miss": int(prompt) - (g + served) * block}))
        return pass_figures(rows, cpu)

    distinct = docs * (tokens // block)
    target = make_target(spec, len(orders), which, figures_at, (distinct + 1) * block)
    evaluator = BlockEvaluator("t", Workload(blocks, requests, block), gpu, lab_models(),
                               gpu_order, cpu_order)
    result = plan(evaluator, target)
    check(result, figures_at, [k * block for k in range(distinct + 2)], target)


@settings(max_examples=10)
@given(docs=st.integers(2, 4), per_doc=st.integers(2, 6), tail=st.integers(0, 3),
       orders=st.lists(st.sampled_from(["fwd", "rev"]), min_size=2, max_size=3),
       level=st.floats(0.05, 1.0))
def test_other_cpu_models_scan_their_grid(docs, per_doc, tail, orders, level):
    """A CPU model without the one-pass form (LMCache's) is run per chunk step: the answer is
    the first step whose figures meet the target under the model's literal replay."""
    from pipeline.catalog.model_api import CPU_MODELS, request_result

    block, chunk = 2, 4
    tokens = per_doc * block + tail % block
    accesses, blocks, requests, stream = lab_blocks(docs, tokens, orders, block)
    passes = accesses["pass_index"].to_list()
    gpu = block                                          # one block of GPU
    evaluator = BlockEvaluator("t", Workload(blocks, requests, block), gpu, lab_models(),
                               cpu_model="lmcache", cpu_options={"chunk_size": chunk})
    gpu_hit = evaluator.gpu_hit

    def figures_at(cpu: int) -> dict:
        cpu_prefix = CPU_MODELS["lmcache-replay"](stream, gpu_hit, [cpu], "head-first",
                                                  chunk_size=chunk)[0]
        result = request_result(stream, gpu_hit, cpu_prefix)
        return pass_figures([(p, {"gpu": g, "cpu": c, "miss": m}) for p, g, c, m in zip(
            passes, result["gpu_hit_tokens"], result["cpu_hit_tokens"],
            result["miss_tokens"])], cpu)

    top = (stream.n_codes + 1) * block + chunk
    target = make_target(("hit_ratio", "p50", level), len(orders), 0, figures_at, top)
    result = plan(evaluator, target)
    check(result, figures_at, [0, *range(chunk, top + chunk, chunk)], target)
