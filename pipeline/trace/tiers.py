"""Tokens per tier of a tier stack over a trace, for every combination of capacities.

Two stacks (``pipeline.onepass.tier_stacks`` says why one is one pass and the other not):

* ``lmcache``: LMCache 0.5.6's stack (CPU, then disk, then remote; a hit promoted) under
  vLLM, each request's GPU hit from vLLM's allocator at the GPU capacity: one replay per
  (GPU, CPU, disk, remote) point (``lmcache_stack_hits``). A request's tokens per tier are
  what vLLM loads from each (beyond its GPU hit, c - 1 when the whole prompt hits), as
  ``simulate --tier`` counts them.
* ``inclusive``: an inclusive LRU stack of chunks (every tier an LRU cache of its own
  capacity that sees every chunk access, capacities not shrinking downwards), without the
  GPU: every point from one stack-distance pass (``inclusive_tier_counts``). A tier's tokens
  are the chunk accesses it serves x the chunk size.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl

from pipeline.components.lmcache import Chunks
from pipeline.onepass.tier_stacks import inclusive_tier_counts, lmcache_stack_hits

__all__ = ["STACKS", "TIER_KINDS", "loaded_per_tier", "lmcache_points", "inclusive_points",
           "POINT_COLUMNS"]

STACKS = ("lmcache", "inclusive")
TIER_KINDS = ("cpu", "disk", "remote")
POINT_COLUMNS = ("gpu_capacity", "cpu_capacity", "disk_capacity", "remote_capacity",
                 "gpu_tokens", "cpu_tokens", "disk_tokens", "remote_tokens",
                 "recomputed_tokens", "hit_ratio", "cpu_hit_ratio", "disk_hit_ratio",
                 "remote_hit_ratio")


def loaded_per_tier(split: np.ndarray, chunk: int, prompt: np.ndarray,
                    gpu: np.ndarray) -> np.ndarray:
    """(R, 3) tokens vLLM loads from each tier: ``split`` the chunks hit per tier (R, 3),
    the load the hit's tokens beyond the GPU hit ``gpu`` (one fewer when the whole prompt
    hits), each tier's part of it its chunks' range (``kstack.flush``)."""
    edges = np.concatenate((np.zeros((split.shape[0], 1), np.int64),
                            np.cumsum(split, axis=1)), axis=1) * chunk
    end = edges[:, -1] - (edges[:, -1] == prompt)
    lo, hi = np.maximum(edges[:, :-1], gpu[:, None]), np.minimum(edges[:, 1:], end[:, None])
    return np.maximum(hi - lo, 0)


def _row(capacities, gpu_tokens: int, tiers: np.ndarray, prompt: int) -> dict:
    total = prompt or 1
    row = dict(zip(POINT_COLUMNS[:4], map(int, capacities)))
    row.update(gpu_tokens=int(gpu_tokens), cpu_tokens=int(tiers[0]), disk_tokens=int(tiers[1]),
               remote_tokens=int(tiers[2]),
               recomputed_tokens=int(prompt - gpu_tokens - tiers.sum()),
               hit_ratio=float((gpu_tokens + tiers.sum()) / total))
    row.update({f"{kind}_hit_ratio": float(tiers[t] / total)
                for t, kind in enumerate(TIER_KINDS)})
    return row


def lmcache_points(chunks: Chunks, gpu_hits: dict[int, np.ndarray],
                   tiers: list[list[int]]) -> pl.DataFrame:
    """LMCache's stack replayed at every (GPU, CPU, disk, remote) point: ``gpu_hits`` each
    GPU capacity's per-request GPU hit tokens, ``tiers`` the capacities (tokens) of the CPU,
    disk and remote tiers (``[0]`` for a tier not given)."""
    prompt = chunks.prompt_tokens.astype(np.int64)
    rows = []
    for gpu, hits in gpu_hits.items():
        hits = np.asarray(hits, np.int64)
        for caps in itertools.product(*tiers):
            split = lmcache_stack_hits(chunks, hits, caps)
            loaded = loaded_per_tier(split, chunks.chunk_size, prompt, hits).sum(axis=0)
            rows.append(_row((gpu, *caps), hits.sum(), loaded, int(prompt.sum())))
    return pl.DataFrame(rows, orient="row")


def inclusive_points(chunks: Chunks, tiers: list[list[int]]) -> tuple[pl.DataFrame, int]:
    """The inclusive LRU stack of the tiers given (``tiers``: the capacities in tokens of
    the first K of CPU, disk, remote) at every point whose capacities do not shrink
    downwards, from one stack-distance pass; (points, combinations skipped)."""
    chunk, k = chunks.chunk_size, len(tiers)
    combos = [caps for caps in itertools.product(*tiers)
              if all(a <= b for a, b in zip(caps, caps[1:]))]
    skipped = int(np.prod([len(t) for t in tiers])) - len(combos)
    if not combos:
        return pl.DataFrame(schema=list(POINT_COLUMNS)), skipped
    counts = inclusive_tier_counts(chunks.codes, np.array(combos, np.int64) // chunk)
    prompt = int(chunks.prompt_tokens.sum())
    pad = (0,) * (3 - k)
    rows = [_row((0, *caps, *pad), 0, np.concatenate((served[:k] * chunk, pad)), prompt)
            for caps, served in zip(combos, counts)]
    return pl.DataFrame(rows, orient="row"), skipped
