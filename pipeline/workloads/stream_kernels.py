"""The compiled walks behind ``pipeline.workloads.stream.block_stream`` (numba): dense key
codes and the per-request runs of a block frame, each in one pass over the blocks."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.base.arrays import read_only

__all__ = ["dense_codes", "request_runs", "ORDERED", "UNORDERED", "REPEATED"]

ORDERED, UNORDERED, REPEATED = 0, 1, 2


@njit(cache=True)
def _lookup(keys: np.ndarray, distinct: np.ndarray, shift: int, table: np.ndarray,
            codes: np.ndarray) -> None:
    """codes[i] = the index of keys[i] in the sorted ``distinct``: a binary search inside
    the bucket of its top bits (``table[b]``: the first distinct key of bucket >= b)."""
    for i in range(keys.size):
        key = keys[i]
        bucket = key >> np.uint64(shift)
        low = table[bucket]
        high = table[bucket + 1]
        while low < high:
            middle = (low + high) >> 1
            if distinct[middle] < key:
                low = middle + 1
            else:
                high = middle
        codes[i] = low


def dense_codes(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """(each key's rank among the distinct keys, 0-based, int64; how many are distinct):
    what ``rank("dense") - 1`` gives, from one sort and a bucketed search."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    if keys.size == 0:
        return np.zeros(0, np.int64), 0
    ordered = np.sort(keys)
    distinct = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    bits = int(min(24, max(1, distinct.size.bit_length())))
    shift = 64 - bits
    table = np.searchsorted(distinct >> np.uint64(shift),
                            np.arange((1 << bits) + 1, dtype=np.uint64)).astype(np.int64)
    codes = np.empty(keys.size, np.int64)
    _lookup(read_only(keys), distinct, shift, table, codes)
    return codes, int(distinct.size)


def request_runs(request: np.ndarray, block_index: np.ndarray, block_tokens: np.ndarray,
                 block_size: int, codes: np.ndarray, n_codes: int, starts: np.ndarray,
                 tokens: np.ndarray, cacheable: np.ndarray,
                 numbers: np.ndarray) -> tuple[int, int, int]:
    """Walk a block frame's columns once: per request (a run of equal ``request``) its first
    block (``starts``), tokens, leading full blocks and number. Returns (runs, status, the
    first run repeating a key): ``UNORDERED`` when requests go down or block indices are
    not 0, 1, 2, ... per request, else ``REPEATED`` when a request holds a key twice."""
    columns = [read_only(column) for column in (request, block_index, block_tokens)]
    return _request_runs(*columns, block_size, codes, n_codes, starts, tokens, cacheable,
                         numbers)


@njit(cache=True)
def _request_runs(request, block_index, block_tokens, block_size, codes, n_codes, starts,
                  tokens, cacheable, numbers):
    mark = np.full(n_codes, -1, np.int64)
    runs = 0
    status = ORDERED
    repeated = -1
    position = 0
    full = True
    for i in range(request.size):
        if i == 0 or request[i] != request[i - 1]:
            if i > 0 and request[i] < request[i - 1]:
                status = UNORDERED
            starts[runs] = i
            numbers[runs] = request[i]
            tokens[runs] = 0
            cacheable[runs] = 0
            runs += 1
            position = 0
            full = True
        else:
            position += 1
        if block_index[i] != position:
            status = UNORDERED
        tokens[runs - 1] += block_tokens[i]
        full = full and block_tokens[i] == block_size
        if full:
            cacheable[runs - 1] += 1
        code = codes[i]
        if mark[code] == runs - 1 and repeated < 0:
            repeated = runs - 1
        mark[code] = runs - 1
    starts[runs] = request.size
    if status == ORDERED and repeated >= 0:
        status = REPEATED
    return runs, status, repeated
