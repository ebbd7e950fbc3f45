"""Benchmark: vLLM's own scheduler on CPU vs kvlab's engine model, same timed requests.

Synthetic workload (says so): ``--requests`` prompts drawn from ``--groups`` shared prefixes
(system prompt + document, 64..1024 tokens) plus a unique question (8..256 tokens),
max_tokens 1..128, Poisson arrivals by step (seeded) at a light and a heavy load. Each load
runs through vLLM 0.33.0's ``Scheduler`` (scripts/vllm_scheduler_reference.py: its files
unmodified, a fake executor) and through ``pipeline.engine.loop.simulate``; the per-request
results must be identical; the CPU times (process time: the machine may be shared) are
printed side by side.

    .venv/bin/python scripts/bench_simulate.py                 # 10,000 requests
    .venv/bin/python scripts/bench_simulate.py --requests 1000 --async-scheduling

Not a test: it takes minutes (vLLM's side dominates). Needs scripts/ensure_vllm_sources.sh.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_scheduler_reference as reference  # noqa: E402

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.engine.request import SimRequest  # noqa: E402

LOADS = {"light": 0.05, "heavy": 2.0}          # requests per step


def workload(count: int, groups: int, rate: float, seed: int) -> list[SimRequest]:
    """Synthetic timed requests (see the module docstring)."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 32000, int(rng.integers(64, 1025))) for _ in range(groups)]
    popularity = 1.0 / np.arange(1, groups + 1)
    group = rng.choice(groups, size=count, p=popularity / popularity.sum())
    arrival = np.floor(np.cumsum(rng.exponential(1.0 / rate, count))).astype(np.int64)
    arrival -= arrival[0]
    out = []
    for i in range(count):
        question = rng.integers(0, 32000, int(rng.integers(8, 257)))
        prompt = np.concatenate((prefixes[group[i]], question))
        out.append(SimRequest(i, prompt, int(rng.integers(1, 129)),
                              arrival_step=int(arrival[i])))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--num-gpu-blocks", type=int, default=4000)
    parser.add_argument("--async-scheduling", action="store_true")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--skip-vllm", action="store_true", help="time kvlab only")
    args = parser.parse_args()
    if not args.skip_vllm and not reference.have_sources():
        print("vLLM sources absent: run scripts/ensure_vllm_sources.sh", file=sys.stderr)
        return 2
    config = SchedulerConfig(num_gpu_blocks=args.num_gpu_blocks, max_model_len=2048,
                             async_scheduling=args.async_scheduling)
    print(f"synthetic workload: {args.requests:,} requests, {args.groups} shared prefixes, "
          f"{args.num_gpu_blocks} GPU blocks, "
          f"{'async' if args.async_scheduling else 'sync'} scheduling")
    start = time.process_time()                    # numba: load (or compile) the kernels
    simulate(workload(20, 2, 1.0, args.seed), config)
    print(f"kvlab's compiled kernels ready in {time.process_time() - start:.1f} s CPU (from "
          f"numba's cache; the first run ever compiles them), not counted below")
    print(f"{'load':<7}{'steps':>8}{'preempt':>9}{'vLLM s':>9}{'kvlab s':>9}{'speedup':>9}"
          f"  identical")
    status = 0
    for name, rate in LOADS.items():
        requests = workload(args.requests, args.groups, rate, args.seed)
        start = time.process_time()
        result = simulate(requests, config)
        ours_s = time.process_time() - start
        rows = {row[0]: tuple(row[1:]) for row in result.requests.select(
            "request", "first_scheduled_step", "first_token_step", "finish_step",
            "gpu_hit_tokens", "preemptions", "output_tokens").iter_rows()}
        theirs_s, same = float("nan"), "-"
        if not args.skip_vllm:
            start = time.process_time()
            theirs, _ = reference.run_vllm(requests, config)
            theirs_s = time.process_time() - start
            same = "yes" if theirs == rows else "NO"
            status |= same != "yes"
        print(f"{name:<7}{result.steps.height:>8,}{int(result.requests['preemptions'].sum()):>9,}"
              f"{theirs_s:>9.1f}{ours_s:>9.2f}{theirs_s / ours_s:>8.0f}x  {same}")
    return status


if __name__ == "__main__":
    sys.exit(main())
