"""Benchmark of the policy family against libCacheSim (prints figures; not a test).

Trace: ``pipeline.bench.curve.zipf_trace`` (default 2,000,000 requests, Zipf(1.0) over
100,000 objects, sizes 256..8192 fixed per object). Per policy: accesses/s of one replay at
10 % of the distinct bytes, ours (numba kernel, LRU included; the class for a policy
whose entry declares no kernel) next to
libCacheSim's ``process_trace`` on the same trace file, with hit counts asserted equal; and
the wall time of a ``--points``-capacity curve (5 %..100 %): ours (LRU one pass, the others
one kernel per capacity on a thread per core) next to libCacheSim's (measured for
``--lcs-curve`` policies, else estimated as points x its one-capacity time).

A second table (``run_onepass_bench``) takes the same keys at unit size, where LRU, MRU and
OPT are stack algorithms: each one's curve from one pass next to our per-capacity replays and
libCacheSim's curve; ``belady`` is OPT without bypass, libCacheSim's definition, so its hits
are asserted equal to libCacheSim's (the family's ``opt`` bypasses and has no libCacheSim twin).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
import tempfile

import numpy as np

from pipeline.bench import timed
from pipeline.bench.curve import capacity_grid, distinct_bytes, libcachesim_hashpower, zipf_trace
from pipeline.policies import POLICIES
from pipeline.policies.reference import LCS_NAMES, lcs_hit_count, write_oracle_trace
from pipeline.catalog.policy_replay import class_hits, encode, hit_counts
from pipeline.catalog import entry, names

__all__ = ["run_bench", "run_onepass_bench", "add_arguments", "main"]


@contextmanager
def _oracle_trace(keys: np.ndarray, sizes: np.ndarray) -> Iterator[str]:
    """A temporary libCacheSim oracleGeneral file of the trace, removed afterwards."""
    fd, path = tempfile.mkstemp(suffix=".oracleGeneral.bin")
    os.close(fd)
    try:
        write_oracle_trace(path, keys, sizes)
        yield path
    finally:
        os.unlink(path)


def _ours_one(name, codes, sizes, capacity):
    """Hits and seconds at one capacity: the compiled replay where the entry declares one
    (without bypass, as libCacheSim), else the policy's class."""
    kernel = entry(name).replay_kernel
    hits, seconds = (timed(kernel, codes, sizes, capacity, bypass=False) if kernel is not None
                     else timed(class_hits, name, codes, sizes, capacity))
    return int(hits.sum()), seconds


def run_bench(requests: int = 2_000_000, objects: int = 100_000, points: int = 50,
              seed: int = 20261003, lcs_curve: tuple[str, ...] = ("lru",),
              policies: tuple[str, ...] = tuple(POLICIES), workers: int | None = None) -> list:
    """Run and print the benchmark; return its rows (dicts)."""
    keys, sizes = zipf_trace(requests, objects, seed)
    codes = encode(keys)
    total = distinct_bytes(keys, sizes)
    one = int(round(0.10 * total))
    grid = capacity_grid(total, points)
    hashpower = libcachesim_hashpower(objects)
    workers = workers or os.cpu_count() or 1
    print(f"trace: {requests:,} requests, Zipf(1.0) over {objects:,} objects, seed {seed}; "
          f"one capacity = 10% of {total:,} distinct bytes; curve = {points} capacities; "
          f"{workers} worker threads")
    for name in policies:                          # compile every kernel before timing
        if entry(name).replay_kernel is not None:
            entry(name).replay_kernel(codes[:1000], sizes[:1000], one)
    rows = []
    with _oracle_trace(keys, sizes) as path:
        print(f"{'policy':8}{'hits@10%':>10}{'ours M/s':>10}{'lcs M/s':>9}{'ratio':>7}"
              f"{'ours curve s':>13}{'lcs curve s':>12}{'speedup':>9}")
        for name in policies:
            hits, ours_s = _ours_one(name, codes, sizes, one)
            lcs_s = lcs_hits = None
            if name in LCS_NAMES:
                lcs_hits, lcs_s = timed(lcs_hit_count, name, path, requests, one, hashpower)
                if lcs_hits != hits:
                    raise AssertionError(f"{name}: ours {hits} hits, libCacheSim {lcs_hits}")
            _, curve_s = timed(hit_counts, name, codes, sizes, grid, workers=workers)
            lcs_curve_s, measured = None, False
            if lcs_s is not None and name in lcs_curve:
                _, lcs_curve_s = timed(lambda: [lcs_hit_count(name, path, requests, int(c),
                                                               hashpower) for c in grid])
                measured = True
            elif lcs_s is not None:
                lcs_curve_s = points * lcs_s
            row = {"policy": name, "hits": hits, "ours_mps": requests / ours_s / 1e6,
                   "lcs_mps": requests / lcs_s / 1e6 if lcs_s else None,
                   "curve_s": curve_s, "lcs_curve_s": lcs_curve_s,
                   "lcs_curve_measured": measured}
            rows.append(row)
            lcs_mps = f"{row['lcs_mps']:.1f}" if lcs_s else "n/a"
            ratio = f"{row['ours_mps'] / row['lcs_mps']:.2f}" if lcs_s else "n/a"
            lcs_c = (f"{lcs_curve_s:.1f}{'' if measured else '*'}" if lcs_curve_s else "n/a")
            speed = f"{lcs_curve_s / curve_s:.1f}x" if lcs_curve_s else "n/a"
            print(f"{name:8}{hits:>10,}{row['ours_mps']:>10.1f}{lcs_mps:>9}{ratio:>7}"
                  f"{curve_s:>13.2f}{lcs_c:>12}{speed:>9}", flush=True)
    print("* estimated: points x libCacheSim's one-capacity time. ratio = ours/lcs "
          "accesses per second (target >= 0.5); opt compared without bypass (= Belady); "
          "libCacheSim's wheel has no MRU.")
    return rows


def run_onepass_bench(requests: int = 2_000_000, objects: int = 100_000, points: int = 50,
                      seed: int = 20261003, lcs_curve: tuple[str, ...] = ("lru",),
                      workers: int | None = None) -> list:
    """Unit sizes: one-pass curves of the stack algorithms vs replays and libCacheSim."""
    keys, _ = zipf_trace(requests, objects, seed)
    codes = encode(keys)
    ones = np.ones_like(codes)
    total = int(codes.max()) + 1
    grid = capacity_grid(total, points)
    one = int(round(0.10 * total))
    hashpower = libcachesim_hashpower(objects)
    workers = workers or os.cpu_count() or 1
    print(f"unit sizes: {total:,} distinct objects; one capacity = {one:,} objects; curve = "
          f"{points} capacities; replay on {workers} threads")
    for name in ("lru", "mru", "opt"):                 # compile before timing
        hit_counts(name, codes[:1000], ones[:1000], [1, 2])
        entry(name).replay_kernel(codes[:1000], ones[:1000], 2)
    entry("opt").onepass.counts(codes[:1000], ones[:1000], [1, 2], bypass=False)
    rows = []
    with _oracle_trace(keys, ones) as path:
        print(f"{'policy':8}{'hits@10%':>10}{'one pass s':>11}{'replay s':>10}"
              f"{'lcs curve s':>12}{'vs replay':>10}{'vs lcs':>8}")
        for label, name, bypass in (("lru", "lru", True), ("mru", "mru", True),
                                    ("opt", "opt", True), ("belady", "opt", False)):
            onepass = entry(name).onepass
            counts, onepass_s = timed(onepass.counts, codes, ones, grid, bypass)
            replay_s = None
            if bypass:
                replayed, replay_s = timed(hit_counts, name, codes, ones, grid, "replay",
                                            workers)
                if not np.array_equal(replayed, counts):
                    raise AssertionError(f"{label}: one pass and replay differ")
            hits = int(onepass.counts(codes, ones, [one], bypass)[0])
            lcs_name = {"lru": "lru", "belady": "opt"}.get(label)
            lcs_s, measured = None, False
            if lcs_name:
                lcs_hits, lcs_one = timed(lcs_hit_count, lcs_name, path, requests, one,
                                           hashpower)
                if lcs_hits != hits:
                    raise AssertionError(f"{label}: ours {hits} hits, libCacheSim {lcs_hits}")
                lcs_s = points * lcs_one
                if label in lcs_curve or lcs_name in lcs_curve:
                    _, lcs_s = timed(lambda: [lcs_hit_count(lcs_name, path, requests, int(c),
                                                             hashpower) for c in grid])
                    measured = True
            row = {"policy": label, "hits": hits, "onepass_s": onepass_s,
                   "replay_s": replay_s, "lcs_curve_s": lcs_s, "lcs_curve_measured": measured}
            rows.append(row)
            replay = f"{replay_s:.2f}" if replay_s else "n/a"
            lcs = f"{lcs_s:.1f}{'' if measured else '*'}" if lcs_s else "n/a"
            print(f"{label:8}{hits:>10,}{onepass_s:>11.2f}{replay:>10}{lcs:>12}"
                  f"{(f'{replay_s / onepass_s:.1f}x' if replay_s else 'n/a'):>10}"
                  f"{(f'{lcs_s / onepass_s:.1f}x' if lcs_s else 'n/a'):>8}", flush=True)
    print("* estimated: points x libCacheSim's one-capacity time. belady = OPT without "
          "bypass (libCacheSim's Belady); opt = the family's OPT (bypass), no libCacheSim "
          "twin; libCacheSim's wheel has no MRU.")
    return rows


def run_block_bench(path: str, fractions: tuple[float, ...] = (0.01, 0.10, 0.50),
                    order: str = "tail-first") -> list:
    """Block mode on a Mooncake trace: each compiled GPU model (LRU: the ``block-lru`` one pass)
    next to its class replay, hit tokens asserted equal."""
    from pipeline.catalog.model_api import GPU_MODELS
    from pipeline.policies.blockmode import policy_gpu_model
    from pipeline.workloads.mooncake import MOONCAKE_BLOCK_SIZE, read_mooncake

    stream = read_mooncake(path).block_stream()
    distinct = int(stream.codes.max()) + 1
    blocks = [int(f * distinct) for f in fractions]
    capacities = [b * MOONCAKE_BLOCK_SIZE for b in blocks]
    print(f"block mode: {stream.requests:,} requests, {stream.codes.size:,} block reads, "
          f"{distinct:,} distinct blocks; GPU capacities {blocks} blocks, {order}")
    print(f"{'model':8}{'compiled s':>12}{'classes s':>11}")
    rows = []
    one_pass = GPU_MODELS["block-lru"]
    for name in [name for name in names(policy=True)
                 if entry(name).block_kernel or GPU_MODELS[name] is one_pass]:
        fast = GPU_MODELS[name]
        fast(stream, capacities[:1], order)                 # compile
        got, fast_s = timed(fast, stream, capacities, order)
        expected, slow_s = timed(policy_gpu_model(name, POLICIES[name]),
                                  stream, capacities, order)
        if not np.array_equal(got, expected):
            raise AssertionError(f"{name}: compiled block model differs from the classes")
        rows.append({"policy": name, "compiled_s": fast_s, "classes_s": slow_s})
        print(f"{name:8}{fast_s:>12.3f}{slow_s:>11.2f}", flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options, prefixed ``--policy-`` so ``python -m pipeline bench`` can add them."""
    parser.add_argument("--policy-requests", type=int, default=2_000_000,
                        help="requests of the Zipf trace (default %(default)s)")
    parser.add_argument("--policy-objects", type=int, default=100_000,
                        help="objects of the Zipf trace (default %(default)s)")
    parser.add_argument("--policy-points", type=int, default=50,
                        help="capacities of the curve (default %(default)s)")
    parser.add_argument("--policy-seed", type=int, default=20261003)
    parser.add_argument("--policy-lcs-curve", default="lru",
                        help="policies whose libCacheSim curve is measured, not estimated "
                             "(comma-separated, or 'all'; default lru)")
    parser.add_argument("--policy-names", default=",".join(POLICIES),
                        help="policies to time (default all)")
    parser.add_argument("--policy-block-trace", default=None,
                        help="only time block mode on this Mooncake trace (compiled models "
                             "vs their class replay)")
    parser.add_argument("--policy-no-onepass", action="store_true",
                        help="skip the unit-size one-pass table (lru, mru, opt, belady)")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed ``add_arguments`` options."""
    if args.policy_block_trace:
        run_block_bench(args.policy_block_trace)
        return 0
    lcs_curve = (tuple(LCS_NAMES) if args.policy_lcs_curve == "all"
                 else tuple(args.policy_lcs_curve.split(",")))
    run_bench(args.policy_requests, args.policy_objects, args.policy_points, args.policy_seed,
              lcs_curve, tuple(args.policy_names.split(",")))
    if not args.policy_no_onepass:
        run_onepass_bench(args.policy_requests, args.policy_objects, args.policy_points,
                          args.policy_seed, lcs_curve + (("belady",) if "opt" in lcs_curve
                                                         else ()))
    return 0


if __name__ == "__main__":
    from pipeline.bench import standalone

    standalone("pipeline.bench.policies", __doc__, add_arguments, main)
