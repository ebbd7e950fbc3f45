"""Linked lists over int64 arrays for the kernels: ``ends[0]`` is the head (newest),
``ends[1]`` the tail (oldest); ``prev`` points towards the head, ``nxt`` towards the tail,
as libCacheSim's queues."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.components.kjit import inlined

__all__ = ["NONE", "NEVER", "FIRST", "kernel", "inlined", "push", "unlink", "bucket_push",
           "bucket_unlink", "arrays"]

NONE = -1
NEVER = np.iinfo(np.int64).max
#: Count bucket 1 as an int64: a literal 1 argument compiled ``bucket_push`` once more.
FIRST = np.int64(1)
#: ``kernel``: a loop or a helper that allocates nothing (its caller passes the work arrays),
#: so numba counts no references in it (``pipeline.components.kjit``'s settings, plus nogil:
#: the policies' replays run in a thread pool); ``inlined`` is kjit's.
kernel = njit(cache=True, nogil=True, error_model="numpy", _nrt=False)


@kernel
def push(ends, prev, nxt, x):
    prev[x] = NONE
    nxt[x] = ends[0]
    if ends[0] != NONE:
        prev[ends[0]] = x
    else:
        ends[1] = x
    ends[0] = x


@kernel
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


@kernel
def bucket_push(bhead, btail, prev, nxt, f, x):
    """``push`` onto bucket ``f`` of lists whose heads and tails are ``bhead[f]``, ``btail[f]``."""
    prev[x] = NONE
    nxt[x] = bhead[f]
    if bhead[f] != NONE:
        prev[bhead[f]] = x
    else:
        btail[f] = x
    bhead[f] = x


@kernel
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
