"""A frozen copy of an engine's GPU prefix cache (its hash map), for a router's stale view
(``EngineSim.cache_snapshot``)."""

from __future__ import annotations

import numpy as np

from pipeline.components.kpool import leading_cached

__all__ = ["CacheSnapshot"]


class CacheSnapshot:
    """The GPU prefix cache as of one moment (a copy of the hash map): what
    ``cached_prefix_blocks`` and ``cached_key_count`` answered then."""

    def __init__(self, table: np.ndarray, mask: int) -> None:
        self._table, self._mask, self._count = table, mask, None

    def prefix_blocks(self, block_hashes) -> int:
        keys = np.asarray(block_hashes, np.uint64).reshape(-1).view(np.int64)
        return int(leading_cached(self._table, self._mask, keys)) if keys.size else 0

    def key_count(self) -> int:
        if self._count is None:
            self._count = int(np.count_nonzero(self._table[:, 1] >= 0))
        return self._count
