"""The cache models' own options on the block commands, and their checks (one place), built
from the registry's declared options (``pipeline.catalog``: each entry's ``Option``s).

``add_model_arguments`` defines ``--gpu-model``/``--cpu-model`` and every declared option for
every block command; ``run_options`` is their one check (``blocks`` and ``trace`` call it).
The commands that size a tier (``trace``, ``plan``) default to the engine-faithful pair,
vllm + lmcache (``ENGINE_MODELS``); the lab's own (``blocks``, ``run --block-size``) keep the
lab's block model, block-lru (``LAB_MODELS``). The old names ``ideal`` / ``ideal-replay``
are accepted with a warning (``ModelName``).
``--output-tokens`` and ``--vllm-version`` belong to the ``vllm`` GPU model, ``--chunk-size``
and ``--save-unfull-chunk`` to the ``lmcache`` CPU model; giving one to another model, or an
order the engine cannot follow, is a one-line error naming the argument.
"""

from __future__ import annotations

import argparse

import numpy as np

from pipeline import catalog as registry
from pipeline.workloads.stream_limits import output_blocks
from pipeline.workloads.stream import HEAD_FIRST, ORDERS, TAIL_FIRST, TRACE
from pipeline.base.arguments import queue_warning
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.limits import MAX_BLOCKS, check_block_count, check_capacities
from pipeline.catalog import MODEL_OPTIONS, MODEL_ORDERS, vllm_version

__all__ = ["MODEL_OPTIONS", "MODEL_ORDERS", "add_engine_arguments", "add_option_argument",
           "add_order_arguments", "ENGINE_MODELS", "LAB_MODELS", "ModelName", "model_names",
           "model_options", "default_chunk_size", "vllm_version", "add_model_arguments",
           "run_options", "option_dests", "trace_outputs"]


def option_dests() -> tuple[str, ...]:
    """Every model option's dest (the registry's declared options, in registry order)."""
    return tuple(registry.options())


def add_option_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                        option: registry.Option, flag: str | None = None,
                        dest: str | None = None) -> None:
    """One declared model option as an argument (default None: "not given"), under its own
    flag and dest unless ``flag`` / ``dest`` say otherwise (the engine's ``--cpu-<option>``)."""
    names = dict(dest=dest) if dest is not None else {}
    if option.boolean:
        parser.add_argument(flag or option.flag, action=argparse.BooleanOptionalAction,
                            default=None, help=option.help, **names)
    else:
        parser.add_argument(flag or option.flag, type=option.type, default=None,
                            help=option.help, **names)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Every declared model option (default None: "not given")."""
    for option in registry.options().values():
        add_option_argument(parser, option)


def add_order_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu-order`` / ``--cpu-order``: the order of a request's blocks in each tier."""
    parser.add_argument("--gpu-order", choices=ORDERS, default=TAIL_FIRST,
                        help="order of a request's blocks in the GPU tier (default tail-first, "
                             "vLLM's free queue)")
    parser.add_argument("--cpu-order", choices=ORDERS, default=HEAD_FIRST,
                        help="order of a request's blocks in the CPU tier (default head-first, "
                             "LMCache's LRU)")


#: the engine-faithful models every command that sizes a tier defaults to (trace, plan)
ENGINE_MODELS = ("vllm", "lmcache")
#: the lab's block model, the default of the lab's own commands (blocks, run --block-size)
LAB_MODELS = ("block-lru", "block-lru")


class _Names(tuple):
    """Model names as ``choices``: iterates the registry's names (what ``--help`` and
    argparse's error show) and also holds the deprecated ones (``DEPRECATED_NAMES``)."""

    def __contains__(self, name: object) -> bool:
        return tuple.__contains__(self, registry.DEPRECATED_NAMES.get(name, name))


def model_names(names) -> tuple[str, ...]:
    """``choices`` of a model flag: ``names`` (e.g. ``registry.GPU_MODELS``), and the old
    names of those, which ``ModelName`` turns into the new ones."""
    return _Names(names)


class ModelName(argparse.Action):
    """Store a model name (``choices=model_names(...)``); a deprecated one is stored as its
    new name and queues one line, ``warning: --gpu-model ideal is deprecated: it is now called
    block-lru``, printed once parsing succeeds. Records that the flag was given
    (``DEST_given``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        new = registry.DEPRECATED_NAMES.get(values)
        if new is not None:
            queue_warning(namespace, f"warning: {option_string} {values} is deprecated: it is "
                                     f"now called {new}")
        setattr(namespace, self.dest, new or values)
        setattr(namespace, f"{self.dest}_given", True)


def add_model_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                        defaults: tuple[str, str] = ENGINE_MODELS) -> None:
    """``--gpu-model`` and ``--cpu-model`` (the registries' names; ``defaults``: the
    engine-faithful vllm + lmcache, ``LAB_MODELS`` for the lab's commands) and the engine
    options: one definition for every block command."""
    parser.add_argument("--gpu-model", choices=model_names(registry.GPU_MODELS),
                        default=defaults[0], action=ModelName,
                        help="GPU cache model (default %(default)s; vllm: vLLM's v1 allocator; "
                             "block-lru: a one-pass block LRU, no engine's rules)")
    parser.add_argument("--cpu-model", choices=model_names(registry.CPU_MODELS),
                        default=defaults[1], action=ModelName,
                        help="CPU cache model (default %(default)s; lmcache: LMCache's CPU "
                             "backend; block-lru: an LRU fed past the GPU hit, which never "
                             "refreshes blocks the GPU served: not an upper bound)")
    parser.set_defaults(gpu_model_given=False, cpu_model_given=False)
    add_engine_arguments(parser)


def default_chunk_size(block_size: int | None) -> int:
    """LMCache's chunk size (256) on the block grid (the lmcache entry's default)."""
    return registry.options()["chunk_size"].value(None, block_size)


def model_options(args: argparse.Namespace, block_size: int | None = None) -> tuple[dict, dict]:
    """(GPU model options, CPU model options) for ``args`` (a namespace with ``gpu_model``,
    ``cpu_model`` and, where the command has them, ``gpu_order``, ``cpu_order``,
    ``block_size``) and the run's ``block_size`` (default ``args.block_size``); UsageError on an
    option the chosen model does not take, an order it cannot follow, or an option's own
    check (a chunk size off the block grid). Defaults are the declared options' (the chunk
    size: the smallest multiple of the block size >= 256). Every block command (``blocks``,
    ``trace``) calls it once its block size is known."""
    if block_size is None:
        block_size = getattr(args, "block_size", None)
    chosen = {"gpu": args.gpu_model, "cpu": args.cpu_model}
    for tier, model in chosen.items():
        order = getattr(args, f"{tier}_order", None)      # commands without orders: skip
        if model in MODEL_ORDERS and order is not None and order != MODEL_ORDERS[model]:
            default = "" if getattr(args, f"{tier}_model_given", True) else (
                f" (the default --{tier}-model; --{tier}-model block-lru follows either order)")
            raise UsageError(f"--{tier}-order {order}: the {model} model is "
                             f"{MODEL_ORDERS[model]}{default}")
    declared = registry.options()
    for dest, option in declared.items():
        if getattr(args, dest, None) is not None and \
                not any(dest in MODEL_OPTIONS.get(m, ()) for m in chosen.values()):
            raise UsageError(f"{option.flag} applies to the {registry.option_owner(dest)} "
                           f"model only")
    options = []
    for model in chosen.values():
        options.append({dest: declared[dest].value(getattr(args, dest, None), block_size)
                        for dest in MODEL_OPTIONS.get(model, ())})
    for model, values in zip(chosen.values(), options):
        for dest, value in values.items():
            check = declared[dest].check
            problem = check(value, block_size) if check is not None else None
            if problem:
                raise UsageError(problem)
    return options[0], options[1]


def trace_outputs(workload: object) -> np.ndarray:
    """``--output-tokens trace``: each request's output tokens from ``workload`` (a
    ``pipeline.workloads.workload.Workload``; 1 where it gives none); CLIError naming the
    file's line of a length < 1 (Mooncake's ``output_length`` may be 0)."""
    given = getattr(workload, "output_tokens", None)
    requests = workload.requests.height
    if given is None:
        return np.ones(requests, np.int64)
    given = np.asarray(given, np.int64)
    bad = np.flatnonzero(given < 1)
    if bad.size:
        where = f"{workload.label}:{int(workload.lines[bad[0]])}" if len(workload.lines) \
            else f"{workload.label}: request {int(bad[0])}"
        raise CLIError(f"{where}: output_length must be >= 1 for --output-tokens trace (the "
                       f"default when a trace gives lengths; or give --output-tokens N), "
                       f"got {int(given[bad[0]])}")
    return given


def run_options(args: argparse.Namespace, block_size: int, requests: int,
                blocks: int, workload: object = None) -> tuple[dict, dict]:
    """The one check of a block command's tiers and models, once its workload's size is
    known (``requests``, ``blocks`` block accesses): ``--gpu`` / ``--cpu`` capacities fit an
    int64, ``model_options`` holds, and the vllm model's output blocks keep the run under
    ``MAX_BLOCKS``; with ``--output-tokens trace`` each request's length comes from
    ``workload`` (``trace_outputs``; none given: 1), and that is the default when the
    workload gives lengths (Mooncake ``output_length``, token JSONL ``max_tokens``). Returns (GPU model options, CPU model
    options); CLIError naming the argument otherwise. ``blocks`` and ``trace`` both call it
    before any work."""
    check_capacities("--gpu", getattr(args, "gpu", None))
    check_capacities("--cpu", getattr(args, "cpu", None))
    check_capacities("--cpu-sweep-gpu", getattr(args, "cpu_sweep_gpu", None))
    check_block_count(blocks, "the workload")
    gpu_options, cpu_options = model_options(args, block_size)
    output = gpu_options.get("output_tokens")
    if output is not None and getattr(args, "output_tokens", None) is None and \
            getattr(workload, "output_tokens", None) is not None:
        output = gpu_options["output_tokens"] = TRACE     # default: the trace's own lengths
    lengths = output
    if output == TRACE:
        lengths = trace_outputs(workload) if workload is not None \
            else np.ones(requests, np.int64)
    if output is not None and blocks + output_blocks(requests, lengths, block_size) > MAX_BLOCKS:
        check_block_count(blocks + output_blocks(requests, lengths, block_size),
                          f"--output-tokens {output} ({requests} requests)")
    return gpu_options, cpu_options
