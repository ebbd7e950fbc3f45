"""The engine models' own options on the block commands, and their checks (one place).

``add_model_arguments`` defines ``--gpu-model``/``--cpu-model`` and the engine options for
every block command; ``run_options`` is their one check (``blocks`` and ``trace`` call it).
``--output-tokens`` and ``--vllm-version`` belong to the ``vllm`` GPU model, ``--chunk-size``
and ``--save-unfull-chunk`` to the ``lmcache`` CPU model; giving one to another model, or an
order the engine cannot follow, is a one-line error naming the argument.
"""

from __future__ import annotations

import argparse

from pipeline.arguments import positive_int
from pipeline.blocks.limits import (MAX_BLOCKS, check_block_count, check_capacities,
                                    output_blocks)
from pipeline.blocks.models import CPU_MODELS, GPU_MODELS
from pipeline.blocks.stream import HEAD_FIRST, ORDERS, TAIL_FIRST
from pipeline.engines.lmcache_cpu import DEFAULT_CHUNK_SIZE
from pipeline.engines.vllm_gpu import DEFAULT_VLLM_VERSION, PREPEND_SINCE, unhashed_to_head
from pipeline.errors import CLIError

__all__ = ["MODEL_OPTIONS", "MODEL_ORDERS", "add_engine_arguments", "add_order_arguments", "model_options",
           "default_chunk_size", "vllm_version", "add_model_arguments", "run_options"]

#: model name -> the option names (argparse dests) it takes.
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {
    "vllm": ("output_tokens", "vllm_version"), "vllm-replay": ("output_tokens", "vllm_version"),
    "lmcache": ("chunk_size", "save_unfull_chunk"),
    "lmcache-replay": ("chunk_size", "save_unfull_chunk"),
}
#: model name -> the only order it follows (the engine's own).
MODEL_ORDERS = {"vllm": TAIL_FIRST, "vllm-replay": TAIL_FIRST, "lmcache": HEAD_FIRST,
                "lmcache-replay": HEAD_FIRST}
_DEFAULTS = {"output_tokens": 1, "vllm_version": DEFAULT_VLLM_VERSION,
             "chunk_size": DEFAULT_CHUNK_SIZE, "save_unfull_chunk": False}


def vllm_version(text: str) -> str:
    """argparse type: a vLLM version such as 0.33.0."""
    try:
        unhashed_to_head(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The four engine options (default None: "not given")."""
    since = ".".join(map(str, PREPEND_SINCE))
    parser.add_argument("--output-tokens", type=positive_int, default=None,
                        help="vllm model: tokens generated per request (max_tokens, default 1)")
    parser.add_argument("--vllm-version", type=vllm_version, default=None,
                        help=f"vllm model: free-queue placement of unhashed blocks, head since "
                             f"{since}, tail before (default {DEFAULT_VLLM_VERSION})")
    parser.add_argument("--chunk-size", type=positive_int, default=None,
                        help=f"lmcache model: chunk_size in tokens, a multiple of the block "
                             f"size (default the smallest multiple >= {DEFAULT_CHUNK_SIZE}: "
                             f"{DEFAULT_CHUNK_SIZE} for 16-token blocks, 512 for 512)")
    parser.add_argument("--save-unfull-chunk", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="lmcache model: store a prompt's partial last chunk (default off, "
                             "as LMCache >= 0.4)")


def add_order_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu-order`` / ``--cpu-order``: the order of a request's blocks in each tier."""
    parser.add_argument("--gpu-order", choices=ORDERS, default=TAIL_FIRST,
                        help="order of a request's blocks in the GPU tier (default tail-first, "
                             "vLLM's free queue)")
    parser.add_argument("--cpu-order", choices=ORDERS, default=HEAD_FIRST,
                        help="order of a request's blocks in the CPU tier (default head-first, "
                             "LMCache's LRU)")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu-model`` and ``--cpu-model`` (the registries' names) and the engine options:
    one definition for every block command."""
    parser.add_argument("--gpu-model", choices=tuple(GPU_MODELS), default="ideal",
                        help="GPU cache model (default %(default)s; vllm: vLLM's v1 allocator)")
    parser.add_argument("--cpu-model", choices=tuple(CPU_MODELS), default="ideal",
                        help="CPU cache model (default %(default)s; lmcache: LMCache's CPU "
                             "backend)")
    add_engine_arguments(parser)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def default_chunk_size(block_size: int | None) -> int:
    """LMCache's chunk size (256) on the block grid: the smallest multiple of ``block_size``
    that is at least 256 (256 itself for 16-token blocks, 512 for a Mooncake trace's 512)."""
    if not block_size:
        return DEFAULT_CHUNK_SIZE
    return -(-DEFAULT_CHUNK_SIZE // block_size) * block_size


def model_options(args: argparse.Namespace, block_size: int | None = None) -> tuple[dict, dict]:
    """(GPU model options, CPU model options) for ``args`` (a namespace with ``gpu_model``,
    ``cpu_model`` and, where the command has them, ``gpu_order``, ``cpu_order``,
    ``block_size``) and the run's ``block_size`` (default ``args.block_size``); CLIError on an
    option the chosen model does not take, an order it cannot follow, or a chunk size off the
    block grid. ``--chunk-size`` defaults to ``default_chunk_size(block_size)``. Every block
    command (``blocks``, ``trace``) calls it once its block size is known."""
    if block_size is None:
        block_size = getattr(args, "block_size", None)
    chosen = {"gpu": args.gpu_model, "cpu": args.cpu_model}
    for tier, model in chosen.items():
        order = getattr(args, f"{tier}_order", None)      # commands without orders: skip
        if model in MODEL_ORDERS and order is not None and order != MODEL_ORDERS[model]:
            raise CLIError(f"--{tier}-order {order}: the {model} model is "
                           f"{MODEL_ORDERS[model]}")
    for dest in _DEFAULTS:
        if getattr(args, dest, None) is not None and \
                not any(dest in MODEL_OPTIONS.get(m, ()) for m in chosen.values()):
            raise CLIError(f"{_flag(dest)} applies to the "
                           f"{'vllm' if dest in MODEL_OPTIONS['vllm'] else 'lmcache'} model only")
    defaults = {**_DEFAULTS, "chunk_size": default_chunk_size(block_size)}
    options = []
    for model in chosen.values():
        options.append({dest: defaults[dest] if getattr(args, dest, None) is None
                        else getattr(args, dest) for dest in MODEL_OPTIONS.get(model, ())})
    chunk = options[1].get("chunk_size")
    if chunk is not None and block_size and chunk % block_size:
        raise CLIError(f"--chunk-size {chunk}: must be a multiple of the block size "
                       f"{block_size} (--block-size)")
    return options[0], options[1]


def run_options(args: argparse.Namespace, block_size: int, requests: int,
                blocks: int) -> tuple[dict, dict]:
    """The one check of a block command's tiers and models, once its workload's size is
    known (``requests``, ``blocks`` block accesses): ``--gpu`` / ``--cpu`` capacities fit an
    int64, ``model_options`` holds, and the vllm model's output blocks keep the run under
    ``MAX_BLOCKS``. Returns (GPU model options, CPU model options); CLIError naming the
    argument otherwise. ``blocks`` and ``trace`` both call it before any work."""
    check_capacities("--gpu", getattr(args, "gpu", None))
    check_capacities("--cpu", getattr(args, "cpu", None))
    check_capacities("--cpu-sweep-gpu", getattr(args, "cpu_sweep_gpu", None))
    check_block_count(blocks, "the workload")
    gpu_options, cpu_options = model_options(args, block_size)
    output = gpu_options.get("output_tokens")
    if output is not None and blocks + output_blocks(requests, output, block_size) > MAX_BLOCKS:
        check_block_count(blocks + output_blocks(requests, output, block_size),
                          f"--output-tokens {output} ({requests} requests)")
    return gpu_options, cpu_options
