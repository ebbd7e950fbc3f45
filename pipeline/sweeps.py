"""Capacity grids -> events (Parquet) -> polars aggregates (Parquet).

Three sweeps over one workload, each a grid of (GPU, CPU) capacity pairs:

* ``gpu_cliff``: GPU capacity 0..1.25x the working set, CPU 0;
* ``cpu_cliff``: GPU fixed, CPU capacity over the same range;
* ``grid``: a coarse GPU x CPU grid for a heatmap.

Events and aggregates are written as zstd Parquet (``pipeline.base.staging``), atomically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvlab.summarize import atomic_output
from pipeline.sizes import grids
from pipeline.base.config import LAB_DOCS, LAB_TOKENS
from pipeline.sizes.limits import check_capacity_list
from pipeline.onepass.events import simulate
from pipeline.base.staging import parquet_bytes
from pipeline.workloads.documents import DocumentWorkload

SWEEPS = ("gpu_cliff", "cpu_cliff", "grid")
SECOND_PASS = 1          # 0-based pass_index of the replay: the cliffs are its results
SWEEP = pl.Enum(list(SWEEPS))
GROUP_KEYS = ("sweep", "gpu_capacity", "cpu_capacity", "pass_index", "pass_order")

#: Columns of aggregates.parquet: hits by tier per (sweep, capacities, pass).
AGGREGATE_SCHEMA = pl.Schema({
    "sweep": SWEEP, "gpu_capacity": pl.Int64, "cpu_capacity": pl.Int64,
    "pass_index": pl.Int16, "pass_order": pl.Enum(["fwd", "rev"]), "accesses": pl.Int32,
    "gpu_hits": pl.Int32, "cpu_hits": pl.Int32, "misses": pl.Int32,
})


@dataclass(frozen=True)
class Sweep:
    """One capacity grid: every GPU capacity crossed with every CPU capacity."""

    name: str
    gpu_capacities: tuple[int, ...]
    cpu_capacities: tuple[int, ...]

    @property
    def pairs(self) -> int:
        return len(self.gpu_capacities) * len(self.cpu_capacities)


def marked_points(workload: DocumentWorkload, lab_points: Sequence[int],
                  lab_working_set: int = LAB_DOCS * LAB_TOKENS) -> tuple[int, ...]:
    """The capacities a cliff marks and exports for ``workload``: the working set and one
    token less (the edge), and the lab's other points scaled to this working set (rounded
    half up, exact integer arithmetic). For the lab's workload these are the lab's points.

    >>> marked_points(DocumentWorkload(20, 4096), (21520, 50109, 50110, 56000))
    (35181, 81919, 81920, 91549)
    """
    ws = workload.working_set
    edge = {lab_working_set - 1, lab_working_set}
    scaled = {(2 * point * ws + lab_working_set) // (2 * lab_working_set)
              for point in lab_points if point not in edge}
    return tuple(sorted(scaled | ({ws - 1, ws} - {-1})))


def cliff_capacities(workload: DocumentWorkload, spec_points: Sequence[int] = (),
                     points: int = 64, factor: float = 1.25) -> tuple[int, ...]:
    """0..factor x working set: an even grid of ``points``, the spec points, and every
    k*tokens-1 / k*tokens edge when there are at most ``points`` of those (so the grid stays
    bounded by about 2 x points plus the spec points, whatever the number of documents)."""
    top = math.ceil(factor * workload.working_set)
    # more points than integers in 0..top round to every integer: the same set, bounded work
    even = grids.even(top, min(max(points, 2), top + 1))
    tokens = max(workload.tokens, 1)
    multiples = top // tokens + 1
    edges = ([value for k in range(multiples) for value in (k * tokens - 1, k * tokens)]
             if 2 * multiples <= points else [])
    values = {int(v) for v in (*even, *edges, *spec_points) if 0 <= v}
    return tuple(sorted(values))


def grid_capacities(workload: DocumentWorkload, steps: int = 13,
                    factor: float = 1.25) -> tuple[int, ...]:
    """A coarse axis 0..factor x working set for the heatmap: evenly spaced, plus the
    working set and one token less, so the heatmap shows the cliff's exact edge."""
    top = math.ceil(factor * workload.working_set)
    edge = {workload.working_set - 1, workload.working_set} - {-1}
    steps = min(max(steps, 2), top + 1)        # as in cliff_capacities: the same set
    return tuple(sorted({int(v) for v in grids.even(top, steps)} | edge))


def cliff_size(workload: DocumentWorkload, points: int = 64, factor: float = 1.25) -> int:
    """At most how many capacities ``cliff_capacities`` gives before its spec points
    (computed without building the grid)."""
    top = math.ceil(factor * workload.working_set)
    multiples = top // max(workload.tokens, 1) + 1
    return min(max(points, 2), top + 1) + (2 * multiples if 2 * multiples <= points else 0)


def grid_size(workload: DocumentWorkload, steps: int = 13, factor: float = 1.25) -> int:
    """At most how many capacities ``grid_capacities`` gives (without building it)."""
    return min(max(steps, 2), math.ceil(factor * workload.working_set) + 1) + 2


def default_sweeps(workload: DocumentWorkload, gpu_spec: Sequence[int],
                   cpu_spec: Sequence[int], cpu_sweep_gpu: int, points: int = 64,
                   grid_steps: int = 13) -> list[Sweep]:
    """The three sweeps with their default grids (spec points always included)."""
    axis = grid_capacities(workload, grid_steps)
    return [
        Sweep("gpu_cliff", cliff_capacities(workload, gpu_spec, points), (0,)),
        Sweep("cpu_cliff", (cpu_sweep_gpu,), cliff_capacities(workload, cpu_spec, points)),
        Sweep("grid", axis, axis),
    ]


def run_sweep(workload: DocumentWorkload, sweep: Sweep, method: str = "onepass") -> pl.DataFrame:
    """Events of one sweep: simulate's events with a leading ``sweep`` column."""
    events = simulate(workload.accesses(), sweep.gpu_capacities, sweep.cpu_capacities, method)
    return events.select(pl.lit(sweep.name, dtype=SWEEP).alias("sweep"), pl.all())


def aggregate(events: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Hits by tier per (sweep, GPU capacity, CPU capacity, pass)."""
    tier = pl.col("tier")
    return (
        events.lazy()
        .group_by(GROUP_KEYS)
        .agg(accesses=pl.len(), gpu_hits=(tier == "gpu").sum(), cpu_hits=(tier == "cpu").sum(),
             misses=(tier == "miss").sum())
        .sort(GROUP_KEYS)
        .collect()
        .cast({name: AGGREGATE_SCHEMA[name] for name in ("accesses", "gpu_hits", "cpu_hits",
                                                         "misses")})
        .match_to_schema(AGGREGATE_SCHEMA)
    )


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> Path:
    """Write ``frame`` to ``path`` (zstd, ``pipeline.base.staging.parquet_bytes``), atomically."""
    with atomic_output(path, binary=True) as handle:
        handle.write(parquet_bytes(frame))
    return Path(path)


def sweep_frames(workload: DocumentWorkload, sweeps: Sequence[Sweep], method: str = "onepass",
                 progress: Callable[[str], None] | None = None
                 ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Every sweep's events (by sweep name) and the aggregates of all of them; writes nothing."""
    events, aggregates = {}, []
    for number, sweep in enumerate(sweeps, start=1):
        events[sweep.name] = run_sweep(workload, sweep, method)
        aggregates.append(aggregate(events[sweep.name]))
        if progress:
            progress(f"sweep {number}/{len(sweeps)} {sweep.name}: {sweep.pairs} capacity pairs, "
                     f"{events[sweep.name].height} events")
    return events, pl.concat(aggregates)


def one_pair(accesses: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """The accesses once each: an events log (``<sweep>.parquet``) repeats every access per
    (GPU, CPU) capacity pair, and its ``stack_distance`` does not depend on the pair, so the
    first pair's rows are kept (sweep, then capacities); a plain access table passes as is."""
    frame = accesses.lazy()
    keys = [c for c in ("sweep", "gpu_capacity", "cpu_capacity")
            if c in frame.collect_schema().names()]
    if not keys:
        return frame
    return frame.filter(pl.struct(keys) == pl.struct(keys).first())


def hit_steps(accesses: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The whole GPU hit curve per pass, from the ``stack_distance`` column.

    One row per (pass, distinct stack distance d): ``hits`` = the pass's hits at every GPU
    capacity in [d, next d). Exact for capacities >= the largest item size (below it,
    oversize items change the stack: use ``pipeline.onepass.stack_distance.lru_hit_counts``). An
    events log may be passed whole: each access counts once (``one_pair``).
    """
    return (
        one_pair(accesses)
        .filter(pl.col("stack_distance").is_not_null())
        .group_by("pass_index", "stack_distance")
        .agg(new_hits=pl.len())
        .sort("pass_index", "stack_distance")
        .select("pass_index", pl.col("stack_distance").alias("capacity"),
                hits=pl.col("new_hits").cum_sum().over("pass_index").cast(pl.Int64))
        .collect()
    )


def hits_at(accesses: pl.DataFrame, capacities: Sequence[int]) -> pl.DataFrame:
    """GPU hits per (pass, capacity) read off ``hit_steps``: columns pass_index, capacity, hits.

    ``accesses`` needs ``pass_index``, ``size`` and ``stack_distance`` (see
    ``pipeline.onepass.events.with_stack_distances``, or any events log: each access counts once);
    every capacity must be >= the largest size.
    """
    accesses = one_pair(accesses).collect()
    largest = accesses["size"].max() or 0
    too_small = [c for c in check_capacity_list("capacities", capacities) if c < largest]
    if too_small:
        raise ValueError(f"capacity {too_small[0]} is below the largest item ({largest}): the "
                         "stack-distance curve is exact only from there; use "
                         "pipeline.onepass.stack_distance.lru_hit_counts")
    grid = (pl.DataFrame({"capacity": list(capacities)}, schema={"capacity": pl.Int64})
            .join(accesses.select(pl.col("pass_index").unique()), how="cross")
            .sort("capacity"))
    # Both sides are sorted by capacity (hit_steps by pass, then capacity).
    return (grid.join_asof(hit_steps(accesses), on="capacity", by="pass_index",
                           strategy="backward", check_sortedness=False)
            .with_columns(pl.col("hits").fill_null(0))
            .sort("pass_index", "capacity")
            .select("pass_index", "capacity", "hits"))


def second_pass(aggregates: pl.DataFrame, sweep: str) -> pl.DataFrame:
    """The second pass's rows of one sweep, with ``hits`` = GPU + CPU hits appended."""
    return (aggregates
            .filter(pl.col("sweep") == sweep, pl.col("pass_index") == SECOND_PASS)
            .with_columns(hits=pl.col("gpu_hits") + pl.col("cpu_hits")))


def cliff_export(aggregates: pl.DataFrame, capacities: Sequence[int]) -> dict[str, int]:
    """cliff.json: second-pass hits (gpu + cpu) at each GPU capacity of the gpu_cliff sweep."""
    rows = second_pass(aggregates, "gpu_cliff").select("gpu_capacity", "hits")
    found = dict(zip(rows["gpu_capacity"].to_list(), rows["hits"].to_list()))
    return {str(c): int(found[c]) for c in capacities}


def cpu_cliff_export(aggregates: pl.DataFrame, capacities: Sequence[int]) -> dict[str, int]:
    """cpu_cliff.json: second-pass misses at each CPU capacity of the cpu_cliff sweep."""
    rows = second_pass(aggregates, "cpu_cliff").select("cpu_capacity", "misses")
    found = dict(zip(rows["cpu_capacity"].to_list(), rows["misses"].to_list()))
    return {str(c): int(found[c]) for c in capacities}
