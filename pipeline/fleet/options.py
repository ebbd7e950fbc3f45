"""The fleet command's options: the sweep axes, routers, engine limits and executors."""

from __future__ import annotations

import argparse
import os

from pipeline.base.arguments import Options, deprecated_alias, derive, non_negative_float, \
    non_negative_int, positive_int, unit_ratio
from pipeline.base.errors import UsageError
from pipeline.engine.options import add_engine_arguments, pool_blocks
from pipeline.fleet.cost import add_cost_arguments
from pipeline.fleet.deciders import DECIDERS, parse_decider
from pipeline.fleet.disaggregated import parse_link
from pipeline.fleet.routers import ROUTERS, router_class
from pipeline.fleet.sweep import EXECUTORS
from pipeline.sizes.units import add_kv_arguments, capacities
from pipeline.sizes.vllm_memory import add_memory_arguments
from pipeline.steptime.options import add_latency_arguments, add_slo_arguments
from pipeline.steptime.options import load_list as loads

__all__ = ["add_fleet_arguments", "router_list", "instance_list", "load_list",
           "DEFAULT_GPU_BLOCKS", "in_blocks", "resolve_fleet_capacities",
           "add_disaggregation_arguments", "resolve_disaggregation"]

#: KV capacity per instance without --gpu: vLLM's num_gpu_blocks
DEFAULT_GPU_BLOCKS = 2048


def in_blocks(text: str) -> str:
    """``2048,4096`` -> ``2048blocks,4096blocks`` (the old --gpu-blocks as --gpu)."""
    return ",".join(f"{part.strip()}blocks" for part in text.split(",") if part.strip())


def _items(text: str, what: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"empty {what} list {text!r}")
    return parts


def router_list(text: str) -> list[str]:
    """argparse type: comma-separated router names of the registry."""
    names = _items(text, "router")
    for name in names:
        try:
            router_class(name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return list(dict.fromkeys(names))


def _int_list(text: str, what: str, low: int) -> list[int]:
    try:
        values = [int(part) for part in _items(text, what)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if any(value < low for value in values):
        raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {text!r}")
    return sorted(set(values))


def instance_list(text: str) -> list[int]:
    """argparse type: instance counts >= 1."""
    return _int_list(text, "instance counts", 1)


def load_list(text: str) -> list[float]:
    """argparse type: arrival-rate multipliers > 0 (``simulate``'s), sorted, each once."""
    return sorted(set(loads(text)))


def resolve_fleet_capacities(args: argparse.Namespace) -> Options:
    """The options with ``--gpu`` and ``--cpu`` in tokens (``resolve_capacities``),
    ``sizes`` (the size lines' data) and ``gpu_blocks``: the swept num_gpu_blocks per
    instance (tokens // --block-size, null block included), each 2..``MAX_BLOCKS`` (a usage
    error naming --gpu otherwise)."""
    from pipeline.sizes.vllm_memory import resolve_with_utilization
    args, sizes = resolve_with_utilization(args, "gpu", "cpu", block_size=args.block_size)
    return derive(args, sizes=sizes, gpu_blocks=[DEFAULT_GPU_BLOCKS] if args.gpu is None else
                  pool_blocks(args.gpu, args.block_size, " per instance"))


def add_disaggregation_arguments(parser: argparse.ArgumentParser) -> None:
    """--prefill-instances, --decode-instances, --kv-transfer, --decode-router."""
    group = parser.add_argument_group(
        "disaggregated prefill/decode (all three of the first options, instead of "
        "--instances)")
    group.add_argument("--prefill-instances", type=instance_list, metavar="P[,P...]",
                       help="prefill engines (each runs a prompt and its first token); "
                            "--router picks one")
    group.add_argument("--decode-instances", type=instance_list, metavar="D[,D...]",
                       help="decode engines (each loads a prompt's KV and decodes)")
    group.add_argument("--kv-transfer", type=parse_link, metavar="GB/S[:LATENCY]",
                       help="each prefill instance's link to the decode side, one transfer "
                            "at a time: 25GB/s, 200Gb/s, 25GB/s:0.5ms")
    group.add_argument("--decode-router", type=router_list, default=None, metavar="NAME",
                       help="the decode side's router (default least-loaded, as llm-d's "
                            "decode selection scores load)")
    group.add_argument("--max-local-prefill-length", type=non_negative_int, default=None,
                       metavar="TOKENS",
                       help="Dynamo's conditional disaggregation: a prompt of at most TOKENS "
                            "is prefilled by its decode engine (default: every prompt "
                            "goes to the prefill side)")
    group.add_argument("--pd-decider", type=parse_decider, default=None,
                       metavar="NAME[:TOKENS]",
                       help="who prefills each request: " + ", ".join(DECIDERS) + " (llm-d-"
                            "prefix:N: llm-d's prefix-based-pd-decider, remote when the "
                            "part its decode engine lacks is >= N tokens; default always)")


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """Everything but the workload."""
    fleet = parser.add_argument_group("fleet (each combination is one point of the sweep)")
    fleet.add_argument("--instances", type=instance_list, default=None, metavar="N[,N...]",
                       help="engine instances behind the router (default 2)")
    fleet.add_argument("--router", type=router_list, default=["round-robin"],
                       metavar="NAME[,NAME...]",
                       help=f"routers: {', '.join(ROUTERS)} (default round-robin)")
    fleet.add_argument("--router-option", action="append", default=[],
                       metavar="ROUTER.OPTION=VALUE",
                       help="a router parameter (repeat); --list-routers shows them with "
                            "the projects' defaults")
    fleet.add_argument("--list-routers", action="store_true",
                       help="print every router with its parameters and sources, and exit")
    fleet.add_argument("--gpu", type=capacities, default=None, metavar="SIZE[,SIZE...]",
                       help=f"KV capacity per instance: tokens, blocks (2048blocks = vLLM's "
                            f"num_gpu_blocks 2048 of --block-size tokens, the null block "
                            f"included) or a size with --model (20GiB, 200GB, 512MiB); a list "
                            f"sweeps (default {DEFAULT_GPU_BLOCKS}blocks)")
    deprecated_alias(fleet, "--gpu-blocks", "--gpu", in_blocks)
    fleet.add_argument("--speed", type=load_list, default=[1.0], metavar="X[,X...]",
                       help="the trace's arrival times divided by X; a list sweeps (default 1)")
    deprecated_alias(fleet, "--load", "--speed")
    fleet.add_argument("--seed", type=non_negative_int, default=0,
                       help="seed of the random router and of random tie-breaks "
                            "(default %(default)s)")
    fleet.add_argument("--staleness-ms", type=non_negative_float, default=0.0, metavar="MS",
                       help="the router's view of engine state (cache contents, queues, KV "
                            "usage) is refreshed every MS ms of simulated time; 0: exact, "
                            "live (the oracle view) (default 0)")
    engine = add_engine_arguments(parser, "engine (per instance; a model of vLLM v1)")
    engine.add_argument("--cpu-shared", action="store_true",
                        help="one CPU pool of --cpu shared by every instance (as a "
                             "Mooncake store or LMCache remote backend: a chunk stored by one "
                             "instance loads on any; reloads cost the roofline's "
                             "--host-link-gbps) instead of one per instance")
    add_disaggregation_arguments(parser)
    add_latency_arguments(parser)
    add_slo_arguments(parser)
    add_kv_arguments(parser.add_argument_group(
        "model (KV bytes per token and the roofline's shape; required by the roofline and "
        "by sizes in bytes)"))
    add_memory_arguments(parser)
    run = parser.add_argument_group("sweep execution and outputs")
    run.add_argument("--executor", choices=EXECUTORS, default="local",
                     help="local: a process pool; ray: Ray tasks (ray.init() starts a local "
                          "Ray unless --ray-address) (default local)")
    run.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                     help="worker processes (local), CPUs of a local Ray (default: the CPU "
                          "count)")
    run.add_argument("--ray-address", metavar="HOST:PORT",
                     help="join this Ray cluster instead of starting a local one")
    run.add_argument("--retries", type=non_negative_int, default=1,
                     help="times a failed or killed point is run again (default 1)")
    run.add_argument("--resume", action="store_true",
                     help="keep the finished points of OUT and run only the others")
    run.add_argument("--out", default="reports/fleet", metavar="DIR",
                     help="output folder (default %(default)s)")
    plan = parser.add_argument_group("plan: the smallest fleet memory per router that meets a "
                                     "target, among the swept points")
    plan.add_argument("--target-ttft-p90-ms", type=non_negative_float, metavar="MS",
                      help="TTFT p90 at most MS")
    plan.add_argument("--target-hit-ratio", type=non_negative_float, metavar="R",
                      help="prefix hit ratio (GPU + CPU) at least R")
    plan.add_argument("--target-goodput", type=unit_ratio, metavar="F",
                      help="the fraction of requests meeting --slo-ttft-ms / --slo-tpot-ms "
                           "at least F (goodput, as vllm bench serve --goodput counts it)")
    plan.add_argument("--target-tpot-p90-ms", type=non_negative_float, metavar="MS",
                      help="TPOT p90 at most MS (with the others: all of them)")
    add_cost_arguments(parser)
    run.add_argument("--json", action="store_true",
                     help="print one JSON object per (router, point)")


def resolve_disaggregation(args: argparse.Namespace) -> Options:
    """The options with ``instances`` (2 by default, or ``--prefill-instances``) and
    ``decode_instances`` ([0]: an aggregated fleet); a usage error naming the option when
    the disaggregated options come incomplete or with an option they replace."""
    pd = {"--prefill-instances": args.prefill_instances,
          "--decode-instances": args.decode_instances, "--kv-transfer": args.kv_transfer}
    given = [flag for flag, value in pd.items() if value is not None]
    if not given:
        for flag in ("--decode-router", "--max-local-prefill-length", "--pd-decider"):
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise UsageError(f"{flag} needs a disaggregated fleet (--prefill-instances, "
                                 f"--decode-instances, --kv-transfer)")
        return derive(args, instances=args.instances or [2], decode_instances=[0])
    missing = [flag for flag in pd if flag not in given]
    if missing:
        raise UsageError(f"{given[0]} needs {' and '.join(missing)} (a disaggregated fleet)")
    if getattr(args, "engine", "vllm") != "vllm":
        raise UsageError(f"{given[0]}: a disaggregated fleet runs vLLM's engines (the decode "
                         f"side loads the KV through vLLM's connector), not --engine "
                         f"{args.engine}")
    if getattr(args, "pd_decider", None) is not None \
            and args.max_local_prefill_length is not None:
        raise UsageError("--pd-decider: not with --max-local-prefill-length (that is "
                         "--pd-decider prompt-length:TOKENS)")
    if args.instances is not None:
        raise UsageError("--instances: a disaggregated fleet counts --prefill-instances and "
                         "--decode-instances instead")
    return derive(args, instances=args.prefill_instances,
                  decode_instances=args.decode_instances,
                  decode_router=(args.decode_router or ["least-loaded"])[0])
