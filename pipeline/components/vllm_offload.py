"""vLLM 0.33.0's native KV offloading (``--kv-offloading-size GiB --kv-offloading-backend
native``: the ``OffloadingConnector`` with ``CPUOffloadingManager``), the CPU side, exact.

``NativeOffload`` holds the manager's state (compiled: ``vllm_offload_policies``,
``vllm_offload_kernels``) and offers its calls: ``lookup``, ``prepare_load``,
``complete_load``, ``touch``, ``prepare_store``, ``complete_store``, ``request_finished``,
``reset``; the eviction policies ``lru`` and ``arc``, ``store_threshold`` and
``max_tracker_size`` as vLLM has them. ``offload_chunks`` is vLLM's sizing: how
``--kv-offloading-size`` becomes a number of CPU chunks. docs/offloading.md gives the rules
with vLLM's file and line; tests/test_vllm_offload.py proves every call equal to vLLM's own
manager.

Keys are any non-negative integers (a block key of the workload); a request is the list of
its chunk keys in prefix order (``new_request``), and a call names chunks by their index in
it, as the connector's scheduler does (it passes slices of the request's offload keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.components import vllm_offload_kernels as kernels
from pipeline.components.vllm_offload_policies import (
    C_CHUNK, C_COUNT, C_EVICT, C_GHOST, C_RANK, C_REF, C_SIZE, C_WHERE, FIRST_ROW, GHOST,
    NO_RANK, R_B1, R_T1, R_TRACK, RES, RQ_ANCHOR, RQ_GEN, RQ_SIZE, S_ALLOC, S_ARC, S_B1, S_B2,
    S_CHUNKS, S_EVICTABLE, S_FREE_TOP, S_GEN, S_NEXT_RANK, S_PENDING, S_SIZE, S_SKIPPED, S_T1,
    S_T2, S_THRESHOLD, S_TPC, S_TRACK_MAX, SHIFT, T1, TRACK, W_SIZE)

__all__ = ["NativeOffload", "OffloadRequest", "offload_chunks", "blocks_per_chunk",
           "LOOKUP_NAMES", "POLICIES", "distinct", "chunk_index"]

#: ``lookup``'s results, by code (vLLM's ``LookupResult`` names).
LOOKUP_NAMES = ("MISS", "HIT", "HIT_PENDING")
#: vLLM's built-in eviction policies (``eviction_policy`` in kv_connector_extra_config).
POLICIES = ("lru", "arc")
#: ``CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT``: a chunk's bytes are rounded up to a page.
PAGE_BYTES = 4096
#: the key of an anchor's row in the row -> key list (keys are non-negative)
ANCHOR_KEY = -1


def blocks_per_chunk(gpu_block_size: int, block_size: int | None = None,
                     chunk_blocks: int | None = None) -> int:
    """GPU blocks per offloaded chunk from kv_connector_extra_config's ``block_size``
    (tokens, a multiple of the GPU block size) or ``blocks_per_chunk``; 1 when neither."""
    if block_size is not None and chunk_blocks is not None:
        raise ValueError("Specify only one of 'block_size' or 'blocks_per_chunk'")
    if chunk_blocks is not None:
        if chunk_blocks <= 0:
            raise ValueError("'blocks_per_chunk' must be greater than 0.")
        return int(chunk_blocks)
    if block_size is not None:
        if block_size % gpu_block_size:
            raise ValueError(f"'block_size'={block_size} is not a multiple of the GPU block "
                             f"size ({gpu_block_size} tokens)")
        return block_size // gpu_block_size
    return 1


def offload_chunks(size_gib: float, worker_kv_bytes_per_block: int, chunk_blocks: int = 1,
                   world_size: int = 1, page_bytes: int = PAGE_BYTES) -> int:
    """CPU chunks for ``--kv-offloading-size size_gib``: ``cpu_bytes_to_use = size * 2**30``
    divided by a chunk's bytes (every worker's copy of ``chunk_blocks`` blocks) rounded up
    to a page."""
    cpu_bytes_to_use = size_gib * (1 << 30)
    chunk_bytes = worker_kv_bytes_per_block * world_size * chunk_blocks
    aligned = -(-chunk_bytes // page_bytes) * page_bytes
    return int(cpu_bytes_to_use) // aligned


@dataclass
class OffloadRequest:
    """One request's chunk keys (as key rows), its per-chunk flags and its rank state."""

    keys: list[int]
    rows: np.ndarray
    flags: np.ndarray
    rq: np.ndarray


def _table(count: int) -> np.ndarray:
    """An empty hash table for ``count`` keys (a power of two of at least twice as many
    slots)."""
    size = 16
    while size < 2 * count:
        size *= 2
    return np.zeros(size, np.int32)


def distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``keys``' distinct values in order of first appearance and each key's index there
    (``np.unique`` without its sort)."""
    keys = np.ascontiguousarray(keys, np.int64)
    unique, index = np.empty(keys.size, np.int64), np.empty(keys.size, np.int64)
    count = kernels.first_seen(keys, _table(keys.size), unique, index)
    return unique[:count], index


def chunk_index(keys: np.ndarray, koff: np.ndarray, counts: np.ndarray, per: int,
                out: np.ndarray) -> np.ndarray:
    """``distinct`` of requests' chunk keys read in place from their block keys (``keys``;
    request r's at ``koff[r]``, ``counts[r]`` chunks of ``per`` blocks, each keyed by its
    last block's key): the distinct chunk keys, each chunk's index there into ``out``."""
    unique = np.empty(out.size, np.int64)
    count = kernels.chunk_index(keys, koff, counts, per, _table(out.size), unique, out)
    return unique[:count]


class NativeOffload:
    """vLLM's ``CPUOffloadingManager(num_chunks, cache_policy, store_threshold,
    max_tracker_size)``; ``tokens_per_chunk`` sets the key positions (chunk i ends at token
    (i + 1) * tokens_per_chunk), which order LRU's ranks."""

    def __init__(self, num_chunks: int, policy: str = "lru", store_threshold: int = 0,
                 max_tracker_size: int = 64_000, tokens_per_chunk: int = 16,
                 expected_keys: int = 64) -> None:
        if policy not in POLICIES:
            raise ValueError(f"Unknown cache policy: {policy!r}. Supported: {list(POLICIES)}")
        S = np.zeros(S_SIZE, np.int64)
        S[S_CHUNKS], S[S_ARC], S[S_THRESHOLD] = num_chunks, policy == "arc", store_threshold
        S[S_TRACK_MAX], S[S_TPC] = max_tracker_size, tokens_per_chunk
        self.policy = policy
        self._row_map: dict[int, int] = {}
        self._key_list: list[int] = []
        self._bulk: np.ndarray | None = None          # keys of a first bulk ``rows_for``
        K, L = self._key_arrays(FIRST_ROW + max(expected_keys, 1))
        for sentinel in range(FIRST_ROW):
            L[sentinel, :] = sentinel
        self.M = (S, np.zeros(1), K, L, np.zeros(num_chunks, np.int64),
                  np.zeros((64, W_SIZE), np.int64))

    @staticmethod
    def _key_arrays(rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Key rows, all absent (zeros: a row's pages are touched when its key is)."""
        return np.zeros((rows, C_SIZE), np.int64), np.zeros((rows, 6), np.int32)

    @property
    def _rows(self) -> dict[int, int]:
        """key -> row (built from a bulk ``rows_for`` when first asked)."""
        self._materialize()
        return self._row_map

    @property
    def _keys(self) -> list[int]:
        """row - FIRST_ROW -> key."""
        self._materialize()
        return self._key_list

    def _materialize(self) -> None:
        if self._bulk is not None:
            keys, self._bulk = self._bulk.tolist(), None
            self._key_list = keys
            self._row_map = dict(zip(keys, range(FIRST_ROW, FIRST_ROW + len(keys))))
            self._row_map.pop(ANCHOR_KEY, None)

    def _grow_rows(self, need: int) -> None:
        K, L = self.M[2], self.M[3]
        if need > len(K):                              # grow: rows are appended
            K2, L2 = self._key_arrays(max(need, 2 * len(K)))
            K2[:len(K)], L2[:len(L)] = K, L
            self.M = self.M[:2] + (K2, L2) + self.M[4:]

    def _row(self, key: int) -> int:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = FIRST_ROW + len(self._keys)
            self._keys.append(key)
            self._grow_rows(row + 1)
        return row

    def rows_for(self, keys: np.ndarray) -> np.ndarray:
        """The key rows of ``keys`` (an int64 array), new keys appended in order of first
        appearance (vectorized ``_row``: one compiled hash pass, then ``intern``)."""
        unique, index = distinct(keys)
        return self.intern(unique)[index]

    def intern(self, unique: np.ndarray, spare: int = 0) -> np.ndarray:
        """The rows of the distinct keys ``unique``, new ones appended in order (one dict
        pass; the first call builds no dict); room for ``spare`` more rows
        (``anchor_rows``) made at once."""
        if self._bulk is None and not self._key_list:  # the first keys: no dict yet
            self._bulk = unique
            self._grow_rows(FIRST_ROW + unique.size + spare)
            return np.arange(FIRST_ROW, FIRST_ROW + unique.size, dtype=np.int64)
        rows = np.fromiter((self._rows.get(k, -1) for k in unique.tolist()), np.int64,
                           unique.size)
        new = np.flatnonzero(rows < 0)
        if new.size:
            first = FIRST_ROW + len(self._keys)
            rows[new] = first + np.arange(new.size)
            fresh = unique[new].tolist()
            self._rows.update(zip(fresh, rows[new].tolist()))
            self._keys.extend(fresh)
        self._grow_rows(FIRST_ROW + len(self._keys) + spare)
        return rows

    def anchor_rows(self, count: int) -> np.ndarray:
        """``count`` fresh rows for requests' LRU anchors (rows no key maps to), or zeros
        (no anchor) under ARC."""
        if self.policy != "lru" or count == 0:
            return np.zeros(count, np.int64)
        if self._bulk is not None:
            first = FIRST_ROW + self._bulk.size
            self._bulk = np.concatenate((self._bulk, np.full(count, ANCHOR_KEY, np.int64)))
        else:
            first = FIRST_ROW + len(self._key_list)
            self._key_list.extend([ANCHOR_KEY] * count)
        self._grow_rows(first + count)
        return np.arange(first, first + count, dtype=np.int64)

    def reserve_scratch(self, chunks: int) -> None:
        """Scratch rows for calls of up to ``chunks`` chunks (compiled callers)."""
        if chunks > len(self.M[5]):
            self.M = self.M[:5] + (np.zeros((2 * chunks, W_SIZE), np.int64),)

    def _scratch(self, chunks) -> np.ndarray:
        """The call's chunks as an array, the scratch rows grown to hold one row each."""
        chunks = np.asarray(chunks, np.int64)
        if len(chunks) > len(self.M[5]):
            self.M = self.M[:5] + (np.zeros((2 * len(chunks), W_SIZE), np.int64),)
        return chunks

    def _rows_of(self, keys) -> np.ndarray:
        return np.array([self._row(int(k)) for k in keys], np.int64)

    # ---------------------------------------------------------------- vLLM's calls

    def new_request(self, keys: list[int]) -> OffloadRequest:
        """``on_new_request`` for a request whose chunk keys (prefix order) are ``keys``."""
        rq = np.zeros(RQ_SIZE, np.int64)
        rq[RQ_GEN], rq[RQ_ANCHOR] = self.M[0][S_GEN], self.anchor_rows(1)[0]
        return OffloadRequest(list(keys), self._rows_of(keys), np.zeros(len(keys), np.uint8),
                              rq)

    def lookup(self, key: int) -> int:
        """0 MISS, 1 HIT (stored, ready), 2 HIT_PENDING (its store is in flight)."""
        row = self._rows.get(key)
        return 0 if row is None else kernels.lookup(self.M, row)

    def prepare_load(self, request: OffloadRequest, chunks) -> None:
        """Pin the request's ``chunks`` (indices) for a load; each must be a HIT."""
        kernels.prepare_load(self.M, request.rows, request.flags, request.rq,
                             self._scratch(chunks))

    def complete_load(self, keys) -> None:
        kernels.complete_load(self.M, self._rows_of(keys))

    def touch(self, keys) -> None:
        kernels.touch(self.M, self._rows_of(keys))

    def prepare_store(self, request: OffloadRequest, chunks) -> tuple[list, list] | None:
        """Offer the request's ``chunks`` for storing: (keys to store, keys evicted), or
        None where vLLM cannot store them (no room)."""
        chunks = self._scratch(chunks)
        stored, evicted = np.empty(len(chunks), np.int64), np.empty(len(chunks), np.int64)
        count, victims = kernels.prepare_store(self.M, request.rows, request.flags,
                                               request.rq, chunks, stored, evicted)
        if count < 0:
            return None
        return ([request.keys[i] for i in stored[:count]],
                [self._keys[row - FIRST_ROW] for row in evicted[:victims]])

    def complete_store(self, keys, success: bool = True) -> None:
        kernels.complete_store(self.M, self._rows_of(keys), success)

    def request_finished(self, request: OffloadRequest) -> None:
        kernels.request_finished(self.M, request.rows, request.flags, request.rq)

    def reset(self) -> None:
        """``reset_cache``: every chunk dropped (the store-threshold tracker stays)."""
        S, F, K, L = self.M[:4]
        K[:, C_WHERE] = K[:, C_REF] = K[:, C_EVICT] = K[:, C_GHOST] = 0
        K[:, C_CHUNK], K[:, C_RANK] = -1, NO_RANK
        for sentinel in range(R_TRACK):
            L[sentinel, :] = sentinel
        S[S_GEN] += 1
        S[S_ALLOC] = S[S_FREE_TOP] = S[S_EVICTABLE] = S[S_PENDING] = S[S_NEXT_RANK] = 0
        S[S_T1] = S[S_T2] = S[S_B1] = S[S_B2] = 0
        F[0] = 0.0

    # ---------------------------------------------------------------- reading the state

    @property
    def stores_skipped(self) -> int:
        """Stores the threshold refused so far (vLLM's ``stores_skipped`` counter)."""
        return int(self.M[0][S_SKIPPED])

    def _list(self, sentinel: int, column: int) -> list[int]:
        L, out, row = self.M[3], [], self.M[3][sentinel, column + 1]
        while row != sentinel:
            out.append(self._keys[row - FIRST_ROW])
            row = L[row, column + 1]
        return out

    def snapshot(self) -> dict:
        """The whole state in vLLM's terms (what tests compare with vLLM's own manager)."""
        S, F, K = self.M[0], self.M[1], self.M[2]
        chunks = {}
        for key, row in self._rows.items():
            if K[row, C_WHERE]:
                chunks[key] = (int(K[row, C_REF]), int(K[row, C_CHUNK]))
        state = {"chunks": chunks, "allocated": int(S[S_ALLOC]),
                 "free": [int(c) for c in self.M[4][:S[S_FREE_TOP]]],
                 "evictable": int(S[S_EVICTABLE]), "pending": int(S[S_PENDING]),
                 "tracker": [(k, int(K[self._rows[k], C_COUNT]))
                             for k in self._list(R_TRACK, TRACK)],
                 "skipped": self.stores_skipped}
        if self.policy == "lru":
            state["ranks"] = {k: divmod(int(K[self._rows[k], C_RANK]), SHIFT)
                              for k in chunks}
            state["ranks"] = {k: (major + (minor > 0), minor - SHIFT * (minor > 0))
                              for k, (major, minor) in state["ranks"].items()}
            state["lru_evictable"] = sorted(k for k in chunks if K[self._rows[k], C_EVICT])
            state["next_rank"] = int(S[S_NEXT_RANK])
        else:
            state["t1"] = [k for k in self._list(R_T1, RES) if K[self._rows[k], C_WHERE] == T1]
            state["t2"] = self._list(R_T1 + 1, RES)
            state["b1"], state["b2"] = self._list(R_B1, GHOST), self._list(R_B1 + 1, GHOST)
            state["target_t1_size"] = float(F[0])
        return state
