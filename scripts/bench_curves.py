"""Benchmark: curves under load on the shared Mooncake trace (20 GPU capacities x 4 loads).

Runs what ``python -m pipeline simulate TRACE --format mooncake --latency roofline --gpu
LO,HI --gpu-steps 20 --speed 0.5,1,2,4`` runs (the engine model once per point, the
one-pass concurrency-1 line) and prints the wall and CPU time of each part; the target is
under 60 s for the grid. Times are roofline figures (a lower bound from peak GPU numbers).

    .venv/bin/python scripts/bench_curves.py                      # block size 16, 2 jobs
    .venv/bin/python scripts/bench_curves.py --block-size 512 --jobs 2

Not a test: it takes a minute or more on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.workload import read_workload  # noqa: E402
from pipeline.sizes.units import model_shape  # noqa: E402
from pipeline.steptime import Roofline, gpu_preset  # noqa: E402
from pipeline.steptime.curves import Load, load_curves, upper_curve  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl"


def _children_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--capacities", type=int, default=20)
    parser.add_argument("--speeds", default="0.5,1,2,4")
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--gpu-type", default="H100")
    args = parser.parse_args()

    start, cpu = time.perf_counter(), _children_cpu()
    workload = read_workload(args.trace, "mooncake", args.block_size, 1)
    requests = workload.requests
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    config = SchedulerConfig(num_gpu_blocks=2, max_model_len=longest,
                             block_size=args.block_size)
    lo = (-(-longest // args.block_size) + 1) * args.block_size   # the largest request fits
    grid = sorted({int(c) for c in np.geomspace(lo, 25_000_000, args.capacities)})
    model = Roofline(model_shape(args.model), gpu_preset(args.gpu_type))
    loads = [Load("speed", float(s)) for s in args.speeds.split(",")]
    read_s = time.perf_counter() - start
    print(f"{args.trace.name}: {len(requests):,} requests, block size {args.block_size}, "
          f"{len(grid)} GPU capacities {grid[0]:,}..{grid[-1]:,} tokens x {len(loads)} loads "
          f"({', '.join(l.label for l in loads)}), {model.label}, {args.jobs} job(s)")
    print(f"read the trace: {read_s:.1f} s")
    t = time.perf_counter()
    upper = upper_curve(requests, grid, config, model)
    upper_s = time.perf_counter() - t
    print(f"concurrency-1 one-pass line ({len(grid)} capacities): {upper_s:.1f} s")
    t = time.perf_counter()
    curves = load_curves(requests, grid, loads, config, model, jobs=args.jobs)
    grid_s = time.perf_counter() - t
    total = time.perf_counter() - start
    print(f"grid of {curves.height} engine runs: {grid_s:.1f} s "
          f"({grid_s / curves.height:.2f} s per run over {args.jobs} job(s))")
    print(f"total {total:.1f} s wall, {_children_cpu() - cpu:.1f} s CPU (this process and its "
          f"workers); target < 60 s for 20 x 4: {'met' if total < 60 else 'NOT met'}")
    table = pl.concat([upper, curves]).pivot(
        on="load", index="gpu_capacity", values="hit_ratio").sort("gpu_capacity")
    with pl.Config(tbl_rows=40, tbl_cols=8, float_precision=3):
        print("hit ratio by GPU capacity (rows) and load (columns):")
        print(table)


if __name__ == "__main__":
    main()
