"""Every capacity from one pass, for the registry's stack algorithms: LRU (one fixed size per
key, ``pipeline/onepass/stack_distance.py``), MRU and OPT with bypass (one size for every access,
``kernels/stack.py``); each is a ``OnePass`` its registry entry declares. Exact per access:
tests/test_policies_stack_passes.py proves each equal to the per-capacity replay.

LFU is not here: libCacheSim's LFU (the family's) forgets a count on eviction, so a smaller
cache's counts differ from a larger one's and the inclusion property fails (the test file
holds a counterexample). The others (FIFO, CLOCK, SIEVE, S3-FIFO, ARC) are not stack
algorithms either (FIFO: Belady's anomaly). For unequal sizes MRU and OPT are not stack
algorithms (a large item can keep two small ones out of a larger cache)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.onepass.stack_distance_kernels import first_size_change

__all__ = ["OnePass", "LRU_PASS", "MRU_PASS", "OPT_PASS", "slots", "mru_distances_of",
           "opt_distances_of"]


def _fixed_sizes(codes: np.ndarray, sizes: np.ndarray) -> bool:
    """True when every key keeps one size (the stack-distance pass's own check)."""
    first = np.full(int(codes.max()) + 1 if codes.size else 0, -1, dtype=np.int64)
    return first_size_change(codes, sizes, first) < 0


def _one_size(codes: np.ndarray, sizes: np.ndarray) -> bool:
    """True when every access has the same size."""
    return sizes.size == 0 or bool((sizes == sizes[0]).all())


def slots(capacities: Sequence[int], size: int) -> np.ndarray:
    """Items of ``size`` each cache holds (int64 max for size 0: everything fits)."""
    capacities = np.asarray(capacities, dtype=np.int64)
    if size == 0:
        return np.full(capacities.size, np.iinfo(np.int64).max, dtype=np.int64)
    return capacities // size


def mru_distances_of(codes: np.ndarray, limit: int, bypass: bool = True) -> np.ndarray:
    """MRU's stack distances (0-based; int64 max: a miss at every size)."""
    from pipeline.onepass.stack_kernels import mru_distances
    return mru_distances(codes, limit)


def opt_distances_of(codes: np.ndarray, limit: int, bypass: bool = True) -> np.ndarray:
    """OPT's stack distances (0-based; int64 max: a miss at every size), with or without
    bypass."""
    from pipeline.policies.kernels import next_use_codes
    from pipeline.onepass.stack_kernels import opt_distances
    return opt_distances(codes, next_use_codes(codes), limit, bypass)


@dataclass(frozen=True)
class OnePass:
    """A policy's one-pass fast path (its registry entry's ``onepass``): every capacity from
    one pass, exact on a trace that meets ``rule`` (``applies(codes, sizes)``).

    ``distances(codes, limit, bypass)``: slot-counted stack distances (MRU, OPT: unit-size
    items, a capacity holds ``slots`` of them); None: byte-weighted LRU stack distances
    (``pipeline.onepass.stack_distance``). ``one_capacity``: taken even for a single capacity
    (cheaper than the compiled replay there too)."""

    rule: str
    applies: Callable[[np.ndarray, np.ndarray], bool]
    distances: Callable[[np.ndarray, int, bool], np.ndarray] | None = None
    one_capacity: bool = False

    def _slot_distances(self, codes, sizes, capacities, bypass):
        size = int(sizes[0]) if sizes.size else 1
        held = slots(capacities, size)
        limit = int(min(held.max(initial=0), int(codes.max()) + 1 if codes.size else 0))
        return self.distances(codes, limit, bypass), held

    def hits(self, codes: np.ndarray, sizes: np.ndarray, capacities: Sequence[int],
             bypass: bool = True) -> np.ndarray:
        """Per-access hits, one row per capacity; the caller checks ``applies`` first."""
        if self.distances is None:
            from pipeline.onepass.stack_distance import lru_hits
            return np.asarray(lru_hits(codes, sizes, capacities), dtype=bool).reshape(
                len(capacities), codes.size)
        dist, held = self._slot_distances(codes, sizes, capacities, bypass)
        return dist[None, :] < held[:, None]

    def counts(self, codes: np.ndarray, sizes: np.ndarray, capacities: Sequence[int],
               bypass: bool = True) -> np.ndarray:
        """Hits per capacity (int64) without per-access rows."""
        if self.distances is None:
            from pipeline.onepass.stack_distance import lru_hit_counts
            return np.asarray(lru_hit_counts(codes, sizes, capacities), dtype=np.int64)
        dist, held = self._slot_distances(codes, sizes, capacities, bypass)
        ordered = np.sort(dist)
        return np.searchsorted(ordered, held, side="left").astype(np.int64)


LRU_PASS = OnePass("one fixed size per key", _fixed_sizes, one_capacity=True)
MRU_PASS = OnePass("one size for every access", _one_size, mru_distances_of)
OPT_PASS = OnePass("one size for every access", _one_size, opt_distances_of)
