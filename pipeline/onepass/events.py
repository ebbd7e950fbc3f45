"""The lab's document mode: workload x cache model -> one event row per access.

Two methods give identical events (proven by tests/test_simulate.py):

* ``direct`` replays the accesses through kvlab's ``TwoTierCache`` once per
  (GPU, CPU) capacity pair: the reference, cache semantics straight from kvlab.
* ``onepass`` (default) derives every capacity from LRU stack distances
  (``pipeline.onepass.stack_distance``): one pass over the trace for the GPU tier and one pass over
  the GPU-miss stream per GPU capacity for the CPU tier.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvlab.kvsim import TwoTierCache
from pipeline.sizes.limits import check_capacity_list
from pipeline.cache.tiers import TIER, TIER_CODES
from pipeline.onepass.stack_distance import COLD, stack_distances, two_tier_states
from pipeline.workloads.documents import ACCESS_SCHEMA

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


def _replay_direct(keys: np.ndarray, sizes: np.ndarray, gpu: int, cpu: int) -> dict:
    """Per-access tier, occupancy and evictions from kvlab's TwoTierCache."""
    cache = TwoTierCache(gpu, cpu)
    n = len(keys)
    tier = np.empty(n, dtype=np.int8)
    used = np.empty((2, n), dtype=np.int64)
    evicted = np.empty((2, n), dtype=np.int32)
    for i, (key, size) in enumerate(zip(keys.tolist(), sizes.tolist())):
        before = cache.gpu.evictions, cache.cpu.evictions
        tier[i] = TIER_CODES[cache.access(key, size)]
        used[:, i] = cache.gpu.used, cache.cpu.used
        evicted[:, i] = cache.gpu.evictions - before[0], cache.cpu.evictions - before[1]
    return {"tier": tier, "gpu_used": used[0], "cpu_used": used[1],
            "gpu_evicted": evicted[0], "cpu_evicted": evicted[1]}


def _replay_onepass(keys: np.ndarray, sizes: np.ndarray, gpus: list[int],
                    cpus: list[int]) -> list[list[dict]]:
    """_replay_direct's columns for every (GPU, CPU) pair, from stack distances
    (``pipeline.onepass.stack_distance.two_tier_states``)."""
    return [[{"tier": state.tiers[j], "gpu_used": state.gpu_used, "cpu_used": state.cpu_used[j],
              "gpu_evicted": state.gpu_evicted, "cpu_evicted": state.cpu_evicted[j]}
             for j in range(len(cpus))]
            for state in two_tier_states(keys, sizes, gpus, cpus)]


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
    gpus = check_capacity_list("gpu capacities", gpu_capacities)
    cpus = check_capacity_list("cpu capacities", cpu_capacities)
    keys = accesses["doc"].to_numpy().astype(np.int64)
    sizes = accesses["size"].to_numpy().astype(np.int64)
    accesses = accesses.with_columns(_stack_distance_column(keys, sizes, method))
    if method == "direct":
        results = [[_replay_direct(keys, sizes, gpu, cpu) for cpu in cpus] for gpu in gpus]
    else:
        results = _replay_onepass(keys, sizes, gpus, cpus)
    pairs = [(gpu, cpu, result) for gpu, columns in zip(gpus, results)
             for cpu, result in zip(cpus, columns)]
    n = accesses.height

    def column(name: str) -> np.ndarray:
        return np.concatenate([result[name] for _, _, result in pairs]) if pairs else []

    results_frame = pl.DataFrame([
        pl.Series("gpu_capacity", np.repeat([gpu for gpu, _, _ in pairs], n), dtype=pl.Int64),
        pl.Series("cpu_capacity", np.repeat([cpu for _, cpu, _ in pairs], n), dtype=pl.Int64),
        # the tier column straight from the int8 codes: no per-pair string arrays
        pl.Series("tier", column("tier"), dtype=pl.Int8).cat.to(TIER),
        *(pl.Series(name, column(name), dtype=RESULT_SCHEMA[name])
          for name in ("gpu_used", "cpu_used", "gpu_evicted", "cpu_evicted")),
    ])
    repeated = pl.concat([accesses] * len(pairs), rechunk=True)
    return pl.concat([repeated, results_frame], how="horizontal").select(
        *ACCESS_SCHEMA.names(), *RESULT_SCHEMA.names())
