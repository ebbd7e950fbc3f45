"""Compiled (numba, ``nogil``) replays of every policy at one capacity, equal per access to
the Python classes (tests/test_policy_kernels.py). Keys are dense codes 0..K-1; each module
holds a few kernels over the linked lists of ``lists.py``.

``replay_<policy>(codes, sizes, capacity, bypass=True) -> hits`` is a policy's per-access
fast path: its registry entry declares it (``CacheModel.replay_kernel``); ``bypass`` only
matters to OPT."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.base.arrays import read_only
from pipeline.policies.kernels.ghost import arc, s3fifo
from pipeline.policies.kernels.lists import arrays
from pipeline.policies.kernels.opt import next_use_codes, opt
from pipeline.policies.kernels.simple import CLOCK, FIFO, LFU, LRU, MRU, SIEVE, replay
from pipeline.policies.s3fifo import share

__all__ = ["replay_lru", "replay_fifo", "replay_mru", "replay_lfu", "replay_clock",
           "replay_sieve", "replay_s3fifo", "replay_arc", "replay_opt", "next_use_codes"]


def _replay(policy: str, run: Callable) -> Callable:
    """The replay of ``policy``: checks the inputs, then ``run(codes, sizes, capacity,
    bypass, k, prev, nxt)`` (``lists.arrays``) on contiguous int64 arrays."""
    def replay(codes: np.ndarray, sizes: np.ndarray, capacity: int,
               bypass: bool = True) -> np.ndarray:
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        sizes = read_only(np.ascontiguousarray(sizes, dtype=np.int64))  # no kernel writes it
        capacity = int(capacity)
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if codes.size == 0:
            return np.zeros(0, dtype=bool)
        return run(codes, sizes, capacity, bypass, *arrays(codes))
    replay.__name__ = replay.__qualname__ = f"replay_{policy}"
    replay.__doc__ = f"Per-access hits (bool) of {policy} (registry defaults) at ``capacity``."
    return replay


def _one_queue(policy: str, code: int) -> Callable:
    """The replay of a one-queue policy (``simple.replay``'s ``code``)."""
    return _replay(policy, lambda c, s, cap, b, k, p, n: replay(c, s, cap, k, p, n, code))


replay_lru, replay_fifo, replay_mru = _one_queue("lru", LRU), _one_queue("fifo", FIFO), \
    _one_queue("mru", MRU)
replay_clock, replay_sieve, replay_lfu = _one_queue("clock", CLOCK), \
    _one_queue("sieve", SIEVE), _one_queue("lfu", LFU)
replay_s3fifo = _replay("s3fifo", lambda c, s, cap, b, k, p, n: s3fifo(
    c, s, cap, k, p, n, int(share(cap, 0.10)), int(share(cap, 0.90)), 2))
replay_arc = _replay("arc", lambda c, s, cap, b, k, p, n: arc(c, s, cap, k, p, n))
replay_opt = _replay("opt", lambda c, s, cap, b, k, p, n: opt(c, s, cap, k, next_use_codes(c),
                                                              b))
