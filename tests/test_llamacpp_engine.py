"""End to end on the real engine: llama-cpp-python's server, its RAM prompt cache, our model.

A small lab workload (3 documents of 1000 tokens, passes fwd, fwd, rev) runs through
``python -m pipeline measure --local-engine`` with a RAM cache of 2.5 documents and one of all
3. Three documents are the fewest where the small cache shows every tier (the second, cyclic
pass: hit, miss, hit; the reverse pass: live context, RAM, miss) and plain LRU, holding two of
the three, predicts no hit in the cyclic pass; each miss costs a 1000-token prompt eval. Every request's tier, as the engine's own log reports it, must equal the tier the
llama.cpp cache model predicts; TTFT must never contradict it; and hits must be at least 10x
faster than misses (medians), every hit faster than every miss. Skips only when llama_cpp is
not importable.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline.cli import main as cli_main
from pipeline.components.llamacpp_cache import StateSize
from pipeline.measure.llamacpp.compare import KEYS, agreement, predict, ttft_tier
from pipeline.measure.llamacpp.engine import parse_request_log
from pipeline.measure.output import provenance_path
from pipeline.measure.workload import lab_requests

DOCS, TOKENS, COMPLETION = 3, 1000, 4
CONFIGS = [("small", 2.5), ("all", DOCS + 0.5)]


def test_log_parsing_reads_the_engines_account():
    hit = ("Llama._create_completion: cache hit\n"
           "Llama.generate: 2008 prefix-match hit, remaining 1 prompt tokens to eval\n"
           "llama_perf_context_print: prompt eval time =       3.10 ms /     1 tokens\n")
    assert parse_request_log(hit) == {
        "server_lookup": "hit", "server_reused_tokens": 2008, "server_evaluated_tokens": 1,
        "server_prompt_eval_ms": 3.1, "server_tier": "cpu"}
    miss = ("Llama._create_completion: cache miss\n"
            "Llama.generate: 1 prefix-match hit, remaining 2008 prompt tokens to eval\n")
    assert parse_request_log(miss)["server_tier"] == "miss"
    live = "Llama.generate: 2008 prefix-match hit, remaining 1 prompt tokens to eval\n"
    assert parse_request_log(live)["server_tier"] == "gpu"
    assert parse_request_log("") == {}


def test_real_engine_tiers_equal_the_llamacpp_model(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama_cpp is not importable: run "
                                            "scripts/ensure_llamacpp.sh (the README's test "
                                            "command does)")
    out = tmp_path / "ttft.jsonl"
    caches = ",".join(f"{name}={docs:g}" for name, docs in CONFIGS)
    assert cli_main(["measure", "--local-engine", "--output", str(out), "--docs", str(DOCS),
                     "--tokens", str(TOKENS), "--passes", "fwd,fwd,rev", "--ram-cache", caches,
                     "--max-tokens", str(COMPLETION), "--quiet",
                     "--work-dir", str(tmp_path / "work")]) == 0
    provenance = json.loads(provenance_path(out).read_text())
    assert provenance["engine"]["version"] == "0.3.36"
    state = StateSize(provenance["state_size"]["fixed_bytes"],
                      provenance["state_size"]["bytes_per_token"])
    cache_bytes = {name: cfg["cache_bytes"] for name, cfg in provenance["configs"].items()}
    requests = [r for name, _ in CONFIGS for r in lab_requests(name, DOCS, TOKENS,
                                                               ["fwd", "fwd", "rev"])]
    measured = pl.read_ndjson(out)
    assert measured.height == len(requests) == 2 * 3 * DOCS
    joined = ttft_tier(measured).join(predict(requests, cache_bytes, state, COMPLETION).drop("doc"),
                                      on=KEYS, how="left")
    shown = joined.select("config", "pass", "doc", "ttft_ms", "server_tier", "predicted_tier",
                          "lru_tier", "ttft_class")
    # the engine's own account equals the model's prediction, request by request
    assert (joined["server_tier"] == joined["predicted_tier"].cast(pl.String)).all(), shown
    # plain LRU gets the small cache wrong (it predicts no hit in the cyclic second pass)
    assert not (joined["server_tier"] == joined["lru_tier"].cast(pl.String)).all()
    # TTFT alone never contradicts the prediction (a busy machine may leave one "unclear")
    contradicted = joined.filter(
        ((pl.col("predicted_tier") == "miss") & (pl.col("ttft_class") == "hit"))
        | ((pl.col("predicted_tier") != "miss") & (pl.col("ttft_class") == "miss")))
    assert contradicted.is_empty(), shown
    summary = agreement(joined)
    for row in summary.iter_rows(named=True):
        assert row["model_vs_server"] == row["requests"] == 3 * DOCS
        assert row["miss_p50_ms"] >= 10 * row["hit_p50_ms"], summary
        assert row["slowest_hit_ms"] < row["fastest_miss_ms"], summary
    hits = joined.filter(pl.col("config") == "small", pl.col("pass") == "pass2-replay",
                         pl.col("server_tier") != "miss")
    assert hits["doc"].to_list() == [0, DOCS - 1]   # the 1-token refresh at work; LRU: none
