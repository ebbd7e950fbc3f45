"""LMCache's tier stack, compiled: the local CPU backend (``pipeline.components.ktier``), then
the local disk backend, then a remote store, as LMCache 0.5.6's ``StorageManager`` drives them
under vLLM v1 (rules and sources: docs/tiers.md; the literal port is the test oracle
``tests/oracles/lmcache_stack.py``). Full chunks only (the engine's keys).

* **Lookup** (admission): the leading chunks in the CPU tier, then from there the leading
  chunks on disk, then in the remote store (``StorageManager.batched_contains``); the CPU and
  disk hits are touched in reverse (chunk 0 ends most recent, ``touch_cache``), the CPU hits
  pinned; the remote store refreshes each hit as it is asked (``MockConnector.exists``).
* **Retrieve** (the worker's load, only when vLLM loads anything: c - g > 0): the chunks from
  ``g // chunk`` to the hit. CPU chunks are referenced (not evictable); disk and remote
  chunks each take CPU memory (``LocalCPUBackend.allocate``: the least recent unpinned chunk
  is evicted until one fits), disk chunks are refreshed in prefix order
  (``batched_get_blocking``), and then written back to the CPU tier at its most recent end
  (``StorageManager.batched_get``): a disk or remote hit is promoted. Then the lookup's pins
  are released (``lookup_unpin``).
* **Policy.** LMCache's one ``cache_policy`` for the CPU and disk tiers: LRU (default), FIFO
  (a hit or a put of a present chunk moves nothing), MRU (evict the most recent) or LFU
  (evict the first of the lowest hit count: ``ktier.lfu_tier``). The remote store evicts
  as its server does (the MockConnector: LRU).
* **Store** (prompt computed): LMCache's CPU store (``ktier.store``, from LMCache's own hit),
  then the same chunks put on disk and in the remote store: present, refreshed; new, the
  least recent evicted until it fits (``LocalDiskBackend.submit_put_task``,
  ``MockConnector``'s ``AsyncLRU.put``). Writes complete at once (LMCache's disk and
  remote writes are asynchronous: a chunk is found only once written).

State: the CPU, disk and remote tiers' ``ktier`` arrays (15), ``K`` (float64: bytes per
token, each tier's GB/s and latency, the step's load ms and bytes per tier) and ``PEND``
(the lookups of the current schedule: row 0 column 0 their count; rows (slot, CPU, disk,
remote chunks hit, GPU hit tokens)). The engine retrieves them at the first store or the
end of the step (``flush``), in admission order, after every lookup of the schedule, as
vLLM's worker loads after its scheduler looked up.
"""

from __future__ import annotations

import numpy as np

from numba.extending import overload

from pipeline.components.engine_layout import (CPUSTATE, DISKHIT, KOFF, LOADNS, NPROMPT,
                                               POLICY_FIFO, POLICY_LFU, PREEMPT, REMOTEHIT,
                                               STATUS,
                                               T_CAPACITY, T_CHUNK, T_ON, T_PER, T_POLICY,
                                               T_USED, WAITING)
from pipeline.components.kjit import helper, inlined, kernel
from pipeline.components.ktier import (_add, _held, _node, allocate, lfu_tier, lookup,
                                       no_tier, on_hit, on_put, store, tier_arrays)

__all__ = ["STACK_ARRAYS", "TIERS", "stack_arrays", "stack_lookup", "stack_retrieve",
           "stack_put", "stack_step_ms", "STEP_BYTES_COLUMNS", "K_BPT", "K_GBPS", "K_LAT", "K_STEP_MS", "K_BYTES",
           "run_lookup", "run_retrieve", "run_store", "flush", "engine_lookup", "engine_store",
           "engine_arrays", "is_stack"]

TIERS = ("cpu", "disk", "remote")
STACK_ARRAYS = 17
K_BPT, K_GBPS, K_LAT, K_STEP_MS, K_BYTES, K_STEP_BYTES = 0, 1, 4, 7, 8, 11
K_SIZE = 14
#: the step columns a stack adds after the engine's 8 (``krun.STEP_FIELDS``)
STEP_BYTES_COLUMNS = tuple(f"{tier}_load_bytes" for tier in TIERS)
PENDING = 4096
HELD = np.int64(1) << 32                 # a retrieval's reference on a CPU chunk (pins column)
#: Constant arguments as int64, not numba literals (a literal compiled its callee once more)
ZERO, ONE = np.int64(0), np.int64(1)


def stack_arrays(capacities: tuple[int, int, int], chunk: int, per: int,
                 gbps: tuple[float, float, float], latency_ms: tuple[float, float, float],
                 bytes_per_token: float, remote: tuple | None = None,
                 policy: int = 0) -> tuple:
    """A fresh stack (capacities in tokens, 0: no such tier); ``remote``: another stack's
    remote arrays to share (one store for a fleet's instances); ``policy``: LMCache's
    ``cache_policy`` of the CPU and disk tiers (``engine_layout.POLICY_*``; the remote store
    evicts as its server: LRU)."""
    parts = []
    for t, capacity in enumerate(capacities):
        arrays = tier_arrays(int(capacity), chunk, per)
        arrays[0][T_ON] = int(capacity > 0)
        arrays[0][T_POLICY] = policy if t < 2 else 0
        if t < 2 and policy == POLICY_LFU:
            arrays = lfu_tier(arrays)
        parts.append(arrays)
    if remote is not None:
        parts[2] = remote
    K = np.zeros(K_SIZE, np.float64)
    K[K_BPT] = bytes_per_token
    K[K_GBPS:K_GBPS + 3] = gbps
    K[K_LAT:K_LAT + 3] = latency_ms
    return (*parts[0], *parts[1], *parts[2], K, np.zeros((PENDING + 1, 5), np.int64))


def engine_arrays(T: tuple) -> tuple:
    """``T`` in a stack's shape, so that one compiled engine serves every tier (each shape
    of ``T`` compiled the whole engine once more): a stack as it is; any other tier
    (``ktier``'s 5 arrays: LMCache's CPU backend, a Python tier's handle, none) followed by
    two absent tiers and an empty ``K``, which ``is_stack`` tells apart when running."""
    if len(T) == STACK_ARRAYS:
        return T
    return (*T, *no_tier(), *no_tier(), np.zeros(0, np.float64), np.zeros((1, 5), np.int64))


def is_stack(T: tuple) -> bool:
    """``T`` is a tier stack (not another tier in a stack's shape: ``engine_arrays``)."""
    return len(T) == STACK_ARRAYS and T[15].size > 0


def _cpu(T):
    return (T[0], T[1], T[2], T[3], T[4])


def _disk(T):
    return (T[5], T[6], T[7], T[8], T[9])


def _remote(T):
    return (T[10], T[11], T[12], T[13], T[14])


_cpu, _disk, _remote = (inlined(f) for f in (_cpu, _disk, _remote))


@inlined
def _touch(D, KEYS, first, stride, count, reverse, pin):
    """The policy's update_on_hit of each chunk (reversed: chunk 0 last; FIFO: they stay);
    add ``pin``."""
    for i in range(count):
        if D[0][T_POLICY] == POLICY_FIFO:
            break
        j = count - 1 - i if reverse else i
        node = _node(D, KEYS[first + j * stride])
        on_hit(D, node)
        D[2][node, 3] += pin


@helper
def stack_lookup(T, KEYS, first, stride, count, out):
    """LMCache's lookup over the stack; ``out`` the chunks hit per tier."""
    chunk = T[0][T_CHUNK]
    h1 = lookup(_cpu(T), KEYS, first, stride, count, chunk) // chunk
    for j in range(h1):                               # contains(pin=True)
        node = _node(_cpu(T), KEYS[first + j * stride])
        T[2][node, 3] += 1
    at, h2, h3 = first + h1 * stride, 0, 0
    if T[5][T_ON] != 0 and h1 < count:
        h2 = _held(_disk(T), KEYS, at, stride, count - h1)
        _touch(_disk(T), KEYS, at, stride, h2, True, 0)
    at += h2 * stride
    if T[10][T_ON] != 0 and h1 + h2 < count:
        h3 = _held(_remote(T), KEYS, at, stride, count - h1 - h2)
        _touch(_remote(T), KEYS, at, stride, h3, False, 0)
    out[0], out[1], out[2] = h1, h2, h3


@inlined
def _promote(T, KEYS, first, stride, lo, hi, disk, loose):
    """Load chunks ``lo..hi`` from the disk (``disk``) or the remote store into CPU memory,
    then write them back to the CPU tier; returns the tokens left allocated outside it."""
    C = _cpu(T)
    chunk = C[0][T_CHUNK]
    got = lo
    while got < hi and allocate(C, chunk, loose + (got - lo) * chunk):
        got += 1
    if disk:
        _touch(_disk(T), KEYS, first + lo * stride, stride, got - lo, False, 0)
        if got < hi:                                  # a None: no write-back
            return loose + (got - lo) * chunk
    for j in range(lo, got):
        node = _add(C, KEYS[first + j * stride])
        if node < 0:                                  # already in the CPU tier
            loose += chunk
            continue
        C[2][node, 2] = chunk
        on_put(C, node)
        C[0][T_USED] += chunk
        C[2][node, 3] += HELD
    return loose


@helper
def stack_retrieve(T, KEYS, first, stride, h1, h2, h3, gpu, prompt):
    """The worker's retrieve for a lookup that hit ``h1, h2, h3`` chunks (see the module
    docstring)."""
    C = _cpu(T)
    chunk = C[0][T_CHUNK]
    hit = h1 + h2 + h3
    tokens = hit * chunk
    low = gpu // chunk
    if tokens - gpu - (tokens == prompt) > 0:
        for j in range(low, h1):                      # get_blocking: a reference
            C[2][_node(C, KEYS[first + j * stride]), 3] += HELD
        loose = np.int64(0)
        if h2 > 0 and h1 + h2 > low:
            loose = _promote(T, KEYS, first, stride, max(h1, low), h1 + h2, True, loose)
        if h3 > 0 and hit > low:
            places = (h1 > 0) + (h2 > 0) + (h3 > 0)
            lo = max(h1 + h2, low)
            if places > 1:                            # get_block_mapping's exists()
                _touch(_remote(T), KEYS, first + lo * stride, stride, hit - lo, False, 0)
            _promote(T, KEYS, first, stride, lo, hit, False, loose)
        for j in range(low, hit):                     # ref_count_down after to_gpu
            node = _node(C, KEYS[first + j * stride])
            if node >= 0 and C[2][node, 3] >= HELD:
                C[2][node, 3] -= HELD


@inlined
def _unpin(T, KEYS, first, stride, h1):
    """lookup_unpin: release the lookup's CPU pins."""
    for j in range(h1):
        T[2][_node(_cpu(T), KEYS[first + j * stride]), 3] -= 1


@helper
def _put(D, key, chunk):
    """A disk or remote put: present, refreshed; new, evict until it fits, most recent.
    (A helper: inlined into ``stack_put`` after ``store``, numba 0.68.1 lost its list moves,
    which the equality tests caught.)"""
    node = _node(D, key)
    if node >= 0:
        on_hit(D, node)
    elif chunk <= D[0][T_CAPACITY] and allocate(D, chunk, ZERO):
        node = _add(D, key)
        D[2][node, 2] = chunk
        on_put(D, node)
        D[0][T_USED] += chunk


@helper
def stack_put(T, KEYS, first, stride, count, prompt, hit):
    """LMCache's store over the stack: the CPU store, then the disk and remote puts of the
    chunks it allocated."""
    chunk = T[0][T_CHUNK]
    stop = store(_cpu(T), KEYS, first, stride, count, chunk, prompt, hit)
    for j in range(hit // chunk, stop):
        key = KEYS[first + j * stride]
        if T[5][T_ON] != 0:
            _put(_disk(T), key, chunk)
        if T[10][T_ON] != 0:
            _put(_remote(T), key, chunk)


# ---------------------------------------------------------------- the engine's call points

@inlined
def _loaded(lo, hi, gpu, end):
    return max(min(hi, end) - max(lo, gpu), 0)


@helper
def flush(T, R, KEYS):
    """Retrieve the pending lookups of admitted requests (in order) and price their loads:
    per tier, bytes / GB/s + latency, summed into the step's load ms and the request's."""
    PEND, K = T[16], T[15]
    chunk, per = T[0][T_CHUNK], T[0][T_PER]
    for row in range(1, PEND[0, 0] + 1):
        slot, h1, h2, h3, gpu = PEND[row, 0], PEND[row, 1], PEND[row, 2], PEND[row, 3], \
            PEND[row, 4]
        first, prompt = R[slot, KOFF] + per - 1, R[slot, NPROMPT]
        if R[slot, STATUS] == WAITING:                # not admitted: the pins only
            _unpin(T, KEYS, first, per, h1)
            continue
        stack_retrieve(T, KEYS, first, per, h1, h2, h3, gpu, prompt)
        _unpin(T, KEYS, first, per, h1)
        tokens = (h1 + h2 + h3) * chunk
        end = tokens - (tokens == prompt)
        d1 = _loaded(h1 * chunk, (h1 + h2) * chunk, gpu, end)
        d2 = _loaded((h1 + h2) * chunk, tokens, gpu, end)
        moved = (_loaded(0, h1 * chunk, gpu, end), d1, d2)
        ms = 0.0
        for t in range(3):
            if moved[t] > 0:
                nbytes = moved[t] * K[K_BPT]
                ms += nbytes / (K[K_GBPS + t] * 1e6) + K[K_LAT + t]
                K[K_BYTES + t] += nbytes
                K[K_STEP_BYTES + t] += nbytes
        K[K_STEP_MS] += ms
        R[slot, LOADNS] += np.int64(round(ms * 1e6))
        if R[slot, PREEMPT] <= 0:
            R[slot, DISKHIT], R[slot, REMOTEHIT] = d1, d2
    PEND[0, 0] = 0


@helper
def engine_lookup(T, R, KEYS, slot, local):
    """At admission: the stack's lookup, kept for the retrieve; the tokens vLLM may load."""
    PEND = T[16]
    if PEND[0, 0] >= PEND.shape[0] - 1:
        flush(T, R, KEYS)
    chunk, per, prompt = T[0][T_CHUNK], T[0][T_PER], R[slot, NPROMPT]
    row = PEND[0, 0] + 1
    PEND[0, 0] = row
    out = PEND[row, 1:4]
    stack_lookup(T, KEYS, R[slot, KOFF] + per - 1, per, prompt // chunk, out)
    PEND[row, 0], PEND[row, 4] = slot, local
    hit = (out[0] + out[1] + out[2]) * chunk
    R[slot, CPUSTATE] = hit
    return hit - 1 if hit == prompt else hit


@helper
def engine_store(T, R, KEYS, slot):
    """Once the request's prompt is computed (after the step's retrievals)."""
    flush(T, R, KEYS)
    chunk, per, prompt = T[0][T_CHUNK], T[0][T_PER], R[slot, NPROMPT]
    stack_put(T, KEYS, R[slot, KOFF] + per - 1, per, prompt // chunk, prompt,
              max(R[slot, CPUSTATE], 0))


def stack_step_ms(T, R, KEYS, STEPS, row):
    """The step's load ms after its retrievals, and its bytes loaded per tier into
    ``STEPS[row, 8:11]`` when the buffer has those columns, reset; -1.0 for a tier that does
    not price its loads."""


@overload(stack_step_ms, inline="always")
def _stack_step_ms(T, R, KEYS, STEPS, row):
    if len(T) != STACK_ARRAYS:
        return lambda T, R, KEYS, STEPS, row: -1.0

    def priced(T, R, KEYS, STEPS, row):
        if T[15].size == 0:                           # another tier (``engine_arrays``)
            return -1.0
        flush(T, R, KEYS)
        return _step_record(T[15], STEPS, row)
    return priced


@helper
def _step_record(K, STEPS, row):
    """The step's load ms, and its bytes per tier into ``STEPS[row, 8:11]`` when the buffer
    has those columns (the fleet's has not), reset."""
    ms = K[K_STEP_MS]
    K[K_STEP_MS] = 0.0
    for t in range(3):
        if STEPS.shape[1] >= 11:
            STEPS[row, 8 + t] = np.int64(K[K_STEP_BYTES + t])
        K[K_STEP_BYTES + t] = 0.0
    return ms


# ---------------------------------------------------------------- from Python (tests)

@kernel
def run_lookup(T, keys, out):
    stack_lookup(T, keys, ZERO, ONE, keys.size, out)


@kernel
def run_retrieve(T, keys, h1, h2, h3, gpu, prompt):
    """The retrieve, then lookup_unpin."""
    stack_retrieve(T, keys, ZERO, ONE, h1, h2, h3, gpu, prompt)
    _unpin(T, keys, ZERO, ONE, h1)


@kernel
def run_store(T, keys, prompt, hit):
    stack_put(T, keys, ZERO, ONE, keys.size, prompt, hit)



@kernel
def replay_requests(T, starts, keys, prompt, gpu, out):
    """Requests one at a time (block mode): request r is the run ``keys[starts[r]:
    starts[r + 1]]`` of full chunks of a prompt of ``prompt[r]`` tokens, GPU hit ``gpu[r]``
    tokens; ``out[r]`` the chunks hit per tier (lookup, retrieve, lookup_unpin, store)."""
    chunk = T[0][T_CHUNK]
    for r in range(starts.size - 1):
        first, count = starts[r], starts[r + 1] - starts[r]
        row = out[r]
        stack_lookup(T, keys, first, ONE, count, row)
        stack_retrieve(T, keys, first, ONE, row[0], row[1], row[2], gpu[r], prompt[r])
        _unpin(T, keys, first, ONE, row[0])
        stack_put(T, keys, first, ONE, count, prompt[r], (row[0] + row[1] + row[2]) * chunk)
