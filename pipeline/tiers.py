"""The three tiers that serve an access, in one place: names, order, codes and columns.

An access is served by a GPU hit, a CPU reload or a miss (recompute), fastest first, as
kvlab's ``TwoTierCache.access`` names them (``kvlab.kvsim.TIERS``). ``TIER`` is the polars
Enum of those names: sorting by it gives gpu, cpu, miss, so no rank map is needed.
"""

from __future__ import annotations

import polars as pl

from kvlab.kvsim import TIERS

__all__ = ["TIERS", "TIER", "GPU_CODE", "CPU_CODE", "MISS_CODE", "TIER_CODES", "COUNT_COLUMNS",
           "COUNT_NAMES"]

#: The tier names as a polars Enum, fastest first.
TIER = pl.Enum(list(TIERS))
#: int8 codes of the tiers in numpy arrays: they index TIERS.
GPU_CODE, CPU_CODE, MISS_CODE = range(len(TIERS))
TIER_CODES = {name: code for code, name in enumerate(TIERS)}
#: tier -> the aggregates column that counts it (pipeline.sweeps.AGGREGATE_SCHEMA).
COUNT_COLUMNS = {"gpu": "gpu_hits", "cpu": "cpu_hits", "miss": "misses"}
#: tier -> how a count of it reads in a sentence ("4 GPU hits + 6 misses").
COUNT_NAMES = {"gpu": "GPU hits", "cpu": "CPU hits", "miss": "misses"}
