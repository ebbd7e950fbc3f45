"""The shared base of the policy family: ``pipeline.cache.tiers.Tier`` (capacity, ``used``, the
oversize rule, ``lookup``/``place``/``access`` and the eviction bookkeeping); a policy
overrides a few small hooks (what a hit updates, which item to evict, where a new item goes).
``Policy`` is its name in the policy modules."""

from __future__ import annotations

from pipeline.cache.tiers import Tier

__all__ = ["Policy"]

Policy = Tier
