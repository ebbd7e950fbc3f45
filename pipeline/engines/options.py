"""The engine models' own options on the block commands, and their checks (one place).

``--output-tokens`` and ``--vllm-version`` belong to the ``vllm`` GPU model, ``--chunk-size``
and ``--save-unfull-chunk`` to the ``lmcache`` CPU model; giving one to another model, or an
order the engine cannot follow, is a one-line error naming the argument.
"""

from __future__ import annotations

import argparse

from pipeline.arguments import positive_int
from pipeline.blocks.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.engines.lmcache_cpu import DEFAULT_CHUNK_SIZE
from pipeline.engines.vllm_gpu import DEFAULT_VLLM_VERSION, PREPEND_SINCE, unhashed_to_head
from pipeline.errors import CLIError

__all__ = ["MODEL_OPTIONS", "MODEL_ORDERS", "add_engine_arguments", "model_options",
           "vllm_version"]

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
                             f"size (default {DEFAULT_CHUNK_SIZE})")
    parser.add_argument("--save-unfull-chunk", action=argparse.BooleanOptionalAction,
                        default=None,
                        help="lmcache model: store a prompt's partial last chunk (default off, "
                             "as LMCache >= 0.4)")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def model_options(args: argparse.Namespace) -> tuple[dict, dict]:
    """(GPU model options, CPU model options) for ``args`` (a namespace with ``gpu_model``,
    ``cpu_model`` and, where the command has them, ``gpu_order``, ``cpu_order``,
    ``block_size``); CLIError on an option the chosen model does not take, an order it cannot
    follow, or a chunk size off the block grid. Any block command can reuse it."""
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
    options = []
    for model in chosen.values():
        options.append({dest: _DEFAULTS[dest] if getattr(args, dest, None) is None
                        else getattr(args, dest) for dest in MODEL_OPTIONS.get(model, ())})
    chunk, block_size = options[1].get("chunk_size"), getattr(args, "block_size", None)
    if chunk is not None and block_size and chunk % block_size:
        raise CLIError(f"--chunk-size {chunk}: must be a multiple of --block-size "
                       f"{block_size}")
    return options[0], options[1]
