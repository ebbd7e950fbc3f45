"""The engine's two CPU-tier call points, compiled per tier type: LMCache's compiled tier
(``ktier``) or any Python tier object (``pipeline.engine.cpu_tier.ModelTier``).

``tier_lookup(T, R, KEYS, slot, local)`` (at admission, every time the scheduler tries the
request; ``local`` its GPU hit in tokens) returns the tokens vLLM may load, counted from the
request's first token; ``tier_store(T, R, KEYS, slot)`` runs once the request's prompt is
computed. Which implementation a kernel gets is decided by the type of ``T`` when it is
compiled (numba ``overload``): LMCache's 5 arrays (``ktier.tier_arrays`` / ``no_tier``) give
``cpu_lookup`` / ``cpu_store``, so the default kernels hold no object-mode code and compile
as before; a Python tier's 2 arrays ``(TS, H)`` (``TS[T_ON]`` 1, ``H[0]`` the tier's handle)
give a separate specialization that calls the tier's ``lookup`` / ``store`` from object mode
(``numba.objmode``, cached on disk like the rest). The tier object is found by its handle
(``register``), so kernels never see a Python object.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np
from numba import objmode
from numba.extending import overload

from pipeline.engine.ktier import cpu_lookup, cpu_store

__all__ = ["register", "tier_lookup", "tier_store", "PYTHON_TIER"]

#: the length of a Python tier's arrays (LMCache's compiled tier has 5)
PYTHON_TIER = 2

_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


def register(tier: object) -> np.ndarray:
    """A handle array for ``tier`` (an object with ``lookup(R, KEYS, slot, local)`` and
    ``store(R, KEYS, slot)``); the kernels find it by ``H[0]`` while it is alive."""
    handle = next(_HANDLES)
    _LIVE[handle] = tier
    return np.array([handle], np.int64)


def _python_lookup(handle, R, KEYS, slot, local) -> int:
    return int(_LIVE[int(handle)].lookup(R, KEYS, int(slot), int(local)))


def _python_store(handle, R, KEYS, slot) -> None:
    _LIVE[int(handle)].store(R, KEYS, int(slot))


def tier_lookup(T, R, KEYS, slot, local):
    """See the module docstring (compiled only)."""
    raise NotImplementedError


def tier_store(T, R, KEYS, slot):
    """See the module docstring (compiled only)."""
    raise NotImplementedError


@overload(tier_lookup)
def _tier_lookup(T, R, KEYS, slot, local):
    if len(T) == PYTHON_TIER:
        def python(T, R, KEYS, slot, local):
            handle = T[1][0]
            with objmode(out="int64"):
                out = _python_lookup(handle, R, KEYS, slot, local)
            return out
        return python
    return lambda T, R, KEYS, slot, local: cpu_lookup(T, R, KEYS, slot)


@overload(tier_store)
def _tier_store(T, R, KEYS, slot):
    if len(T) == PYTHON_TIER:
        def python(T, R, KEYS, slot):
            handle = T[1][0]
            with objmode():
                _python_store(handle, R, KEYS, slot)
        return python
    return lambda T, R, KEYS, slot: cpu_store(T, R, KEYS, slot)
