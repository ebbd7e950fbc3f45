"""Every capacity from one pass, for the registry's stack algorithms: LRU (one fixed size per
key, ``pipeline/stackdist.py``), MRU and OPT with bypass (one size for every access,
``kernels/stack.py``). Exact per access: tests/test_policies_onepass.py proves each equal to
the per-capacity replay.

LFU is not here: libCacheSim's LFU (the family's) forgets a count on eviction, so a smaller
cache's counts differ from a larger one's and the inclusion property fails (the test file
holds a counterexample). The others (FIFO, CLOCK, SIEVE, S3-FIFO, ARC) are not stack
algorithms either (FIFO: Belady's anomaly). For unequal sizes MRU and OPT are not stack
algorithms (a large item can keep two small ones out of a larger cache)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ONEPASS", "applies", "onepass_hits", "onepass_counts", "slots", "distances"]

#: policies with an exact one-pass engine, and the size rule it needs
ONEPASS = {"lru": "one fixed size per key", "mru": "one size for every access",
           "opt": "one size for every access"}


def _fixed_sizes(codes: np.ndarray, sizes: np.ndarray) -> bool:
    """True when every key keeps one size."""
    if codes.size == 0:
        return True
    first = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    first[codes[::-1]] = sizes[::-1]
    return bool((first[codes] == sizes).all())


def applies(name: str, codes: np.ndarray, sizes: np.ndarray) -> bool:
    """True when the one-pass engine of ``name`` is exact on this trace."""
    if name == "lru":
        return _fixed_sizes(codes, sizes)
    if name in ("mru", "opt"):
        return sizes.size == 0 or bool((sizes == sizes[0]).all())
    return False


def slots(capacities: Sequence[int], size: int) -> np.ndarray:
    """Items of ``size`` each cache holds (int64 max for size 0: everything fits)."""
    capacities = np.asarray(capacities, dtype=np.int64)
    if size == 0:
        return np.full(capacities.size, np.iinfo(np.int64).max, dtype=np.int64)
    return capacities // size


def distances(name: str, codes: np.ndarray, limit: int, bypass: bool = True) -> np.ndarray:
    """Stack distances of ``mru`` or ``opt`` (0-based; int64 max: a miss at every size)."""
    from pipeline.policies.kernels import next_use_codes
    from pipeline.policies.kernels.stack import mru_distances, opt_distances

    if name == "mru":
        return mru_distances(codes, limit)
    if name == "opt":
        return opt_distances(codes, next_use_codes(codes), limit, bypass)
    raise ValueError(f"no one-pass stack kernel for {name!r}")


def _mru_opt(name, codes, sizes, capacities, bypass):
    size = int(sizes[0]) if sizes.size else 1
    held = slots(capacities, size)
    limit = int(min(held.max(initial=0), int(codes.max()) + 1 if codes.size else 0))
    return distances(name, codes, limit, bypass), held


def onepass_hits(name: str, codes: np.ndarray, sizes: np.ndarray,
                 capacities: Sequence[int], bypass: bool = True) -> np.ndarray:
    """Per-access hits, one row per capacity; the caller checks ``applies`` first."""
    if name == "lru":
        from pipeline.stackdist import lru_hits
        return np.asarray(lru_hits(codes, sizes, capacities), dtype=bool).reshape(
            len(capacities), codes.size)
    dist, held = _mru_opt(name, codes, sizes, capacities, bypass)
    return dist[None, :] < held[:, None]


def onepass_counts(name: str, codes: np.ndarray, sizes: np.ndarray,
                   capacities: Sequence[int], bypass: bool = True) -> np.ndarray:
    """Hits per capacity (int64) without per-access rows."""
    if name == "lru":
        from pipeline.stackdist import lru_hit_counts
        return np.asarray(lru_hit_counts(codes, sizes, capacities), dtype=np.int64)
    dist, held = _mru_opt(name, codes, sizes, capacities, bypass)
    ordered = np.sort(dist)
    return np.searchsorted(ordered, held, side="left").astype(np.int64)
