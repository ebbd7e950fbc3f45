"""Tier stacks over a workload: in one pass where the stack allows it, else one replay per
combination of capacities.

**Exact in one pass: an inclusive LRU stack.** Every tier is an LRU cache of its own
capacity that sees every access (a hit refreshes the key in every tier holding it, a miss
stores it in every tier), capacities non-decreasing downwards (C_1 <= C_2 <= ...). Each tier
then is an LRU cache of the whole access stream, so it holds an access's key exactly when
the access's stack distance d is at most its capacity (Mattson et al., 1970;
``pipeline.onepass.stack_distance``), whatever the other tiers hold: the access is served by
the first tier with d <= C_k, and one stack-distance pass gives every capacity of every
tier (``inclusive_tiers``). ``tests/test_tier_stacks.py`` checks this against a literal
replay of the tiers.

**Not one pass.** A stack whose tiers see different streams: an exclusive stack (a tier fed
only the misses of the one above, ``TwoTierCache``: one more pass per upper capacity,
``two_tier_states``), and LMCache's (``pipeline.components.kstack``: the disk and remote
tiers are asked only for the chunks the CPU tier missed, a hit is promoted to the CPU tier,
the CPU tier skips a chunk it holds without refreshing it, a retrieve depends on the GPU's
hit): a larger tier can hit less, and each combination of capacities is its own replay
(``lmcache_stack_hits``, compiled, one request at a time as the block models run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.components.kstack import replay_requests, stack_arrays
from pipeline.components.lmcache import Chunks
from pipeline.onepass.stack_distance import COLD, stack_distances

__all__ = ["inclusive_tiers", "inclusive_tier_counts", "lmcache_stack_hits"]


def _nested(capacities: Sequence[int]) -> np.ndarray:
    caps = np.asarray(capacities, np.int64)
    if caps.ndim != 1 or caps.size == 0 or np.any(caps < 0) or np.any(np.diff(caps) < 0):
        raise ValueError(f"an inclusive stack's capacities are non-negative and "
                         f"non-decreasing downwards, got {list(capacities)!r}")
    return caps


def inclusive_tiers(distances: np.ndarray, capacities: Sequence[int]) -> np.ndarray:
    """Per access, the tier (0..K-1) of an inclusive LRU stack of ``capacities`` that serves
    it, K for a miss, from its stack distances (``stack_distances`` of unit-size keys)."""
    caps = _nested(capacities)
    d = np.asarray(distances, np.int64)
    tier = np.searchsorted(caps, d, side="left")
    return np.where(d == COLD, caps.size, tier).astype(np.int64)


def inclusive_tier_counts(keys: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """Accesses served per tier (K, columns) and missed (last column) for every row of
    ``capacities`` (M, K), each row an inclusive stack: one stack-distance pass in all."""
    distances = stack_distances(keys, np.ones(len(keys), np.int64))
    warm = np.sort(distances[distances != COLD])
    rows = np.asarray(capacities, np.int64)
    within = np.searchsorted(warm, rows, side="right")       # d <= C_k, per (row, tier)
    for row in rows:
        _nested(row)
    served = np.diff(np.concatenate((np.zeros((rows.shape[0], 1), np.int64), within), axis=1),
                     axis=1)
    return np.concatenate((served, (len(keys) - within[:, -1])[:, None]), axis=1)


def lmcache_stack_hits(chunks: Chunks, gpu_hit_tokens: np.ndarray,
                       capacities: tuple[int, int, int]) -> np.ndarray:
    """LMCache's stack of (cpu, disk, remote) tokens replayed over ``chunks`` (full chunks
    only) with each request's GPU hit: the chunks hit per tier per request, (R, 3)."""
    full = chunks.tokens == chunks.chunk_size
    if not np.all(full):
        raise ValueError("the tier stack keys full chunks only (save_unfull_chunk False)")
    T = stack_arrays(tuple(int(c) for c in capacities), chunks.chunk_size, 1, (1.0,) * 3,
                     (0.0,) * 3, 1.0)
    out = np.zeros((chunks.starts.size - 1, 3), np.int64)
    replay_requests(T, chunks.starts, chunks.codes, chunks.prompt_tokens.astype(np.int64),
                    np.asarray(gpu_hit_tokens, np.int64), out)
    return out
