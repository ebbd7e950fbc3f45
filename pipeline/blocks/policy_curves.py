"""Hit ratio vs capacity per policy, for the report: the lab's cyclic workload and a Mooncake
trace at object level. Frames (policy, capacity, hits, accesses, hit_ratio) that
``pipeline.charts.policies`` draws; ``run`` computes them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.sizes import grids
from pipeline.base.config import LAB_DOCS, LAB_PASSES, LAB_TOKENS
from pipeline.catalog.policy_replay import encode, hit_counts
from pipeline.catalog import POLICIES
from pipeline.workloads.documents import documents_workload
from pipeline.workloads.mooncake import read_mooncake

__all__ = ["policy_curves", "lab_curves", "trace_curves"]


def policy_curves(keys: np.ndarray, sizes: np.ndarray, capacities: Sequence[int],
                  policies: Sequence[str] | None = None) -> pl.DataFrame:
    """policy, capacity, hits, accesses, hit_ratio: one row per policy (default: every
    registered one) and capacity."""
    codes = encode(keys)
    frames = [pl.DataFrame({"policy": name, "capacity": np.asarray(capacities, np.int64),
                            "hits": hit_counts(name, codes, sizes, capacities)})
              for name in (tuple(POLICIES) if policies is None else policies)]
    return (pl.concat(frames)
            .with_columns(accesses=pl.lit(int(codes.size), pl.Int64))
            .with_columns(hit_ratio=pl.col("hits") / pl.col("accesses")))


def lab_curves(docs: int = LAB_DOCS, tokens: int = LAB_TOKENS,
               passes: Sequence[str] = LAB_PASSES, points: int = 121) -> pl.DataFrame:
    """The lab's document mode, capacities 0..1.2 x the working set (the cliff included)."""
    keys, sizes = documents_workload(docs, tokens, passes, None).items()
    working = docs * tokens
    grid = np.unique(np.r_[grids.even(1.2 * working, points), working - 1, working])
    return policy_curves(keys, sizes, grid)


def trace_curves(path: str | Path, points: int = 40) -> pl.DataFrame:
    """A Mooncake trace at object level (unit blocks), 1 %..100 % of its distinct blocks."""
    keys, sizes = read_mooncake(path).items(unit=True)
    distinct = int(np.unique(keys).size)
    return policy_curves(keys, sizes, grids.log_spaced(max(1, distinct // 100), distinct, points))
