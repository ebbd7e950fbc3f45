"""Benchmark: ``plan --fleet --cost`` over at least 200 configurations of the shared
Mooncake trace, on the process pool and on Ray, side by side.

The grid: routers x aggregated instance counts x GPU blocks, plus routers x prefill x
decode instance counts x GPU blocks (disaggregated, KV over 25 GB/s + 0.5 ms), priced on
H100 presets with Llama-3.1-8B's KV and roofline step times (at vidur's measured
efficiency, labelled so by the plan). Prints, per executor, the wall seconds, the points planned and simulated and
the process CPU seconds per simulation the plan reports, and the ratio Ray / pool.

    .venv/bin/python scripts/bench_plan_cost.py                # the whole grid, both executors
    .venv/bin/python scripts/bench_plan_cost.py --limit 800 --executors local
    .venv/bin/python scripts/bench_plan_cost.py --executors local \
        --tier-options none,native:2GiB,cpu:2GiB+disk:20GiB:5:0.2    # x 3 tiers

Not a test: minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl",
           ROOT.parents[1] / "shared" / "traces" / "synthetic_trace.jsonl")


def grid_arguments(trace: Path, limit: int | None, tiers: str | None = None) -> list[str]:
    """The plan's options: 3 routers x (6 aggregated counts + 4 x 3 prefill/decode
    counts) x 4 GPU block counts = 216 configurations (x the ``--tier-options`` given)."""
    arguments = [str(trace), "--format", "mooncake", "--fleet", "--cost",
                 "--router", "round-robin,least-loaded,prefix-precise",
                 "--instances", "1,2,3,4,6,8", "--prefill-instances", "1,2,3,4",
                 "--decode-instances", "1,2,4", "--kv-transfer", "25GB/s:0.5ms",
                 "--gpu", "400blocks,550blocks,700blocks,850blocks",
                 "--block-size", "512", "--model", "llama-3.1-8b",
                 "--target-ttft-p90-ms", "2000", "--speed", "1", "--json"]
    return arguments + (["--limit", str(limit)] if limit else []) \
        + (["--tier-options", tiers] if tiers else [])


def run(arguments: list[str], executor: str, jobs: int) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipeline", "plan", *arguments,
                           "--executor", executor, "--jobs", str(jobs)], cwd=ROOT,
                          text=True, capture_output=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise SystemExit(f"plan --executor {executor} failed: {done.stderr.strip()}")
    return wall, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=next(
        (p for p in SOURCES if p.is_file()), SOURCES[0]))
    parser.add_argument("--limit", type=int, default=None,
                        help="the trace's first N requests (default: all)")
    parser.add_argument("--executors", default="local,ray")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tier-options", default=None,
                        help="search these CPU tiers too (plan's --tier-options)")
    args = parser.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"--trace {args.trace}: not found (the shared Mooncake trace)")
    arguments = grid_arguments(args.trace, args.limit, args.tier_options)
    walls = {}
    for executor in args.executors.split(","):
        wall, document = run(arguments, executor, args.jobs)
        walls[executor] = wall
        search = document["search"]
        answers = ", ".join(
            f"{a['router']}: {a.get('kind')}{' + ' + a['tier'] if a.get('tier') else ''} "
            f"${a.get('usd_per_hour') or float('nan'):.2f}/h"
            for a in document["answers"])
        print(f"{executor:>5}: {wall:7.1f} s wall, {search['simulated']} of "
              f"{search['planned']} configurations simulated ({search['pruned']} pruned, "
              f"{search['not_fitting']} not fitting), "
              f"{search['cpu_s_per_simulation'] or 0:.2f} s CPU per simulation; {answers}")
    if {"local", "ray"} <= walls.keys():
        print(f"ray / local: {walls['ray'] / walls['local']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
