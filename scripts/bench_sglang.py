"""Benchmark: SGLang 0.5.23's own scheduling pieces on CPU vs ``--engine sglang``, same timed
requests, identical results required.

Synthetic workload (says so): ``--requests`` prompts drawn from ``--groups`` shared prefixes
(64..512 tokens) plus a unique question (8..128 tokens), max_tokens 1..64, Poisson arrivals
by step (seeded). It runs through scripts/sglang_scheduler_reference.py (SGLang's
``SchedulePolicy``, ``PrefillAdder``, ``PrefillBudget``, ``RadixCache`` unmodified, in the
transcribed batch loop) and through ``pipeline.engine.sglang``'s compiled step-clock run (``run_on_steps``, as
``simulate --engine sglang`` runs it); every step's batch and every request's steps, hit
and retractions must be equal; the CPU times (process time: the machine may be shared) are
printed side by side. Each side starts from its own input, built before the clock: the
reference's token lists, the engine's SimRequests (token arrays); numba's compilation (or
its load from the cache) is done before the clock by a 50-request run.

    .venv/bin/python scripts/bench_sglang.py                        # 10,000 requests
    .venv/bin/python scripts/bench_sglang.py --requests 1000 --policy lpm
    .venv/bin/python scripts/bench_sglang.py --pool 20000 --hicache write_through \
        --host 60000 [--overlap] [--python]      # HiCache: SGLang's vs the engine's

With ``--hicache POLICY`` both sides run HiCache (the reference over SGLang's
``UnifiedRadixCache`` with ``init_hicache``'s decisions; ``--overlap``: its overlap loop,
scripts/sglang_hicache_overlap_reference.py; the engine's compiled HiCache run as
``simulate --enable-hierarchical-cache`` runs it), compared per step (batch, host tokens
loaded and written since the last batch) and per request (with the host tokens loaded);
in the overlap loop a step's first tokens are those known at launch, the reference's those
processed (a subset). The compiled engine without HiCache is timed beside them, and with
``--python`` the plain-Python HiCache engine (the reference model).

Not a test: it takes minutes. Needs scripts/ensure_sglang_sources.sh.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import sglang_scheduler_reference as reference  # noqa: E402
from pipeline.components import sglang_ksched as K  # noqa: E402
from pipeline.components.sglang_settings import SCHEDULE_POLICIES, SchedulerSettings  # noqa
from pipeline.engine.request import SimRequest  # noqa: E402
from pipeline.engine.sglang import SGLangConfig  # noqa: E402
from pipeline.engine.sglang_hicache import HiCacheSpec, SGLangHiInstance  # noqa: E402
from pipeline.engine.sglang_instance import SGLangInstance  # noqa: E402
from pipeline.engine.sglang_step_clock import run_on_steps  # noqa: E402


def engine_inputs(requests, pool: int, options: dict) -> tuple[list, SGLangConfig]:
    """The engine's own input: SimRequests (token arrays) and its config, built before the
    clock starts (as the reference's lists are)."""
    config = SGLangConfig(2, 10 ** 6, options["page"], SchedulerSettings(
        max_total_tokens=pool, page_size=options["page"], schedule_policy=options["policy"],
        max_running_requests=options["max_running"], chunked_prefill_size=options["chunk"],
        max_prefill_tokens=options["max_prefill"],
        schedule_conservativeness=options["conservativeness"], seed=options["seed"]))
    sims = [SimRequest(i, np.array(p, np.int64), len(o), arrival_step=a,
                       output_token_ids=np.array(o, np.int64))
            for i, (p, o, a) in enumerate(requests)]
    return sims, config


def as_reported(engine: SGLangInstance) -> dict:
    """A whole step-clock run's arrays (``run_on_steps``, recording every batch's rows: the
    timed run is the compared one) as the reference reports it, after
    the clock: per step (prefill?, (request, new, cached) rows, first tokens, finished),
    per request (first scheduled, first token, finish, hit, retractions)."""
    STEPS, SCHED, EVENTS = engine.steps
    bounds = np.append(STEPS[:, -1], len(SCHED)).tolist()
    rows = SCHED.tolist()
    first = [[] for _ in range(len(STEPS))]
    done = [[] for _ in range(len(STEPS))]
    for step, kind, index in EVENTS.tolist():
        (done if kind else first)[step].append(index)
    steps = [(prefill > 0 or not decodes, [tuple(r) for r in rows[bounds[j]:bounds[j + 1]]],
              first[j], done[j])
             for j, (prefill, decodes) in enumerate(STEPS[:, 1:3].tolist())]
    R = engine.state.R[:len(engine.rows)]
    requests = [tuple(r) for r in R[:, [K.R_FSCHED, K.R_FTOK, K.R_FINSTEP, K.R_HIT,
                                        K.R_RETR]].tolist()]
    return {"steps": steps, "requests": requests}


def workload(count: int, groups: int, rate: float, seed: int) -> list[tuple]:
    """(prompt, outputs, arrival step) per request (see the module docstring)."""
    rng = np.random.default_rng(seed)
    stems = [rng.integers(0, 30000, rng.integers(64, 513)).tolist() for _ in range(groups)]
    steps = np.cumsum(rng.poisson(1.0 / rate, count)) if rate > 0 else np.zeros(count, int)
    out = []
    for i in range(count):
        prompt = stems[rng.integers(groups)] + rng.integers(30000, 60000,
                                                            rng.integers(8, 129)).tolist()
        outputs = rng.integers(0, 60000, rng.integers(1, 65)).tolist()
        out.append((prompt, outputs, int(steps[i])))
    return out


def workload_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the synthetic workload's options (``workload``'s), the pool and the
    policy."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.5, help="requests per step")
    parser.add_argument("--pool", type=int, default=60_000, help="max_total_tokens")
    parser.add_argument("--policy", choices=SCHEDULE_POLICIES, default="fcfs")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def workload_and_options(args) -> tuple[list, dict]:
    """(``workload`` of the parsed options, the scheduler options both sides run with)."""
    requests = workload(args.requests, args.groups, args.rate, args.seed)
    options = dict(policy=args.policy, max_running=256, chunk=8192, max_prefill=16384,
                   conservativeness=1.0, seed=args.seed, page=1)
    return requests, options


def main() -> int:
    parser = workload_parser(__doc__.splitlines()[0])
    parser.add_argument("--hicache", choices=("write_through", "write_through_selective",
                                              "write_back"), default=None)
    parser.add_argument("--host", type=int, default=120_000, help="host pool tokens")
    parser.add_argument("--overlap", action="store_true",
                        help="HiCache in the overlap loop (event_loop_overlap) on both sides")
    parser.add_argument("--python", action="store_true",
                        help="also time the plain-Python HiCache engine (non-overlap)")
    args = parser.parse_args()
    requests, options = workload_and_options(args)
    if args.hicache:
        return bench_hicache(args, requests, options)
    inputs = [(p + o, len(p), len(o), a) for p, o, a in requests]
    start = time.process_time()
    theirs = reference.run(inputs, args.pool, **options)
    t_theirs = time.process_time() - start
    sims, config = engine_inputs(requests, args.pool, options)
    run_on_steps(sims[:50], config)                      # numba: load (or compile) once
    engine = SGLangInstance(config, capacity=len(sims))
    start = time.process_time()
    run_on_steps(sims, config, engine, record=True)
    t_mine = time.process_time() - start
    mine = as_reported(engine)
    equal = mine["steps"] == theirs["steps"] and mine["requests"] == theirs["requests"]
    hits = sum(r[3] for r in mine["requests"])
    print(f"{args.requests:,} requests, {len(mine['steps']):,} steps, policy {args.policy}, "
          f"pool {args.pool:,} tokens: hit {hits:,} tokens, "
          f"{sum(r[4] for r in mine['requests'])} retractions")
    print(f"SGLang's pieces (reference loop): {t_theirs:8.3f} s CPU")
    print(f"--engine sglang (compiled):       {t_mine:8.3f} s CPU   "
          f"({t_theirs / max(t_mine, 1e-9):.1f}x)")
    print(f"identical per step and per request: {equal}")
    return 0 if equal else 1


def bench_hicache(args, requests, options) -> int:
    """HiCache on every side (module docstring); per step and per request equal."""
    inputs = [(p + o, len(p), len(o), a) for p, o, a in requests]
    hicache = (args.hicache, args.host)
    start = time.process_time()
    if args.overlap:
        import sglang_hicache_overlap_reference as overlap_reference
        theirs = overlap_reference.run_overlap(inputs, args.pool, hicache=hicache, **options)
    else:
        theirs = reference.run_unified(inputs, args.pool, hicache=hicache, **options)
    t_theirs = time.process_time() - start
    sims, config = engine_inputs(requests, args.pool, options)
    config = replace(config, overlap=args.overlap)
    hi = replace(config, hicache=HiCacheSpec(args.hicache, args.host, 1))
    run_on_steps(sims[:50], config)                      # numba: load (or compile) once
    run_on_steps(sims[:50], hi)
    start = time.process_time()
    run_on_steps(sims, config)
    t_plain = time.process_time() - start
    engine = SGLangInstance(hi, capacity=len(sims))
    start = time.process_time()
    run_on_steps(sims, hi, engine, record=True)
    t_mine = time.process_time() - start
    mine = as_reported(engine)
    STEPS = engine.steps[0]
    host = [tuple(h) for h in STEPS[:, K.S_LOADED:K.S_COLUMNS].tolist()]
    loaded = engine.state.R[:len(sims), K.R_HLOADED].tolist()
    if args.overlap:                                     # the first tokens known at launch
        same_steps = all(m[:2] == tuple(t[:2]) and m[3] == t[3] and set(t[2]) <= set(m[2])
                         for m, t in zip(mine["steps"], theirs["steps"])) and \
            len(mine["steps"]) == len(theirs["steps"])
    else:
        same_steps = mine["steps"] == [tuple(s) for s in theirs["steps"]]
    equal = (same_steps and host == [tuple(h) for h in theirs["host"]]
             and mine["requests"] == [tuple(r) for r in theirs["requests"]]
             and loaded == theirs["host_loaded"])
    t_python = None
    if args.python and not args.overlap:                 # the plain-Python HiCache engine
        python = SGLangHiInstance(hi, capacity=len(sims))
        start = time.process_time()
        simulate_python(python, sims, requests)
        t_python = time.process_time() - start
    loop = "overlap" if args.overlap else "non-overlap"
    print(f"{args.requests:,} requests, {len(mine['steps']):,} steps, policy {args.policy}, "
          f"pool {args.pool:,} tokens, HiCache {args.hicache}, host {args.host:,} tokens, "
          f"{loop} loop: {sum(loaded):,} tokens loaded from the host, "
          f"{sum(h[1] for h in host):,} written")
    print(f"SGLang's pieces over its HiCache:        {t_theirs:8.3f} s CPU")
    if t_python is not None:
        print(f"--engine sglang with HiCache (Python):   {t_python:8.3f} s CPU   "
              f"({t_theirs / max(t_python, 1e-9):.1f}x)")
    print(f"--engine sglang with HiCache (compiled): {t_mine:8.3f} s CPU   "
          f"({t_theirs / max(t_mine, 1e-9):.1f}x)")
    print(f"--engine sglang without HiCache:         {t_plain:8.3f} s CPU")
    print(f"identical per step and per request: {equal}")
    return 0 if equal else 1


def simulate_python(engine: SGLangHiInstance, sims, requests) -> None:
    """``simulate``'s step clock over the plain-Python HiCache instance."""
    now, pointer = 0, 0
    while pointer < len(sims) or engine.has_work():
        if not engine.has_work():
            now = max(now, requests[pointer][2])
        while pointer < len(sims) and requests[pointer][2] <= now:
            engine.add_request(sims[pointer])
            pointer += 1
        engine.step()
        now += 1


if __name__ == "__main__":
    sys.exit(main())
