"""Replay real traffic through the block model: GPU / CPU / recomputed tokens per capacity.

``python -m pipeline trace PATH`` reads a Mooncake trace (``--format mooncake``, 512-token
blocks) or token ids (``--format tokens``, hashed into chained blocks of ``--block-size``);
``--pattern`` generates LMCache long_doc_qa, multi-tenant or Zipf traffic instead. It prints
the infinite-cache block hit ratio and, per (GPU, CPU) capacity point in tokens, the tokens
each tier serves and the block and token hit ratios; writes the block events and per-request
tokens to Parquet and the report to reports/trace.html. Capacities are tokens or sizes
(``pipeline.sizes.units``: ``1.5GiB``, ``40GB``, ``1.5lmcacheGB``) through ``--model``'s bytes per
token; the output then says the unit and bytes per token used. Bad input stops it before anything is
written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.base.arguments import derive
from pipeline.base.config import EVENTS_DIR, REPORTS_DIR
from pipeline.catalog.model_options import add_model_arguments, add_order_arguments, run_options
from pipeline.base.errors import CLIError, UsageError
from pipeline.commands.trace_tiers import add_trace_tier_arguments, trace_tiers
from pipeline.sizes.units import add_kv_arguments, capacities, capacity, size_lines
from pipeline.trace import engine
from pipeline.commands import trace_outputs as outputs
from pipeline.workloads.sources import add_input_arguments, block_size_of, load_workload
from pipeline.sizes.vllm_memory import add_memory_arguments, resolve_with_utilization
from pipeline.base.staging import Outputs

DEFAULT_OUT = EVENTS_DIR / "trace"
DEFAULT_REPORT = REPORTS_DIR / "trace.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``trace``."""
    add_input_arguments(parser)
    tiers = parser.add_argument_group("tiers (capacities in tokens, blocks such as 5860blocks "
                                      "(x --block-size tokens) or sizes such as 1.5GiB, 40GB, "
                                      "512MiB, 1.5lmcacheGB through --model's bytes per token; "
                                      "a tier holds capacity // block-size blocks)")
    tiers.add_argument("--gpu", type=capacities, default=None, metavar="SIZE[,SIZE...]",
                       help="GPU capacities, a list sweeps (default: 0 and 1/32 .. 1 of the "
                            "distinct blocks)")
    tiers.add_argument("--cpu", type=capacities, default=None, metavar="SIZE[,SIZE...]",
                       help="CPU capacities, a list sweeps (default: 0, 1/4 and all of the "
                            "distinct blocks)")
    tiers.add_argument("--cpu-sweep-gpu", type=capacity, default=None, metavar="SIZE",
                       help="the GPU capacity of the report's CPU curve (default: the "
                            "smallest non-zero --gpu)")
    add_order_arguments(tiers)
    add_model_arguments(parser.add_argument_group(
        "models (pipeline.catalog.model_api; engine options as on blocks)"))
    add_kv_arguments(parser.add_argument_group("KV size (converts sizes to tokens)"))
    add_memory_arguments(parser)
    add_trace_tier_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, default=DEFAULT_OUT,
                     help="folder for events.parquet, requests.parquet, points.parquet "
                          "(default %(default)s)")
    out.add_argument("--report", type=Path, default=DEFAULT_REPORT,
                     help="report page (default %(default)s)")
    out.add_argument("--no-report", action="store_true", help="skip the report page")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _table(points: pl.DataFrame) -> str:
    header = (f"{'gpu':>10} {'cpu':>10} {'gpu tokens':>12} {'cpu tokens':>12} "
              f"{'recomputed':>12} {'block hit':>9} {'token hit':>9}")
    rows = [f"{r['gpu_capacity']:>10} {r['cpu_capacity']:>10} {r['gpu_tokens']:>12} "
            f"{r['cpu_tokens']:>12} {r['recomputed_tokens']:>12} "
            f"{r['block_hit_ratio']:>9.4f} {r['token_hit_ratio']:>9.4f}"
            for r in points.iter_rows(named=True)]
    return "\n".join([header, *rows])


def _shown(path: str | Path) -> str:
    """``path`` relative to the working folder when it lies under it."""
    try:
        return str(Path(path).absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(args: argparse.Namespace) -> int:
    """``python -m pipeline trace``: validate, replay, write, print."""
    args, as_sizes = resolve_with_utilization(args, "gpu", "cpu", "cpu_sweep_gpu",
                                              block_size=block_size_of(args))
    # the report adds GiB (outputs.trace_units)
    args = derive(args, sizes_given=bool(as_sizes.get("kv")))
    workload = load_workload(args)
    try:
        stream = workload.block_stream()
    except ValueError as exc:
        raise CLIError(f"{workload.label}: {exc}") from None
    if args.tiers:
        return trace_tiers(args, workload, stream)
    if args.tier_stack is not None:
        raise UsageError("--tier-stack: it is the --tier stack's kind; give --tier")
    gpu = args.gpu if args.gpu is not None else engine.default_gpu_grid(stream)
    cpu = args.cpu if args.cpu is not None else engine.default_cpu_grid(stream)
    if len(gpu) * len(cpu) > 65535:
        raise CLIError("--gpu x --cpu: at most 65535 capacity points")
    sweep_gpu = args.cpu_sweep_gpu if args.cpu_sweep_gpu is not None else \
        min([g for g in gpu if g > 0], default=0)
    models = outputs.Models(args.gpu_model, args.cpu_model,
                            *run_options(args, stream.block_size, stream.requests,
                                         stream.blocks, workload))
    outputs.check_writable(args.out, None if args.no_report else args.report)

    infinite = engine.infinite(stream)
    points, per_request = engine.points(stream, gpu, cpu, args.gpu_order, args.cpu_order,
                                        *models)
    events = engine.block_events(stream, args.gpu_order)
    points, per_request = outputs.name_models(points, per_request, models)
    staged = Outputs()
    sizes = outputs.add_frames(staged, args.out, events, per_request, points,
                               workload.requests, args.gpu_model)
    summary = outputs.summary(workload, stream, infinite, args, sweep_gpu, sizes, points,
                              models)
    if not args.no_report:
        outputs.add_report(staged, args.report, workload, stream, infinite, args, sweep_gpu,
                           events, models)
        summary["report"] = str(args.report)
    staged.commit()                 # every file or none (pipeline.base.staging)
    if as_sizes:
        summary["sizes"] = as_sizes
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return 0
    print(models.line())
    print(f"trace: {workload.label} ({infinite.requests} requests, {infinite.blocks} block "
          f"accesses of {stream.block_size} tokens, {infinite.distinct_blocks} distinct, "
          f"{infinite.prompt_tokens} prompt tokens)")
    if workload.skipped:
        print(f"skipped {len(workload.skipped)} bad lines (first: line "
              f"{workload.skipped[0][0]}: {workload.skipped[0][1]})")
    print(f"infinite-cache block hit ratio: {infinite.repeat_ratio:.4f} (repeated blocks); "
          f"the model, full blocks only: {infinite.block_hit_ratio:.4f} of blocks, "
          f"{infinite.token_hit_ratio:.4f} of tokens")
    print(f"GPU {args.gpu_order} ({models.describe('gpu')}), CPU {args.cpu_order} "
          f"({models.describe('cpu')}), capacities in tokens:")
    print(_table(points))
    for line in size_lines(as_sizes):
        print(line)
    print(f"events: {_shown(sizes['events']['path'])} ({sizes['events']['rows']} rows, "
          f"{sizes['events']['bytes_per_row']:.2f} bytes/access; "
          f"{'' if args.gpu_model == 'block-lru' else 'the block-lru model: '}GPU curve exact from "
          f"{int(np.max(stream.cacheable, initial=0))} blocks)")
    print(f"per request: {_shown(sizes['requests']['path'])} ({sizes['requests']['rows']} rows, "
          f"{sizes['requests']['bytes_per_row']:.2f} bytes/request/point)")
    if not args.no_report:
        print(f"report: {_shown(args.report)}")
    return 0
