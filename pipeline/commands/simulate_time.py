"""What ``simulate`` gains from the step-time models: the time clock, metrics, curves.

``steptime_arguments(parser)`` adds ``--latency`` and the GPU options, the KV model
options, ``--gpu CAPS`` (+ ``--gpu-steps``), ``--jobs`` and ``--report``;
``prepare(args)`` returns the run's options (the clock settled) and the loads of a curve run
(None for one run);
``run_metrics_outputs`` adds ``metrics.json`` and ``vllm_log.parquet`` to one timed run;
``run_curves`` runs the grid and writes ``curves.parquet`` (and the report), then a
``warning: overloaded:`` line per overloaded point (or one with how many and the worst).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.base.arguments import Options, derive, positive_int
from pipeline.base.durations import format_duration
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.units import add_kv_arguments, capacities, kv_from_args, size_lines
from pipeline.base.staging import Outputs, json_bytes, parquet_bytes
from pipeline.engine.overload import warning_lines
from pipeline.engine.request import EngineRequests
from pipeline.steptime.curves import UPPER, Load, load_curves, upper_curve
from pipeline.steptime.fitted import Linear
from pipeline.steptime.metrics import prefix_cache_entries, run_metrics, vllm_log_figures
from pipeline.engine.options import pool_blocks
from pipeline.steptime.options import add_latency_arguments, add_slo_arguments, \
    latency_from_args, slo_options
from pipeline.steptime.tpot import goodput

__all__ = ["steptime_arguments", "prepare", "run_metrics_outputs", "run_curves",
           "metric_lines", "loads_closed"]

LOAD_KINDS = ("speed", "rate", "concurrency")


def steptime_arguments(parser: argparse.ArgumentParser) -> None:
    """The step-time, model and curve options of ``simulate``."""
    add_latency_arguments(parser)
    add_slo_arguments(parser)
    add_kv_arguments(parser.add_argument_group(
        "model (the roofline's shape; sizes in --gpu)"))
    group = parser.add_argument_group("GPU capacity, and curves under load (a list in --gpu "
                                      "or a load list, with --latency)")
    group.add_argument("--gpu", type=capacities, metavar="SIZE[,SIZE...]", default=None,
                       help="GPU KV capacity: tokens, blocks (5860blocks = vLLM's "
                            "num_gpu_blocks 5860 of --block-size tokens, the null block "
                            "included) or a size with --model (20GiB, 200GB, 512MiB); one "
                            "value: one run; a list (or a load list): one run per (load, "
                            "capacity), hit ratio and TTFT per point in DIR/curves.parquet")
    group.add_argument("--gpu-steps", type=positive_int, metavar="N", default=None,
                       help="with --gpu LO,HI: N capacities spaced geometrically")
    group.add_argument("--jobs", type=positive_int, default=1,
                       help="worker processes for the curve runs (default %(default)s)")
    group.add_argument("--report", type=Path, metavar="HTML", default=None,
                       help="also write the curves as a page (atomically)")
    from pipeline.sizes.vllm_memory import add_memory_arguments
    add_memory_arguments(parser)


def prepare(args: argparse.Namespace) -> tuple[Options, list[Load] | None]:
    """(the run's options, the loads of a curve run or None for one run). The options are
    ``args`` with ``latency_model`` (``--latency``'s, or None), ``clock`` settled (time
    with --latency), and for one run the load options as single values and
    ``num_gpu_blocks``; for curves the load options None (the loads say them)."""
    model = latency_from_args(args)
    clock = args.clock or ("time" if model is not None else "steps")
    if clock == "time" and model is None:
        raise UsageError("--clock time needs a step-time model: --latency roofline or FILE")
    if clock == "steps" and model is not None:
        raise UsageError("--latency prices batches in milliseconds: use --clock time (the "
                         "default with --latency)")
    slos = slo_options(args, clock == "time")
    given = {kind: getattr(args, kind) for kind in LOAD_KINDS if getattr(args, kind)}
    if args.concurrency and any(v != int(v) for v in args.concurrency):
        raise UsageError("--concurrency: a whole number of requests")
    curves = (args.gpu is not None and len(args.gpu) > 1 or args.gpu_steps is not None
              or args.report is not None or any(len(values) > 1 for values in given.values()))
    if not curves:
        single = {kind: int(values[0]) if kind == "concurrency" else values[0]
                  for kind, values in given.items()}
        if args.gpu is None:
            raise UsageError("--gpu SIZE is required (the GPU KV capacity; a list for curves)")
        return derive(args, latency_model=model, clock=clock, **single,
                      num_gpu_blocks=pool_blocks(args.gpu[:1], args.block_size)[0]), None
    if args.gpu is None:
        raise UsageError("a list of loads makes curves: give --gpu SIZE[,SIZE...] (GPU "
                         "capacities)")
    if model is None:
        raise UsageError("curves under load need --latency roofline or FILE (TTFT in ms)")
    if any(slo is not None for slo in slos):
        raise UsageError(f"--slo-{'ttft' if slos[0] is not None else 'tpot'}-ms: goodput is "
                         f"reported for one run (one --gpu, one load) and by fleet, not "
                         f"for curves")
    if len(given) > 1:
        raise UsageError("curves take one load list: --speed, --rate or --concurrency")
    kind, values = next(iter(given.items())) if given else ("speed", [1.0])
    return (derive(args, latency_model=model, clock=clock, **dict.fromkeys(LOAD_KINDS)),
            [Load(kind, v) for v in values])


def _notes(model, prompt_tokens, kv_bytes: int) -> list[str]:
    notes = list(getattr(model, "notes", ()))
    if isinstance(model, Linear):
        note = model.range_note(prompt_tokens)
        if note:
            notes.append(note)
        if model.kv_bytes_per_token and model.kv_bytes_per_token != kv_bytes:
            notes.append(f"the fit was made with {model.kv_bytes_per_token:,} KV bytes per "
                         f"token, the model options give {kv_bytes:,}")
    return notes


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def run_metrics_outputs(args: argparse.Namespace, result, outputs: Outputs,
                        models: dict | None = None) -> dict:
    """Add DIR/metrics.json and DIR/vllm_log.parquet (time clock, vLLM's engine) to
    ``outputs``; return the metrics (with ``models``, the cache models, first when given).
    For ``--engine sglang`` the ``vllm_*`` figures give way to ``sglang_cache_hit_rate``
    (SGLang's first-admission hit rate, which over a whole run is the GPU hit ratio)."""
    model = args.latency_model
    metrics = {**({"models": models} if models is not None else {}),
               **run_metrics(result.requests, result.steps, model.label if model else None)}
    kv = kv_from_args(args)
    slos = (getattr(args, "slo_ttft_ms", None), getattr(args, "slo_tpot_ms", None))
    if model is not None and any(slo is not None for slo in slos):
        metrics.update(goodput(result.requests, metrics.get("duration_s"), *slos))
    metrics["provenance"] = model.provenance if model else None
    metrics["notes"] = _notes(model, result.requests["prompt_tokens"].to_list(),
                              kv.bytes_per_token) if model else []
    sglang = getattr(args, "engine", "vllm") == "sglang"
    if sglang:                                   # vLLM's counters and log mean nothing here
        metrics = {k: v for k, v in metrics.items() if not k.startswith("vllm_")}
        # SGLang counts a HiCache load back in the admission's prefix (its cpu_hit_tokens)
        gpu, cpu = metrics["gpu_hit_ratio"], metrics["cpu_hit_ratio"]
        metrics["sglang_cache_hit_rate"] = None if gpu is None else gpu + cpu
    if model is not None and result.steps.height and not sglang:
        entries = prefix_cache_entries(result.requests, result.steps)
        end = float((result.steps["start_ms"] + result.steps["duration_ms"]).max())
        log = vllm_log_figures(entries, end)
        outputs.add(f"{args.out}/vllm_log.parquet", parquet_bytes(log), "--out")
    outputs.add(f"{args.out}/metrics.json", json_bytes(_finite(metrics)), "--out")
    return metrics


def metric_lines(metrics: dict) -> list[str]:
    """Text lines of a timed run's metrics, labelled with the step-time model."""
    if metrics.get("step_time_model") is None:
        return []

    def pct(value):
        return "n/a" if value is None else f"{100 * value:.1f} %"

    ttft = " / ".join(format_duration(metrics[f"ttft_ms_{p}"]) for p in ("p50", "p90", "p99"))
    lines = [f"TTFT p50 / p90 / p99: {ttft}, queue p90 "
             f"{format_duration(metrics['queue_ms_p90'])} [{metrics['step_time_model']}]",
             f"throughput {metrics['request_throughput'] or 0:,.2f} requests/s, "
             f"{metrics['output_throughput'] or 0:,.0f} output tokens/s over "
             f"{metrics['duration_s']:,.1f} s [{metrics['step_time_model']}]",
             *_token_lines(metrics),
             f"hit ratio GPU {pct(metrics['gpu_hit_ratio'])}, CPU "
             f"{pct(metrics['cpu_hit_ratio'])}; " + (
                 f"SGLang would report cache_hit_rate {pct(metrics['sglang_cache_hit_rate'])}"
                 f" over the run (first admissions' #cached-token / (#cached-token + "
                 f"#new-token), the GPU hit ratio"
                 f"{' plus the CPU one: HiCache loads' if metrics['cpu_hit_ratio'] else ''}"
                 f"; its gauge keeps a 15 s window)"
                 if "sglang_cache_hit_rate" in metrics else
                 f"vLLM would report prefix cache hit rate "
                 f"{pct(metrics['vllm_prefix_cache_hit_rate'])} (Prometheus counters), "
                 f"{pct(metrics['vllm_log_hit_rate_final'])} in its last log line "
                 f"(1,000-request window)")]
    lines += [f"note: {note}" for note in metrics.get("notes", [])]
    return lines


def _token_lines(metrics: dict) -> list[str]:
    """TPOT and ITL percentiles, and goodput when an SLO was given."""
    label = metrics["step_time_model"]
    if metrics.get("tpot_ms_p50") is None:
        lines = [f"TPOT, ITL: none (no request has two output tokens) [{label}]"]
    else:
        tpot, itl = (" / ".join(format_duration(metrics[f"{name}_ms_p{p}"])
                                for p in (50, 90, 99)) for name in ("tpot", "itl"))
        unresolved = metrics.get("itl_unresolved_requests") or 0
        lines = [f"TPOT p50 / p90 / p99: {tpot}; ITL p50 / p90 / p99: {itl}"
                 + (f" ({unresolved:,} requests whose gaps the run cannot tell apart left out:"
                    " preempted, or out of a decoding batch)"
                    if unresolved else "") + f" [{label}]"]
    if metrics.get("goodput_fraction") is not None:
        slos = " and ".join(f"{name} <= {metrics[f'slo_{name.lower()}_ms']:g} ms"
                            for name in ("TTFT", "TPOT")
                            if metrics.get(f"slo_{name.lower()}_ms") is not None)
        rate = metrics.get("request_goodput")
        lines.append(f"goodput: {metrics['goodput_requests']:,} of {metrics['requests']:,} "
                     f"requests ({100 * metrics['goodput_fraction']:.1f} %) meet {slos}"
                     + (f", {rate:.3g} requests/s" if rate is not None else "")
                     + f" [{label}]")
    return lines


def _grid(args: argparse.Namespace) -> list[int]:
    tokens = list(args.gpu)
    if args.gpu_steps is not None:
        if len(tokens) != 2 or not 0 < tokens[0] < tokens[1]:
            raise UsageError("--gpu-steps needs --gpu LO,HI with 0 < LO < HI")
        grid = np.geomspace(tokens[0], tokens[1], args.gpu_steps)
        tokens = sorted({int(round(t)) for t in grid})
    return sorted(set(tokens))


def run_curves(args: argparse.Namespace, workload: EngineRequests, loads: list[Load],
               config_for: Callable[[int], object], tier_factory,
               first_line: str | None = None) -> int:
    """The grid of (load, capacity) runs plus the upper line; writes DIR/curves.parquet and
    the --report page; ``config_for(num_gpu_blocks)`` is the command's config check;
    ``first_line`` (the cache models) is printed first."""
    grid = _grid(args)
    block = args.block_size
    smallest = max(grid[0] // block, 2)
    try:
        config = config_for(smallest)
    except CLIError as exc:
        raise CLIError(f"--gpu {grid[0]:,} tokens ({smallest} blocks of {block}): "
                       f"{str(exc).replace(f'--gpu {smallest}blocks', 'that capacity')}") from None
    model = args.latency_model
    frame = load_curves(workload.requests, grid, loads, config, model, cpu_tier=tier_factory,
                        jobs=args.jobs, seed=args.seed)
    if tier_factory is None:
        upper = upper_curve(workload.requests, grid, config, model)
    else:
        upper = load_curves(workload.requests, grid, [Load("concurrency", 1)], config, model,
                            cpu_tier=tier_factory, jobs=args.jobs).with_columns(
            curve=pl.lit(UPPER), load=pl.lit("concurrency 1 (engine, CPU tier)"))
    curves = pl.concat([upper, frame])
    outputs = Outputs()
    outputs.add(f"{args.out}/curves.parquet", parquet_bytes(curves), "--out")
    description = (f"{workload.label}: {len(workload.requests):,} requests, block size "
                   f"{block}, {len(grid)} GPU capacities x {len(loads)} loads")
    if args.report is not None:
        from pipeline.charts.summary import engine_configuration, provenance_text
        from pipeline.charts.steptime import curves_page
        page = curves_page(curves, description, engine_configuration(args, model),
                           provenance_text(model))
        outputs.add(args.report, page.encode(), "--report")
    outputs.commit()
    if first_line is not None:
        print(first_line)
    for line in size_lines(args.sizes):
        print(line)
    print(f"{description}; step time {model.label}")
    for load in [upper["load"][0], *[l.label for l in loads]]:
        rows = curves.filter(pl.col("load") == load).sort("gpu_capacity")
        picks = rows[[0, rows.height // 2, rows.height - 1]] if rows.height > 2 else rows
        print(f"  {load}: " + "; ".join(
            f"{r['gpu_capacity']:,} tokens hit {100 * (r['hit_ratio'] or 0):.1f} % TTFT p90 "
            f"{format_duration(r['ttft_ms_p90'])}" for r in picks.iter_rows(named=True)))
    print(f"wrote {args.out}/curves.parquet" + (f" and {args.report}" if args.report else ""))
    for line in warning_lines(frame.to_dicts(), lambda row: f"{row['load']}, GPU "
                                                            f"{row['gpu_capacity']:,} tokens"):
        print(line)
    return 0


def loads_closed(loads: list[Load] | None) -> bool:
    """True when every load of a curve run is a closed loop (no arrival times needed)."""
    return bool(loads) and all(load.kind in ("concurrency", "rate") for load in loads)

