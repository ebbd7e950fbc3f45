"""``plan --tier-costs CPU,DISK --target-ttft-p90-ms MS``: the cheapest LMCache CPU + disk
stack whose TTFT p90 under a load meets a target (with ``--target-tpot-p90-ms``, its TPOT
p90 too, as ``plan.load.meets_targets``).

Each (CPU, disk) point of ``plan.tiers``' grid is one engine run, as ``simulate --tier`` runs
it: vLLM's engine at ``--gpu`` on the time clock under the load (``--speed``, ``--rate`` or
``--concurrency``), LMCache's stack as its CPU tier, each step priced by the step-time model
with the stack's loads (bytes / GB/s + latency per tier, ``--cpu-link`` and ``--disk-link``)
in place of its reload term. The points run cheapest first and the first that meets the
target is the answer: exact at that grid point (TTFT under load is not monotone in either
tier, so there is no bisection; a cheaper stack between grid points may exist). The
step-time model must price in the compiled loop (roofline or a fitted linear model) and
back the plan (``steptime.alone.plan_with_latency``); otherwise one line says why.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from pipeline.base.arguments import derive
from pipeline.base.durations import format_duration
from pipeline.base.errors import CLIError, UsageError
from pipeline.components.lmcache_stack import CPU_LINK_GBPS, LMCacheStack, Tier
from pipeline.engine.compiled import compiled_model
from pipeline.plan.load import loaded_requests, meets_targets
from pipeline.engine.tier_options import stack_chunk
from pipeline.plan.tiers import tier_grid
from pipeline.sizes.units import capacity_tokens, kv_from_args, one_of
from pipeline.steptime.metrics import run_metrics
from pipeline.steptime.options import latency_from_args

__all__ = ["tier_ttft_plan"]


def _distinct_chunks(requests, per: int) -> int:
    """The distinct chunk keys of the requests' prompts (a chunk's key: its last block's)."""
    keys = [r.prompt_keys[per - 1::per] for r in requests if r.prompt_keys is not None]
    return int(np.unique(np.concatenate(keys)).size) if keys else 0


def _checked_model(args: argparse.Namespace):
    latency = latency_from_args(args)
    if latency is None:
        raise UsageError("--target-ttft-p90-ms needs a step-time model: --latency roofline "
                         "or FILE")
    if compiled_model(latency.step_ms) is None:
        raise UsageError(f"--tier-costs: the stack's loads are priced in the compiled loop, "
                         f"and the step model {latency.label} is not (roofline or a fitted "
                         f"linear model)")
    if args.disk_link is None:
        raise UsageError("--disk-link GBPS:LATENCY_MS: --tier-costs with --target-ttft-p90-ms "
                         "prices the disk's loads by it (no default)")
    return latency


def tier_ttft_plan(args: argparse.Namespace) -> int:
    """The cheapest grid point meeting the TTFT p90 target (exit 0), or the one with the
    lowest TTFT p90 (exit 1); text or ``--json``."""
    from pipeline.engine.config import SchedulerConfig
    from pipeline.engine.loop import simulate
    latency = _checked_model(args)
    given = one_of(args.gpu, "--gpu", "a list only with --fleet")
    if given is None:
        raise UsageError("--tier-costs: give --gpu SIZE (the GPU KV capacity)")
    tokens = args.output_tokens
    args = derive(args, block_size=args.block_size or 16,
                  output_tokens=1 if tokens in (None, "trace") else tokens)
    size = args.block_size
    chunk = stack_chunk(args.chunk_size, size)
    kv = kv_from_args(args, "--tier-costs (GiB)")
    workload, load, requests, concurrency = loaded_requests(args, latency, kv)
    blocks = capacity_tokens(given, kv, size, "--gpu") // size
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    if blocks < -(-(longest - 1) // size) + 1:
        raise CLIError(f"--gpu: {blocks * size:,} tokens cannot hold the largest request "
                       f"({longest:,} tokens)")
    config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=longest, block_size=size,
                             max_num_seqs=args.max_num_seqs,
                             max_num_batched_tokens=args.max_num_batched_tokens)
    (cpu_gbps, cpu_ms), (disk_gbps, disk_ms) = args.cpu_link or (CPU_LINK_GBPS, 0.0), \
        args.disk_link
    top = _distinct_chunks(requests, chunk // size)
    costs = args.tier_costs

    def cost(cpu: int, disk: int) -> float:
        return kv.bytes(cpu) / 2**30 * costs[0] + kv.bytes(disk) / 2**30 * costs[1]

    grid = sorted(((cost(c, d), c, d) for c in tier_grid(top, chunk, False)
                   for d in tier_grid(top, chunk, True)), key=lambda p: (p[0], p[1]))
    target, runs, answer = args.target_ttft_p90_ms, [], None
    tpot = getattr(args, "target_tpot_p90_ms", None)
    for price, cpu, disk in grid:
        tiers = [Tier("cpu", cpu, cpu_gbps, cpu_ms)] + (
            [Tier("disk", disk, disk_gbps, disk_ms)] if disk else [])
        result = simulate(requests, config, cpu_tier=LMCacheStack(tiers, size,
                                                                  float(kv.bytes_per_token),
                                                                  chunk),
                          clock="time", step_ms=latency.step_ms, concurrency=concurrency,
                          decode_run_ms=getattr(latency, "decode_run_ms", None))
        figures = run_metrics(result.requests, result.steps, latency.label)
        runs.append({"cpu_tokens": cpu, "disk_tokens": disk, "cost": price,
                     "cpu_gib": kv.bytes(cpu) / 2**30, "disk_gib": kv.bytes(disk) / 2**30,
                     "ttft_ms_p90": figures["ttft_ms_p90"], "ttft_ms_p50": figures["ttft_ms_p50"],
                     "tpot_ms_p90": figures.get("tpot_ms_p90"),
                     "hit_ratio": figures["hit_ratio"], "overloaded": figures["overloaded"],
                     "load_ms": float(result.requests["load_ms"].sum())})
        if meets_targets(figures, target, tpot):
            answer = runs[-1]
            break
    met = answer is not None
    if not met:
        answer = min(runs, key=lambda r: (r["ttft_ms_p90"], r["cost"]))
    search = (f"{len(runs)} of {len(grid)} grid points run, cheapest first (CPU x disk, "
              f"log-spaced; each one engine run; TTFT under load is not monotone in a tier: "
              f"no bisection); a cheaper stack between grid points may exist")
    document = {"target": {"kind": "ttft_p90_under_load", "ttft_ms_p90": target,
                           "load": load.label,
                           **({"tpot_ms_p90": tpot} if tpot is not None else {})},
                "gpu_tokens": blocks * size, "chunk_size": chunk,
                "costs_per_gib": {"cpu": costs[0], "disk": costs[1]},
                "links": {"cpu": [cpu_gbps, cpu_ms], "disk": [disk_gbps, disk_ms]},
                "step_time_model": latency.label, "met": met, "answer": answer,
                "runs": len(runs), "grid_points": len(grid), "search": search,
                "tried": runs}
    if args.json:
        sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
        return 0 if met else 1
    print(f"models: GPU vllm (vLLM 0.33.0 block pool) at {blocks * size:,} tokens, tiers "
          f"LMCache 0.5.6 stack (chunks of {chunk} tokens): cpu at {cpu_gbps:g} GB/s + "
          f"{cpu_ms:g} ms, then disk at {disk_gbps:g} GB/s + {disk_ms:g} ms; loads "
          f"synchronous in the step, in place of the step model's reload term")
    both = f" and TPOT p90 <= {tpot:g} ms" if tpot is not None else ""
    print(f"target: TTFT p90 <= {target:g} ms{both} at {load.label} [{latency.label}]")
    print(f"workload: {workload.label}: {len(requests):,} requests, {top:,} distinct chunks")
    state = "meets" if met else "NOT met; the lowest TTFT p90 found"
    print(f"answer ({state}): CPU {answer['cpu_tokens']:,} tokens = {answer['cpu_gib']:.3g} "
          f"GiB + disk {answer['disk_tokens']:,} tokens = {answer['disk_gib']:.3g} GiB: TTFT "
          f"p90 {format_duration(answer['ttft_ms_p90'])}, hit ratio "
          f"{100 * (answer['hit_ratio'] or 0):.1f} %, cost {answer['cost']:.4g} at "
          f"{costs[0]:g} / {costs[1]:g} per GiB")
    print(f"search: {search}")
    return 0 if met else 1
