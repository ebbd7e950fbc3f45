"""Benchmark: ``simulate`` with and without LMCache's tier stack, same timed requests.

The synthetic workload of ``scripts/bench_simulate.py`` (``--requests`` prompts over
``--groups`` shared prefixes, Poisson arrivals by step at a light and a heavy load), run on
the time clock (arrival step x 25 ms) with a roofline step model (H100, Llama-3.1-8B): no
tier; LMCache's CPU tier
alone (``LMCacheTier``); and the stack (``LMCacheStack``) of the same CPU tier plus a local
disk. CPU times (process time, best of ``--repeat``: the machine may be shared) side by side,
and the stack's ratio to the run without a tier (the target: at most 1.5x).

    .venv/bin/python scripts/bench_tiers.py                  # 10,000 requests
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_simulate import LOADS, workload  # noqa: E402

from pipeline.components.lmcache_stack import LMCacheStack, Tier  # noqa: E402
from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.cpu_tier import LMCacheTier  # noqa: E402
from pipeline.engine.loop import simulate  # noqa: E402
from pipeline.sizes.model_presets import preset  # noqa: E402
from pipeline.sizes.gpus import gpu_preset  # noqa: E402
from pipeline.sizes.units import model_shape  # noqa: E402
from pipeline.steptime.roofline import Roofline  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--num-gpu-blocks", type=int, default=4000)
    parser.add_argument("--cpu-tokens", type=int, default=200_000)
    parser.add_argument("--disk-tokens", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    config = SchedulerConfig(num_gpu_blocks=args.num_gpu_blocks, max_model_len=2048)
    model = Roofline(model_shape("llama-3.1-8b"), gpu_preset("H100"))
    per_token = preset("llama-3.1-8b").bytes_per_token
    tiers = {
        "none": lambda: None,
        "cpu": lambda: LMCacheTier(args.cpu_tokens, 16, 256),
        "cpu+disk": lambda: LMCacheStack([Tier("cpu", args.cpu_tokens),
                                          Tier("disk", args.disk_tokens, 5.0, 0.2)],
                                         16, per_token, 256),
    }
    simulate(workload(20, 2, 1.0, args.seed), config, cpu_tier=tiers["cpu+disk"](),
             clock="time", step_ms=model.step_ms)          # kernels ready (not counted)
    print(f"synthetic workload: {args.requests:,} requests, {args.groups} shared prefixes, "
          f"{args.num_gpu_blocks} GPU blocks, CPU tier {args.cpu_tokens:,} tokens, disk "
          f"{args.disk_tokens:,} tokens at 5 GB/s + 0.2 ms; roofline H100 Llama-3.1-8B; "
          f"CPU s best of {args.repeat}")
    print(f"{'load':<7}" + "".join(f"{name + ' s':>12}" for name in tiers)
          + f"{'stack/none':>12}{'disk tokens':>14}")
    for load, rate in LOADS.items():
        requests = [replace(r, arrival_s=r.arrival_step * 0.025)
                    for r in workload(args.requests, args.groups, rate, args.seed)]
        seconds, disk = {}, 0
        for name, make in tiers.items():
            best = float("inf")
            for _ in range(args.repeat):
                tier = make()
                start = time.process_time()
                result = simulate(requests, config, cpu_tier=tier, clock="time",
                                  step_ms=model.step_ms)
                best = min(best, time.process_time() - start)
            seconds[name] = best
            if "disk_hit_tokens" in result.requests.columns:
                disk = int(result.requests["disk_hit_tokens"].sum())
        print(f"{load:<7}" + "".join(f"{s:>12.3f}" for s in seconds.values())
              + f"{seconds['cpu+disk'] / seconds['none']:>11.2f}x{disk:>14,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
