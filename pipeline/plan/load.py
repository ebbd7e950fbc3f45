"""``plan --target-ttft-p90-ms MS``: the smallest GPU KV capacity whose TTFT p90 under a
load meets a target, from the engine model on the time clock.

Each candidate capacity is one engine run (``pipeline.engine.simulate``, the step-time model
of ``--latency``, refused when it cannot back this plan: ``steptime.alone.plan_with_latency``)
under the load (``--speed``, ``--rate`` or ``--concurrency``). The search
bisects the number of GPU blocks between the smallest pool that holds the largest request
and ``--gpu`` (default: a pool that holds every distinct block at once), assuming TTFT p90
falls as the GPU grows; that is not proven under load (admission and preemption change with
the pool), so the answer is reported with the figure one block below it. An answer whose
run is overloaded (its queue grows: ``pipeline.engine.overload``) ends with a
``warning: overloaded:`` line (stderr with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from pipeline.base.arguments import derive, positive_float
from pipeline.base.durations import format_duration
from pipeline.base.errors import CLIError, UsageError
from pipeline.catalog import models_field, models_line
from pipeline.engine.overload import warning_line
from pipeline.engine.request import EngineRequests
from pipeline.plan.output import exit_status
from pipeline.sizes.units import capacity_tokens, kv_from_args, one_of
from pipeline.sizes.vllm_memory import gpu_from_utilization
from pipeline.steptime.alone import plan_with_latency
from pipeline.steptime.curves import Load, apply_load
from pipeline.steptime.metrics import run_metrics
from pipeline.engine.options import add_scheduler_limits
from pipeline.steptime.options import add_latency_arguments, add_load_arguments, \
    latency_from_args

__all__ = ["add_load_plan_arguments", "add_tpot_target", "plan_under_load",
           "engine_workload", "load_of", "loaded_requests", "meets_targets"]

#: the answer's overload figures, also in the JSON document's ``answer``
ANSWER_LOAD_KEYS = ("overloaded", "offered_rate", "served_rate", "queue_at_last_arrival")


def add_load_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The load, engine and step-time options of a TTFT-p90-under-load target."""
    add_latency_arguments(parser, latency=False)      # plan's own --latency (a path) serves
    group = parser.add_argument_group("load (with --target-ttft-p90-ms; the engine model)")
    add_load_arguments(group, lists=False)
    add_scheduler_limits(group)


def add_tpot_target(parser: argparse.ArgumentParser) -> None:
    """``--target-tpot-p90-ms``: beside --target-ttft-p90-ms (and a fleet plan's targets)."""
    parser.add_argument("--target-tpot-p90-ms", type=positive_float, metavar="MS",
                        help="with --target-ttft-p90-ms or --fleet: TPOT p90 at most MS too "
                             "(time per output token, as vllm bench serve)")


def meets_targets(figures: dict, ttft: float, tpot: float | None) -> bool:
    """TTFT p90 within ``ttft`` and, when given, TPOT p90 within ``tpot`` (a run without
    TPOT, no request of two output tokens, meets any)."""
    return figures["ttft_ms_p90"] <= ttft and (
        tpot is None or figures.get("tpot_ms_p90") is None or figures["tpot_ms_p90"] <= tpot)


def loaded_requests(args: argparse.Namespace, latency, kv) -> tuple:
    """(the workload, its load, its requests under that load, the closed loop's
    concurrency or None), once ``plan_with_latency`` has backed a TTFT target for them."""
    workload = engine_workload(args)
    load = load_of(args, workload.arrival_unit == "seconds")
    requests, concurrency = apply_load(workload.requests, load, args.seed)
    plan_with_latency(latency, kv.bytes_per_token, [len(r.prompt_token_ids) for r in requests],
                      served_model=getattr(args, "served_model", None),
                      ttft_target="--target-ttft-p90-ms")
    return workload, load, requests, concurrency


def engine_workload(args: argparse.Namespace) -> EngineRequests:
    """The engine's requests of a Mooncake trace PATH or ``--pattern``; CLIError otherwise."""
    from pipeline.engine.workload import pattern_workload, read_workload
    from pipeline.workloads.jsonl import TraceError
    if (args.path is None) == (args.pattern is None):
        raise CLIError("--target-ttft-p90-ms: give a trace PATH (--format mooncake) or "
                       "--pattern")
    if args.pattern is not None:
        return pattern_workload(args)
    if args.format != "mooncake":
        raise CLIError("--target-ttft-p90-ms reads Mooncake traces (--format mooncake); "
                       "token-id JSONL goes through simulate --gpu CAPS")
    try:
        return read_workload(args.path, "mooncake", args.block_size, args.output_tokens)
    except TraceError as exc:
        raise CLIError(str(exc)) from None


def load_of(args: argparse.Namespace, timed: bool) -> Load:
    """The one load given (``--speed``, ``--rate``, ``--concurrency``; a timed trace: speed 1)."""
    given = [(k, getattr(args, k)) for k in ("speed", "rate", "concurrency")
             if getattr(args, k) is not None]
    if len(given) > 1:
        raise UsageError("give one load: --speed, --rate or --concurrency")
    if not given:
        if not timed:
            raise CLIError("an untimed workload needs --rate or --concurrency")
        return Load("speed", 1.0)
    return Load(*given[0])


def plan_under_load(args: argparse.Namespace) -> int:
    """Search, then print the answer (text or --json); Ctrl-C is the CLI's one line (exit
    130, "interrupted; nothing written")."""
    try:
        return _plan_under_load(args)
    except (ValueError, RuntimeError) as exc:
        raise CLIError(str(exc)) from None


def _plan_under_load(args: argparse.Namespace) -> int:
    from pipeline.engine.config import SchedulerConfig
    from pipeline.engine.loop import simulate
    latency = latency_from_args(args)
    if latency is None:
        raise UsageError("--target-ttft-p90-ms needs a step-time model: --latency roofline "
                         "or FILE")
    if args.report is not None:
        raise UsageError("--report: not available with --target-ttft-p90-ms (simulate --gpu "
                         "CAPS --report draws the curves)")
    tokens = args.output_tokens                      # Mooncake: each line's output_length
    args = derive(args, block_size=args.block_size or 16,
                  output_tokens=1 if tokens in (None, "trace") else tokens)
    utilization = None
    if getattr(args, "gpu_memory_utilization", None) is not None:
        args, utilization = gpu_from_utilization(args, args.block_size)
    gpu = one_of(args.gpu, "--gpu", "the top of the search")
    kv = kv_from_args(args, "--target-ttft-p90-ms (the answer in GiB)")
    workload, load, requests, concurrency = loaded_requests(args, latency, kv)
    size = args.block_size
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    lo = -(-(longest - 1) // size) + 1
    if gpu is not None:
        hi = capacity_tokens(gpu, kv, size, "--gpu") // size
        if hi < lo:
            raise CLIError(f"--gpu: {hi * size:,} tokens cannot hold the largest request "
                           f"(at least {lo * size:,} tokens)")
    else:
        keys = set()
        for r in requests:
            keys.update(r.prompt_keys.tolist() if r.prompt_keys is not None else
                        range(len(keys), len(keys) + len(r.prompt_token_ids) // size))
        hi = len(keys) + sum(-(-r.max_tokens // size) + 1 for r in requests) + lo
    config = SchedulerConfig(num_gpu_blocks=lo, max_model_len=longest, block_size=size,
                             max_num_seqs=args.max_num_seqs,
                             max_num_batched_tokens=args.max_num_batched_tokens)
    seen: dict[int, dict] = {}

    def figures(blocks: int) -> dict:
        if blocks not in seen:
            result = simulate(requests, replace(config, num_gpu_blocks=blocks), clock="time",
                              step_ms=latency.step_ms, concurrency=concurrency,
                              decode_run_ms=getattr(latency, "decode_run_ms", None))
            seen[blocks] = run_metrics(result.requests, result.steps, latency.label)
        return seen[blocks]

    target, tpot = args.target_ttft_p90_ms, getattr(args, "target_tpot_p90_ms", None)
    if not meets_targets(figures(hi), target, tpot):
        status, answer = "unreachable", hi
    else:
        low, high = lo, hi
        while low < high:
            mid = (low + high) // 2
            if meets_targets(figures(mid), target, tpot):
                high = mid
            else:
                low = mid + 1
        status, answer = ("gpu_minimum" if low == lo else "met"), low
    below = figures(answer - 1) if status == "met" else None
    at = figures(answer)
    document = {
        "cache_models": models_field("vllm", None),        # the engine, no CPU tier
        "target": {"kind": "ttft_p90_under_load", "ttft_ms_p90": target, "load": load.label,
                   **({"tpot_ms_p90": tpot} if tpot is not None else {})},
        "workload": f"{workload.label}: {len(requests):,} requests, block size {size}",
        "step_time_model": latency.label, "provenance": latency.provenance,
        "answer": {"status": status, "num_gpu_blocks": answer, "gpu_tokens": answer * size,
                   "gpu_bytes": kv.bytes(answer * size), "kv": kv.describe()},
        "search": f"bisected {lo:,}..{hi:,} blocks in {len(seen)} engine runs (assuming TTFT "
                  f"p90 falls as the GPU grows: not proven under load)",
        "figures": at, "figures_one_block_below": below,
        **({"gpu_memory_utilization": utilization} if utilization is not None else {})}
    document["answer"].update({key: at[key] for key in ANSWER_LOAD_KEYS})
    warning = warning_line(at, f"the answer ({answer:,} GPU blocks)") if at["overloaded"] \
        else None
    if args.json:                     # stdout stays one JSON document: the warning to stderr
        print(json.dumps(document, indent=2, default=str))
        if warning:
            print(warning, file=sys.stderr)
        return exit_status(status)
    gib = kv.bytes(answer * size) / 2**30
    verdict = {"met": "meets it", "gpu_minimum": "meets it already at the smallest pool that "
               "holds the largest request", "unreachable": "misses it even at the top of "
               "the search"}[status]
    print(models_line("vllm", None))
    both = f" and TPOT p90 <= {tpot:g} ms" if tpot is not None else ""
    print(f"target: TTFT p90 <= {target:g} ms{both} at {load.label} [{latency.label}]")
    print(f"workload: {document['workload']}")
    print(f"answer: GPU KV {answer * size:,} tokens = {gib:.2f} GiB ({kv.describe()}), "
          f"num_gpu_blocks {answer}: {verdict}")
    print(f"  there: TTFT p90 {format_duration(at['ttft_ms_p90'])}, "
          f"p50 {format_duration(at['ttft_ms_p50'])}, "
          f"hit ratio {100 * (at['hit_ratio'] or 0):.1f} %, "
          f"{at['preemptions']} preemptions"
          + (f", TPOT p90 {format_duration(at['tpot_ms_p90'])}" if tpot is not None
             and at.get("tpot_ms_p90") is not None else ""))
    if below is not None:
        print(f"  one block below: TTFT p90 {format_duration(below['ttft_ms_p90'])}")
    print(f"search: {document['search']}")
    if utilization is not None:
        print(utilization["line"])
    if warning:
        print(warning)
    return exit_status(status)
