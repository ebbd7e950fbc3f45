"""The compiled SGLang 0.5.23 scheduler's state, its columns, and the memory helpers every
part of the loop uses (allocate, match, checkpoint, release).

The state is a tuple ``S`` (``SGLangState.state()``):

* ``TOK``: every request's prompt then output tokens, one run per request; tree keys are
  spans of it. ``R[r]``: a request's fields (``R_*``, the oracle's ``Req``).
* ``WQ`` / ``RUN`` / ``LB`` / ``CAN``: the waiting queue, the running batch, the last
  prefill batch, the adder's ``can_run`` (request rows; lengths in ``SG``).
* ``SG`` / ``SF``: the loop's integers and floats (``G_*``, ``F_*``); ``T`` the radix tree,
  ``TB`` the lpm in-batch tree; ``MT`` the random policy's Mersenne Twister (CPython's
  ``random.Random(seed)`` state, so ``shuffle`` draws the same numbers); ``SCR`` scratch.
* ``BQ`` / ``BF`` / ``BX``: the batch just run: (request, new tokens, cached tokens) rows,
  who sampled a first token, who finished.

With HiCache ``T`` is ``sglang_khiradix``'s tree: the tree calls go through ``sglang_ktree``,
typed per tree (a run without HiCache compiles none of it); ``R_HOST`` / ``R_BEST`` the
match's host run and deepest node, ``R_HLOADED`` the host tokens the first admission loaded;
a step row's ``S_LOADED`` / ``S_WRITTEN`` the host tokens moved since the last row.
"""

from __future__ import annotations

import random

import numpy as np

from pipeline.components.kjit import helper
from pipeline.components.sglang_khinodes import H_DEV, new_hitree
from pipeline.components.sglang_kradix import new_tree
from pipeline.components.sglang_ktree import (
    t_checkpoint, t_dec_lock, t_evict, t_inc_lock, t_match)
from pipeline.components.sglang_settings import (
    DECAY_STEPS, INIT_NEW_TOKEN_RATIO, MIN_RATIO_FACTOR, WAITING_QUEUE_PREFIX_MATCH_MAX)

__all__ = ["SGLangState", "POLICY_CODES", "R_COLUMNS", "G_COLUMNS", "S_COLUMNS"]

POLICY_CODES = ("fcfs", "lpm", "dfs-weight", "lof", "random")

(R_TOFF, R_N, R_MAXNEW, R_OUT, R_PREFIX, R_NMATCH, R_LAST, R_LOCK, R_EXT, R_KV, R_PROT,
 R_INS, R_MID, R_FIN, R_RETR, R_FSCHED, R_FTOK, R_FINSTEP, R_HIT, R_INDEX, R_DEP,
 R_SEL, R_RETRACTED, R_QUEUED, R_HOST, R_BEST, R_HLOADED) = range(27)
R_COLUMNS = 27
(G_NREQ, G_NWAIT, G_NRUN, G_NLAST, G_NCAN, G_CHUNKED, G_FULL, G_FREE, G_REFRESH, G_STEP,
 G_P, G_POLICY, G_MAXRUN, G_CHUNK, G_MAXPREFILL, G_LRU, G_NTOK, G_EXTEND, G_NB, G_NF, G_NX,
 G_ERROR, G_NEWCHUNK, G_BLOCK, G_NDONE, G_OVERLAP, G_QHAS, G_QN, G_QEXT, G_QSTEP, G_LASTRAN,
 G_POPPED, G_LOADMARK, G_WRITEMARK) = range(34)
G_COLUMNS = 34
F_RATIO, F_MIN, F_DECAY, F_TOTAL = range(4)
#: adder budget states
CONTINUE, NO_TOKEN, OTHER = 0, 1, 2
#: step row columns (``loop.STEP_COLUMNS``)
S_STEP, S_PREFILL, S_DECODE, S_CONTEXT, S_RELOAD, S_NRUN, S_NWAIT, S_FREE, S_LOADED, \
    S_WRITTEN = range(10)
#: a step row: ``loop.STEP_COLUMNS``, then the host tokens loaded and written (HiCache)
S_COLUMNS = 10
DONE, FULL, FAILED, SMALL_TREE = 0, 1, 2, 3
INF_KEY = 2 ** 62


# --------------------------------------------------------------------------- memory

@helper
def pages(tokens, P):
    return -(-tokens // P)


@helper
def evict_to_free(S, num):
    SG, T = S[5], S[7]
    shortfall = num - SG[G_FREE]
    if shortfall > 0:
        SG[G_FREE] += t_evict(T, shortfall)


@helper
def alloc(S, r, new_len):
    R, SG = S[1], S[5]
    P = SG[G_P]
    SG[G_FREE] -= (pages(new_len, P) - pages(R[r, R_KV], P)) * P
    R[r, R_KV] = new_len


@helper
def unlock(S, r):
    R = S[1]
    if R[r, R_LOCK] >= 0:
        t_dec_lock(S[7], R[r, R_LOCK])
    R[r, R_LOCK] = -1


@helper
def fill_len(R, r):
    return R[r, R_N] + R[r, R_OUT]


@helper
def match(S, r, limit):
    """``match_kv_cache``: the tree's hit on the fill ids becomes the prefix (HiCache: the
    host run below it and the deepest node too)."""
    TOK, R, T = S[0], S[1], S[7]
    n = fill_len(R, r)
    max_len = max(n - 1, 0)
    prefix, host, best, node = t_match(T, TOK, R[r, R_TOFF], max_len if limit else n)
    R[r, R_PREFIX], R[r, R_LAST] = prefix, node
    R[r, R_HOST], R[r, R_BEST] = host, best
    R[r, R_NMATCH] = min(prefix + host, max_len)


@helper
def checkpoint(S, r, up_to):
    """``RadixCache.checkpoint``: insert up to ``up_to`` (whole pages), free duplicates,
    re-match and move the lock (HiCache: the unified checkpoint, the insert's own node)."""
    TOK, R, SG, T = S[0], S[1], S[5], S[7]
    P, start = SG[G_P], R[r, R_TOFF]
    length = min(up_to, fill_len(R, r))
    key_len = length // P * P
    freed, node = t_checkpoint(T, TOK, start, key_len, R[r, R_N] // P * P, R[r, R_INS],
                               R[r, R_PROT])
    R[r, R_INS] = max(R[r, R_INS], key_len)
    SG[G_FREE] += freed
    R[r, R_PROT] = key_len
    unlock(S, r)
    t_inc_lock(T, node)
    R[r, R_LOCK] = R[r, R_LAST] = node


@helper
def release(S, r, keep):
    """``release_kv_cache``: checkpoint (finish) or not (retract), free own pages, unlock."""
    R, SG = S[1], S[5]
    P = SG[G_P]
    if keep:
        checkpoint(S, r, R[r, R_KV])
    SG[G_FREE] += (pages(R[r, R_KV], P) - R[r, R_PROT] // P) * P
    unlock(S, r)


class SGLangState:
    """The arrays of one scheduler (``S``), grown from Python as requests arrive."""

    def __init__(self, *, max_total_tokens: int, page_size: int = 1,
                 schedule_policy: str = "fcfs", max_running_requests: int = 256,
                 chunked_prefill_size: int | None = 8192, max_prefill_tokens: int = 16384,
                 schedule_conservativeness: float = 1.0, radix_eviction_policy: str = "lru",
                 seed: int = 0, block_size: int = 1, requests: int = 64,
                 tokens: int = 4096, overlap: bool = False,
                 hicache: tuple | None = None) -> None:
        P = page_size
        self.hicache = hicache is not None             # (write policy, host pool tokens)
        self.tree = new_tree(max_total_tokens // P + 8, P, radix_eviction_policy) \
            if hicache is None else new_hitree(max_total_tokens, hicache[1], P,
                                               radix_eviction_policy, hicache[0])
        self.batch_tree = new_tree(3 * WAITING_QUEUE_PREFIX_MATCH_MAX + 8, 1, "lru")
        self.TOK = np.zeros(max(tokens, 16), np.int64)
        self.ntok = 0
        self.R = np.zeros((0, R_COLUMNS), np.int64)
        self.WQ = self.RUN = self.LB = self.CAN = self.BF = self.BX = self.QB = \
            np.zeros(0, np.int64)
        self.BQ = np.zeros((0, 3), np.int64)
        self.SG = np.zeros(G_COLUMNS, np.int64)
        self.SF = np.zeros(4, np.float64)
        SG, SF = self.SG, self.SF
        SG[G_CHUNKED] = SG[G_NEWCHUNK] = -1
        SG[G_FREE] = max_total_tokens // P * P
        SG[G_P], SG[G_POLICY] = P, POLICY_CODES.index(schedule_policy)
        SG[G_MAXRUN], SG[G_MAXPREFILL] = max_running_requests, max_prefill_tokens
        SG[G_CHUNK] = -1 if chunked_prefill_size is None else chunked_prefill_size
        SG[G_LRU], SG[G_BLOCK] = radix_eviction_policy == "lru", block_size
        SG[G_OVERLAP] = overlap
        init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        SF[F_MIN] = min(init * MIN_RATIO_FACTOR, 1.0)
        SF[F_DECAY] = (init - SF[F_MIN]) / DECAY_STEPS
        SF[F_RATIO] = init
        state = random.Random(seed).getstate()[1]
        self.MT = np.array(state, np.int64)
        self.SCR = np.zeros((0, 8), np.int64)
        self._state = None
        self._grow_requests(requests)

    def _grow_requests(self, count: int) -> None:
        self._state = None
        old = self.R.shape[0]
        count = max(count, 2 * old, 16)
        R = np.zeros((count, R_COLUMNS), np.int64)
        R[:old] = self.R
        self.R = R
        for name in ("WQ", "RUN", "LB", "CAN", "BF", "BX", "QB"):
            array = np.zeros(count + 2, np.int64)
            array[:old] = getattr(self, name)[:old]
            setattr(self, name, array)
        self.BQ = np.zeros((count + 2, 3), np.int64)
        scratch = max(count + 2, self.tree[0].shape[0] + 2)
        self.SCR = np.zeros((2 * scratch, 8), np.int64)

    def grow_batch_tree(self) -> None:
        """An in-batch tree for every waiting request (``lpm`` / ``dfs-weight``)."""
        nodes = max(3 * int(self.SG[G_NWAIT]) + 8, 2 * self.batch_tree[0].shape[0])
        self.batch_tree = new_tree(nodes, 1, "lru")
        self._state = None

    def add(self, index: int, tokens: np.ndarray, prompt: int, max_new: int,
            queue: bool = True) -> int:
        """A request (its prompt + output tokens); queued unless ``queue`` is False
        (``run_steps`` queues by arrival). Its row."""
        r = int(self.SG[G_NREQ])
        if r >= self.R.shape[0]:
            self._grow_requests(r + 1)
        size = len(tokens)
        if self.ntok + size > self.TOK.shape[0]:
            TOK = np.zeros(max(2 * self.TOK.shape[0], self.ntok + size), np.int64)
            TOK[:self.ntok] = self.TOK[:self.ntok]
            self.TOK = TOK
            self._state = None
        self.TOK[self.ntok:self.ntok + size] = tokens
        row = self.R[r]
        row[R_TOFF], row[R_N], row[R_MAXNEW], row[R_INDEX] = self.ntok, prompt, max_new, index
        row[R_LAST] = row[R_LOCK] = -1
        row[R_FSCHED] = row[R_FTOK] = row[R_FINSTEP] = row[R_HIT] = -1
        self.ntok += size
        self.SG[G_NREQ] = r + 1
        if queue:
            self.WQ[self.SG[G_NWAIT]] = r
            self.SG[G_NWAIT] += 1
        return r

    def add_many(self, indices: np.ndarray, parts: list, sizes: np.ndarray,
                 prompts: np.ndarray, max_new: np.ndarray) -> None:
        """Requests in bulk, not queued (``run_steps`` queues them by arrival): request
        ``indices[i]`` has ``sizes[i]`` tokens, ``parts`` in order (concatenated)."""
        first, count, total = int(self.SG[G_NREQ]), len(indices), int(sizes.sum())
        if first + count > self.R.shape[0]:
            self._grow_requests(first + count)
        if self.ntok + total > self.TOK.shape[0]:
            TOK = np.empty(self.ntok + total + 16, np.int64)
            TOK[:self.ntok] = self.TOK[:self.ntok]
            self.TOK = TOK
            self._state = None
        if parts:
            np.concatenate(parts, out=self.TOK[self.ntok:self.ntok + total], casting="unsafe")
        rows = self.R[first:first + count]
        rows[:] = 0
        rows[:, R_TOFF] = self.ntok + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        rows[:, R_N], rows[:, R_MAXNEW], rows[:, R_INDEX] = prompts, max_new, indices
        for column in (R_LAST, R_LOCK, R_FSCHED, R_FTOK, R_FINSTEP, R_HIT):
            rows[:, column] = -1
        self.ntok += total
        self.SG[G_NREQ] = first + count

    def device_flags(self) -> np.ndarray:
        """``peek``'s ``DEV``: the nodes' device flags with HiCache, else empty."""
        return self.tree[3][:, H_DEV] if self.hicache else np.zeros(0, np.int64)

    def enqueue(self, r: int) -> None:
        """Row ``r`` (added, not queued) joins the waiting queue."""
        self.WQ[self.SG[G_NWAIT]] = r
        self.SG[G_NWAIT] += 1

    def state(self) -> tuple:
        """The kernels' tuple (rebuilt only after an array was replaced)."""
        if self._state is None:
            self._state = self._tuple()
        return self._state

    def _tuple(self) -> tuple:
        return (self.TOK, self.R, self.WQ, self.RUN, self.LB, self.SG, self.SF, self.tree,
                self.batch_tree, self.SCR, self.MT, self.CAN, self.BQ, self.BF, self.BX,
                self.QB)
