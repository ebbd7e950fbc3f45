"""What the router sees of the instances: live (an oracle of engine state) or stale.

Router-side state (the requests it routed that have not finished) is always current: the
router owns it. Engine-side state (waiting and running counts, KV usage, the prefix blocks
an instance holds) is read live with ``staleness_ms=0``; with ``staleness_ms=S`` it is a
snapshot refreshed at every multiple of S ms of simulated time (as metric scrapes and
batched KV events would deliver it), so the router's view lags by 0..S ms.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from pipeline.engine.core import EngineSim

__all__ = ["FleetView"]


class FleetView:
    """The ``InstanceView`` of a running fleet."""

    def __init__(self, engines: Sequence[EngineSim], staleness_ms: float = 0.0) -> None:
        if staleness_ms < 0:
            raise ValueError(f"staleness must be >= 0 ms, got {staleness_ms}")
        self.engines = list(engines)
        self.num_instances = len(self.engines)
        self.block_size = self.engines[0].block_size
        self.outstanding = [0] * self.num_instances
        self.staleness_ms = staleness_ms
        self.stale = staleness_ms > 0
        self.epoch = 0
        self.next_refresh = 0.0
        # per engine (waiting, running, KV usage, CacheSnapshot, the engine's version)
        self.snapshot: list[tuple[int, int, float, Any, int]] = []
        self._hashes: Sequence[Any] | None = None
        self._array = None
        self.versions = [0] * self.num_instances     # bumped when an engine's state moves
        self._counts: dict[int, tuple[int, int]] = {}

    def changed(self, instance: int) -> None:
        """The engine of ``instance`` stepped or took a request (its cache may differ)."""
        self.versions[instance] += 1

    def advance(self, now: float, upcoming: float = -np.inf) -> None:
        """Before an event at ``now``: a stale view refreshes when a period has passed.
        ``upcoming``: the next arrival; a refresh whose successor is due by then is never
        read, so its contents are not copied (the refresh still counts)."""
        if not self.stale:
            self.epoch += 1
            return
        if now >= self.next_refresh:
            self.epoch += 1
            self.next_refresh = (now // self.staleness_ms + 1) * self.staleness_ms
            if upcoming < self.next_refresh:
                self._refresh()

    def _refresh(self) -> None:
        """Snapshot every engine (an engine that has not moved since keeps its own)."""
        old = self.snapshot
        self.snapshot = [
            old[i] if old and old[i][4] == self.versions[i] else
            (e.num_waiting, e.num_running, self._usage(e), e.cache_snapshot(),
             self.versions[i]) for i, e in enumerate(self.engines)]

    def request_keys(self, hashes: Sequence[Any], keys: np.ndarray) -> None:
        """The request being routed: its ``hashes`` as the uint64 array ``keys``."""
        self._hashes, self._array = hashes, keys

    @staticmethod
    def _usage(engine: EngineSim) -> float:
        """vLLM's ``BlockPool.get_usage``: 1 - free / (num_gpu_blocks - 1)."""
        return 1.0 - engine.free_blocks / max(engine.config.num_gpu_blocks - 1, 1)

    def routed_outstanding(self, instance: int) -> int:
        return self.outstanding[instance]

    def num_waiting(self, instance: int) -> int:
        if self.stale:
            return self.snapshot[instance][0]
        return self.engines[instance].num_waiting

    def num_running(self, instance: int) -> int:
        if self.stale:
            return self.snapshot[instance][1]
        return self.engines[instance].num_running

    def kv_usage(self, instance: int) -> float:
        if self.stale:
            return self.snapshot[instance][2]
        return self._usage(self.engines[instance])

    def cached_blocks(self, instance: int, hashes: Sequence[Any]) -> int:
        if hashes is not self._hashes:        # one conversion per request, not per instance
            self._hashes, self._array = hashes, np.asarray(hashes, np.uint64)
        if not self.stale:
            return self.engines[instance].cached_prefix_blocks(self._array)
        return self.snapshot[instance][3].prefix_blocks(self._array)

    def gpu_blocks(self, instance: int) -> int:
        """vLLM's num_gpu_blocks (its ``CacheNumBlocks`` metric): configuration, never stale."""
        return self.engines[instance].config.num_gpu_blocks

    def cached_block_count(self, instance: int) -> int:
        if self.stale:
            return self.snapshot[instance][3].key_count()
        version = self.versions[instance]
        known = self._counts.get(instance)
        if known is None or known[0] != version:
            known = self._counts[instance] = (version,
                                                     self.engines[instance].cached_key_count())
        return known[1]
