"""vLLM's ``SimpleCPUOffloadConnector`` as the engine's offload tier
(``VLLM_USE_SIMPLE_KV_OFFLOAD=1 --kv-offloading-backend native``): its scheduler side in
the engine loop (``pipeline.engine.ksimple_offload``) over a second vLLM ``BlockPool`` of
offload slots, in CPU memory or on disk (``kv_offload_backend``), and the fake worker's two
streams.

``SimpleSpec`` holds the settings (``from_size``: vLLM's sizing); ``SimpleOffloadTier`` is
``NativeTier``'s shape (the engine drives both the same way) with the connector's arrays
switched on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.components import engine_layout as L
from pipeline.engine import ksimple_offload as K
from pipeline.engine.ksimple_worker import event_ms
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.native_tier import DEFAULT_LINK_GBPS, NativeSpec, NativeTier

__all__ = ["SimpleSpec", "SimpleOffloadTier", "MEDIUMS", "offload_slots",
           "DEFAULT_BUFFER_SLOTS", "DEFAULT_DISK_GIB"]

#: vLLM's ``kv_offload_backend`` values (simple_cpu_offload_connector.py:56)
MEDIUMS = ("cpu", "disk")
#: vLLM's ``disk_buffer_slots`` default (simple_cpu_offload_connector.py:145)
DEFAULT_BUFFER_SLOTS = 2
#: vLLM's ``disk_capacity_bytes`` default, GiB (simple_cpu_offload_connector.py:142-144)
DEFAULT_DISK_GIB = 100


def offload_slots(capacity_bytes: int, block_bytes: int) -> int:
    """vLLM's pool size: ``max(1, capacity // bytes per block)`` slots
    (``SimpleCPUOffloadWorker._resolve_num_cpu_blocks``, worker.py:182-192; the scheduler's
    pool takes the worker's count, manager.py:305-309); slot 0 is the pool's null block."""
    return max(1, int(capacity_bytes) // int(block_bytes))


@dataclass(frozen=True)
class SimpleSpec:
    """The connector's settings: ``num_slots`` offload slots (vLLM's ``num_cpu_blocks``),
    one token's KV bytes, the medium (vLLM's ``kv_offload_backend``), the host link (GB/s
    one way, latency ms per event) and, on disk, the disk (GB/s, latency ms per block read
    or written) and its staging buffer slots (``disk_buffer_slots``); ``lazy``: vLLM's
    ``lazy_offload`` (store as the GPU needs room, not as computed)."""

    num_slots: int
    kv_bytes_per_token: int
    medium: str = "cpu"
    rate_gbps: float = DEFAULT_LINK_GBPS
    latency_ms: float = 0.0
    disk_gbps: float = 0.0
    disk_latency_ms: float = 0.0
    buffer_slots: int = DEFAULT_BUFFER_SLOTS
    lazy: bool = False

    def __post_init__(self) -> None:
        if self.medium not in MEDIUMS:
            raise ValueError(f"offload medium must be one of {', '.join(MEDIUMS)}")
        if self.num_slots < 1 or self.kv_bytes_per_token < 1:
            raise ValueError("the offload pool needs at least one slot")
        if not self.rate_gbps > 0 or self.latency_ms < 0:
            raise ValueError("transfers need GB/s > 0 and latency >= 0")
        if self.medium == "disk" and (not self.disk_gbps > 0 or self.disk_latency_ms < 0
                                      or self.buffer_slots < 1):
            raise ValueError("the disk needs GB/s > 0, latency >= 0 and a buffer slot")

    def link_array(self) -> np.ndarray:
        """The worker's figures (``ksimple_offload``'s ``SF``): bytes per ms, ms."""
        SF = np.zeros(K.SF_SIZE)
        SF[K.SF_RATE], SF[K.SF_LAT] = self.rate_gbps * 1e6, self.latency_ms
        if self.medium == "disk":
            SF[K.SF_DRATE], SF[K.SF_DLAT] = self.disk_gbps * 1e6, self.disk_latency_ms
            SF[K.SF_SLOTS] = self.buffer_slots
        return SF

    def event_ms(self, blocks: int, block_bytes: int) -> float:
        """One transfer event of ``blocks`` blocks of ``block_bytes`` (``transfer_ms``)."""
        return float(event_ms(blocks, block_bytes, self.link_array()))

    @classmethod
    def from_size(cls, capacity_bytes: int, kv_bytes_per_token: int, block_size: int,
                  **kwargs) -> "SimpleSpec":
        """vLLM's sizing: the medium's bytes (``cpu_bytes_to_use`` per rank, or
        ``disk_capacity_bytes``) over one GPU block's bytes."""
        return cls(num_slots=offload_slots(capacity_bytes, kv_bytes_per_token * block_size),
                   kv_bytes_per_token=kv_bytes_per_token, **kwargs)


class SimpleOffloadTier(NativeTier):
    """One engine's SimpleCPUOffloadConnector (its pool is its own, as vLLM's lives in the
    instance's scheduler process)."""

    def __init__(self, spec: SimpleSpec, config: SchedulerConfig, timed: bool = False,
                 model: tuple[int, np.ndarray] | None = None) -> None:
        self.simple_spec = spec
        block_size = config.block_size
        super().__init__(NativeSpec(num_chunks=0, kv_bytes_per_token=spec.kv_bytes_per_token,
                                    link_gbps=spec.rate_gbps, latency_ms=spec.latency_ms),
                         block_size, timed, model)
        arrays = list(K.simple_arrays(spec.num_slots, config.num_gpu_blocks))
        SC, SF = arrays[K.I_SC - K.SIMPLE], arrays[K.I_SF - K.SIMPLE]
        SC[K.SC_ON], SC[K.SC_FREE] = 1, spec.num_slots - 1
        SC[K.SC_BBYTES], SC[K.SC_LWM] = spec.kv_bytes_per_token * block_size, -1
        SC[K.SC_CURSOR] = L.NONE
        if spec.lazy:                  # _estimate_lazy_target_blocks (manager.py:336-354)
            SC[K.SC_LAZY] = 1
            SC[K.SC_TARGET] = 2 * -(-config.max_num_batched_tokens // block_size)
        SF[:] = spec.link_array()
        self.simple = arrays
        self.region = 0
        self._pack()

    def _array(self, index: int) -> np.ndarray:
        return self.simple[index - K.SIMPLE]

    def defer_frees(self, on: bool) -> None:
        super().defer_frees(on)
        self._array(K.I_SC)[K.SC_ASYNC] = int(on)

    def reserve(self, rows: int) -> None:
        SQ = self._array(K.I_SQ)
        if rows > SQ.shape[0]:
            grown = np.zeros((max(rows, 2 * SQ.shape[0]), K.SQ_COLUMNS), np.int64)
            grown[:SQ.shape[0]] = SQ
            self.simple[K.I_SQ - K.SIMPLE] = grown
            self._pack()
        super().reserve(rows)

    def add(self, slots: np.ndarray, keys: np.ndarray, koff: np.ndarray,
            nkeys: np.ndarray) -> None:
        """Register requests in rows ``slots`` (their key counts ``nkeys`` size their rows
        of pinned slots and load blocks)."""
        counts = np.asarray(nkeys, np.int64)
        first = self.region
        self.region += int(counts.sum())
        REG = self._array(K.I_REG)
        if self.region > REG.shape[1]:
            grown = np.zeros((3, max(self.region, 2 * REG.shape[1])), np.int64)
            grown[:, :REG.shape[1]] = REG
            self.simple[K.I_REG - K.SIMPLE] = grown
        self.reserve(int(slots.max()) + 1 if slots.size else 0)
        self.RX[slots] = 0
        self.RX[slots, L.X_LSTEP] = self.RX[slots, L.X_LDONE] = L.NONE
        self.RQ[slots] = 0
        self.RF[slots] = np.nan
        SQ = self._array(K.I_SQ)
        SQ[slots] = 0
        SQ[slots, K.SQ_OFF] = first + np.cumsum(counts) - counts
        SQ[slots, K.SQ_NPIN] = SQ[slots, K.SQ_LEV] = -1
        self._pack()
