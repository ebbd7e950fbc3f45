"""vLLM's native offloading as the engine's CPU tier (``--kv-offloading-backend native``):
the ``OffloadingConnector`` scheduler side in the engine loop (``pipeline.engine.knative``)
over vLLM's CPU manager (``pipeline.components.vllm_offload.NativeOffload``, its compiled
state), and the host link the transfers share.

``NativeTier`` owns the offload state tuple ``arrays`` (layout:
``pipeline.components.engine_layout``'s ``O_*``); ``EngineSim`` registers each request's
chunk keys with it (``add``) and grows its per-request arrays (``reserve``). ``no_offload()``
is the state of an engine without it (the same types: one compiled kernel serves both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.components import engine_layout as L
from pipeline.components.vllm_offload import (POLICIES, NativeOffload, chunk_index,
                                                 offload_chunks)
from pipeline.components.vllm_offload_policies import RQ_ANCHOR, RQ_GEN, RQ_SIZE, S_GEN
from pipeline.engine.ksimple_offload import no_simple

__all__ = ["NativeSpec", "NativeTier", "no_offload", "DEFAULT_LINK_GBPS", "LINK_SOURCE"]

#: the host link one way, GB/s: vLLM's blog on its offloading connector measured about
#: 50 GB/s one way (83.4 GB/s both ways) on an H100 over PCIe 5 (a measured figure)
DEFAULT_LINK_GBPS = 50.0
LINK_SOURCE = ("measured: vLLM blog on the OffloadingConnector, H100 PCIe 5, about 50 GB/s "
               "one way")


@dataclass(frozen=True)
class NativeSpec:
    """The connector's settings: ``num_chunks`` CPU chunks of ``blocks_per_chunk`` GPU
    blocks, ``policy`` (lru/arc), ``store_threshold``, ``sync_load_budget_bytes``, one
    token's KV bytes, the link (GB/s one way, latency ms)."""

    num_chunks: int
    kv_bytes_per_token: int
    policy: str = "lru"
    store_threshold: int = 0
    blocks_per_chunk: int = 1
    sync_load_budget_bytes: int = 0
    link_gbps: float = DEFAULT_LINK_GBPS
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"eviction policy must be one of {', '.join(POLICIES)}")
        if self.num_chunks < 0 or self.blocks_per_chunk < 1 or self.store_threshold < 0 \
                or self.sync_load_budget_bytes < 0 or self.kv_bytes_per_token < 1:
            raise ValueError("offload sizes must be non-negative (chunks >= 1 block)")
        if not self.link_gbps > 0 or self.latency_ms < 0:
            raise ValueError("the host link needs GB/s > 0 and latency >= 0")

    @classmethod
    def from_size(cls, size_gib: float, kv_bytes_per_token: int, block_size: int,
                  offload_block_size: int | None = None, **kwargs) -> "NativeSpec":
        """vLLM's sizing: ``--kv-offloading-size`` GiB over the chunk's page-aligned bytes."""
        per = (offload_block_size or block_size) // block_size
        chunks = offload_chunks(size_gib, kv_bytes_per_token * block_size, per)
        return cls(num_chunks=chunks, kv_bytes_per_token=kv_bytes_per_token,
                   blocks_per_chunk=per, **kwargs)


def no_offload() -> tuple:
    """The offload state of an engine without native offloading."""
    manager = NativeOffload(1).M
    return _tuple(np.zeros(L.OC_SIZE, np.int64), np.zeros(L.OF_SIZE), manager,
                  np.zeros(1, np.int64), np.zeros(1, np.uint8), np.zeros(1, np.int64),
                  np.zeros((1, RQ_SIZE), np.int64), np.zeros((1, L.RX_COLUMNS), np.int64),
                  np.zeros((1, 3)), np.zeros((1, L.J_COLUMNS), np.int64), np.zeros((1, 2)),
                  np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.uint8),
                  np.zeros((3, 1), np.int64), *no_simple())


def _tuple(*arrays) -> tuple:
    return tuple(arrays)


class NativeTier:
    """One engine's native offloading (its manager is its own: vLLM's lives in the
    instance's scheduler process)."""

    def __init__(self, spec: NativeSpec, block_size: int, timed: bool = False,
                 model: tuple[int, np.ndarray] | None = None, job_capacity: int = 64) -> None:
        self.spec, self.block_size = spec, block_size
        self.per = spec.blocks_per_chunk
        tpc = block_size * self.per
        self.offload = NativeOffload(max(spec.num_chunks, 0), spec.policy,
                                     spec.store_threshold, tokens_per_chunk=tpc)
        OC = np.zeros(L.OC_SIZE, np.int64)
        OC[[L.O_ON, L.O_TPC, L.O_BPC, L.O_BS, L.O_SYNC_BUDGET, L.O_KVBPT, L.O_CHUNK_BYTES,
            L.O_TIMED]] = (1, tpc, self.per, block_size, spec.sync_load_budget_bytes,
                           spec.kv_bytes_per_token, spec.kv_bytes_per_token * tpc, int(timed))
        OF = np.zeros(L.OF_SIZE)
        OF[L.F_RATE], OF[L.F_LATENCY], OF[L.F_NEXTARR] = spec.link_gbps * 1e6, \
            spec.latency_ms, np.inf
        self.OC, self.OF = OC, OF
        if model is not None:
            self.price_with(model)
        self.CROW = np.zeros(0, np.int64)
        self.CFL = np.zeros(0, np.uint8)
        self.CJOB = np.zeros(0, np.int64)
        self.RQ = np.zeros((0, RQ_SIZE), np.int64)
        self.RX = np.zeros((0, L.RX_COLUMNS), np.int64)
        self.RF = np.zeros((0, 3))
        self.JOB = np.zeros((job_capacity, L.J_COLUMNS), np.int64)
        self.JT = np.zeros((job_capacity, 2))
        self.KQ = np.zeros(0, np.int64)
        self.FINQ = np.zeros(0, np.int64)
        self.CBL = np.zeros(0, np.uint8)
        self.SCR = np.zeros((3, 1), np.int64)
        self.nchunks = 0
        self.simple = no_simple()          # the SimpleCPUOffloadConnector's arrays: off
        self._pack()

    def _pack(self) -> None:
        self.arrays = _tuple(self.OC, self.OF, self.offload.M, self.CROW, self.CFL, self.CJOB,
                             self.RQ, self.RX, self.RF, self.JOB, self.JT, self.KQ, self.FINQ,
                             self.CBL, self.SCR, *self.simple)

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` requests (the engine's request table's rows)."""
        if rows > self.RX.shape[0]:
            size = max(rows, 2 * self.RX.shape[0])
            for name, width, fill in (("RQ", RQ_SIZE, 0), ("RX", L.RX_COLUMNS, 0), ("RF", 3, 0)):
                old = getattr(self, name)
                new = np.full((size, width), fill, old.dtype)
                new[:old.shape[0]] = old
                setattr(self, name, new)
            for name in ("KQ", "FINQ"):
                old = getattr(self, name)
                new = np.zeros(size, np.int64)
                new[:old.size] = old
                setattr(self, name, new)
            self._pack()

    def add(self, slots: np.ndarray, keys: np.ndarray, koff: np.ndarray,
            nkeys: np.ndarray) -> None:
        """Register requests in rows ``slots``: their block keys (``keys`` the engine's
        int64 key array, ``koff``/``nkeys`` their offsets and counts): chunk j keyed by
        its last block's key."""
        counts = np.asarray(nkeys, np.int64) // self.per
        total = int(counts.sum())
        first = self.nchunks
        need = first + total
        if need > self.CROW.size:
            size = max(need, 2 * self.CROW.size)
            for name in ("CROW", "CFL", "CJOB"):
                old = getattr(self, name)
                new = np.zeros(size, old.dtype)
                new[:old.size] = old
                setattr(self, name, new)
        local = self.CROW[first:need]                 # each chunk's distinct key, then row
        unique = chunk_index(keys, np.asarray(koff, np.int64), counts, self.per, local)
        rows = self.offload.intern(unique, slots.size)
        if rows.size and rows[-1] - rows[0] == rows.size - 1 and np.all(np.diff(rows) == 1):
            local += rows[0]                          # all new, in order: an offset
        else:
            local[:] = rows[local]
        self.CFL[first:need] = 0
        self.nchunks = need
        self.reserve(int(slots.max()) + 1 if slots.size else 0)
        self.RX[slots] = 0
        self.RX[slots, L.X_COFF] = first + np.cumsum(counts) - counts
        self.RX[slots, L.X_LSTEP] = self.RX[slots, L.X_LDONE] = L.NONE
        self.RQ[slots] = 0
        self.RQ[slots, RQ_GEN] = self.offload.M[0][S_GEN]
        self.RQ[slots, RQ_ANCHOR] = self.offload.anchor_rows(slots.size)
        self.RF[slots] = np.nan
        keyrows = len(self.offload.M[2])
        if keyrows > self.CBL.size:
            cbl = np.zeros(keyrows, np.uint8)
            cbl[:self.CBL.size] = self.CBL
            self.CBL = cbl
        widest = int(counts.max()) if counts.size else 0
        if widest > self.SCR.shape[1]:
            self.SCR = np.zeros((3, max(widest, 2 * self.SCR.shape[1])), np.int64)
        self.offload.reserve_scratch(widest)
        self._grow_jobs(self.nchunks + self.RX.shape[0] + 64)
        self._pack()

    def _grow_jobs(self, capacity: int) -> None:
        """A job ring of ``capacity`` (re-linearized). Enough: a request's store jobs in
        flight hold distinct chunks (a preempted request waits for its jobs before its next
        lookup), and it has at most one load."""
        cap = self.JOB.shape[0]
        if capacity <= cap:
            return
        count, head = int(self.OC[L.O_JLEN]), int(self.OC[L.O_JHEAD])
        order = (head + np.arange(count)) % cap
        job, times = np.zeros((capacity, L.J_COLUMNS), np.int64), np.zeros((capacity, 2))
        job[:count], times[:count] = self.JOB[order], self.JT[order]
        self.JOB, self.JT = job, times
        self.OC[L.O_JHEAD] = 0

    def price_with(self, model: tuple[int, np.ndarray] | None) -> None:
        """The compiled step-time model (kind, coefficients) the worker times steps with."""
        if model is None:
            raise ValueError("native offloading on the time clock needs a compiled "
                             "step-time model (fitted Linear or Roofline)")
        self.OC[L.O_MODEL] = model[0]
        self.OF[L.F_COEF:L.F_COEF + len(model[1])] = model[1]

    def defer_frees(self, on: bool) -> None:
        """vLLM's ``defer_block_free`` (async scheduling with a KV-consumer connector):
        a request whose last step is in flight is not preempted."""
        self.OC[L.O_DEFER] = int(on)

    def check(self) -> None:
        if self.OC[L.O_ERROR]:
            raise RuntimeError("native offload: more transfers in flight than its job ring "
                               "holds")
