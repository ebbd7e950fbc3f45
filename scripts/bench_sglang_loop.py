"""Benchmark: SGLang 0.5.23's own scheduler loop run unmodified on CPU
(scripts/sglang_scheduler_unmodified.py, in a spawned process: it installs a stand-in torch)
vs ``--engine sglang`` compiled, on bench_sglang.py's synthetic workload (the same
``--requests``, ``--groups``, ``--rate``, ``--pool``, ``--policy``, ``--seed``), the
non-overlap loop; every step's batch and every request's steps, hit and retractions must be
identical. CPU seconds (process time) side by side; each side's warm-up (SGLang's imports and
a 50-request run; numba's load) before its clock.

    .venv/bin/python scripts/bench_sglang_loop.py                         # 10,000 requests
    .venv/bin/python scripts/bench_sglang_loop.py --policy lof --pool 3000

Not a test: it takes a minute or more. Needs scripts/ensure_sglang_sources.sh.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

import bench_sglang as bench  # noqa: E402
from pipeline.engine.sglang_instance import SGLangInstance  # noqa: E402
from pipeline.engine.sglang_step_clock import run_on_steps  # noqa: E402


def sglangs_loop(inputs: list, pool: int, options: dict) -> tuple[dict, float]:
    """SGLang's loop on ``inputs`` (in the worker process, through its intake as the engine
    takes them) and its CPU seconds."""
    import sglang_scheduler_unmodified as unmodified
    unmodified.run(inputs[:50], pool, intake=True, **options)
    start = time.process_time()
    out = unmodified.run(inputs, pool, intake=True, **options)
    return out, time.process_time() - start


def main() -> int:
    parser = bench.workload_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    for name in ("requests", "groups", "pool"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: must be at least 1")
    requests, options = bench.workload_and_options(args)
    inputs = [(p + o, len(p), len(o), a) for p, o, a in requests]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        theirs, t_theirs = pool.submit(sglangs_loop, inputs, args.pool, options).result()
    sims, config = bench.engine_inputs(requests, args.pool, options)
    run_on_steps(sims[:50], config)                      # numba: load (or compile) once
    engine = SGLangInstance(config, capacity=len(sims))
    start = time.process_time()
    run_on_steps(sims, config, engine, record=True)
    t_mine = time.process_time() - start
    mine = bench.as_reported(engine)
    equal = mine["steps"] == theirs["steps"] and mine["requests"] == theirs["requests"]
    print(f"{args.requests:,} requests, {len(mine['steps']):,} steps, policy {args.policy}, "
          f"pool {args.pool:,} tokens: {sum(r[4] for r in mine['requests'])} retractions")
    print(f"SGLang's own loop (unmodified): {t_theirs:8.3f} s CPU")
    print(f"--engine sglang (compiled):     {t_mine:8.3f} s CPU   "
          f"({t_theirs / max(t_mine, 1e-9):.0f}x)")
    print(f"identical per step and per request: {equal}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
