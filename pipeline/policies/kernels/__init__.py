"""Compiled (numba, ``nogil``) replays of every policy at one capacity, equal per access to
the Python classes (tests/test_policy_kernels.py). Keys are dense codes 0..K-1; each module
holds a few kernels over the linked lists of ``lists.py``."""

from __future__ import annotations

import numpy as np

from pipeline.policies.kernels.ghost import arc, s3fifo
from pipeline.policies.kernels.lists import arrays
from pipeline.policies.kernels.opt import next_use_codes, opt
from pipeline.policies.kernels.simple import clock, lfu, queue, sieve
from pipeline.policies.s3fifo import share

__all__ = ["replay", "KERNELS", "next_use_codes"]

KERNELS = ("lru", "fifo", "mru", "lfu", "clock", "sieve", "s3fifo", "arc", "opt")


def replay(name: str, codes: np.ndarray, sizes: np.ndarray, capacity: int,
           bypass: bool = True) -> np.ndarray:
    """Per-access hits of policy ``name`` (registry defaults) at ``capacity``."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    capacity = int(capacity)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    k, prev, nxt = arrays(codes)
    if name in ("lru", "fifo", "mru"):
        return queue(codes, sizes, capacity, k, prev, nxt, ("lru", "fifo", "mru").index(name))
    if name == "clock":
        return clock(codes, sizes, capacity, k, prev, nxt, 1, 0)
    if name == "sieve":
        return sieve(codes, sizes, capacity, k, prev, nxt)
    if name == "lfu":
        return lfu(codes, sizes, capacity, k, prev, nxt)
    if name == "s3fifo":
        return s3fifo(codes, sizes, capacity, k, prev, nxt, int(share(capacity, 0.10)),
                       int(share(capacity, 0.90)), 2)
    if name == "arc":
        return arc(codes, sizes, capacity, k, prev, nxt)
    if name == "opt":
        return opt(codes, sizes, capacity, k, next_use_codes(codes), bypass)
    raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(KERNELS)}")
