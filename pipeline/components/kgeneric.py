"""The engine's two CPU-tier call points, the one place a tier component is plugged in:
LMCache's compiled backend (``ktier``) or any Python tier object
(``pipeline.engine.cpu_tier.ModelTier``).

``tier_lookup(T, R, KEYS, slot, local)`` (at admission, every time the scheduler tries the
request; ``local`` its GPU hit in tokens) returns the tokens vLLM may load, counted from the
request's first token; ``tier_store(T, R, KEYS, slot)`` runs once the request's prompt is
computed. Both tiers are the same 5 arrays (``ktier.tier_arrays`` / ``no_tier``), so one
compiled kernel serves both: ``TS[T_HANDLE]`` 0 runs ``ktier.lookup`` / ``ktier.store`` on
the request's full chunks (chunk j keyed by its block ``(j + 1) * per - 1``); a Python
tier's handle (``register``; its other arrays unused) calls the tier's ``lookup`` / ``store``
from object mode (``numba.objmode``, cached on disk like the rest). The tier object is found
by its handle, so kernels never see a Python object. A compiled tier of another engine is
one more module with the same ``lookup`` / ``store`` over a run of keys, and one more branch
here. A tier stack (``pipeline.components.kstack``: 17 arrays) runs its own
``engine_lookup`` / ``engine_store``; the engine passes every tier in the stack's shape
(``kstack.engine_arrays``: compiled once for all), told apart when running by its ``K``.
"""

from __future__ import annotations

import itertools
import weakref

from numba import objmode
from numba.extending import overload

from pipeline.components.kjit import helper
from pipeline.components.kstack import STACK_ARRAYS, engine_lookup, engine_store
from pipeline.components.ktier import lookup as lmcache_lookup
from pipeline.components.ktier import store as lmcache_store
from pipeline.components.engine_layout import CPUSTATE, KOFF, NPROMPT, T_CHUNK, T_HANDLE, T_PER

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
    return _lookup(T, R, KEYS, slot, local)


@helper
def tier_store(T, R, KEYS, slot):
    """See the module docstring."""
    _store(T, R, KEYS, slot)


def _lookup(T, R, KEYS, slot, local):
    """``tier_lookup`` for ``T``'s kind of tier."""


def _store(T, R, KEYS, slot):
    """``tier_store`` for ``T``'s kind of tier."""


@overload(_lookup, inline="always")
def _lookup_typed(T, R, KEYS, slot, local):
    if len(T) == STACK_ARRAYS:
        def either(T, R, KEYS, slot, local):
            if T[15].size == 0:                       # another tier in a stack's shape
                return _tier_lookup((T[0], T[1], T[2], T[3], T[4]), R, KEYS, slot, local)
            return engine_lookup(T, R, KEYS, slot, local)
        return either
    return lambda T, R, KEYS, slot, local: _tier_lookup(T, R, KEYS, slot, local)


@overload(_store, inline="always")
def _store_typed(T, R, KEYS, slot):
    if len(T) == STACK_ARRAYS:
        def either(T, R, KEYS, slot):
            if T[15].size == 0:                       # another tier in a stack's shape
                _tier_store((T[0], T[1], T[2], T[3], T[4]), R, KEYS, slot)
            else:
                engine_store(T, R, KEYS, slot)
        return either
    return lambda T, R, KEYS, slot: _tier_store(T, R, KEYS, slot)


@helper
def _tier_lookup(T, R, KEYS, slot, local):
    """LMCache's CPU backend or a Python tier."""
    TS = T[0]
    handle = TS[T_HANDLE]
    if handle == 0:
        chunk, per, prompt = TS[T_CHUNK], TS[T_PER], R[slot, NPROMPT]
        hit = lmcache_lookup(T, KEYS, R[slot, KOFF] + per - 1, per, prompt // chunk, chunk)
        R[slot, CPUSTATE] = hit                       # LMCache stores from its own hit
        return hit - 1 if hit == prompt else hit
    with objmode(out="int64"):
        out = _python_lookup(handle, R, KEYS, slot, local)
    return out


@helper
def _tier_store(T, R, KEYS, slot):
    """LMCache's CPU backend or a Python tier."""
    TS = T[0]
    handle = TS[T_HANDLE]
    if handle == 0:
        chunk, per, prompt = TS[T_CHUNK], TS[T_PER], R[slot, NPROMPT]
        lmcache_store(T, KEYS, R[slot, KOFF] + per - 1, per, prompt // chunk, chunk, prompt,
                      max(R[slot, CPUSTATE], 0))
        return
    with objmode():
        _python_store(handle, R, KEYS, slot)
