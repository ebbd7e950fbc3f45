"""LMCache's tier stack as the engine's CPU tier (``--tier``): the local CPU backend, then
an optional local disk, then an optional remote store, each with its capacity, bandwidth and
latency; compiled in ``pipeline.components.kstack`` (its rules), called by the engine at
``pipeline.components.kgeneric``'s two points. Loads are synchronous in the step: each
tier's bytes / GB/s + latency, summed over the step's loads, replace the step model's
reload term (``pipeline.engine.krun``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.components.engine_layout import (POLICY_FIFO, POLICY_LFU, POLICY_LRU, POLICY_MRU,
                                               T_USED)
from pipeline.components.kstack import (K_BYTES, TIERS, run_lookup, run_retrieve, run_store,
                                        stack_arrays)
from pipeline.components.lmcache import (DEFAULT_CHUNK_SIZE, NumberedKeys, check_chunk_size,
                                         lru_order)

__all__ = ["Tier", "LMCacheStack", "share_remote", "POLICIES", "CPU_LINK_GBPS",
           "CPU_LINK_SOURCE"]

#: LMCache's cache_policy values (``cache_policy/__init__.py``'s POLICY_MAPPING), for the
#: stack's CPU and disk tiers
POLICIES = {"lru": POLICY_LRU, "fifo": POLICY_FIFO, "mru": POLICY_MRU, "lfu": POLICY_LFU}

#: the CPU tier's default link: measured, one way (host to GPU), H100 on PCIe 5
CPU_LINK_GBPS = 50.0
CPU_LINK_SOURCE = ("vLLM's blog on its offloading connector: about 50 GB/s one way "
                   "measured on an H100, PCIe 5")


@dataclass(frozen=True)
class Tier:
    """One tier: ``kind`` (cpu, disk, remote), capacity in tokens, GB/s (10^9 bytes per
    second) and latency per load in ms; ``shared``: one remote store for a fleet."""

    kind: str
    tokens: int
    gbps: float = CPU_LINK_GBPS
    latency_ms: float = 0.0
    shared: bool = False


class LMCacheStack(NumberedKeys):
    """LMCache's stack of ``tiers`` (cpu first, then disk and/or remote, each once) of
    ``chunk_size``-token chunks of ``chunk_size // block_size`` engine blocks, KV of
    ``bytes_per_token``; ``arrays`` its compiled state (``kstack``); ``remote``: another
    stack whose remote store this one shares; ``policy``: LMCache's ``cache_policy`` of the
    CPU and disk tiers (``POLICIES``). From Python (tests), keys are any hashable keys of
    full chunks."""

    places_whole_request = True

    def __init__(self, tiers: Sequence[Tier], block_size: int, bytes_per_token: float,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 remote: "LMCacheStack | None" = None, policy: str = "lru") -> None:
        check_chunk_size(chunk_size, block_size)
        if policy not in POLICIES:
            raise ValueError(f"cache_policy {policy!r}: the stack models "
                             f"{', '.join(POLICIES)} (LMCache's POLICY_MAPPING)")
        self.policy = policy
        by_kind = {tier.kind: tier for tier in tiers}
        self.tiers = tuple(tiers)
        self.block_size, self.chunk_size = int(block_size), int(chunk_size)
        self.per = self.chunk_size // self.block_size
        self.capacity = self.capacity_tokens = by_kind["cpu"].tokens
        none = Tier("none", 0, 1.0, 0.0)
        row = [by_kind.get(kind, none) for kind in TIERS]
        self.arrays = stack_arrays(tuple(t.tokens for t in row), self.chunk_size, self.per,
                                   tuple(t.gbps for t in row), tuple(t.latency_ms for t in row),
                                   float(bytes_per_token),
                                   remote.arrays[10:15] if remote is not None else None,
                                   POLICIES[policy])
        self.remote_of = remote                  # the stack whose remote store this one uses
        super().__init__()

    def used(self, kind: str) -> int:
        return int(self.arrays[5 * TIERS.index(kind)][T_USED])

    def bytes_loaded(self) -> dict[str, float]:
        """Bytes loaded from each tier so far."""
        return {kind: float(self.arrays[15][K_BYTES + t]) for t, kind in enumerate(TIERS)}

    def lookup(self, keys: Sequence[Hashable]) -> tuple[int, int, int]:
        """LMCache's lookup at admission: chunks hit in the CPU, disk and remote tiers."""
        out = np.zeros(3, np.int64)
        run_lookup(self.arrays, self._run(keys), out)
        return int(out[0]), int(out[1]), int(out[2])

    def retrieve(self, keys: Sequence[Hashable], split: tuple[int, int, int], gpu: int,
                 prompt: int) -> None:
        """The worker's retrieve beyond the GPU hit ``gpu`` tokens, then lookup_unpin."""
        run_retrieve(self.arrays, self._run(keys), *split, int(gpu), int(prompt))

    def store(self, keys: Sequence[Hashable], prompt_tokens: int, hit_tokens: int) -> None:
        """LMCache's store once the prompt is computed, from its hit ``hit_tokens``."""
        run_store(self.arrays, self._run(keys), int(prompt_tokens), int(hit_tokens))

    def state(self) -> dict[str, list]:
        """Each tier's keys, least recent first."""
        return {kind: self._named(lru_order(self.arrays[5 * t + 2], self.arrays[5 * t + 3]))
                for t, kind in enumerate(TIERS)}


def share_remote(tiers: list) -> list:
    """A fleet's instances' tiers, each its own: stacks whose remote tier is ``shared`` then
    share the first one's remote store (one store for every instance); others unchanged."""
    first = tiers[0] if tiers else None
    if not isinstance(first, LMCacheStack) or not any(t.shared for t in first.tiers):
        return tiers
    return [first] + [LMCacheStack(t.tiers, t.block_size, float(t.arrays[15][0]),
                                   t.chunk_size, remote=first, policy=t.policy)
                      for t in tiers[1:]]
