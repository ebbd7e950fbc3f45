"""Benchmark (not a test): the Mooncake trace on 8 instances x routers x 10 capacities,
wall and CPU time of the process pool and of a local Ray, and each simulation's requests
per CPU second.

The routers are the six the fleet issue's benchmark names (``ROUTER_SET``: round robin,
the load and session baselines and the three cache-aware routers of SGLang, llm-d and
Dynamo); ``random`` is round robin's unordered twin and ``prefix-estimate`` llm-d's
second approximate scorer beside ``prefix-approx``: ``--routers all`` adds them.

CPU time is the workers' own (the pool's children; Ray's worker processes, read from
/proc) and the driver's, so it holds on a busy machine where wall time does not; wall
time on an idle machine is about CPU time / jobs. Each point's own CPU seconds (measured
in its worker) give the mean per router.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.engine.request import EngineRequests
from pipeline.fleet.routers import ROUTERS
from pipeline.fleet.sweep import run_sweep
from pipeline.fleet.sweep_point import Point, Settings

#: The shared Mooncake trace beside the repository (``../shared/traces``).
TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "synthetic_trace.jsonl"
#: The trace has no session ids: the session router keys each request by its first block
#: (the figures recorded in docs/performance.md).
SESSION_KEY = {"session": {"key": "blocks:1"}}
ROUTER_SET = ["round-robin", "least-loaded", "session", "prefix-approx", "prefix-precise",
              "kv-cost"]


def _workload(path: Path, limit: int | None, block_size: int) -> EngineRequests:
    from pipeline.engine.workload import read_workload
    requests = read_workload(path, "mooncake", block_size).requests[:limit]
    label = f"{path} (first {limit})" if limit else str(path)
    return EngineRequests(label, tuple(requests))


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _descendants_cpu(root: int) -> float:
    """CPU seconds of every live process below ``root`` (Linux /proc; Ray's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        for child, parent in parents.items():
            if parent == pid:
                total += cpu[child]
                stack.append(child)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--limit", type=int, default=None,
                        help="first N requests (default: the whole trace)")
    parser.add_argument("--capacities", type=int, default=10, help="GPU block counts")
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--routers", default=",".join(ROUTER_SET),
                        help="comma-separated, or all (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args(argv)
    from pipeline.engine.config import SchedulerConfig
    from pipeline.sizes.units import model_shape, DEFAULT_PRESET
    from pipeline.steptime import Roofline, gpu_preset

    workload = _workload(args.trace, args.limit, 16)
    routers = list(ROUTERS) if args.routers == "all" else args.routers.split(",")
    unknown = [name for name in routers if name not in ROUTERS]
    if unknown:
        parser.error(f"--routers: unknown router {unknown[0]!r} (choose from "
                     f"{', '.join(ROUTERS)}, or all)")
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in workload.requests)
    low = -(-longest // 16) + 1
    blocks = np.linspace(low, 3 * low, args.capacities).astype(int).tolist()
    settings = Settings(SchedulerConfig(num_gpu_blocks=low, max_model_len=longest),
                        Roofline(model_shape(DEFAULT_PRESET), gpu_preset("H100"), 1.0),
                        router_options=SESSION_KEY)
    points = [Point(r, args.instances, b, 1.0) for r in routers for b in blocks]
    print(f"{len(points)} points: {len(routers)} routers x {args.capacities} capacities, "
          f"{args.instances} instances, {workload.size} requests of {workload.label}")
    walls = {}
    executors = [e for e, skip in (("local", args.skip_local), ("ray", args.skip_ray))
                 if not skip]
    for executor in executors:
        if executor == "ray":
            import ray
            ray.init(num_cpus=args.jobs, include_dashboard=False, logging_level="ERROR")
        before = (_cpu(resource.RUSAGE_CHILDREN), _descendants_cpu(os.getpid()),
                  _cpu(resource.RUSAGE_SELF))
        started = time.perf_counter()
        per_point: dict = {}
        with tempfile.TemporaryDirectory() as out:
            failed = run_sweep(settings, points, workload, Path(out), executor=executor,
                               jobs=args.jobs, cpu=per_point)
        walls[executor] = time.perf_counter() - started
        if executor == "ray":
            cpu = _descendants_cpu(os.getpid()) - before[1]
            ray.shutdown()
        else:
            cpu = _cpu(resource.RUSAGE_CHILDREN) - before[0]
        driver = _cpu(resource.RUSAGE_SELF) - before[2]
        rate = workload.size * len(points) / cpu if cpu else float("nan")
        print(f"{executor}: {walls[executor]:.1f} s wall, {cpu:.1f} s CPU in the workers "
              f"+ {driver:.1f} s in the driver ({len(failed)} failed); {rate:,.0f} requests "
              f"per CPU second per simulation ({cpu / len(points):.2f} s CPU per point)")
        for name in routers:
            mine = [seconds for point, seconds in per_point.items() if point.router == name]
            if mine:
                print(f"  {name}: {sum(mine) / len(mine):.2f} s CPU per point "
                      f"(min {min(mine):.2f}, max {max(mine):.2f})")
    if len(walls) == 2:
        print(f"ray / local: {walls['ray'] / walls['local']:.2f}x wall (Ray's start "
              f"excluded)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
