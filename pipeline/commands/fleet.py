"""Route a trace or a pattern over N simulated engine instances with each router, as a sweep
over instances x GPU blocks per instance x load (``python -m pipeline fleet``).

Each instance is a time-clocked model of vLLM v1's engine (``pipeline.engine``) with its
own prefix cache; the router sees what the named project's router sees. Writes
``OUT/requests/`` and ``OUT/steps/`` (Parquet datasets partitioned by point),
``OUT/instances.parquet``, ``OUT/fleet.parquet``, ``OUT/report.html`` and ``OUT/sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import polars as pl
import pyarrow.dataset as ds

from pipeline.engine.options import cpu_tier_choice, cpu_tier_dests, cpu_tier_factory, \
    engine_for, engine_models
from pipeline.engine.engines import DEFAULT_ENGINE, engine_options
from pipeline.base.arguments import Options, derive
from pipeline.base.errors import CLIError, UsageError
from pipeline.fleet.aggregates import TPOT_SHOWN, fleet_aggregates, instance_aggregates, \
    json_rows, overload_lines, point_columns
from pipeline.fleet.options import add_fleet_arguments, resolve_disaggregation, \
    resolve_fleet_capacities
from pipeline.fleet.cost import cheapest, cost_requested, prices_from_args, with_cost
from pipeline.fleet.cost_search import tier_gib
from pipeline.fleet.cost_tiers import engine_tier_tokens
from pipeline.fleet.plan import Memory, smallest_memory
from pipeline.charts.fleet import report_html
from pipeline.fleet.routers import ROUTERS, make_router, parse_router_options, router_class
from pipeline.fleet.sweep import run_sweep
from pipeline.fleet.sweep_point import Disaggregation, Point, Settings, point_path
from pipeline.fleet.workload import add_workload_arguments, load_workload, workload_usage_checks
from pipeline.base.staging import Outputs, json_bytes, parquet_bytes
from pipeline.sizes.units import size_lines
from pipeline.steptime.options import check_roofline_model, latency_from_args

_SWEEP_KEYS = ("trace", "format", "pattern", "limit", "num_documents",
               "document_length", "repeat_count", "repeat_mode", "users", "num_requests",
               "zipf_alpha", "groups", "questions", "sessions", "turns", "think_s",
               "system_prompt_length", "question_length", "output_tokens", "rate",
               "shuffle_seed", "router_option", "seed", "staleness_ms", "block_size",
               "max_num_seqs", "max_num_batched_tokens", "max_model_len",
               "no_chunked_prefill", "async_scheduling", "cpu", "cpu_chunk_size",
               "cpu_shared", "latency", "gpu_type", "gpu_tflops",
               "gpu_fp8_tflops", "gpu_hbm_gbps", "host_link_gbps", "weights",
               "step_overhead_ms", "model_shape", "model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    add_fleet_arguments(parser)


def list_routers() -> str:
    """Every router: its docstring's first line, parameters and defaults."""
    lines = []
    for name in ROUTERS:
        cls = router_class(name)
        doc = cls.__doc__ or sys.modules[cls.__module__].__doc__ or ""
        summary = " ".join(doc.split("\n\n")[0].split())
        lines.append(summary.replace(f"``{name}``", name, 1).replace("``", ""))
        for option, parameter in cls.PARAMETERS.items():
            lines.append(f"    {name}.{option}={parameter.default!r}  {parameter.help}")
    return "\n".join(lines)


def ray_target(address: str) -> tuple[str, int]:
    """``--ray-address`` as (host, port); ValueError naming the option when it is not
    HOST:PORT (or ray://HOST:PORT)."""
    target = urlparse(address if "://" in address else f"ray://{address}")
    try:
        host, port = target.hostname, target.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise ValueError(f"--ray-address {address}: expected HOST:PORT")
    return host, port


def usage_checks(args: argparse.Namespace) -> dict[str, dict]:
    """The checks of options that argparse cannot make alone (which workload, each router's
    options against ``--router``, ``--ray-address`` and its form): the router options, or
    ValueError naming the option (a usage error)."""
    workload_usage_checks(args)
    options = router_options(args)
    if args.ray_address and args.executor != "ray":      # not silently run locally
        raise ValueError(f"--ray-address {args.ray_address} joins a Ray cluster: give it "
                         "with --executor ray")
    if args.executor == "ray" and args.ray_address:
        ray_target(args.ray_address)
    if getattr(args, "target_goodput", None) is not None and \
            getattr(args, "slo_ttft_ms", None) is None and \
            getattr(args, "slo_tpot_ms", None) is None:
        raise ValueError("--target-goodput needs --slo-ttft-ms or --slo-tpot-ms (what a "
                         "good request meets)")
    return options


#: Seconds a ``--ray-address`` gets to answer as a Ray cluster.
RAY_PROBE_S = 30.0

#: The probe: ray.init in a child process, whose hang, log lines and fatal exits stay there.
_RAY_PROBE = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', "
              "log_to_driver=False); ray.shutdown()")


def _probe_ray(address: str) -> None:
    """CLIError (one line) unless a Ray cluster at ``address`` accepts a driver within
    ``RAY_PROBE_S``: something that accepts TCP but is not Ray makes ``ray.init`` retry for
    minutes, print Ray's log lines, and end in a traceback."""
    try:
        done = subprocess.run([sys.executable, "-c", _RAY_PROBE, address], text=True,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=RAY_PROBE_S)
    except subprocess.TimeoutExpired:
        raise CLIError(f"--ray-address {address}: no Ray cluster answers within "
                       f"{RAY_PROBE_S:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        # Ray's own log line says why (refused, not Ray, a missing auth token), else the
        # traceback's last line
        reason = next((line.split("GCS server: ", 1)[1] for line in reversed(lines)
                       if "GCS server: " in line),
                      lines[-1] if lines else f"exit status {done.returncode}")
        raise CLIError(f"--ray-address {address}: no Ray cluster answers ({reason})")


def ray_connect(address: str | None, jobs: int) -> bool:
    """``ray.init`` (local when no address, after proving an address answers); True when
    this call started Ray (and must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        try:
            host, port = ray_target(address)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        try:
            socket.create_connection((host, port), timeout=5).close()
        except OSError as exc:
            raise CLIError(f"--ray-address {address}: no Ray cluster answers "
                           f"({exc.strerror or exc})") from None
        _probe_ray(address)
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:                  # noqa: BLE001 -- Ray raises several kinds
            raise CLIError(f"--ray-address {address}: cannot join the Ray cluster "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    else:
        ray.init(num_cpus=jobs, logging_level="ERROR", log_to_driver=False,
                 include_dashboard=False)
    return True


def sweep_settings(args: argparse.Namespace, workload, options) -> tuple[Options, Settings]:
    """(the options with the CPU tier's chunk size and the step times settled, what every
    point shares) from the engine, CPU-tier and step-time options; CLIError
    (one line) when a router refuses the workload (``Router.refusal``) or the smallest
    ``--gpu`` pool cannot hold the longest request."""
    engine = engine_for(args)
    requests = workload.requests
    sessions = [r.session for r in requests]
    for name in args.router:
        refused = router_class(name).refusal(sessions, options.get(name, {}))
        if refused:
            raise CLIError(refused)
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    max_len = args.max_model_len or longest
    prompt = max(len(r.prompt_token_ids) for r in requests)
    intake = hasattr(engine, "refusal")         # the engine's own intake rules (SGLang's)
    if intake:
        smallest = engine.config(args, min(args.gpu_blocks), max_len)
        for r in requests:
            why = engine.refusal(r, smallest)
            if why is not None:
                raise CLIError(f"{workload.where(r.index)}: {why}")
    elif prompt >= max_len:                     # vLLM needs room for 1 output token
        raise CLIError(f"--max-model-len {max_len}: the longest prompt has {prompt} tokens "
                       "(vLLM needs room for 1 output token)")
    need = blocks_needed(requests, args.block_size, max_len)
    if not intake and min(args.gpu_blocks) < need:
        raise CLIError(f"--gpu {min(args.gpu_blocks)}blocks: the longest request needs "
                       f"{need} blocks of {args.block_size} tokens (null block included)")
    try:
        config = engine.config(args, need, max_len)
        tier = cpu_tier_factory(args)
        # the sweep's settings record the chunk size the tier runs with (None: no chunks)
        chunk_size = cpu_tier_choice(args)[1].get("chunk_size")
        if tier is not None:
            tier()                                    # the chunk size must fit the blocks
    except ValueError as exc:
        raise CLIError(f"engine options: {exc}") from None
    args = derive(args, cpu_chunk_size=chunk_size,
                  latency="roofline" if args.latency is None else args.latency)
    if args.cpu_shared and tier is None:
        raise CLIError("--cpu-shared needs --cpu SIZE (the shared pool's size)")
    model = latency_from_args(args)
    return args, Settings(config, model, options, args.seed, args.staleness_ms, tier,
                          args.cpu_shared, engine.NAME, _disaggregation(args, model))


def _disaggregation(args: argparse.Namespace, model) -> Disaggregation | None:
    """The disaggregated fleet's settings, or None; CLIError without a KV size to move."""
    if getattr(args, "kv_transfer", None) is None:
        return None
    kv = getattr(model, "kv_bytes_per_token", None)
    if not kv:
        raise CLIError("--kv-transfer: the step-time model gives no KV bytes per token "
                       "to move (give --model)")
    return Disaggregation(args.kv_transfer, int(kv), args.decode_router,
                          args.max_local_prefill_length, getattr(args, "pd_decider", None))


def blocks_needed(requests, block_size: int, max_len: int) -> int:
    """GPU blocks (null block included) the longest request needs."""
    # the KV holds every token but the last sampled one, at most max_model_len - 1
    return max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, max_len) - 1) // block_size)
               for r in requests) + 1


def router_options(args: argparse.Namespace) -> dict[str, dict]:
    """``--router-option`` per router of ``--router``, each value checked by the router
    itself; ValueError (one line) naming the option."""
    options = parse_router_options(args.router_option, args.router)
    for name in args.router:
        make_router(name, 1, args.block_size, **options[name])
    return options


def _fingerprint(args: argparse.Namespace) -> dict:
    found = {key: getattr(args, key, None) for key in _SWEEP_KEYS}
    found.update({key: getattr(args, key) for key in cpu_tier_dests()   # --cpu-model etc.
                  if key not in found and getattr(args, key, None) is not None})
    if getattr(args, "engine", DEFAULT_ENGINE) != DEFAULT_ENGINE:      # another engine's
        found.update({key: getattr(args, key, None) for key in ("engine", *engine_options())
                      if key not in found})
    return found


def _check_out(out: Path, args: argparse.Namespace) -> None:
    manifest = out / "sweep.json"
    if (out / "requests").exists() and not args.resume:
        raise CLIError(f"--out {out}: already holds a sweep; --resume continues it, or "
                       "choose another folder")
    if args.resume and manifest.exists():
        stored = json.loads(manifest.read_text()).get("settings")
        if stored != json.loads(json.dumps(_fingerprint(args))):
            raise CLIError(f"--resume: {out} was written with other settings "
                           "(workload, engine, routers or step times differ)")


def main(args: argparse.Namespace) -> int:
    try:
        return _main(args)
    except KeyboardInterrupt:
        print("interrupted: finished points are kept (--resume continues)", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    if args.list_routers:
        print(list_routers())
        return 0
    try:
        options = usage_checks(args)
    except ValueError as exc:                 # a usage error: one line, exit 2
        raise UsageError(str(exc)) from None
    args = resolve_fleet_capacities(resolve_disaggregation(args))
    if args.latency in (None, "roofline"):     # the default step times: before any reading
        check_roofline_model(args)
    costs = prices_from_args(args) if cost_requested(args) else None
    workload = load_workload(args)
    args, settings = sweep_settings(args, workload, options)
    out = Path(args.out)
    _check_out(out, args)
    points = [Point(r, n, b, x, d) for r in args.router for n in args.instances
              for d in args.decode_instances for b in args.gpu_blocks for x in args.speed]
    todo = [p for p in points if not (args.resume and point_path(out, "requests", p).exists())]
    started_ray = (ray_connect(args.ray_address, args.jobs) if args.executor == "ray"
                   else False)
    try:
        manifest = Outputs()
        manifest.add(out / "sweep.json", json_bytes({
            "kind": "kvlab-fleet-sweep", "version": 1, "workload": workload.label,
            "step_times": settings.step_model.label, "settings": _fingerprint(args)}),
            label="--out")
        manifest.commit()
        failed = run_sweep(settings, todo, workload, out, executor=args.executor,
                           jobs=args.jobs, retries=args.retries)
    finally:
        if started_ray:
            import ray
            ray.shutdown()
    for point, error in failed.items():
        print(f"error: point {point.key}: {type(error).__name__}: {error}".splitlines()[0],
              file=sys.stderr)
    done = [p for p in points if point_path(out, "requests", p).exists()]
    if done:
        _write_summaries(out, done, workload.label, settings.step_model, args, costs)
    return 1 if failed else 0


def _write_summaries(out: Path, points: list[Point], label: str, model,
                     args: argparse.Namespace, costs=None) -> None:
    model_label = model.label
    keys = [p.key for p in points]
    dataset = ds.dataset(out / "requests", format="parquet", partitioning="hive")
    requests = pl.from_arrow(dataset.to_table(filter=ds.field("point").isin(keys)))
    instances = instance_aggregates(requests)
    fleet = fleet_aggregates(requests, args.slo_ttft_ms, args.slo_tpot_ms)
    from pipeline.charts.summary import engine_configuration, provenance_text
    page = report_html(fleet, label, model_label, requests, engine_configuration(args, model),
                       provenance_text(model))
    targets = dict(ttft_p90_ms=args.target_ttft_p90_ms, hit_ratio=args.target_hit_ratio,
                   tpot_p90_ms=args.target_tpot_p90_ms, goodput=args.target_goodput)
    kv = getattr(model, "kv_bytes_per_token", None)
    cpu_tokens, disk_tokens = engine_tier_tokens(args, kv)     # --cpu, --tier or native's
    memory = Memory(kv, args.block_size, cpu_tokens, args.cpu_shared,
                    getattr(args, "tensor_parallel_size", 1))
    prices = None
    if costs is not None:
        prices, kv_tokens_per_gpu = costs
        fleet = with_cost(fleet, memory, prices, kv_tokens_per_gpu,
                          tier_gib(disk_tokens, memory))
    planned = any(v is not None for v in targets.values())
    plan = (None if not planned else smallest_memory(fleet, **targets, memory=memory)
            if prices is None else cheapest(fleet, **targets))
    outputs = Outputs()
    outputs.add(out / "instances.parquet", parquet_bytes(instances), label="--out")
    outputs.add(out / "fleet.parquet", parquet_bytes(fleet), label="--out")
    outputs.add(out / "report.html", page.encode(), label="--out")
    if plan is not None:
        outputs.add(out / "plan.parquet", parquet_bytes(plan), label="--out")
    outputs.commit()
    warnings = overload_lines(fleet)
    first_line, models = engine_models(args)
    if args.json:                             # stdout stays JSON lines: warnings to stderr
        for row in json_rows(fleet, cost=prices is not None):
            print(json.dumps({**row, "models": models, "step_time_model": model_label}))
        for line in warnings:
            print(line, file=sys.stderr)
        return
    print(first_line)
    print(f"{len(points)} point{'s' if len(points) != 1 else ''} -> {out} (step times: "
          f"{model_label})")
    if getattr(args, "kv_transfer", None) is not None:
        print(f"disaggregated: --instances counts prefill engines; the KV moves over "
              f"{args.kv_transfer.describe()} per prefill instance to the decode engines "
              f"({args.decode_router} router); TTFT is the prefill side's first token, "
              f"TPOT the decode side's"
              + ("" if args.max_local_prefill_length is None else
                 f"; prompts of at most {args.max_local_prefill_length} tokens are "
                 f"prefilled by their decode engine")
              + ("" if getattr(args, "pd_decider", None) is None else
                 f"; P/D decider {args.pd_decider.describe()}"))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True,
                   float_precision=3, tbl_hide_column_data_types=True,
                   tbl_width_chars=200, fmt_str_lengths=40):
        shown = [*point_columns(fleet), "hit_ratio", "ttft_p50_ms", "ttft_p90_ms",
                 *(TPOT_SHOWN if "decode_instances" in fleet.columns else ()),
                 "imbalance", *(c for c in ("goodput_fraction",) if c in fleet.columns)]
        if prices is not None:
            shown += ["usd_per_hour", "usd_per_million_output_tokens", "fits_gpu"]
        print(fleet.select(shown))
        if plan is not None:
            wanted = ", ".join(f"{k} {'>=' if k in ('hit_ratio', 'goodput') else '<='} {v:g}"
                               for k, v in targets.items() if v is not None)
            print(f"smallest total memory meeting {wanted} (replicas x (GPU KV + CPU tier), "
                  f"GiB; none: no swept point does):" if prices is None else
                  f"cheapest point meeting {wanted} (USD per hour; none: no swept point "
                  f"that fits the GPU does):")
            print(plan if prices is None else plan.select(
                "router", "load", *point_columns(plan)[1:-2], "gpu_blocks", "cpu_gib",
                "ttft_p90_ms",
                "hit_ratio", "usd_per_hour", "usd_per_million_output_tokens"))
    if prices is not None:
        print("prices: " + "; ".join(prices.lines()))
    for line in [*warnings, *size_lines(getattr(args, "sizes", {}))]:
        print(line)
