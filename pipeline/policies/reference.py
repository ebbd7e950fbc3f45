"""libCacheSim (PyPI ``libcachesim``, a dev/bench dependency only) as the reference the
family is cross-checked and benchmarked against: per-access hits through ``get()`` and whole
traces through ``process_trace`` on an oracleGeneral file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LCS_NAMES", "lcs_cache", "lcs_hits", "lcs_hit_count", "write_oracle_trace",
           "oracle_next"]

#: our name -> libCacheSim class name (MRU: the PyPI wheel 0.3.5 does not ship it).
LCS_NAMES = {"lru": "LRU", "fifo": "FIFO", "lfu": "LFU", "clock": "Clock", "sieve": "Sieve",
             "s3fifo": "S3FIFO", "arc": "ARC", "opt": "Belady"}
INT64_MAX = int(np.iinfo(np.int64).max)


def lcs_cache(name: str, capacity: int, hashpower: int = 20):
    """A libCacheSim cache of our policy ``name`` (its default parameters)."""
    import libcachesim as lcs

    return getattr(lcs, LCS_NAMES[name])(cache_size=int(capacity), hashpower=hashpower)


def oracle_next(codes: np.ndarray) -> np.ndarray:
    """Next-access position per access (INT64_MAX when none), as Belady reads it."""
    codes = np.asarray(codes, dtype=np.int64)
    n = codes.size
    order = np.lexsort((np.arange(n), codes))
    nxt = np.full(n, INT64_MAX, dtype=np.int64)
    same = codes[order[1:]] == codes[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def lcs_hits(name: str, keys: Sequence[int], sizes: Sequence[int], capacity: int) -> np.ndarray:
    """Per-access hits of libCacheSim's policy, one ``get()`` per access (slow; tests)."""
    import libcachesim as lcs

    keys = np.asarray(keys, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    nxt = oracle_next(keys)
    cache = lcs_cache(name, capacity, hashpower=12)
    req = lcs.Request()
    out = np.zeros(keys.size, dtype=bool)
    for i in range(keys.size):
        req.obj_id = int(keys[i])
        req.obj_size = int(sizes[i])
        req.clock_time = i
        req.next_access_vtime = int(nxt[i])
        out[i] = cache.get(req)
    return out


def write_oracle_trace(path: str, keys: np.ndarray, sizes: np.ndarray) -> None:
    """An oracleGeneral binary trace (24-byte records; next access filled in for Belady)."""
    dt = np.dtype([("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nxt", "<i8")])
    rec = np.empty(len(keys), dt)
    rec["t"] = np.arange(len(keys))
    rec["id"] = keys
    rec["sz"] = sizes
    nxt = oracle_next(keys)
    rec["nxt"] = np.where(nxt == INT64_MAX, -1, nxt)
    rec.tofile(path)


def lcs_hit_count(name: str, trace_path: str, n: int, capacity: int,
                  hashpower: int = 20) -> int:
    """Hits of libCacheSim's policy over an oracleGeneral file, via ``process_trace``."""
    import libcachesim as lcs

    reader = lcs.TraceReader(trace_path, lcs.TraceType.ORACLE_GENERAL_TRACE,
                             lcs.ReaderInitParam(ignore_size_zero_req=False))
    miss_ratio, _ = lcs_cache(name, capacity, hashpower).process_trace(reader)
    return round((1 - miss_ratio) * n)
