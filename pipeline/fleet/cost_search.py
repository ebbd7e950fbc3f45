"""The cheapest fleet that meets a target, over aggregated and disaggregated
configurations (``plan --fleet --cost``).

A point's price per hour is known before it runs (``fleet.cost``: GPUs x their price +
the CPU tier's memory and disk), so the search hands the points to the sweep cheapest first and
the sweep never starts a point that costs more than an answer its router and kind
(aggregated or disaggregated) already have by then: such a point cannot be that answer
(points already running when an answer arrives finish, and count as simulated). A point whose GPU KV does not fit the GPU is not simulated either. The answers
are then the same as an exhaustive grid's (tests/test_fleet_cost_search.py checks that on
random grids), with the simulations counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from pipeline.fleet.cost import Prices, cheapest, with_cost
from pipeline.fleet.plan import GIB, Memory, Targets
from pipeline.fleet.sweep_point import Point

__all__ = ["KINDS", "kind_of", "point_price", "tier_gib", "SearchResult", "cheapest_search",
           "Setup", "search_setups", "combined", "closest_miss", "frontier"]

KINDS = ("aggregated", "disaggregated")


def kind_of(point: Point) -> str:
    return KINDS[1] if point.decode_instances else KINDS[0]


def tier_gib(tokens: int, memory: Memory) -> float:
    """GiB of ``tokens`` of KV (``memory_columns``' bytes per token)."""
    return tokens * (memory.kv_bytes_per_token or 0) * memory.gpus / GIB


def point_price(point: Point, prices: Prices, memory: Memory, disk_tokens: int = 0) -> float:
    """USD per hour of ``point`` (``with_cost``'s arithmetic, before simulating): its GPUs,
    and the CPU tier and disk of each engine that has them (``instances``: a disaggregated
    fleet's prefill engines), or one shared CPU pool."""
    engines = point.instances + point.decode_instances
    cpu_gib = tier_gib(memory.cpu_tokens, memory)
    cpu = cpu_gib if memory.cpu_shared else point.instances * cpu_gib
    return engines * prices.gpus_per_instance * prices.gpu_per_hour \
        + cpu * prices.cpu_per_gib_hour \
        + point.instances * tier_gib(disk_tokens, memory) * prices.disk_per_gib_hour


@dataclass(frozen=True)
class SearchResult:
    """``fleet``: every simulated point with its cost columns and ``kind``; ``answers``:
    per router and kind the cheapest point that fits and meets the targets (nulls when
    none does); the counts of points planned, simulated, pruned (priced above an answer)
    and not fitting one GPU."""

    fleet: pl.DataFrame
    answers: pl.DataFrame
    planned: int
    simulated: int
    pruned: int
    unfit: int

    def counts_line(self) -> str:
        return (f"{self.simulated} of {self.planned} points simulated ({self.pruned} priced "
                f"above an answer of their router and kind, {self.unfit} not fitting one "
                f"GPU)")


def _with_kind(frame: pl.DataFrame) -> pl.DataFrame:
    if "decode_instances" not in frame.columns:
        frame = frame.with_columns(decode_instances=pl.lit(0, pl.Int64))
    frame = frame.with_columns(pl.col("decode_instances").fill_null(0))
    return frame.with_columns(kind=pl.when(pl.col("decode_instances") > 0)
                              .then(pl.lit(KINDS[1])).otherwise(pl.lit(KINDS[0])))


#: ``run(points, skip, seen)``: simulate ``points`` in that order, never starting one for
#: which ``skip(point)`` is true by then, and call ``seen(point, row)`` with each
#: simulated point's ``fleet_aggregates`` row (a one-row frame) as it finishes
Runner = Callable[[list[Point], Callable[[Point], bool],
                   Callable[[Point, pl.DataFrame], None]], None]


def cheapest_search(points: Sequence[Point], run: Runner, prices: Prices, memory: Memory,
                    kv_tokens_per_gpu: int | None, targets: Targets = Targets(),
                    answered: dict[tuple[str, str], float] | None = None,
                    disk_tokens: int = 0) -> SearchResult:
    """Simulate ``points`` cheapest first, skipping those priced above an answer of their
    (router, kind); see the module docstring. ``answered``: the cheapest price per
    (router, kind) met so far, shared by searches of several GPU types (updated here);
    ``disk_tokens``: a disk tier per engine with a CPU tier."""
    fits = [kv_tokens_per_gpu is None or p.gpu_blocks * memory.block_size <= kv_tokens_per_gpu
            for p in points]
    price = {p: point_price(p, prices, memory, disk_tokens) for p in points}
    order = [points[i] for *_, i in sorted(
        (price[p], p.instances + p.decode_instances, p.gpu_blocks, i)
        for i, p in enumerate(points) if fits[i])]
    answered = {} if answered is None else answered
    frames: list[pl.DataFrame] = []

    def skip(point: Point) -> bool:
        key = (point.router, kind_of(point))
        return key in answered and price[point] > answered[key] + 1e-9

    def seen(point: Point, row: pl.DataFrame) -> None:
        row = _with_kind(row)
        frames.append(row)
        if row.select(targets.meets()).item():
            key = (point.router, kind_of(point))
            answered[key] = min(answered.get(key, price[point]), price[point])

    run(order, skip, seen)
    fleet = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    if fleet.height:
        fleet = with_cost(fleet.sort("router", "instances", "decode_instances",
                                     "gpu_blocks"), memory, prices, kv_tokens_per_gpu,
                          tier_gib(disk_tokens, memory))
    answers = _answers(fleet, points, targets)
    return SearchResult(fleet, answers, len(points), len(frames),
                        len(order) - len(frames), len(points) - len(order))


#: the columns of an answer (``cheapest``'s), null where nothing was simulated
_ANSWER_NULLS = {**{name: pl.Float64 for name in (
    "total_gib", "gpu_gib", "cpu_gib", "ttft_p90_ms", "hit_ratio", "gpu_usd_per_hour",
    "memory_usd_per_hour", "usd_per_hour", "usd_per_million_output_tokens")},
    **{name: pl.Int64 for name in ("total_blocks", "instances", "decode_instances",
                                   "gpu_blocks", "total_tokens", "gpu_tokens", "cpu_tokens")},
    "fits_gpu": pl.Boolean}


@dataclass(frozen=True)
class Setup:
    """One GPU type x CPU tier of a cost search: its ``tags`` (columns its rows get, as
    ``gpu_type``, ``cpu_tier`` or ``tier``), its points, how to run them, its prices,
    memory (the CPU tier in ``cpu_tokens``), fit and disk tier (tokens per engine)."""

    tags: dict
    points: Sequence[Point]
    run: Runner
    prices: Prices
    memory: Memory
    kv_tokens_per_gpu: int | None = None
    disk_tokens: int = 0


def search_setups(setups: Sequence[Setup], targets: Targets = Targets()) -> SearchResult:
    """``cheapest_search`` of each setup in turn, sharing the answers met so far per
    (router, kind): a cheap setup's answer prunes the dearer points of the others (a point
    with more CPU tier costs more, so it is pruned sooner, never wrongly: a pruned point is
    priced above an answer it cannot beat). One result, each row with its setup's tags."""
    answered: dict[tuple[str, str], float] = {}
    return combined([(setup.tags, cheapest_search(
        setup.points, setup.run, setup.prices, setup.memory, setup.kv_tokens_per_gpu,
        targets, answered, setup.disk_tokens)) for setup in setups])


def combined(searches: Sequence[tuple[dict, SearchResult]]) -> SearchResult:
    """One result of several setups' searches, each row with its setup's tags."""
    def tagged(frame: pl.DataFrame, tags: dict) -> pl.DataFrame:
        return frame.with_columns(
            pl.lit(value, pl.Int64 if isinstance(value, int) else None).alias(name)
            for name, value in tags.items()) if frame.height else frame
    fleets = [tagged(s.fleet, tags) for tags, s in searches if s.fleet.height]
    return SearchResult(
        pl.concat(fleets, how="diagonal_relaxed") if fleets else pl.DataFrame(),
        pl.concat([tagged(s.answers, tags) for tags, s in searches], how="diagonal_relaxed"),
        *(sum(getattr(s, name) for _, s in searches)
          for name in ("planned", "simulated", "pruned", "unfit")))


def _answers(fleet: pl.DataFrame, points: Sequence[Point], targets: Targets
             ) -> pl.DataFrame:
    """Per router, load and kind of ``points``: ``cheapest``'s row (nulls where no
    simulated point of that kind meets the targets)."""
    keys = pl.DataFrame([(p.router, p.load, kind_of(p)) for p in points], orient="row",
                        schema={"router": pl.String, "load": pl.Float64, "kind": pl.String}
                        ).unique(maintain_order=True)
    parts = [cheapest(fleet.filter(pl.col("kind") == kind), targets.ttft_p90_ms,
                      targets.hit_ratio, targets.tpot_p90_ms, targets.goodput)
             .with_columns(kind=pl.lit(kind)) for kind in KINDS
             if fleet.height and fleet.filter(pl.col("kind") == kind).height]
    if not parts:                             # nothing simulated: every answer null
        return keys.with_columns(pl.lit(None, dtype).alias(name)
                                 for name, dtype in _ANSWER_NULLS.items())
    found = pl.concat(parts, how="diagonal_relaxed")
    return keys.join(found, on=["router", "load", "kind"], how="left")


def closest_miss(fleet: pl.DataFrame, router: str, targets: Targets) -> dict | None:
    """The point of ``router`` nearest the targets (``Targets.excess``: the least worst
    ratio to a target), or None."""
    mine = fleet.filter(pl.col("router") == router) if fleet.height else fleet
    if not mine.height:
        return None
    return mine.sort(targets.excess(), "usd_per_hour", nulls_last=True).row(0, named=True)


def frontier(fleet: pl.DataFrame) -> pl.DataFrame:
    """The points no other point beats on both price and TTFT p90 (cheaper and faster),
    by price."""
    if not fleet.height:
        return fleet
    ordered = fleet.drop_nulls("ttft_p90_ms").sort("usd_per_hour", "ttft_p90_ms")
    return ordered.filter(pl.col("ttft_p90_ms") < pl.col("ttft_p90_ms").cum_min().shift(1)
                          .fill_null(float("inf")))
