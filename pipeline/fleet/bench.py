"""Benchmark (not a test): the Mooncake trace on 8 instances x 6 routers x capacities, wall
time of the process pool and of a local Ray, and each simulation's requests per second.

``python -m pipeline.fleet.bench [--limit N] [--capacities K] [--jobs J]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.fleet.routers import ROUTERS
from pipeline.fleet.sweep import Point, Settings, run_sweep
from pipeline.fleet.workload import Workload

#: The shared Mooncake trace beside the repository (``../shared/traces``).
TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "synthetic_trace.jsonl"
ROUTER_SET = [name for name in ROUTERS if name != "random"]


def _workload(path: Path, limit: int, block_size: int) -> Workload:
    from pipeline.engine.workload import read_workload
    requests = read_workload(path, "mooncake", block_size).requests[:limit]
    return Workload(f"{path} (first {limit})", tuple(requests))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--limit", type=int, default=100, help="first N requests")
    parser.add_argument("--capacities", type=int, default=10, help="GPU block counts")
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args(argv)
    from pipeline.engine.config import SchedulerConfig
    from pipeline.kvsize import model_shape, DEFAULT_PRESET
    from pipeline.steptime import Roofline, gpu_preset

    workload = _workload(args.trace, args.limit, 16)
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in workload.requests)
    low = -(-longest // 16) + 1
    blocks = np.linspace(low, 3 * low, args.capacities).astype(int).tolist()
    settings = Settings(SchedulerConfig(num_gpu_blocks=low, max_model_len=longest),
                        Roofline(model_shape(DEFAULT_PRESET), gpu_preset("H100"), 1.0))
    points = [Point(r, args.instances, b, 1.0) for r in ROUTER_SET for b in blocks]
    print(f"{len(points)} points: {len(ROUTER_SET)} routers x {args.capacities} capacities, "
          f"{args.instances} instances, {workload.size} requests of {workload.label}")
    walls = {}
    for executor in ("local", *(() if args.skip_ray else ("ray",))):
        started = time.perf_counter()
        if executor == "ray":
            import ray
            ray.init(num_cpus=args.jobs, include_dashboard=False, logging_level="ERROR")
            started = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            failed = run_sweep(settings, points, workload, Path(out), executor=executor,
                               jobs=args.jobs)
        walls[executor] = time.perf_counter() - started
        if executor == "ray":
            ray.shutdown()
        rate = workload.size * len(points) / walls[executor] / args.jobs
        print(f"{executor}: {walls[executor]:.1f} s wall ({len(failed)} failed), "
              f"{rate:.0f} requests/s per simulation worker")
    if "ray" in walls:
        print(f"ray / local: {walls['ray'] / walls['local']:.2f}x (Ray's start excluded)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
