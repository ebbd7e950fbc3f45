"""Read-only views of an ``EngineSim``'s arrays (``pipeline.components.engine_layout``): one request's
counters (``RequestView``, what ``EngineSim.result`` returns) and the block pool's cached
keys and free count (``PoolView``, ``EngineSim.pool``)."""

from __future__ import annotations

import numpy as np

from pipeline.components import engine_layout as L

__all__ = ["RequestView", "PoolView"]

_FIELDS = {"index": L.INDEX, "num_prompt": L.NPROMPT, "max_tokens": L.MAXTOK,
           "num_tokens": L.NTOK, "computed": L.COMPUTED, "status": L.STATUS,
           "preemptions": L.PREEMPT, "gpu_hit": L.GPUHIT, "cpu_hit": L.CPUHIT}
_OPTIONAL = {"first_scheduled_step": L.FSCHED, "first_token_step": L.FTOK,
             "finish_step": L.FIN}


class RequestView:
    """One request's counters, read from the engine's table (``EngineSim.result``)."""

    __slots__ = ("_row",)

    def __init__(self, row: np.ndarray) -> None:
        self._row = row

    def __getattr__(self, name):
        if name in _FIELDS:
            return int(self._row[_FIELDS[name]])
        if name in _OPTIONAL:
            value = int(self._row[_OPTIONAL[name]])
            return None if value == L.NONE else value
        raise AttributeError(name)


class PoolView:
    """What callers read of the block pool of ``engine`` (an ``EngineSim``): ``cached``
    (the keys in the hash map) and ``num_free``."""

    def __init__(self, engine) -> None:
        self._engine = engine

    @property
    def cached(self) -> set[int]:
        e = self._engine
        return set(np.unique(e.BH[:-1][e.P[:-1, L.HASHED] == 1].view(np.uint64)).tolist())

    @property
    def num_free(self) -> int:
        return self._engine.free_blocks
