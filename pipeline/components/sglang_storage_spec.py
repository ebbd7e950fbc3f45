"""The settings of SGLang 0.5.23's HiCache L3 storage (``--hicache-storage-backend``) as the
lab models them: the backends and prefetch policies SGLang accepts, its pages per storage
call, and ``StorageSpec`` (SGLang's settings plus the lab's transfer timing)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STORAGE_BACKENDS", "PREFETCH_POLICIES", "STORAGE_BATCH_SIZE", "StorageSpec"]

#: ``--hicache-storage-backend``'s choices (``arg_groups/fields/memory.py:150-167``).
STORAGE_BACKENDS = ("file", "sim", "mooncake", "npu_memcache", "hf3fs", "nixl", "aibrix",
                    "dynamic", "eic", "simm", "mori", "shm", "tensorcast", "seaweedfs")
#: ``--hicache-storage-prefetch-policy``'s choices (SGLang's default: timeout).
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
STORAGE_BATCH_SIZE = 128                         # pages per storage call (hicache_storage:24)


@dataclass(frozen=True)
class StorageSpec:
    """The L3 settings: SGLang's (backend, prefetch policy, the extra config's threshold
    and timeouts, the retry pacing) and the lab's timing (``latency_ms`` per transfer,
    ``bandwidth`` bytes per ms, ``page_bytes`` one page's KV)."""

    backend: str = "file"
    prefetch_policy: str = "timeout"
    threshold: int = 256
    timeout_base: float = 1.0
    timeout_per_ki_token: float = 0.25
    retry_interval: int = 8
    retry_max_attempts: int = 8
    latency_ms: float = 0.0
    bandwidth: float = float("inf")
    page_bytes: int = 0
