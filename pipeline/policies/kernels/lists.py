"""Linked lists over int64 arrays for the kernels: ``ends[0]`` is the head (newest),
``ends[1]`` the tail (oldest); ``prev`` points towards the head, ``nxt`` towards the tail,
as libCacheSim's queues."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["NONE", "NEVER", "FIRST", "inlined", "push", "unlink", "bucket_push", "bucket_unlink",
           "arrays"]

NONE = -1
NEVER = np.iinfo(np.int64).max
#: Count bucket 1 as an int64: a literal 1 argument compiled ``bucket_push`` once more.
FIRST = np.int64(1)
#: ``pipeline.engine.kjit.inlined``'s settings (engine/ is a layer above): a kernel's helper
#: whose body numba copies into the kernel, so arrays passed to it cost no reference counts.
inlined = njit(inline="always", error_model="numpy", _nrt=False)


@njit(cache=True, nogil=True)
def push(ends, prev, nxt, x):
    prev[x] = NONE
    nxt[x] = ends[0]
    if ends[0] != NONE:
        prev[ends[0]] = x
    else:
        ends[1] = x
    ends[0] = x


@njit(cache=True, nogil=True)
def unlink(ends, prev, nxt, x):
    p, n = prev[x], nxt[x]
    if p == NONE:
        ends[0] = n
    else:
        nxt[p] = n
    if n == NONE:
        ends[1] = p
    else:
        prev[n] = p
    prev[x] = NONE
    nxt[x] = NONE


@njit(cache=True, nogil=True)
def bucket_push(bhead, btail, prev, nxt, f, x):
    """``push`` onto bucket ``f`` of lists whose heads and tails are ``bhead[f]``, ``btail[f]``."""
    prev[x] = NONE
    nxt[x] = bhead[f]
    if bhead[f] != NONE:
        prev[bhead[f]] = x
    else:
        btail[f] = x
    bhead[f] = x


@njit(cache=True, nogil=True)
def bucket_unlink(bhead, btail, prev, nxt, f, x):
    """``unlink`` ``x`` from bucket ``f`` (its ``prev``/``nxt`` are left as they were)."""
    p, q = prev[x], nxt[x]
    if p == NONE:
        bhead[f] = q
    else:
        nxt[p] = q
    if q == NONE:
        btail[f] = p
    else:
        prev[q] = p


def arrays(codes: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(K, prev, nxt) for dense codes 0..K-1."""
    k = int(codes.max()) + 1 if codes.size else 1
    return k, np.full(k, NONE, np.int64), np.full(k, NONE, np.int64)
