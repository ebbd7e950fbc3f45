"""``plan --fleet``: the smallest total KV memory per router that meets a TTFT p90 or a
hit-ratio target, for a fleet of instances behind that router.

The search is ``fleet``'s (``pipeline.fleet.plan.smallest_memory``): every point of a grid
(``--instances`` x ``--gpu`` per instance, at the load ``--speed``) is one fleet
simulation, and per router the point with the least memory (replicas x (GPU KV + CPU tier),
or replicas x GPU KV + one ``--cpu-shared`` pool) that meets the target is the answer. The
answer is only as fine as the grid: without ``--gpu`` the grid is six block counts,
geometric from the smallest pool that holds the longest request to one that holds every
distinct block of the workload. Memory is in tokens and in bytes at the plan's KV size
(``--model``, ``--kv-bytes-per-token`` or ``--kv-shape``, as ``plan`` sizes it).

TTFT is printed only when the step-time model can back it: the roofline (labelled)
or a fitted file, with the plan's KV bytes per token, and for a fitted file every prompt
inside its fitted range. Otherwise a TTFT target is refused and a hit-ratio plan prints no
TTFT, saying why. Nothing is written but ``--out DIR`` (``fleet.parquet``: every point;
``plan.parquet``: the answers), both or neither, and only when every point ran. An answer
whose point is overloaded (its queue grows under the load: ``pipeline.engine.overload``)
gets a ``warning: overloaded:`` line (on stderr with ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.dataset as ds

from pipeline.base.arguments import Options, Parser, derive
from pipeline.sizes.gpus import gpu_preset
from pipeline.engine.hashing import bulk_request_keys
from pipeline.engine.engines import engine_options
from pipeline.base.errors import CLIError, UsageError
from pipeline.commands import fleet as fleet_command
from pipeline.engine.overload import warning_line
from pipeline.fleet.aggregates import fleet_aggregates
from pipeline.fleet.options import resolve_disaggregation, resolve_fleet_capacities
from pipeline.commands.plan_fleet_output import plan_document, print_document, \
    tier_models_lines
from pipeline.commands.plan_cost import best_of_kinds, both_kinds, frontier_page, with_search
from pipeline.fleet.cost import COST_DESTS, cost_requested, prices_from_args
from pipeline.fleet.cost_search import Setup, search_setups
from pipeline.fleet.cost_tiers import TierChoice, engine_tier_choice, resolve_tier_options, \
    tier_option_list
from pipeline.sizes.model_options import tensor_parallel
from pipeline.fleet.plan import Memory, Targets, smallest_memory
from pipeline.fleet.sweep import run_sweep
from pipeline.fleet.sweep_point import Point, point_path
from pipeline.fleet.workload import FLEET_PATTERNS, load_workload
from pipeline.plan.output import exit_status
from pipeline.sizes.units import kv_from_args
from pipeline.steptime.alone import plan_with_latency
from pipeline.steptime.tpot import tpot_ms
from pipeline.base.staging import Outputs, parquet_bytes
from pipeline.workloads import patterns

__all__ = ["add_fleet_plan_arguments", "fleet_requested", "fleet_plan", "gpu_block_grid"]

GRID_POINTS = 6
#: fleet's options that plan takes only with --fleet (plan has the others already)
FLEET_ONLY = ("engine", "instances", "router", "router_option", "staleness_ms",
              "max_model_len", "no_chunked_prefill", "long_prefill_token_threshold",
              "async_scheduling", "cpu", "cpu_chunk_size", "cpu_shared", "limit",
              "groups", "questions", "sessions", "turns", "think_s", "executor", "jobs",
              "ray_address", "retries", "prefill_instances", "decode_instances",
              "kv_transfer", "decode_router", "max_local_prefill_length", "pd_decider", "gpu_types",
              "slo_ttft_ms", "slo_tpot_ms", "target_goodput", "tier_options", "tiers",
              "tier_policy", *COST_DESTS)


#: the options whose default, when plan's parser leaves None, is fleet's own
FLEET_DEFAULTS = ("engine", "block_size", "output_tokens", "rate", "router", "router_option",
                  "staleness_ms", "long_prefill_token_threshold", "cpu", "groups", "questions",
                  "sessions", "turns", "think_s", "executor", "jobs", "retries")


@functools.cache
def _fleet_defaults() -> dict:
    """``fleet``'s parser's defaults, by dest."""
    template = Parser(add_help=False)
    fleet_command.add_arguments(template)
    return {action.dest: action.default for action in template._actions}


def add_fleet_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """``--fleet``, ``--out`` and fleet's options that ``plan`` lacks (one definition:
    ``fleet``'s own, default None here so that giving one without --fleet is refused)."""
    template = Parser(add_help=False)
    fleet_command.add_arguments(template)
    group = parser.add_argument_group(
        "fleet (with --fleet: the smallest fleet memory per router; fleet's options)")
    group.add_argument("--fleet", action="store_true",
                       help="plan a fleet of --instances behind each --router for "
                            "--target-ttft-p90-ms or --target-hit-ratio (a grid of fleet "
                            "simulations)")
    for action in template._actions:
        alias = getattr(action, "new", None) in ("--gpu", "--cpu")   # fleet's old spellings
        if action.dest in _fleet_only() or alias:
            if not alias:
                action.default = None
            action.container = group
            group._add_action(action)
    group.add_argument("--gpu-types", type=name_list, metavar="NAME[,NAME...]",
                       help="with --cost: search these GPU presets too (each its roofline, "
                            "its price and its fit; default: --gpu-type only)")
    group.add_argument("--tier-options", type=tier_option_list, metavar="TIER[,TIER...]",
                       help="with --cost: search these CPU tiers per instance too (a "
                            "disaggregated fleet's prefill engines), each point paying for "
                            "its CPU memory and disk: none; SIZE (LMCache's CPU backend, as "
                            "--cpu takes it); native:SIZE (vLLM's native offloading); or "
                            "--tier specs joined by + (cpu:200GiB+disk:2TiB:5:0.2: LMCache's "
                            "stack)")
    group.add_argument("--out", type=Path, metavar="DIR",
                       help="with --fleet: also write DIR/fleet.parquet (every point) and "
                            "DIR/plan.parquet (the answers)")
    pattern = next(a for a in parser._actions if a.dest == "pattern")
    pattern.choices = FLEET_PATTERNS


def name_list(text: str) -> list[str]:
    """argparse type: comma-separated GPU preset names (``--gpu-types``)."""
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for name in names:
        try:
            gpu_preset(name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if not names:
        raise argparse.ArgumentTypeError(f"empty GPU list {text!r}")
    return names


def _tiers(args: argparse.Namespace) -> list[TierChoice] | None:
    """``--tier-options`` resolved (``pipeline.fleet.cost_tiers``), or None; a usage error
    naming the option when it cannot be searched."""
    if args.tier_options is None:
        return None
    if not cost_requested(args):
        raise UsageError("--tier-options needs --cost (the tiers are compared by price)")
    return resolve_tier_options(args, args.tier_options)


def _fleet_only() -> tuple[str, ...]:
    """``FLEET_ONLY`` and every registered engine's own options."""
    return (*FLEET_ONLY, *(d for d in engine_options() if d not in FLEET_ONLY))


def _fleet_only_given(args: argparse.Namespace) -> str | None:
    if args.pattern in patterns.TOKEN_PATTERNS:
        return f"--pattern {args.pattern}"
    given = next((d for d in _fleet_only() if getattr(args, d, None) not in (None, False)),
                 None)
    return None if given is None else f"--{given.replace('_', '-')}"


def fleet_requested(args: argparse.Namespace) -> bool:
    """--fleet, or an option only a fleet plan takes (refused by ``fleet_plan``)."""
    return bool(args.fleet or _fleet_only_given(args))


def gpu_block_grid(low: int, high: int, points: int = GRID_POINTS) -> list[int]:
    """``points`` block counts, geometric from ``low`` to ``high`` (distinct integers)."""
    high = max(high, low)
    return sorted({int(round(b)) for b in np.geomspace(low, high, points)})


def _check(args: argparse.Namespace) -> Options:
    """The options of a fleet plan: fleet's defaults where plan's parser left None, the
    engines' CPU tier, the router options; a usage error on an option a fleet does not
    take."""
    if not args.fleet:
        raise UsageError(f"{_fleet_only_given(args)} needs --fleet")
    if args.instances is None and args.prefill_instances is None:
        raise UsageError("--fleet needs --instances N[,N...] (or --prefill-instances and "
                         "--decode-instances)")
    fleet = _fleet_defaults()
    defaults = {dest: copy.copy(fleet[dest]) for dest in FLEET_DEFAULTS
                if getattr(args, dest) is None}
    defaults.update(trace=args.path, latency="roofline" if args.latency is None
                    else str(args.latency))
    if getattr(args, "gpu_model_given", False) and args.gpu_model != "vllm":
        raise UsageError(f"--gpu-model {args.gpu_model}: not with --fleet (its engines run "
                         f"vLLM's allocator, vllm)")
    if getattr(args, "cpu_model_given", False):
        defaults["cpu_tier_model"] = args.cpu_model     # the engines' CPU tier
    args = derive(args, **defaults, **{flag: bool(getattr(args, flag)) for flag in (
        "no_chunked_prefill", "async_scheduling", "cpu_shared")})
    try:
        return derive(args, options=fleet_command.usage_checks(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _grid(args: argparse.Namespace, workload, costs=None) -> list[int]:
    """``--gpu``'s blocks, or six from the smallest pool that holds the longest request to
    one that holds every distinct block (with ``--cost``: at most what the largest GPU
    type's allocation holds, where that is known)."""
    if args.gpu is not None:
        return args.gpu_blocks
    requests = workload.requests
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    low = fleet_command.blocks_needed(requests, args.block_size, args.max_model_len or longest)
    keys = {k for ks in bulk_request_keys(requests, args.block_size) for k in (ks or ())}
    outputs = sum(-(-r.max_tokens // args.block_size) + 1 for r in requests)
    high = len(keys) + outputs + low
    fits = [tokens for _, tokens in costs or () if tokens is not None]
    if fits and len(fits) == len(costs):
        high = min(high, max(fits) // args.block_size)
    return gpu_block_grid(low, high)


def fleet_plan(args: argparse.Namespace) -> int:
    """Check, search, print (text or --json); a usage error (``UsageError``) is one line,
    exit 2."""
    args, aggregated = both_kinds(_check(args))
    args = resolve_fleet_capacities(resolve_disaggregation(args))
    tiers = _tiers(args)
    try:
        kv = kv_from_args(args, "plan --fleet (memory in bytes)")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.out is not None and not args.out.parent.is_dir():
        raise CLIError(f"--out: folder {args.out.parent} does not exist")
    if args.gpu_types and not cost_requested(args):
        raise UsageError("--gpu-types needs --cost (the types are compared by price)")
    types = [derive(args, gpu_type=name) for name in args.gpu_types or ()] or [args]
    costs = [prices_from_args(one) for one in types] if cost_requested(args) else None
    workload = load_workload(args)
    args = derive(args, gpu_blocks=_grid(args, workload, costs))
    args, settings = fleet_command.sweep_settings(args, workload, args.options)
    model = settings.step_model
    withheld = plan_with_latency(
        model, kv.bytes_per_token, [len(r.prompt_token_ids) for r in workload.requests],
        ttft_target=None if args.target_ttft_p90_ms is None else "--target-ttft-p90-ms")
    load = args.speed or 1.0
    points = [Point(r, n, b, load, d) for r in args.router for n in args.instances
              for d in args.decode_instances for b in args.gpu_blocks]
    points += [Point(r, n, b, load) for r in args.router for n in aggregated
               for b in args.gpu_blocks]
    own = engine_tier_choice(args, kv.bytes_per_token)    # --tier or native offloading
    memory = Memory(kv.bytes_per_token, args.block_size,
                    args.cpu if own is None else own.cpu_tokens, args.cpu_shared,
                    tensor_parallel(args))
    targets = Targets(args.target_ttft_p90_ms, args.target_hit_ratio,
                      args.target_tpot_p90_ms, args.target_goodput)
    search = None
    with _executor(args):
        if costs is None:
            fleet = _rows(args, settings, points, workload)
            plan = smallest_memory(fleet, args.target_ttft_p90_ms, args.target_hit_ratio,
                                   memory, args.target_tpot_p90_ms, args.target_goodput)
        else:
            setups, cpu = _cost_setups(args, settings, types, costs, tiers, points,
                                       memory, workload, 0 if own is None else own.disk_tokens)
            search = search_setups(setups, targets)
            fleet, plan = search.fleet, best_of_kinds(search.answers)
    plan = plan.sort(pl.col("router").replace_strict(
        {name: i for i, name in enumerate(args.router)}, return_dtype=pl.Int64))
    if withheld is not None:
        fleet = fleet.with_columns(pl.lit(None, pl.Float64).alias(name)
                                   for name in fleet.columns if name.startswith("ttft_"))
        plan = plan.with_columns(ttft_p90_ms=pl.lit(None, pl.Float64))
    if args.out is not None:
        outputs = Outputs()
        outputs.add(args.out / "fleet.parquet", parquet_bytes(fleet), label="--out")
        outputs.add(args.out / "plan.parquet", parquet_bytes(plan), label="--out")
        if search is not None:
            outputs.add(args.out / "frontier.html", frontier_page(
                search, args.target_ttft_p90_ms, workload).encode(), label="--out")
        outputs.commit()
    document = plan_document(args, workload, kv, model, withheld, plan, fleet, load,
                             None if costs is None else costs[0][0], aggregated,
                             tiers if tiers is not None or own is None else [own])
    if search is not None:
        document = with_search(document, search, targets)
        if args.gpu_types:
            document["cost"]["gpu_types"] = {prices.gpu: prices.gpu_per_hour
                                             for prices, _ in costs}
        document["search"]["cpu_s_per_simulation"] = (
            sum(sum(c.values()) for c in cpu) / sum(map(len, cpu)) if any(cpu) else None)
    warnings = [warning_line(a, f"the answer for {a['router']} ({a['instances']} x "
                                f"{a['gpu_blocks']:,} GPU blocks)")
                for a in document["answers"] if a["overloaded"]]
    if args.json:                     # stdout stays one JSON document: warnings to stderr
        print(json.dumps(document, indent=2))
    else:
        for line in tier_models_lines(args, tiers):
            print(line)
        print_document(document)
    for line in warnings:
        print(line, file=sys.stderr if args.json else sys.stdout)
    met = any(a["status"] == "met" for a in document["answers"])
    return exit_status("met" if met else "unreachable")      # 1: no router meets it


def _cost_setups(args: argparse.Namespace, settings, types: list, costs: list,
                 tiers: list[TierChoice] | None, points: list[Point], memory: Memory,
                 workload, disk_tokens: int = 0) -> tuple[list[Setup], list[dict]]:
    """One search setup per GPU type x CPU tier, each with its sweep settings (built here,
    so a tier the engine refuses is one line before anything runs); and per setup the CPU
    seconds of its points."""
    cpu: list[dict[Point, float]] = []
    setups = []
    for one, (prices, fits) in zip(types, costs):
        for tier in (None,) if tiers is None else tiers:
            if tier is None and one is args:
                each_args, each = args, settings
            else:
                given = derive(one, gpu_blocks=args.gpu_blocks)
                try:
                    each_args, each = fleet_command.sweep_settings(
                        given if tier is None else tier.with_args(given), workload,
                        args.options)
                except CLIError as exc:
                    if tier is None:
                        raise
                    raise UsageError(f"--tier-options {tier.text}: {exc}") from None
            tags = {"gpu_type": prices.gpu} if args.gpu_types else {}
            if tier is not None:
                tags.update(cpu_tier=tier.cpu_tokens, tier=tier.text)
            cpu.append({})
            setups.append(Setup(
                tags, points,
                lambda order, skip, seen, one=each_args, each=each, mine=cpu[-1]: _stream(
                    one, each, order, workload, skip, seen, mine),
                prices, memory if tier is None else dataclasses.replace(
                    memory, cpu_tokens=tier.cpu_tokens), fits,
                disk_tokens if tier is None else tier.disk_tokens))
    return setups, cpu


@contextlib.contextmanager
def _executor(args: argparse.Namespace):
    """Ray joined (or started) for the whole search when ``--executor ray``."""
    started = (fleet_command.ray_connect(args.ray_address, args.jobs)
               if args.executor == "ray" else False)
    try:
        yield
    finally:
        if started:
            import ray
            ray.shutdown()


def _rows(args: argparse.Namespace, settings, points: list[Point],
          workload) -> pl.DataFrame:
    """Every point's fleet figures; CLIError when a point failed (nothing is written)."""
    with tempfile.TemporaryDirectory(prefix="kvlab-fleet-plan-") as tmp:
        _sweep(args, settings, points, workload, Path(tmp))
        requests = pl.from_arrow(ds.dataset(Path(tmp) / "requests", format="parquet",
                                            partitioning="hive").to_table())
    return fleet_aggregates(requests, args.slo_ttft_ms, args.slo_tpot_ms)


def _stream(args: argparse.Namespace, settings, order: list[Point], workload, skip,
            seen, cpu: dict) -> None:
    """The cost search's sweep: ``order`` run in that order, ``skip`` asked before a point
    starts, ``seen(point, its figures with TPOT)`` as each point finishes; ``cpu`` gets
    each point's CPU seconds where it ran."""
    with tempfile.TemporaryDirectory(prefix="kvlab-fleet-plan-") as tmp:
        def saved(point: Point) -> None:
            requests = pl.read_parquet(point_path(Path(tmp), "requests", point))
            requests = requests.with_columns(point=pl.lit(point.key))
            if "tpot_ms" not in requests.columns:
                requests = requests.with_columns(tpot_ms=tpot_ms())
            seen(point, fleet_aggregates(requests, args.slo_ttft_ms, args.slo_tpot_ms))
        _sweep(args, settings, order, workload, Path(tmp), on_saved=saved, skip=skip,
               cpu=cpu)


def _sweep(args: argparse.Namespace, settings, points: list[Point], workload, out: Path,
           **hooks) -> None:
    failed = run_sweep(settings, points, workload, out, executor=args.executor,
                       jobs=args.jobs, retries=args.retries, **hooks)
    if failed:
        point, error = next(iter(failed.items()))
        raise CLIError(f"{len(failed)} of {len(points)} points failed, nothing "
                       f"written; point {point.key}: {type(error).__name__}: "
                       f"{error}".splitlines()[0])
