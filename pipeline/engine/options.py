"""The engine's command-line options (vLLM's names and defaults), shared by ``simulate``
and ``fleet``, and the CPU tier they choose (``cpu_tier_factory``).

The CPU tier is any registered CPU model (``--cpu-model``, default ``lmcache``: LMCache's
CPU backend, compiled) of ``--cpu`` (tokens, blocks or a size); its declared options
(``registry`` entries' ``Option``s) are offered as ``--cpu-<option>`` (``--cpu-chunk-size``), built as
``pipeline.catalog.model_options`` builds the block commands' option groups. An option of
another model, an order the model cannot follow or a check that fails is a one-line usage
error (exit 2). vLLM's own offloading options (``--kv-offloading-size GiB
--kv-offloading-backend native|lmcache``, the native connector's ``--offload-*``) choose the
CPU tier instead (``offloading``): native is ``pipeline.engine.native_tier``, lmcache
LMCache's CPU backend of that size.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial

from pipeline import catalog as registry
from pipeline.base.arguments import deprecated_alias, positive_int
from pipeline.workloads.stream import HEAD_FIRST, ORDERS
from pipeline.engine.engines import DEFAULT_ENGINE, ENGINES, engine_class, engine_options
from pipeline.engine.cpu_tier import LMCacheTier, ModelTier, engine_cpu_models, \
    engine_tier_problem
from pipeline.engine.tier_options import add_tier_arguments, stack_models_line, \
    tier_stack_factory
from pipeline.catalog.model_options import ModelName, add_option_argument, model_names
from pipeline.base.errors import UsageError
from pipeline.sizes.limits import MAX_BLOCKS
from pipeline.sizes.units import one_capacity
from pipeline.sizes.vllm_memory import DEFAULT_BATCHED_TOKENS, DEFAULT_SEQS
from pipeline.engine.native_tier import DEFAULT_LINK_GBPS, NativeSpec
from pipeline.engine.simple_offload_tier import DEFAULT_BUFFER_SLOTS, DEFAULT_DISK_GIB, \
    SimpleSpec

__all__ = ["add_engine_arguments", "add_scheduler_limits", "pool_blocks", "cpu_tier_choice",
           "cpu_tier_factory", "cpu_tier_dests", "DEFAULT_CPU_MODEL", "engine_models",
           "engine_for", "offloading"]

DEFAULT_CPU_MODEL = "lmcache"
#: the OffloadingConnector's options (dests), refused with the lmcache backend and with
#: the SimpleCPUOffloadConnector
CONNECTOR_ONLY = ("offload_eviction_policy", "offload_block_size", "offload_store_threshold",
                  "offload_sync_load_budget")
#: the SimpleCPUOffloadConnector's options (dests): its medium, then the disk's
SIMPLE_ONLY = ("lazy_offload", "offload_medium", "disk_capacity", "disk_bandwidth",
               "disk_latency_ms", "disk_buffer_slots")
#: every native option, refused with the lmcache backend
NATIVE_ONLY = CONNECTOR_ONLY + ("simple_kv_offload",) + SIMPLE_ONLY


def _declared() -> dict[str, registry.Option]:
    """The declared options of the CPU models the engine takes, by dest (each once)."""
    found: dict[str, registry.Option] = {}
    for name in engine_cpu_models():
        for option in registry.entry(name).options:
            found.setdefault(option.dest, option)
    return found


def _flag(dest: str) -> str:
    return "--cpu-" + dest.replace("_", "-")


def add_engine_arguments(parser: argparse.ArgumentParser, title: str
                         ) -> argparse._ArgumentGroup:
    """Block size, scheduler limits and the CPU tier, in a group named ``title``
    (returned, so a command adds its own capacity options beside them)."""
    engine = parser.add_argument_group(title)
    engine.add_argument("--engine", choices=list(ENGINES), default=DEFAULT_ENGINE,
                        help="the engine model, any registered engine (default %(default)s: "
                             f"{ENGINES[DEFAULT_ENGINE].SUMMARY}); an option marked "
                             "[NAME only] is that engine's")
    engine.add_argument("--block-size", type=positive_int, default=16,
                        help="tokens per KV block (default %(default)s)")
    add_scheduler_limits(engine)
    engine.add_argument("--max-model-len", type=positive_int, default=None,
                        help="longest sequence (default: the longest prompt + max_tokens)")
    for owner, option in engine_options().values():
        kwargs = dict(option.kwargs)
        kwargs["help"] = f"{kwargs.get('help', '')} [{owner} only]".lstrip()
        engine.add_argument(option.flag, **kwargs)
    engine.add_argument("--cpu", type=one_capacity, default=0, metavar="SIZE",
                        help="CPU tier capacity: tokens, blocks (512blocks = 512 x "
                             "--block-size tokens) or a size with --model (20GiB, 200GB, "
                             "512MiB) (default 0: none)")
    deprecated_alias(engine, "--cpu-tokens", "--cpu")
    engine.add_argument("--cpu-model", dest="cpu_tier_model", default=None,
                        choices=model_names(registry.CPU_MODELS), action=ModelName,
                        help=f"the CPU tier's model, any registered CPU model (default "
                             f"{DEFAULT_CPU_MODEL}: LMCache's CPU backend, compiled; a block "
                             f"model sees the prompt's full blocks and stores them from the "
                             f"GPU hit on)")
    engine.add_argument("--cpu-order", dest="cpu_tier_order", choices=ORDERS, default=None,
                        help="the order a block CPU model places a request's blocks in "
                             "(default head-first, LMCache's)")
    for dest, option in _declared().items():
        add_option_argument(engine, option, _flag(dest), "cpu_" + dest)
    add_tier_arguments(engine)
    return engine


def add_scheduler_limits(group) -> None:
    """``--max-num-seqs`` and ``--max-num-batched-tokens``: vLLM's names and defaults."""
    group.add_argument("--max-num-seqs", type=positive_int, default=DEFAULT_SEQS,
                       help="vLLM's max_num_seqs: running requests at most (default "
                            "%(default)s)")
    group.add_argument("--max-num-batched-tokens", type=positive_int,
                       default=DEFAULT_BATCHED_TOKENS, help="vLLM's max_num_batched_tokens: "
                       "tokens per step at most (default %(default)s)")


def pool_blocks(tokens: list[int], block_size: int, where: str = "") -> list[int]:
    """vLLM's num_gpu_blocks of each ``--gpu`` capacity in tokens (sorted, each once), the
    null block included: at least 2, at most ``MAX_BLOCKS`` ``where`` (the pool's arrays are
    allocated whole); a usage error naming --gpu otherwise."""
    blocks = sorted({count // block_size for count in tokens})
    if blocks[0] < 2:
        raise UsageError(f"--gpu: {min(tokens):,} tokens are {blocks[0]} blocks of "
                         f"{block_size}: at least 2 (block 0 is vLLM's null block)")
    if blocks[-1] > MAX_BLOCKS:
        raise UsageError(f"--gpu: {blocks[-1]:,} blocks of {block_size}: at most "
                         f"{MAX_BLOCKS:,}{where}")
    return blocks


def cpu_tier_dests() -> tuple[str, ...]:
    """The argparse dests of the CPU tier's options (``--cpu-model`` is ``cpu_tier_model``:
    ``plan`` has a block ``--cpu-model`` of its own)."""
    return ("cpu_tier_model", "cpu_tier_order", *("cpu_" + dest for dest in _declared()))


def cpu_tier_choice(args: argparse.Namespace) -> tuple[str, dict, str]:
    """(model, its options, order) of the CPU tier ``args`` ask for; a usage error (one
    line, exit 2) on an option of another model, a failed check, an order the model cannot
    follow or a model the engine cannot run."""
    given = getattr(args, "cpu_tier_model", None)
    model = given or DEFAULT_CPU_MODEL
    entry = registry.entry(model)
    problem = engine_tier_problem(model)
    if problem:
        raise UsageError(f"--cpu-model {model}: {problem}")
    declared = _declared()
    for dest in declared:
        if getattr(args, "cpu_" + dest, None) is not None and dest not in entry.option_names:
            owner = next(n for n in engine_cpu_models()
                         if dest in registry.entry(n).option_names)
            raise UsageError(f"{_flag(dest)} applies to the {owner} CPU model, not --cpu-model "
                             f"{model}")
    options = {dest: declared[dest].value(getattr(args, "cpu_" + dest, None), args.block_size)
               for dest in entry.option_names}
    for dest, value in options.items():
        check = declared[dest].check
        problem = check(value, args.block_size) if check is not None else None
        if problem:
            raise UsageError(problem.replace(declared[dest].flag, _flag(dest), 1))
    if options.get("save_unfull_chunk"):
        raise UsageError(f"{_flag('save_unfull_chunk')}: the engine keys full chunks only "
                         f"(LMCache >= 0.4's default)")
    order = getattr(args, "cpu_tier_order", None) or entry.order or HEAD_FIRST
    if entry.order is not None and order != entry.order:
        raise UsageError(f"--cpu-order {order}: the {model} model is {entry.order}")
    if given is not None and not args.cpu:
        raise UsageError(f"--cpu-model {model} needs --cpu SIZE (the tier's size)")
    return model, options, order


def _flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def offloading(args: argparse.Namespace) -> NativeSpec | SimpleSpec | int | None:
    """vLLM's offloading options: a ``NativeSpec`` (backend native, vLLM's default with a
    size; a ``SimpleSpec`` with ``--simple-kv-offload``), the tokens of LMCache's CPU
    backend of that size (backend lmcache), or None (no size). One-line usage errors naming the option: a backend or a native option
    without a size, a native option with lmcache, a second CPU tier, a chunk that is not
    whole blocks, a size under one chunk."""
    size = getattr(args, "kv_offloading_size", None)
    backend = getattr(args, "kv_offloading_backend", None)
    given = [dest for dest in NATIVE_ONLY if getattr(args, dest, None) is not None]
    if size is None:
        if backend is not None or given:
            flag = "--kv-offloading-backend" if backend is not None else _flag_of(given[0])
            raise UsageError(f"{flag} needs --kv-offloading-size GiB")
        return None
    backend = backend or "native"
    if getattr(args, "cpu", 0) or getattr(args, "cpu_tier_model", None) is not None:
        flag = "--cpu-model" if getattr(args, "cpu_tier_model", None) else "--cpu"
        raise UsageError(f"{flag}: --kv-offloading-size already sets the engine's CPU tier "
                         f"(backend {backend})")
    from pipeline.sizes.units import kv_from_args
    try:
        kv = kv_from_args(args, "--kv-offloading-size")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if backend == "lmcache":
        if given:
            raise UsageError(f"{_flag_of(given[0])} applies to --kv-offloading-backend "
                             f"native, not lmcache")
        return int(size * (1 << 30)) // kv.bytes_per_token
    if getattr(args, "simple_kv_offload", None):
        return _simple(args, size, kv)
    if any(getattr(args, dest, None) is not None for dest in SIMPLE_ONLY):
        flag = next(_flag_of(d) for d in SIMPLE_ONLY if getattr(args, d, None) is not None)
        raise UsageError(f"{flag} needs --simple-kv-offload (vLLM's SimpleCPUOffloadConnector)")
    chunk = getattr(args, "offload_block_size", None) or args.block_size
    if chunk % args.block_size:
        raise UsageError(f"--offload-block-size {chunk}: must be a multiple of --block-size "
                         f"{args.block_size}")
    spec = NativeSpec.from_size(
        size, kv.bytes_per_token, args.block_size, chunk,
        policy=getattr(args, "offload_eviction_policy", None) or "lru",
        store_threshold=getattr(args, "offload_store_threshold", None) or 0,
        sync_load_budget_bytes=getattr(args, "offload_sync_load_budget", None) or 0,
        link_gbps=getattr(args, "host_link_gbps", None) or DEFAULT_LINK_GBPS)
    if spec.num_chunks < 1:
        raise UsageError(f"--kv-offloading-size {size:g}: less than one chunk of {chunk} "
                         f"tokens ({kv.bytes_per_token * chunk:,} bytes)")
    return spec


def _simple(args: argparse.Namespace, size: float, kv) -> SimpleSpec:
    """``--simple-kv-offload``'s ``SimpleSpec``: the pool of ``--kv-offloading-size`` GiB of
    CPU memory, or ``--disk-capacity`` GiB of disk (``--offload-medium disk``, which needs
    the disk's figures); usage errors naming the option otherwise."""
    for dest in CONNECTOR_ONLY:
        if getattr(args, dest, None) is not None:
            raise UsageError(f"{_flag_of(dest)} applies to vLLM's OffloadingConnector, not "
                             f"--simple-kv-offload")
    medium = getattr(args, "offload_medium", None) or "cpu"
    disk = {dest: getattr(args, dest, None) for dest in SIMPLE_ONLY[2:]}
    if medium != "disk":
        flag = next((_flag_of(d) for d, value in disk.items() if value is not None), None)
        if flag:
            raise UsageError(f"{flag} needs --offload-medium disk")
        capacity, where = int(size * (1 << 30)), f"--kv-offloading-size {size:g}"
        figures = {}
    else:
        for dest in ("disk_bandwidth", "disk_latency_ms"):
            if disk[dest] is None:
                raise UsageError(f"--offload-medium disk needs {_flag_of(dest)} (the disk's "
                                 f"own figure: no default)")
        gib = disk["disk_capacity"] or DEFAULT_DISK_GIB
        capacity, where = int(gib * (1 << 30)), f"--disk-capacity {gib:g}"
        figures = dict(disk_gbps=disk["disk_bandwidth"],
                       disk_latency_ms=disk["disk_latency_ms"],
                       buffer_slots=disk["disk_buffer_slots"] or DEFAULT_BUFFER_SLOTS)
    spec = SimpleSpec.from_size(capacity, kv.bytes_per_token, args.block_size, medium=medium,
                                lazy=bool(getattr(args, "lazy_offload", None)),
                                rate_gbps=getattr(args, "host_link_gbps", None)
                                or DEFAULT_LINK_GBPS, **figures)
    if spec.num_slots < 2:
        raise UsageError(f"{where}: no block of {args.block_size} tokens "
                         f"({kv.bytes_per_token * args.block_size:,} bytes) beyond the pool's "
                         f"null block")
    return spec


def _given(value):
    return value


def cpu_tier_factory(args: argparse.Namespace) -> Callable[[], object] | None:
    """A picklable factory of fresh CPU tiers as ``args`` ask (``cpu_tier_choice``), or
    None without ``--cpu`` (in tokens by then: ``resolve_capacities``): the compiled
    ``LMCacheTier`` for ``lmcache``, else a ``ModelTier``; with ``--kv-offloading-size``
    (``offloading``) a ``NativeSpec`` (each engine builds its own connector from it) or
    LMCache's tier of that size."""
    offload = offloading(args)
    model, options, order = cpu_tier_choice(args)
    if getattr(args, "tiers", None) and offload is not None:
        raise UsageError("--tier: not with --kv-offloading-size (the engine takes one "
                         "offloading setup)")
    if isinstance(offload, (NativeSpec, SimpleSpec)):
        return partial(_given, offload)
    if offload is not None:
        return partial(LMCacheTier, offload, args.block_size, options["chunk_size"])
    stack = tier_stack_factory(args, options.get("chunk_size", 0),
                               fleet=hasattr(args, "cpu_shared"))     # fleet's option
    if stack is not None:
        return stack
    if not args.cpu:
        return None
    if model == DEFAULT_CPU_MODEL:
        return partial(LMCacheTier, args.cpu, args.block_size, options["chunk_size"])
    return partial(ModelTier, model, args.cpu, args.block_size, options, order)


def engine_for(args: argparse.Namespace) -> type:
    """The engine class ``--engine`` names (``pipeline.engine.engines``); a usage error
    naming an option another engine owns given with it (a value other than its default)."""
    name = getattr(args, "engine", None) or DEFAULT_ENGINE
    try:
        cls = engine_class(name)
    except ValueError as exc:
        raise UsageError(f"--engine: {exc}") from None
    for dest, (owner, option) in engine_options().items():
        if owner != name and dest not in {o.dest for o in getattr(cls, "OPTIONS", ())} \
                and getattr(args, dest, None) not in (None, option.default):
            raise UsageError(f"{option.flag} applies to the {owner} engine, not --engine "
                             f"{name}")
    return cls


def engine_models(args: argparse.Namespace) -> tuple[str, dict]:
    """(the answer's first line, the ``models`` field) of an engine run: vLLM's allocator on
    the GPU, the CPU tier's model (``cpu_tier_choice``; none without a CPU tier); another
    engine than vllm is named first (``engine``: its name)."""
    engine = engine_for(args)
    model, options, _ = cpu_tier_choice(args)
    if getattr(args, "tiers", None):
        return stack_models_line(args, options), {
            **registry.models_field("vllm", model), "cpu_tier": "lmcache-stack",
            "stack": {"policy": getattr(args, "tier_policy", None) or "lru",
                      "tiers": [spec.text for spec in args.tiers],
                      "chunk_tokens": options.get("chunk_size")}}
    offload = offloading(args)
    cpu = model if getattr(args, "cpu", 0) or isinstance(offload, int) else None
    if isinstance(offload, (NativeSpec, SimpleSpec)):
        line, field = engine_models_native(args, offload)
        if engine.NAME == DEFAULT_ENGINE:
            return line, field
    if engine.NAME == DEFAULT_ENGINE:
        return (registry.models_line("vllm", cpu, None, options),
                registry.models_field("vllm", cpu))
    line = registry.models_line("vllm", cpu, None, options).replace(
        "models: GPU " + registry.describe("vllm"), f"models: engine {engine.NAME} "
        f"({engine.SUMMARY})", 1)
    field = {"engine": engine.NAME, **registry.models_field(None, cpu)}
    if hasattr(engine, "adjust_models_line"):
        line = engine.adjust_models_line(args, line)
    if hasattr(engine, "adjust_models_field"):
        field = engine.adjust_models_field(args, field)
    return line, field


def engine_models_native(args: argparse.Namespace, spec: NativeSpec) -> tuple[str, dict]:
    """The answer's models line and field with vLLM's native offloading as the CPU tier."""
    from pipeline.engine.native_tier import LINK_SOURCE
    link = "--host-link-gbps" if getattr(args, "host_link_gbps", None) else LINK_SOURCE
    line = registry.models_line("vllm", None, None, {})
    if isinstance(spec, SimpleSpec):
        return _models_simple(args, spec, line, link)
    tpc = spec.blocks_per_chunk * args.block_size
    native = (f"CPU vllm-native (vLLM 0.33.0's OffloadingConnector + CPUOffloadingManager, "
              f"{spec.policy}, {spec.num_chunks:,} chunks of {tpc} tokens, host link "
              f"{spec.link_gbps:g} GB/s: {link})")
    line = line.replace("CPU none (no CPU tier)", native) if "CPU none" in line \
        else f"{line}; {native}"
    return line, {**registry.models_field("vllm", None), "cpu_tier": "vllm-native",
                  "offload": {"policy": spec.policy, "chunks": spec.num_chunks,
                              "chunk_tokens": tpc, "store_threshold": spec.store_threshold,
                              "sync_load_budget_bytes": spec.sync_load_budget_bytes,
                              "link_gbps": spec.link_gbps}}


def _models_simple(args: argparse.Namespace, spec: SimpleSpec, line: str, link: str
                   ) -> tuple[str, dict]:
    """The models line and field of ``--simple-kv-offload`` (its hits are the requests'
    ``cpu_hit_tokens`` on either medium)."""
    disk = (f", disk {spec.disk_gbps:g} GB/s + {spec.disk_latency_ms:g} ms per block, "
            f"{spec.buffer_slots} staging buffers") if spec.medium == "disk" else ""
    text = (f"CPU vllm-simple (vLLM 0.33.0's SimpleCPUOffloadConnector, "
            f"{'lazy' if spec.lazy else 'eager'} stores, "
            f"{spec.num_slots - 1:,} {spec.medium} slots of {args.block_size} tokens{disk}, "
            f"host link {spec.rate_gbps:g} GB/s: {link})")
    line = line.replace("CPU none (no CPU tier)", text) if "CPU none" in line \
        else f"{line}; {text}"
    return line, {**registry.models_field("vllm", None), "cpu_tier": "vllm-simple",
                  "offload": {"connector": "SimpleCPUOffloadConnector", "medium": spec.medium,
                              "lazy_offload": spec.lazy,
                              "slots": spec.num_slots, "block_tokens": args.block_size,
                              "link_gbps": spec.rate_gbps,
                              **({"disk_gbps": spec.disk_gbps,
                                  "disk_latency_ms": spec.disk_latency_ms,
                                  "disk_buffer_slots": spec.buffer_slots}
                                 if spec.medium == "disk" else {})}}
