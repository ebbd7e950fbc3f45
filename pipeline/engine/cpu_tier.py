"""The engine's CPU tier: LMCache's, compiled (``LMCacheTier``, the default), or any
registered CPU model's tier object called from the compiled scheduler (``ModelTier``).

LMCache (``pipeline.components.lmcache.LMCacheTier``): LMCache's local CPU backend (LRU,
``pipeline.components.ktier``, called by ``pipeline.components.kgeneric``) keyed by chunks of
``chunk_size`` tokens: chunk j of a prompt is keyed by the chained key of its last block
(only full chunks: ``save_unfull_chunk`` False). Lookup at admission (every time the scheduler tries the request, as vLLM asks its
connector): LMCache's hit c, of which vLLM loads ``c - g`` beyond its own GPU hit g
(``c - 1`` when c is the whole prompt). Store once the request's prompt is computed, from
LMCache's own hit on. Engines given the same tier share it.

Any other model (``ModelTier``): the registry entry's tier object (``registry.make_tier``)
at the same two points (``pipeline.components.kgeneric``). A block-unit model (the policies,
``block-lru``) sees the request's full prompt blocks (the engine's chained block keys, as
unsigned ints, so a policy that compares keys orders them as the block stream's codes):
lookup of the leading blocks present from block 0 (no state change), c tokens, of which
vLLM loads ``c - g`` (``c - 1`` when c is the whole prompt); store places the blocks from
the GPU hit g of the request's last admission on, in ``order`` (head-first: prefix order),
capacity ``capacity_tokens // block_size`` blocks of size 1: the block models' composition
(``pipeline.policies.blockmode``). A chunk-unit model (``lmcache``, its test oracle) sees
LMCache's chunk keys and follows LMCache's own protocol (``admit(keys)`` refreshes the hit
chunks, ``store(keys, prompt_tokens, hit_tokens)`` from its own hit), so forced through this
path ``lmcache`` equals ``LMCacheTier``.
"""

from __future__ import annotations

import numpy as np

from pipeline import catalog as registry
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, check_order
from pipeline.components.kgeneric import register
from pipeline.components.ktier import no_tier
from pipeline.components.engine_layout import (CPUSTATE, KOFF, NPROMPT, T_CAPACITY, T_CHUNK, T_HANDLE,
                                    T_ON, T_PER)
from pipeline.components.lmcache import DEFAULT_CHUNK_SIZE, LMCacheTier, check_chunk_size

__all__ = ["LMCacheTier", "ModelTier", "engine_tier_problem", "engine_cpu_models"]


def engine_tier_problem(name: str) -> str | None:
    """Why registered model ``name`` cannot be the engine's CPU tier, or None."""
    model = registry.entry(name)
    if model.cpu is None or model.tier is None:
        return f"{name} is not a CPU model with a tier object"
    if model.unit not in ("block", "chunk"):
        return f"{name} keys {model.unit}s, not blocks or chunks"
    if getattr(model.tier, "needs_future", False):
        return (f"{name} needs the future of its placements, which the engine's schedule "
                f"decides as it runs")
    return None


def engine_cpu_models() -> list[str]:
    """The registered CPU models the engine takes as its CPU tier (registry order)."""
    return [name for name in registry.CPU_MODELS if engine_tier_problem(name) is None]


class ModelTier:
    """Registered CPU model ``model``'s tier object as the engine's CPU tier, called from
    the compiled scheduler at admission (``lookup``) and once the prompt is computed
    (``store``); ``options`` the model's own (its declared ``Option`` dests), ``order`` the
    order a block model places a request's blocks in. See the module docstring."""

    def __init__(self, model: str, capacity_tokens: int, block_size: int,
                 options: dict | None = None, order: str = HEAD_FIRST) -> None:
        problem = engine_tier_problem(model)
        if problem:
            raise ValueError(f"--cpu-model {model}: {problem}")
        entry = registry.entry(model)
        options = dict(options or {})
        check_order(order)
        if entry.order is not None and order != entry.order:
            raise ValueError(f"--cpu-order {order}: the {model} model is {entry.order}")
        self.model, self.chunk_unit = model, entry.unit == "chunk"
        self.capacity_tokens, self.block_size = int(capacity_tokens), int(block_size)
        self.tail_first = order == TAIL_FIRST
        if self.chunk_unit:
            if options.pop("save_unfull_chunk", False):
                raise ValueError("--cpu-save-unfull-chunk: the engine keys full chunks only "
                                 "(LMCache >= 0.4's default)")
            self.chunk_size = int(options.get("chunk_size", DEFAULT_CHUNK_SIZE))
            check_chunk_size(self.chunk_size, self.block_size)
            self.tier = registry.make_tier(model, self.capacity_tokens, **options)
            if not (hasattr(self.tier, "admit") and hasattr(self.tier, "store")):
                raise ValueError(f"--cpu-model {model}: a chunk model's tier needs admit and "
                                 f"store (LMCache's protocol)")
        else:
            self.chunk_size = self.block_size
            self.tier = registry.make_tier(model, self.capacity_tokens // self.block_size,
                                           **options)
        self.per = self.chunk_size // self.block_size
        self.arrays = no_tier()                       # LMCache's arrays' types, unused
        self.arrays[0][[T_ON, T_CAPACITY, T_CHUNK, T_PER, T_HANDLE]] = \
            1, self.capacity_tokens, self.chunk_size, self.per, register(self)

    def _keys(self, R: np.ndarray, KEYS: np.ndarray, slot: int) -> tuple[list[int], int]:
        """The request's keys the tier sees (full blocks, or the last block of each full
        chunk) as unsigned ints, and its prompt tokens."""
        prompt, first = int(R[slot, NPROMPT]), int(R[slot, KOFF])
        count = prompt // self.chunk_size
        keys = KEYS[first + self.per - 1:first + count * self.per:self.per]
        return keys.view(np.uint64).tolist(), prompt

    def lookup(self, R: np.ndarray, KEYS: np.ndarray, slot: int, local: int) -> int:
        """At admission (GPU hit ``local`` tokens): the tokens vLLM may load, from 0."""
        keys, prompt = self._keys(R, KEYS, slot)
        if self.chunk_unit:
            hit = int(self.tier.admit(keys))
            R[slot, CPUSTATE] = hit                   # LMCache stores from its own hit
        else:
            hit = int(self.tier.lookup(keys)) * self.block_size
            R[slot, CPUSTATE] = local // self.block_size   # places from the GPU hit
        return hit - 1 if hit == prompt else hit

    def store(self, R: np.ndarray, KEYS: np.ndarray, slot: int) -> None:
        """Once the request's prompt is computed."""
        keys, prompt = self._keys(R, KEYS, slot)
        start = max(int(R[slot, CPUSTATE]), 0)
        if self.chunk_unit:
            self.tier.store(keys, prompt, start)
            return
        placed = keys[start:]
        self.tier.place(placed[::-1] if self.tail_first else placed, 1)
