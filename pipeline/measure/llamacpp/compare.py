"""Predicted vs measured tiers for llama.cpp runs of the lab's workload.

* ``predict``: per request, the tier ``LlamaCppPromptCache`` predicts (``predicted_tier``,
  ``predicted_reused``) and plain LRU's prediction (``lru_tier``: kvlab's ``TwoTierCache``
  with a GPU tier of one request's state = the live context and a CPU tier of the RAM cache's
  bytes), one fresh cache per (config, repeat), as ``--local-engine`` starts one fresh server
  for each.
* ``ttft_tier``: hit or miss read from TTFT alone: relative to the median TTFT of the same
  (config, repeat)'s cold pass (every request there is a first read), a hit is below 1/8 of
  it, a miss above 1/4 (misses vary a lot on a busy machine), anything between is ``unclear``.
* ``agreement``: per config, how many requests each prediction gets right against the
  engine's own log (``server_tier``) and against TTFT, and the hit/miss TTFT medians.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kvlab.kvsim import TwoTierCache
from pipeline.components.llamacpp_cache import LlamaCppPromptCache, StateSize
from pipeline.measure.output import provenance_path
from pipeline.cache.tiers import TIER
from pipeline.measure.workload import Request, prompt_token_ids, spec_requests

__all__ = ["HIT_BELOW", "MISS_ABOVE", "KEYS", "agreement", "load_measurement", "predict",
           "ttft_tier"]

KEYS = ["config", "repeat", "pass", "step"]
HIT_BELOW, MISS_ABOVE = 1 / 8, 1 / 4
COMPLETION_TOKEN = -2          # the forced word, in prompt_token_ids' units


def predict(requests: Sequence[Request], cache_bytes: dict[str, int | None],
            state_size: StateSize, completion_tokens: int) -> pl.DataFrame:
    """KEYS, doc, predicted_tier, predicted_reused, lru_tier for every request."""
    completion = (COMPLETION_TOKEN,) * completion_tokens
    models: dict[tuple[str, int], tuple[LlamaCppPromptCache, TwoTierCache]] = {}
    rows = []
    for request in requests:
        prompt = prompt_token_ids(request.prompt)
        size = state_size(len(prompt) + completion_tokens - 1)
        ram = cache_bytes[request.config]
        group = (request.config, request.repeat)
        if group not in models:     # the live context holds one request's state
            models[group] = (LlamaCppPromptCache(ram, state_size), TwoTierCache(size, ram or 0))
        llama, lru = models[group]
        outcome = llama.request(prompt, completion)
        rows.append((request.config, request.repeat, request.pass_name, request.step,
                     request.doc, outcome.tier, outcome.reused, lru.access(request.doc, size)))
    schema = {"config": pl.String, "repeat": pl.Int64, "pass": pl.String, "step": pl.Int64,
              "doc": pl.Int64, "predicted_tier": TIER, "predicted_reused": pl.Int64,
              "lru_tier": TIER}
    return pl.DataFrame(rows, schema=schema, orient="row")


def ttft_tier(measured: pl.DataFrame) -> pl.DataFrame:
    """``measured`` plus ``ttft_class``: hit / miss / unclear (see the module docstring)."""
    cold = (measured.filter(pl.col("pass") == pl.col("pass").first().over("config", "repeat"))
                    .group_by("config", "repeat").agg(cold_ms=pl.col("ttft_ms").median()))
    ratio = pl.col("ttft_ms") / pl.col("cold_ms")
    return (measured.join(cold, on=["config", "repeat"], how="left", maintain_order="left")
                    .with_columns(ttft_class=pl.when(ratio < HIT_BELOW).then(pl.lit("hit"))
                                  .when(ratio > MISS_ABOVE).then(pl.lit("miss"))
                                  .otherwise(pl.lit("unclear"))))


def agreement(joined: pl.DataFrame) -> pl.DataFrame:
    """Per config: requests, matches of each prediction, hit and miss TTFT medians.

    ``joined``: measured lines (with ``server_tier``) joined to ``predict`` and ``ttft_tier``.
    """
    hit = pl.col("predicted_tier") != "miss"
    predicted_class = pl.when(hit).then(pl.lit("hit")).otherwise(pl.lit("miss"))
    return (joined.group_by("config", maintain_order=True).agg(
        requests=pl.len(),
        model_vs_server=(pl.col("predicted_tier").cast(pl.String) == pl.col("server_tier")).sum(),
        lru_vs_server=(pl.col("lru_tier").cast(pl.String) == pl.col("server_tier")).sum(),
        model_vs_ttft=(predicted_class == pl.col("ttft_class")).sum(),
        hits=hit.sum(),
        hit_p50_ms=pl.col("ttft_ms").filter(hit).median(),
        miss_p50_ms=pl.col("ttft_ms").filter(~hit).median(),
        slowest_hit_ms=pl.col("ttft_ms").filter(hit).max(),
        fastest_miss_ms=pl.col("ttft_ms").filter(~hit).min(),
    ))


def load_measurement(path: str | Path) -> pl.DataFrame:
    """A ``--local-engine`` file joined to its predictions (read from its provenance).

    Columns: ``predict``'s, ``request`` (0-based sending order within each config), then the
    measured lines' fields, ``cold_ms`` and ``ttft_class``; measured requests only, in
    sending order.
    """
    path = Path(path)
    provenance = json.loads(provenance_path(path).read_text(encoding="utf-8"))
    workload = provenance["workload"]
    state = StateSize(provenance["state_size"]["fixed_bytes"],
                      provenance["state_size"]["bytes_per_token"])
    caches = {name: config["cache_bytes"] for name, config in provenance["configs"].items()}
    requests = [r for name in caches for r in spec_requests(name, workload)]
    measured = pl.read_ndjson(path, infer_schema_length=None)
    if "server_tier" not in measured.columns:       # a server that logged nothing usable
        measured = measured.with_columns(server_tier=pl.lit(None, dtype=pl.String))
    predicted = predict(requests, caches, state, workload["completion_tokens"])
    predicted = predicted.with_columns(request=pl.int_range(pl.len()).over("config"))
    return predicted.join(ttft_tier(measured).drop("doc"), on=KEYS, how="inner",
                          maintain_order="left")
