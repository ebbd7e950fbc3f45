"""Benchmark: a large Mooncake-like timed trace through one engine configuration.

Synthetic (says so): the shared public Mooncake trace (``traces/synthetic_trace.jsonl``,
3,993 requests over ~17 minutes) repeated until ``--requests`` lines: copy c keeps the
hash ids that several base requests share (system prompts, shared documents) and renames
the others per copy, its timestamps shifted by c trace lengths and divided by ``--speed``.
The trace is written as Mooncake JSONL to ``--out`` (default /tmp), read back with
``simulate``'s reader, and run on the step clock (arrival step = timestamp /
``--ms-per-step``) with block size 512 (the trace's own). Prints wall and CPU seconds per
phase and the peak RSS.

    .venv/bin/python scripts/bench_simulate_mooncake.py                  # 1,000,000 requests
    .venv/bin/python scripts/bench_simulate_mooncake.py --requests 50000
    .venv/bin/python scripts/bench_simulate_mooncake.py --cpu-tokens 2000000 --disk-tokens 40000000

``--cpu-tokens`` / ``--disk-tokens``: LMCache's tier stack (CPU, then a local disk at 5 GB/s
+ 0.2 ms; Llama-3.1-8B's bytes per token for the loads; the step clock does not price them).

Not a test: it takes about a minute.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.engine.workload import read_workload  # noqa: E402

SOURCES = (ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl",
           ROOT.parents[1] / "shared" / "traces" / "synthetic_trace.jsonl")


def write_trace(source: Path, count: int, speed: float, path: Path) -> None:
    """The Mooncake-like trace of ``count`` lines (see the module docstring) to ``path``."""
    base = pl.read_ndjson(source).with_row_index("row")
    n = base.height
    span = int(base["timestamp"].max()) + 1000
    top = int(base["hash_ids"].list.max().max()) + 1
    ids = base.select("row", "hash_ids").explode("hash_ids")
    shared = ids.group_by("hash_ids").agg(pl.col("row").n_unique().alias("users"))
    lines = pl.DataFrame({"line": pl.int_range(0, count, eager=True)}).with_columns(
        row=(pl.col("line") % n).cast(pl.UInt32), copy=pl.col("line") // n)
    blocks = (lines.join(ids, on="row").join(shared, on="hash_ids")
              .with_columns(hash_ids=pl.when(pl.col("users") > 1).then(pl.col("hash_ids"))
                            .otherwise(pl.col("hash_ids") + pl.col("copy") * top))
              .group_by("line", maintain_order=True).agg("hash_ids"))
    out = (lines.join(base.drop("hash_ids"), on="row").join(blocks, on="line")
           .sort("line")
           .select(timestamp=((pl.col("timestamp") + pl.col("copy") * span) / speed)
                   .cast(pl.Int64), input_length="input_length",
                   output_length="output_length", hash_ids="hash_ids"))
    out.write_ndjson(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--speed", type=float, default=1.0,
                        help="divide the repeated trace's timestamps by this")
    parser.add_argument("--ms-per-step", type=float, default=50.0)
    parser.add_argument("--num-gpu-blocks", type=int, default=1000,
                        help="GPU blocks of 512 tokens (1000: ~512k tokens)")
    parser.add_argument("--cpu-tokens", type=int, default=0, help="LMCache CPU tier (0: none)")
    parser.add_argument("--disk-tokens", type=int, default=0,
                        help="and a local disk behind it (needs --cpu-tokens)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/kvlab-mooncake-like.jsonl"))
    parser.add_argument("--source", type=Path, default=next(
        (p for p in SOURCES if p.exists()), SOURCES[0]))
    args = parser.parse_args()
    if not args.source.exists():
        print(f"error: --source {args.source} not found", file=sys.stderr)
        return 2
    wall, cpu = time.perf_counter(), time.process_time()
    write_trace(args.source, args.requests, args.speed, args.out)
    print(f"synthetic Mooncake-like trace: {args.requests:,} lines -> {args.out} "
          f"({time.perf_counter() - wall:.1f} s)")
    wall, cpu = time.perf_counter(), time.process_time()
    workload = read_workload(args.out, "mooncake", 512)
    requests = workload.requests
    for r in requests:
        r.arrival_step = int(r.arrival_s * 1000.0 / args.ms_per_step)
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    read_wall, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
    config = SchedulerConfig(block_size=512, num_gpu_blocks=args.num_gpu_blocks,
                             max_model_len=longest)
    tier = None
    if args.cpu_tokens:
        from pipeline.components.lmcache_stack import LMCacheStack, Tier
        from pipeline.sizes.model_presets import preset
        stack = [Tier("cpu", args.cpu_tokens)] + (
            [Tier("disk", args.disk_tokens, 5.0, 0.2)] if args.disk_tokens else [])
        tier = LMCacheStack(stack, 512, preset("llama-3.1-8b").bytes_per_token, 512)
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(requests, config, cpu_tier=tier)
    sim_wall, sim_cpu = time.perf_counter() - wall, time.process_time() - cpu
    frame = result.requests
    hit = frame["gpu_hit_tokens"].sum() / frame["prompt_tokens"].sum()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20     # KiB -> GiB
    print(f"read {read_wall:.1f} s wall ({read_cpu:.1f} s CPU); simulate {sim_wall:.1f} s "
          f"wall ({sim_cpu:.1f} s CPU): {result.steps.height:,} steps, GPU hit {hit:.1%}, "
          f"{int(frame['preemptions'].sum()):,} preemptions; peak RSS {peak:.2f} GiB")
    if tier is not None:
        print(f"tier stack: CPU {int(frame['cpu_hit_tokens'].sum()):,} tokens loaded, of "
              f"which disk {int(frame['disk_hit_tokens'].sum()):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
