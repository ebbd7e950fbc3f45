"""``plan --tier-costs CPU,DISK``: the cheapest LMCache CPU + disk stack for a hit-ratio target.

vLLM's allocator gives each request's GPU hit at ``--gpu`` (the ``vllm`` GPU model, once);
LMCache's stack (``pipeline.onepass.tier_stacks.lmcache_stack_hits``: CPU, then disk, a hit
promoted, requests one at a time) is replayed at every (CPU, disk) point of a grid: the CPU
tier from one chunk to every distinct chunk, the disk from none to every distinct chunk,
log-spaced. LMCache's stack is no stack algorithm (a larger tier can hit less), so there is
no one-pass curve and no bisection: every grid point is its own replay, and the answer is the
cheapest grid point that meets the target (cost = CPU GiB x CPU + disk GiB x DISK, the
costs per GiB as given: no default, prices are the user's). The answer is exact at that
point; a cheaper stack between grid points may exist, and the output says so.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from pipeline.base.arguments import derive
from pipeline.base.errors import CLIError, UsageError
from pipeline.catalog.model_api import GPU_MODELS
from pipeline.catalog.model_options import run_options
from pipeline.components.lmcache import lmcache_chunks
from pipeline.components.lmcache_stack import CPU_LINK_GBPS, CPU_LINK_SOURCE
from pipeline.onepass.tier_stacks import lmcache_stack_hits
from pipeline.engine.tier_options import stack_chunk
from pipeline.sizes import grids
from pipeline.trace.tiers import loaded_per_tier
from pipeline.sizes.units import capacity_tokens, kv_from_args, one_of
from pipeline.workloads.sources import load_workload
from pipeline.workloads.stream import TAIL_FIRST
from pipeline.workloads.stream_limits import model_capacities

__all__ = ["add_tier_plan_arguments", "tier_costs", "link", "tier_plan", "tier_grid",
           "GRID_POINTS"]

GRID_POINTS = 14


def tier_costs(text: str) -> tuple[float, float]:
    """argparse type of ``--tier-costs CPU,DISK``: two costs per GiB, >= 0, not both 0."""
    parts = text.split(",")
    try:
        costs = tuple(float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPU,DISK costs per GiB (numbers), got "
                                         f"{text!r}") from None
    if len(costs) != 2 or any(not np.isfinite(c) or c < 0 for c in costs) or not any(costs):
        raise argparse.ArgumentTypeError(f"expected CPU,DISK costs per GiB, >= 0 and not "
                                         f"both 0, got {text!r}")
    return costs


def link(text: str) -> tuple[float, float]:
    """argparse type of a tier's link: ``GBPS[:LATENCY_MS]`` (GB/s > 0, ms >= 0)."""
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(np.isfinite(values)) or values[0] <= 0 \
            or (len(values) == 2 and values[1] < 0):
        raise argparse.ArgumentTypeError(f"expected GBPS[:LATENCY_MS] (GB/s > 0, ms >= 0), "
                                         f"got {text!r}")
    return values[0], values[1] if len(values) == 2 else 0.0


def add_link_arguments(group) -> None:
    group.add_argument("--cpu-link", type=link, default=None, metavar="GBPS[:LATENCY_MS]",
                       help=f"with --target-ttft-p90-ms: the CPU tier's link (default "
                            f"{CPU_LINK_GBPS:g} GB/s + 0 ms, {CPU_LINK_SOURCE})")
    group.add_argument("--disk-link", type=link, default=None, metavar="GBPS:LATENCY_MS",
                       help="with --target-ttft-p90-ms: the disk's bandwidth and latency per "
                            "load (no default)")


def add_tier_plan_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tier stack (LMCache CPU + disk)")
    group.add_argument(
        "--tier-costs", type=tier_costs, metavar="CPU,DISK",
        help="plan the cheapest LMCache CPU + local disk stack for --target-hit-ratio or "
             "--target-ttft-p90-ms (under a load, each point an engine run) on a trace or "
             "--pattern: costs per GiB of CPU memory and of disk (yours: no default), e.g. "
             "4,0.1")
    add_link_arguments(group)


def tier_grid(top_chunks: int, chunk: int, zero: bool) -> list[int]:
    """Tokens: log-spaced whole chunks from one to ``top_chunks`` (and 0 with ``zero``)."""
    chunks = grids.log_spaced(1, max(top_chunks, 1), GRID_POINTS)
    return ([0] if zero else []) + sorted({int(c) * chunk for c in chunks})


def tier_plan(args: argparse.Namespace) -> int:
    """The cheapest grid point meeting ``--target-hit-ratio`` (exit 0), or the best one found
    (exit 1); text or ``--json``."""
    if args.target_hit_ratio is None:
        raise UsageError("--tier-costs: give --target-hit-ratio R or --target-ttft-p90-ms MS")
    for option in ("cpu_link", "disk_link"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option.replace('_', '-')}: prices loads for "
                             f"--target-ttft-p90-ms; a hit-ratio target takes no time")
    if args.path is None and args.pattern is None:
        raise UsageError("--tier-costs: give a trace PATH or --pattern")
    kv = kv_from_args(args, "--tier-costs (GiB)")
    workload = load_workload(args)
    try:
        stream = workload.block_stream()
    except ValueError as exc:
        raise CLIError(f"{workload.label}: {exc}") from None
    given = one_of(args.gpu, "--gpu", "a list only with --fleet")
    if given is None:
        raise UsageError("--tier-costs: give --gpu SIZE (the GPU KV capacity)")
    gpu = capacity_tokens(given, kv, stream.block_size, "--gpu")
    args = derive(args, gpu=[gpu])                  # tokens from here on
    gpu_options, cpu_options = run_options(args, stream.block_size, stream.requests,
                                           stream.blocks, workload)
    chunk = stack_chunk(cpu_options.get("chunk_size"), stream.block_size)
    gpu_hits = GPU_MODELS["vllm"](stream, model_capacities(stream, [gpu],
                                                           gpu_options.get("output_tokens", 1)),
                                  TAIL_FIRST, **gpu_options)[0]
    chunks = lmcache_chunks(stream, chunk, False)
    prompt = int(stream.prompt_tokens.sum())
    top = chunks.n_codes
    rows = []
    for cpu in tier_grid(top, chunk, False):
        for disk in tier_grid(top, chunk, True):
            split = lmcache_stack_hits(chunks, gpu_hits, (cpu, disk, 0))
            beyond = loaded_per_tier(split, chunk, chunks.prompt_tokens, gpu_hits)
            ratio = float((gpu_hits.sum() + beyond.sum()) / prompt) if prompt else 0.0
            cost = kv.bytes(cpu) / 2**30 * args.tier_costs[0] + \
                kv.bytes(disk) / 2**30 * args.tier_costs[1]
            rows.append({"cpu_tokens": cpu, "disk_tokens": disk, "hit_ratio": ratio,
                         "cost": cost, "cpu_gib": kv.bytes(cpu) / 2**30,
                         "disk_gib": kv.bytes(disk) / 2**30})
    meeting = [r for r in rows if r["hit_ratio"] >= args.target_hit_ratio]
    answer = min(meeting, key=lambda r: (r["cost"], r["cpu_tokens"])) if meeting else \
        max(rows, key=lambda r: r["hit_ratio"])
    cpu_only = [r for r in meeting if r["disk_tokens"] == 0]
    document = {"target_hit_ratio": args.target_hit_ratio, "gpu_tokens": gpu,
                "costs_per_gib": {"cpu": args.tier_costs[0], "disk": args.tier_costs[1]},
                "chunk_size": chunk, "grid_points": len(rows), "met": bool(meeting),
                "answer": answer,
                "cheapest_cpu_only": min(cpu_only, key=lambda r: r["cost"]) if cpu_only else None}
    if args.json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return 0 if meeting else 1
    print(f"models: GPU vllm (vLLM 0.33.0 block pool) at {gpu:,} tokens, tiers LMCache 0.5.6 "
          f"stack: cpu, then disk (chunks of {chunk} tokens), requests one at a time")
    print(f"workload: {workload.label}: {stream.requests:,} requests, {prompt:,} prompt tokens,"
          f" {top:,} distinct chunks; grid {len(rows)} points (CPU x disk, log-spaced; LMCache's"
          f" stack is no stack algorithm: each point replayed)")
    state = "meets" if meeting else "NOT met; the best found"
    print(f"answer ({state}): CPU {answer['cpu_tokens']:,} tokens = {answer['cpu_gib']:.3g} GiB"
          f" + disk {answer['disk_tokens']:,} tokens = {answer['disk_gib']:.3g} GiB: hit ratio "
          f"{answer['hit_ratio']:.4f} (target {args.target_hit_ratio}), cost "
          f"{answer['cost']:.4g} at {args.tier_costs[0]:g} / {args.tier_costs[1]:g} per GiB")
    if document["cheapest_cpu_only"] is not None:
        best = document["cheapest_cpu_only"]
        print(f"CPU tier alone: {best['cpu_tokens']:,} tokens = {best['cpu_gib']:.3g} GiB, "
              f"cost {best['cost']:.4g}")
    print("the cheapest point of the grid: a cheaper stack between grid points may exist")
    return 0 if meeting else 1
