"""The engine's two CPU-tier call points: LMCache's compiled tier (``ktier``) or any Python
tier object (``pipeline.engine.cpu_tier.ModelTier``).

``tier_lookup(T, R, KEYS, slot, local)`` (at admission, every time the scheduler tries the
request; ``local`` its GPU hit in tokens) returns the tokens vLLM may load, counted from the
request's first token; ``tier_store(T, R, KEYS, slot)`` runs once the request's prompt is
computed. Both tiers are the same 5 arrays (``ktier.tier_arrays`` / ``no_tier``), so one
compiled kernel serves both: ``TS[T_HANDLE]`` 0 calls ``cpu_lookup`` / ``cpu_store``; a
Python tier's handle (``register``; its other arrays unused) calls the tier's ``lookup`` /
``store`` from object mode (``numba.objmode``, cached on disk like the rest). The tier
object is found by its handle, so kernels never see a Python object.
"""

from __future__ import annotations

import itertools
import weakref

from numba import objmode

from pipeline.components.kjit import helper
from pipeline.components.ktier import cpu_lookup, cpu_store
from pipeline.components.engine_layout import T_HANDLE

__all__ = ["register", "tier_lookup", "tier_store"]

_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


def register(tier: object) -> int:
    """A handle (>= 1) for ``tier`` (an object with ``lookup(R, KEYS, slot, local)`` and
    ``store(R, KEYS, slot)``); the kernels find it by ``TS[T_HANDLE]`` while it is alive."""
    handle = next(_HANDLES)
    _LIVE[handle] = tier
    return handle


def _python_lookup(handle, R, KEYS, slot, local) -> int:
    return int(_LIVE[int(handle)].lookup(R, KEYS, int(slot), int(local)))


def _python_store(handle, R, KEYS, slot) -> None:
    _LIVE[int(handle)].store(R, KEYS, int(slot))


@helper
def tier_lookup(T, R, KEYS, slot, local):
    """See the module docstring."""
    handle = T[0][T_HANDLE]
    if handle == 0:
        return cpu_lookup(T, R, KEYS, slot)
    with objmode(out="int64"):
        out = _python_lookup(handle, R, KEYS, slot, local)
    return out


@helper
def tier_store(T, R, KEYS, slot):
    """See the module docstring."""
    handle = T[0][T_HANDLE]
    if handle == 0:
        cpu_store(T, R, KEYS, slot)
        return
    with objmode():
        _python_store(handle, R, KEYS, slot)
