"""Workload x cache model -> one event row per access.

Two methods give identical events (proven by tests/test_simulate.py):

* ``direct`` replays the accesses through kvlab's ``TwoTierCache`` once per
  (GPU, CPU) capacity pair: the reference, cache semantics straight from kvlab.
* ``onepass`` (default) derives every capacity from LRU stack distances
  (``pipeline.stackdist``): one pass over the trace for the GPU tier and one pass over
  the GPU-miss stream per GPU capacity for the CPU tier.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvlab.kvsim import TIERS, TwoTierCache
from pipeline.stackdist import COLD, lru_states, stack_distances
from pipeline.workloads.documents import ACCESS_SCHEMA

TIER = pl.Enum(list(TIERS))
METHODS = ("onepass", "direct")

#: Columns the methods add to the access table, one row per (capacity pair, access).
RESULT_SCHEMA = pl.Schema({
    "stack_distance": pl.Int64,   # GPU-tier LRU stack distance; null on a first access
    "gpu_capacity": pl.Int64,
    "cpu_capacity": pl.Int64,
    "tier": TIER,                 # gpu / cpu / miss
    "gpu_used": pl.Int64,         # tokens stored in each tier after the access
    "cpu_used": pl.Int64,
    "gpu_evicted": pl.Int32,      # items each tier evicted on this access
    "cpu_evicted": pl.Int32,
})


def check_capacities(name: str, capacities: Sequence[int]) -> list[int]:
    """Return the capacities as ints; raise ValueError if empty or any is negative."""
    values = [int(c) for c in capacities]
    if not values:
        raise ValueError(f"{name}: the capacity list is empty")
    negative = [c for c in values if c < 0]
    if negative:
        raise ValueError(f"{name}: capacities must be >= 0, got {negative[0]}")
    return values


def _replay_direct(keys: np.ndarray, sizes: np.ndarray, gpu: int, cpu: int) -> dict:
    """Per-access tier, occupancy and evictions from kvlab's TwoTierCache."""
    cache = TwoTierCache(gpu, cpu)
    n = len(keys)
    tier = np.empty(n, dtype=np.int8)
    used = np.empty((2, n), dtype=np.int64)
    evicted = np.empty((2, n), dtype=np.int32)
    code = {name: index for index, name in enumerate(TIERS)}
    for i, (key, size) in enumerate(zip(keys.tolist(), sizes.tolist())):
        before = cache.gpu.evictions, cache.cpu.evictions
        tier[i] = code[cache.access(key, size)]
        used[:, i] = cache.gpu.used, cache.cpu.used
        evicted[:, i] = cache.gpu.evictions - before[0], cache.cpu.evictions - before[1]
    return {"tier": tier, "gpu_used": used[0], "cpu_used": used[1],
            "gpu_evicted": evicted[0], "cpu_evicted": evicted[1]}


def _replay_onepass(keys: np.ndarray, sizes: np.ndarray, gpus: list[int],
                    cpus: list[int]) -> list[list[dict]]:
    """_replay_direct's columns for every (GPU, CPU) pair, from stack distances: one pass
    for every GPU capacity, then one pass over each GPU capacity's miss stream for every
    CPU capacity."""
    gpu_states = lru_states(keys, sizes, gpus)
    positions = np.arange(len(keys))
    results = []
    for g in range(len(gpus)):
        gpu_miss = ~gpu_states.hits[g]
        cpu_state = lru_states(keys[gpu_miss], sizes[gpu_miss], cpus)
        # The CPU tier changes only on GPU misses: carry its occupancy over GPU hits.
        last_miss = np.searchsorted(np.flatnonzero(gpu_miss), positions, side="right") - 1
        per_cpu = []
        for j in range(len(cpus)):
            tier = np.zeros(len(keys), dtype=np.int8)
            tier[gpu_miss] = np.where(cpu_state.hits[j], 1, 2)
            cpu_evicted = np.zeros(len(keys), dtype=np.int32)
            cpu_evicted[gpu_miss] = cpu_state.evicted[j]
            cpu_used = np.where(last_miss >= 0, cpu_state.used[j][np.maximum(last_miss, 0)], 0)
            per_cpu.append({"tier": tier, "gpu_used": gpu_states.used[g],
                            "cpu_used": cpu_used, "gpu_evicted": gpu_states.evicted[g],
                            "cpu_evicted": cpu_evicted})
        results.append(per_cpu)
    return results


def _stack_distance_column(keys: np.ndarray, sizes: np.ndarray, method: str) -> pl.Series:
    """GPU-tier stack distances (null on first reads; all null for the direct method when a
    key changes size, since a distance is then undefined)."""
    try:
        distances = stack_distances(keys, sizes)
    except ValueError:
        if method == "onepass":
            raise
        return pl.Series("stack_distance", [None] * len(keys), dtype=pl.Int64)
    distance = pl.Series("stack_distance", distances, dtype=pl.Int64)
    return distance.set(distance == COLD, None)


def with_stack_distances(accesses: pl.DataFrame) -> pl.DataFrame:
    """The access table plus its GPU-tier ``stack_distance`` column (null on first reads)."""
    keys = accesses["doc"].to_numpy().astype(np.int64)
    sizes = accesses["size"].to_numpy().astype(np.int64)
    return accesses.with_columns(_stack_distance_column(keys, sizes, "onepass"))


def simulate(accesses: pl.DataFrame, gpu_capacities: Sequence[int],
             cpu_capacities: Sequence[int] = (0,), method: str = "onepass") -> pl.DataFrame:
    """Events for every (GPU, CPU) capacity pair: the access table plus RESULT_SCHEMA."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    gpus = check_capacities("gpu capacities", gpu_capacities)
    cpus = check_capacities("cpu capacities", cpu_capacities)
    keys = accesses["doc"].to_numpy().astype(np.int64)
    sizes = accesses["size"].to_numpy().astype(np.int64)
    accesses = accesses.with_columns(_stack_distance_column(keys, sizes, method))
    if method == "direct":
        results = [[_replay_direct(keys, sizes, gpu, cpu) for cpu in cpus] for gpu in gpus]
    else:
        results = _replay_onepass(keys, sizes, gpus, cpus)
    frames = []
    for gpu, columns in zip(gpus, results):
        for cpu, result in zip(cpus, columns):
            frames.append(accesses.with_columns(
                pl.lit(gpu, dtype=pl.Int64).alias("gpu_capacity"),
                pl.lit(cpu, dtype=pl.Int64).alias("cpu_capacity"),
                pl.Series("tier", np.asarray(TIERS)[result["tier"]], dtype=TIER),
                *(pl.Series(name, result[name], dtype=RESULT_SCHEMA[name])
                  for name in ("gpu_used", "cpu_used", "gpu_evicted", "cpu_evicted")),
            ))
    return pl.concat(frames).select(*ACCESS_SCHEMA.names(), *RESULT_SCHEMA.names())
