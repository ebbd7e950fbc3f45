"""Benchmark: ``simulate`` with and without vLLM's native offloading, and against vLLM's own
Scheduler + OffloadingConnector scheduler side driven on CPU.

The synthetic workload of scripts/bench_simulate.py (says so: shared prefixes, Poisson
arrivals by step, a light and a heavy load). Per load: kvlab's time on ``--requests``
requests without a CPU tier and with the native tier (``--cpu-chunks`` chunks of one
block, LRU), their ratio; then vLLM's scheduler + connector
(scripts/vllm_offload_engine_reference.py) and kvlab on the first ``--vllm-requests``
requests, whether every request's result is identical, and the speedup. CPU process time
(the machine may be shared): kvlab's runs the best of ``--repeats``.

    .venv/bin/python scripts/bench_native_offload.py
    .venv/bin/python scripts/bench_native_offload.py --requests 2000 --vllm-requests 300
    .venv/bin/python scripts/bench_native_offload.py --simple [--lazy]

``--simple``: vLLM's SimpleCPUOffloadConnector instead (``--cpu-chunks`` slots, eager
stores or ``--lazy``), against scripts/vllm_simple_offload_reference.py.

Not a test: minutes (vLLM's side dominates). Needs scripts/ensure_vllm_sources.sh.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_offload_engine_reference as reference  # noqa: E402
import vllm_simple_offload_reference as simple_reference  # noqa: E402
from bench_simulate import LOADS, workload  # noqa: E402

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.engine.native_tier import NativeSpec  # noqa: E402

COLUMNS = ("request", "first_scheduled_step", "first_token_step", "finish_step",
           "gpu_hit_tokens", "cpu_hit_tokens", "preemptions", "output_tokens", "load_step",
           "load_done_step")


def timed(function, repeats: int = 1):
    """(the result, the least CPU seconds of ``repeats`` calls)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        out = function()
        best = min(best, time.process_time() - start)
    return out, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--vllm-requests", type=int, default=1_000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--num-gpu-blocks", type=int, default=4000)
    parser.add_argument("--cpu-chunks", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--repeats", type=int, default=5,
                        help="kvlab's time: the best of this many runs (default 5)")
    parser.add_argument("--skip-vllm", action="store_true", help="time kvlab only")
    parser.add_argument("--simple", action="store_true",
                        help="the SimpleCPUOffloadConnector (--cpu-chunks slots)")
    parser.add_argument("--lazy", action="store_true", help="with --simple: lazy_offload")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.lazy and not args.simple:
        parser.error("--lazy needs --simple")
    if not args.skip_vllm and not reference.have_sources():
        print("vLLM sources absent: run scripts/ensure_vllm_sources.sh", file=sys.stderr)
        return 2
    config = SchedulerConfig(num_gpu_blocks=args.num_gpu_blocks, max_model_len=2048)
    if args.simple:
        offload = simple_reference.offload_config(args.cpu_chunks, args.lazy)
        spec, run_vllm = offload.spec, simple_reference.run_vllm
        tier = (f"SimpleCPUOffloadConnector {args.cpu_chunks:,} slots "
                f"({'lazy' if args.lazy else 'eager'})")
    else:
        offload = reference.offload_config(args.cpu_chunks)
        spec = NativeSpec(num_chunks=args.cpu_chunks,
                          kv_bytes_per_token=reference.KV_BYTES_PER_TOKEN)
        run_vllm, tier = reference.run_vllm, f"native tier {args.cpu_chunks:,} chunks (lru)"
    print(f"synthetic workload: {args.requests:,} requests, {args.groups} shared prefixes, "
          f"{args.num_gpu_blocks} GPU blocks, {tier}; vLLM on the first "
          f"{args.vllm_requests:,}")
    _, ready = timed(lambda: simulate(workload(20, 2, 1.0, args.seed), config, offload=spec))
    print(f"kvlab's kernels ready in {ready:.1f} s CPU (numba's cache), not counted below")
    print(f"{'load':<7}{'plain s':>9}{'tier s':>9}{'ratio':>7}{'CPU hit':>9}"
          f"{'vLLM s':>9}{'kvlab s':>9}{'speedup':>9}  identical")
    status = 0
    for name, rate in LOADS.items():
        requests = workload(args.requests, args.groups, rate, args.seed)
        _, plain_s = timed(lambda: simulate(requests, config), args.repeats)
        result, native_s = timed(lambda: simulate(requests, config, offload=spec), args.repeats)
        hit = result.requests["cpu_hit_tokens"].sum() / result.requests["prompt_tokens"].sum()
        theirs_s = ours_s = float("nan")
        same = "-"
        if not args.skip_vllm:
            part = requests[:args.vllm_requests]
            mine, ours_s = timed(lambda: simulate(part, config, offload=spec), args.repeats)
            (theirs, _), theirs_s = timed(lambda: run_vllm(part, config, offload))
            rows = {row[0]: tuple(row[1:]) for row in mine.requests.select(COLUMNS).iter_rows()}
            same = "yes" if rows == theirs else "NO"
            status |= same != "yes"
        print(f"{name:<7}{plain_s:>9.3f}{native_s:>9.3f}{native_s / plain_s:>6.2f}x"
              f"{hit:>9.1%}{theirs_s:>9.1f}{ours_s:>9.3f}{theirs_s / ours_s:>8.0f}x  {same}")
    return status


if __name__ == "__main__":
    sys.exit(main())
