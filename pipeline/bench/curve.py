"""Benchmark: exact LRU hit counts at many capacities, three ways, side by side.

(a) kvlab's ``LRUCache`` re-run per capacity (pure Python), (b) libCacheSim's LRU
``process_trace`` over its binary oracleGeneral trace, one fresh cache per capacity, and
(c) the one-pass stack-distance curve (``pipeline.onepass.stack_distance.lru_hit_counts``). Every hit
count that (a) and (b) produce is checked against (c); a mismatch exits with status 1.

Workload: Zipf(alpha=1.0) requests over ``--objects`` objects, sizes uniform 256..8192 fixed
per object, seeded; capacities evenly spaced from 5% to 100% of the distinct bytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from kvlab.kvsim import LRUCache
from pipeline.base.arguments import positive_int
from pipeline.onepass.stack_distance import hit_curve, lru_hit_counts
from pipeline.policies.reference import lcs_cache, write_oracle_trace

ZIPF_ALPHA = 1.0
SIZE_RANGE = (256, 8192)
CAPACITY_RANGE = (0.05, 1.00)      # fractions of the distinct bytes
LANDMARKS = (0.05, 0.50, 1.00)     # fractions whose hits each comparison prints
PYTHON_SAMPLE = 20                 # capacities (a) runs when it would otherwise extrapolate
ONE_PASS_REPEATS = 3               # (c) is timed as the median of this many runs


class Mismatch(Exception):
    """Two methods disagree on a hit count."""


# --------------------------------------------------------------------------- workload


def zipf_trace(requests: int, objects: int, seed: int,
               alpha: float = ZIPF_ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """(keys, sizes): Zipf(alpha) object ids (0 = most popular) and their fixed sizes."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, objects + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    keys = np.minimum(np.searchsorted(cdf, rng.random(requests), side="right"), objects - 1)
    object_sizes = rng.integers(SIZE_RANGE[0], SIZE_RANGE[1] + 1, size=objects)
    return keys.astype(np.int64), object_sizes[keys].astype(np.int64)


def distinct_bytes(keys: np.ndarray, sizes: np.ndarray) -> int:
    """Summed size of the distinct objects the trace requests."""
    _, first = np.unique(keys, return_index=True)
    return int(sizes[first].sum())


def capacity_grid(total_bytes: int, count: int) -> np.ndarray:
    """``count`` capacities evenly spaced over CAPACITY_RANGE of ``total_bytes``."""
    fractions = np.linspace(*CAPACITY_RANGE, num=count)
    return np.round(fractions * total_bytes).astype(np.int64)


def sample_rows(count: int, sample: int) -> np.ndarray:
    """``sample`` evenly spaced row indices out of ``count`` (all of them if fewer)."""
    return np.unique(np.round(np.linspace(0, count - 1, num=min(sample, count))).astype(int))


# --------------------------------------------------------------------------- the three methods


def one_pass_hits(keys: np.ndarray, sizes: np.ndarray,
                  capacities: np.ndarray) -> tuple[np.ndarray, float]:
    """(c) Hit counts from one stack-distance pass; seconds = median of ONE_PASS_REPEATS."""
    seconds = []
    for _ in range(ONE_PASS_REPEATS):
        start = time.perf_counter()
        hits = lru_hit_counts(keys, sizes, capacities)
        seconds.append(time.perf_counter() - start)
    return hits, statistics.median(seconds)


def libcachesim_hashpower(objects: int) -> int:
    """A hash table of 2**hashpower buckets, at least twice the object count.

    libCacheSim's default (24: 16 M buckets) costs far more per fresh cache than this trace
    needs; sizing it to the objects keeps (b) as fast as it can be.
    """
    return max(int(np.ceil(np.log2(max(objects, 2)))) + 1, 10)


def libcachesim_hits(path: str, requests: int, capacities: np.ndarray,
                     hashpower: int) -> tuple[np.ndarray, float]:
    """(b) libCacheSim LRU, one fresh cache per capacity over the trace file."""
    import libcachesim as lcs

    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE,
                             lcs.ReaderInitParam(ignore_size_zero_req=False))
    hits = np.empty(capacities.size, dtype=np.int64)
    start = time.perf_counter()
    for row, capacity in enumerate(capacities):
        object_miss_ratio, _ = lcs_cache("lru", capacity, hashpower).process_trace(reader)
        hits[row] = round((1.0 - object_miss_ratio) * requests)
    return hits, time.perf_counter() - start


def kvlab_hits(keys: list[int], sizes: list[int],
               capacities: np.ndarray) -> tuple[np.ndarray, float]:
    """(a) kvlab's LRUCache re-run per capacity, one ``access`` call per request."""
    hits = np.empty(capacities.size, dtype=np.int64)
    start = time.perf_counter()
    for row, capacity in enumerate(capacities):
        hits[row] = sum(map(LRUCache(int(capacity)).access, keys, sizes))
    return hits, time.perf_counter() - start


# --------------------------------------------------------------------------- reporting


def check_same(method: str, got: np.ndarray, expected: np.ndarray,
               capacities: np.ndarray) -> None:
    """Raise Mismatch at the first capacity where ``got`` differs from ``expected``."""
    differ = np.flatnonzero(got != expected)
    if differ.size:
        row = differ[0]
        raise Mismatch(f"{method} gives {got[row]} hits at capacity {capacities[row]}, "
                       f"the one-pass curve {expected[row]} ({differ.size} capacities differ)")


def print_row(method: str, seconds: float, baseline: float, note: str = "") -> None:
    """One line of a comparison table: seconds and the ratio to the one-pass time."""
    print(f"  {method:<44} {seconds:10.3f} s {seconds / baseline:10.1f}x  {note}")


def time_warm_up() -> float:
    """Compile (or load from cache) the numba kernels on a tiny trace; return seconds."""
    start = time.perf_counter()
    lru_hit_counts(np.array([0, 1, 0]), np.array([1, 2, 1]), np.array([0, 3]))
    return time.perf_counter() - start


def measure_one_pass(keys: np.ndarray, sizes: np.ndarray, capacities: np.ndarray) -> None:
    """Print the one-pass throughput and its peak traced (numpy) memory."""
    _, seconds = one_pass_hits(keys, sizes, capacities)
    tracemalloc.start()
    lru_hit_counts(keys, sizes, capacities)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    start = time.perf_counter()
    curve = hit_curve(keys, sizes)
    curve_seconds = time.perf_counter() - start
    print(f"  lru_hit_counts at {capacities.size} capacities: {seconds:.3f} s "
          f"(median of {ONE_PASS_REPEATS}) = {keys.size / seconds / 1e6:.1f} M accesses/s")
    print(f"  peak memory of that call: {peak / 2**20:.1f} MiB (tracemalloc peak of numpy/Python "
          f"allocations; the numba kernels allocate nothing, all work arrays come from numpy; "
          f"the input trace itself, {(keys.nbytes + sizes.nbytes) / 2**20:.1f} MiB, excluded)")
    print(f"  hit_curve (the whole step function, {curve.capacities.size:,} steps from "
          f"{curve.capacities[0]:,} bytes up): {curve_seconds:.3f} s")


def compare(capacities: np.ndarray, keys: np.ndarray, sizes: np.ndarray, trace_path: str,
            hashpower: int, python_rows: np.ndarray | None) -> None:
    """Run (c), (b) and (a) at ``capacities``, check every count, print the table."""
    print(f"\n== {capacities.size} capacities, {capacities[0]:,} .. {capacities[-1]:,} bytes ==")
    expected, one_pass = one_pass_hits(keys, sizes, capacities)
    print_row("(c) one-pass stack distances", one_pass, one_pass,
              f"median of {ONE_PASS_REPEATS} runs")
    lcs_hits, lcs_seconds = libcachesim_hits(trace_path, keys.size, capacities, hashpower)
    check_same("libCacheSim", lcs_hits, expected, capacities)
    print_row("(b) libCacheSim LRU process_trace", lcs_seconds, one_pass,
              f"hits identical at all {capacities.size}")
    if python_rows is not None:
        rows = python_rows
        py_hits, py_seconds = kvlab_hits(keys.tolist(), sizes.tolist(), capacities[rows])
        check_same("kvlab LRUCache", py_hits, expected[rows], capacities[rows])
        if rows.size == capacities.size:
            print_row("(a) kvlab LRUCache, pure Python", py_seconds, one_pass,
                      f"hits identical at all {capacities.size}")
        else:
            estimate = py_seconds * capacities.size / rows.size
            print_row(f"(a) kvlab LRUCache, ESTIMATE from {rows.size} of {capacities.size}",
                      estimate, one_pass,
                      f"{py_seconds:.1f} s measured for {rows.size}; hits identical at those")
    print(landmark_line(keys, sizes))


def landmark_line(keys: np.ndarray, sizes: np.ndarray) -> str:
    """Hits at exactly 5 %, 50 % and 100 % of the distinct bytes (one-pass, rounded to the
    nearest byte), whatever the compared grid holds."""
    total = distinct_bytes(keys, sizes)
    marks = np.round(np.array(LANDMARKS) * total).astype(np.int64)
    hits = lru_hit_counts(keys, sizes, marks)
    shown = " / ".join(f"{fraction:.0%}" for fraction in LANDMARKS)
    return (f"  hits at {shown} of distinct bytes ({' / '.join(f'{m:,}' for m in marks)} "
            f"bytes): {' / '.join(f'{h:,}' for h in hits)} of {keys.size:,}")


# --------------------------------------------------------------------------- command line


def positive_counts(text: str) -> list[int]:
    """Parse '20,1000' into [20, 1000] (each >= 1)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"capacity counts must be >= 1, got {text!r}")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--requests", type=positive_int, default=2_000_000, help="trace length")
    parser.add_argument("--objects", type=positive_int, default=100_000,
                        help="distinct objects")
    parser.add_argument("--seed", type=int, default=20261003, help="numpy seed")
    parser.add_argument("--capacities", type=positive_counts, default=[20, 1000],
                        help="comma-separated capacity counts to compare (default 20,1000)")
    parser.add_argument("--full", action="store_true",
                        help=f"run kvlab's LRUCache at every capacity instead of "
                             f"extrapolating from {PYTHON_SAMPLE} (slow: ~0.5 s each)")
    parser.add_argument("--skip-python", action="store_true",
                        help="do not run kvlab's pure-Python LRUCache at all")


def python_rows_for(count: int, args: argparse.Namespace) -> np.ndarray | None:
    """Which capacities (a) runs: none, all, or an evenly spaced sample."""
    if args.skip_python:
        return None
    return np.arange(count) if args.full else sample_rows(count, PYTHON_SAMPLE)


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures; 1 if any hit count disagrees."""
    if importlib.util.find_spec("libcachesim") is None:
        print("error: libCacheSim is not installed; it is a dev/bench dependency: "
              ".venv/bin/pip install -e '.[dev]'", file=sys.stderr)
        return 1
    keys, sizes = zipf_trace(args.requests, args.objects, args.seed)
    total = distinct_bytes(keys, sizes)
    print(f"trace: {keys.size:,} requests, Zipf({ZIPF_ALPHA}) over {args.objects:,} objects "
          f"({np.unique(keys).size:,} requested, {total:,} distinct bytes), sizes "
          f"{SIZE_RANGE[0]}..{SIZE_RANGE[1]} fixed per object, seed {args.seed}")
    print(f"numba compile / cache load (excluded from all timings): {time_warm_up():.2f} s")
    with tempfile.TemporaryDirectory() as folder:
        trace_path = os.path.join(folder, "trace.oracleGeneral.bin")
        start = time.perf_counter()
        write_oracle_trace(trace_path, keys, sizes)
        hashpower = libcachesim_hashpower(np.unique(keys).size)
        print(f"libCacheSim trace file written in {time.perf_counter() - start:.2f} s "
              f"(excluded from (b)); LRU hashpower={hashpower} (default 24 is slower per cache)")
        try:
            for count in args.capacities:
                capacities = capacity_grid(total, count)
                compare(capacities, keys, sizes, trace_path, hashpower,
                        python_rows_for(count, args))
        except Mismatch as error:
            print(f"MISMATCH: {error}", file=sys.stderr)
            return 1
    print("\n== one-pass curve on its own ==")
    measure_one_pass(keys, sizes, capacity_grid(total, max(args.capacities)))
    return 0


if __name__ == "__main__":
    from pipeline.bench import standalone

    standalone("pipeline.bench.curve", __doc__, add_arguments, main)
