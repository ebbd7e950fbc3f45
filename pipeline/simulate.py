"""The ``simulate`` stage and command: a workload through a model of vLLM v1's engine loop,
step by step.

The scheduler (running requests first, then the FCFS queue; max_num_seqs,
max_num_batched_tokens, chunked prefill, long_prefill_token_threshold, max_model_len),
vLLM's admission check, prefix hits at (re-)admission, blocks hashed as soon as they are
full, preemption of the newest running request when decode growth finds no block, blocks
freed tail first, async scheduling's two-deep batch queue, and an optional CPU tier
(LMCache's, or any registered CPU model: ``--cpu-model``). Proven equal to vLLM 0.33.0's
own scheduler (tests/test_engine_vllm_equal.py).
Writes DIR/requests.parquet (one row per request), DIR/steps.parquet (one per batch) and
DIR/metrics.json (the run's figures; with a step-time model also DIR/vllm_log.parquet);
a run whose queue grows (``pipeline.engine.overload``) ends with a ``warning: overloaded:``
line. The lab's document-mode events (one row per access and capacity pair) are
``pipeline.onepass.events``; ``METHODS``, ``RESULT_SCHEMA``, ``with_stack_distances`` and
``document_events`` (its ``simulate``) stay reachable here.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.base.arguments import deprecated_alias, derive, plural, \
    positive_int
from pipeline.onepass.events import METHODS, RESULT_SCHEMA, with_stack_distances
from pipeline.onepass.events import simulate as document_events
from pipeline.sizes.units import size_lines
from pipeline.sizes.vllm_memory import resolve_with_utilization
from pipeline.engine.tier_options import check_stack_pricing, stack_lines
from pipeline.engine.options import add_engine_arguments, cpu_tier_factory, engine_for, \
    engine_models
from pipeline.engine.overload import warning_line
from pipeline.engine.sglang_intake import CLIP_WARNING
from pipeline.engine.request import EngineRequests
from pipeline.engine.workload import (FORMATS, pattern_workload, read_workload,
                                      with_arrivals)
from pipeline.base.errors import CLIError, UsageError
from pipeline.workloads.sources import (add_pattern_arguments, add_trace_arguments,
                                       check_pattern_options)
from pipeline.base.staging import Outputs, parquet_bytes
from pipeline.steptime.options import add_load_arguments
from pipeline.steptime.tpot import token_times
from pipeline.commands.simulate_time import (loads_closed, metric_lines, prepare,
                                       run_curves, run_metrics_outputs,
                                       steptime_arguments)
from pipeline.workloads.jsonl import TraceError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_trace_arguments(parser, FORMATS, 'tokens: {"prompt_token_ids", "max_tokens", '
                        '"arrival_step" or "arrival_time", optional "output_token_ids"}; '
                        "mooncake: {timestamp, input_length, output_length, hash_ids}",
                        default="tokens")
    parser.add_argument("--out", metavar="DIR", required=True,
                        help="folder for requests.parquet and steps.parquet")
    engine = add_engine_arguments(parser, "engine (vLLM's options and defaults)")
    deprecated_alias(engine, "--num-gpu-blocks", "--gpu", lambda text: f"{text}blocks")
    load = parser.add_argument_group("arrivals")
    load.add_argument("--clock", choices=("steps", "time"), default=None,
                      help="steps: one step = one executed batch (default); time: each "
                           "batch priced by --latency (the default with --latency)")
    load.add_argument("--output-tokens", type=positive_int, default=1,
                      help="max_tokens of token-id lines without one, and of patterns "
                           "(default %(default)s)")
    add_load_arguments(load, lists=True)                # one arrival pattern at a time
    add_pattern_arguments(parser)
    steptime_arguments(parser)


__all__ = ["add_arguments", "main", "load", "METHODS", "RESULT_SCHEMA", "document_events",
           "with_stack_distances"]


def _config(args: argparse.Namespace, workload: EngineRequests, blocks: int):
    """The engine's config of a pool of ``blocks`` (vLLM's num_gpu_blocks); a prompt of
    --max-model-len tokens or more (refused by vLLM's input processor) or a request the pool
    can never hold is one line naming its file:line and the option."""
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in workload.requests)
    max_len = args.max_model_len or longest
    engine = engine_for(args)
    if hasattr(engine, "refusal"):              # the engine's own intake rules (SGLang's)
        config = engine.config(args, blocks, max_len)
        for r in workload.requests:
            why = engine.refusal(r, config)
            if why is not None:
                raise CLIError(f"{workload.where(r.index)}: {why}")
        return config
    size, usable = args.block_size, blocks - 1
    for r in workload.requests:
        prompt = len(r.prompt_token_ids)
        if prompt >= max_len:                   # vLLM's input processor refuses both
            what = "is longer than" if prompt > max_len else "fills"
            raise CLIError(f"{workload.where(r.index)}: prompt of {prompt} tokens {what} "
                           f"--max-model-len {max_len} (vLLM needs room for 1 output token)")
        # the KV holds every token but the last sampled one, at most max_model_len - 1
        need = -(-(min(prompt + r.max_tokens, max_len) - 1) // size)
        if need > usable:
            raise CLIError(f"{workload.where(r.index)}: the request needs {need} blocks of "
                           f"{size} tokens, more than --gpu {blocks}blocks "
                           f"holds ({usable} usable)")
    batched = args.max_num_batched_tokens
    if getattr(args, "no_chunked_prefill", False) and batched < max_len:
        raise CLIError(f"--no-chunked-prefill needs --max-num-batched-tokens ({batched}) >= "
                       f"--max-model-len ({max_len}), as vLLM requires")
    return engine_for(args).config(args, blocks, max_len)


def load(args: argparse.Namespace) -> EngineRequests:
    """The workload of PATH or --pattern, with its arrivals set."""
    if (args.path is None) == (args.pattern is None):
        raise UsageError("give a trace PATH or --pattern, not both or neither")
    check_pattern_options(args)
    if args.pattern is not None:
        workload = pattern_workload(args)
    else:
        try:
            workload = read_workload(args.path, args.format, args.block_size,
                                     args.output_tokens)
        except TraceError as exc:
            raise CLIError(str(exc)) from None
    if (workload.arrival_unit == "seconds" and args.clock == "steps" and args.rate is None
            and args.concurrency is None):
        raise CLIError(f"{workload.label}: arrivals are in seconds (timestamp/arrival_time), "
                       f"not steps: give --latency (e.g. roofline, with --model and "
                       f"--gpu-type) to replay them on the time clock, or --rate or "
                       f"--concurrency for --clock steps")
    if args.speed is not None and workload.arrival_unit is None:
        raise CLIError(f"{workload.label}: --speed needs arrival times in the trace (use "
                       f"--rate or --concurrency for an untimed workload)")
    with_arrivals(workload.requests, args.clock, speed=args.speed, rate=args.rate,
                  seed=args.seed)
    return workload


def main(args: argparse.Namespace) -> int:
    args, sizes = resolve_with_utilization(args, "gpu", "cpu", block_size=args.block_size)
    args = derive(args, sizes=sizes)
    try:
        args, loads = prepare(args)             # steptime: the clock, and curves or one run
        tiers = cpu_tier_factory(args)
        first_line, models = engine_models(args)
        workload = load(args)
        if workload.arrival_unit == "steps" and args.clock == "time" and args.rate is None \
                and args.concurrency is None and not loads_closed(loads):
            raise CLIError(f"{workload.label}: arrivals are in steps (arrival_step), not "
                           f"seconds: give --rate or --concurrency for --clock time")
        if loads is not None:
            if engine_for(args).NAME != "vllm":
                raise UsageError(f"--engine {args.engine}: curves run vLLM's engine only "
                                 f"(give one --gpu and one load)")
            return run_curves(args, workload, loads, lambda blocks: _config(
                args, workload, blocks), tiers, first_line)
        config = _config(args, workload, args.num_gpu_blocks)
        tier = tiers() if tiers is not None else None
        model = args.latency_model
        check_stack_pricing(args, model)
        result = engine_for(args).simulate(
            workload.requests, config, cpu_tier=tier, clock=args.clock,
            concurrency=args.concurrency, step_ms=model.step_ms if model is not None else None,
            decode_run_ms=getattr(model, "decode_run_ms", None))
        outputs = Outputs()
        outputs.add(f"{args.out}/requests.parquet", parquet_bytes(
            token_times(result.requests, result.steps) if model is not None
            else result.requests), "--out")
        outputs.add(f"{args.out}/steps.parquet", parquet_bytes(result.steps), "--out")
        metrics = run_metrics_outputs(args, result, outputs, models)
        written = outputs.commit()
    except (ValueError, RuntimeError) as exc:
        raise CLIError(str(exc)) from None
    except MemoryError as exc:                  # a pool (or grid) too large for this machine
        raise CLIError(f"not enough memory for the engine's arrays ({exc}): a smaller "
                       f"--gpu") from None
    frame = result.requests
    prompt = int(frame["prompt_tokens"].sum())
    hit = int(frame["gpu_hit_tokens"].sum())
    print(first_line)
    print(f"{plural(frame.height, 'request')} in {plural(result.steps.height, 'step')}: "
          f"GPU prefix hits {hit:,} of {prompt:,} prompt tokens "
          f"({hit / prompt:.1%}), CPU {int(frame['cpu_hit_tokens'].sum()):,}, "
          f"{plural(int(frame['preemptions'].sum()), _preemption(args))}; "
          f"wrote {args.out}/: {', '.join(sorted(path.name for path in written))}")
    for line in size_lines(args.sizes) + stack_lines(frame):
        print(line)
    for line in metric_lines(metrics):
        print(line)
    if metrics["overloaded"]:
        print(warning_line(metrics))
    if "output_clipped" in frame.columns:
        print(CLIP_WARNING.format(count=plural(
            int((frame["output_clipped"] > 0).sum()), "request")), file=sys.stderr)
    return 0


def _preemption(args: argparse.Namespace) -> str:
    """What the engine calls a request pushed out of the batch: SGLang retracts
    (``retract_decode``), vLLM preempts."""
    return "retraction" if getattr(args, "engine", "vllm") == "sglang" else "preemption"
