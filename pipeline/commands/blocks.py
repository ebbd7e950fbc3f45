"""The lab's scenario in block mode: documents as prefix-chained blocks through a GPU tier
(+ optional CPU tier); prints JSON.

Same flags as ``kvlab/scenario.py`` plus the block size, each tier's order and model.
Output, one pass per entry::

    {"passes": [{"order": "fwd", "gpu_hit_tokens": 0, "cpu_hit_tokens": 0,
                 "miss_tokens": 50110, "hit_blocks": 0}, ...]}

``hit_blocks`` counts the blocks served from either tier. ``--gpu``/``--cpu`` take tokens or
a size (``1.5GiB``, ``40GB``) through ``--model``'s bytes per token (``pipeline.sizes.units``);
then the JSON has ``sizes``, saying the unit and the bytes per token used. Example: ``python -m pipeline
blocks --gpu 48000 --passes fwd,fwd --gpu-order head-first``.
"""

from __future__ import annotations

import argparse
import json
import sys

import polars as pl

from pipeline.base.arguments import add_document_arguments, non_negative_int, positive_int
from pipeline.workloads.stream_limits import check_document_blocks, model_capacities
from pipeline.catalog.model_api import two_tier
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST
from pipeline.catalog.model_options import LAB_MODELS, add_model_arguments, add_order_arguments, \
    run_options
from pipeline.base.config import LAB_DOCS, LAB_GPU, LAB_PASSES, LAB_TOKENS
from pipeline.sizes.units import add_kv_arguments, capacity, resolve_capacities
from pipeline.sizes.limits import check_block_size
from pipeline.workloads.documents import documents_workload

DEFAULT_BLOCK_SIZE = 16
PASS_KEYS = ("order", "gpu_hit_tokens", "cpu_hit_tokens", "miss_tokens", "hit_blocks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``blocks``."""
    parser.add_argument("--gpu", type=capacity, default=LAB_GPU, metavar="CAP",
                        help="GPU KV capacity: tokens or a size such as 0.6GiB, through "
                             "--model's bytes per token (default %(default)s tokens)")
    add_document_arguments(parser, count=non_negative_int)
    parser.add_argument("--cpu", type=capacity, default=0, metavar="CAP",
                        help="CPU offload capacity: tokens or a size (1.5GiB; LMCache's "
                             "max_local_cpu_size 1.5 as 1.5lmcacheGB); 0 = GPU tier only "
                             "(default 0)")
    parser.add_argument("--block-size", type=positive_int, default=DEFAULT_BLOCK_SIZE,
                        help="tokens per block; only full blocks are cached (default 16)")
    add_order_arguments(parser)
    add_model_arguments(parser, LAB_MODELS)
    add_kv_arguments(parser)


def run_blocks(gpu: int = LAB_GPU, docs: int = LAB_DOCS, tokens: int = LAB_TOKENS,
               passes: list[str] | tuple[str, ...] = LAB_PASSES, cpu: int = 0,
               block_size: int = DEFAULT_BLOCK_SIZE, gpu_order: str = TAIL_FIRST,
               cpu_order: str = HEAD_FIRST, gpu_model: str = "block-lru",
               cpu_model: str = "block-lru", gpu_options: dict | None = None,
               cpu_options: dict | None = None) -> dict:
    """Run the block-mode scenario and return ``{"passes": [...]}`` as the command prints."""
    stream = documents_workload(docs, tokens, passes, block_size).block_stream()
    output = (gpu_options or {}).get("output_tokens", 1)
    gpu, cpu = model_capacities(stream, [gpu, cpu], output)     # same answer, bounded work
    result = two_tier(stream, gpu, cpu, gpu_order, cpu_order, gpu_model, cpu_model,
                      gpu_options, cpu_options)
    sums = (result.group_by(pass_index=pl.col("request") // max(docs, 1))
            .agg(pl.col("gpu_hit_tokens", "cpu_hit_tokens", "miss_tokens", "hit_blocks").sum()))
    found = {row["pass_index"]: row for row in sums.iter_rows(named=True)}
    empty = {"gpu_hit_tokens": 0, "cpu_hit_tokens": 0, "miss_tokens": 0, "hit_blocks": 0}
    return {"passes": [
        {"order": order, **{key: int(found.get(index, empty)[key]) for key in PASS_KEYS[1:]}}
        for index, order in enumerate(passes)]}


def main(args: argparse.Namespace) -> int:
    """``python -m pipeline blocks``: print the JSON (with ``sizes`` when a capacity was
    given as a size: its unit and the bytes per token)."""
    check_block_size(args.block_size)
    args, sizes = resolve_capacities(args, "gpu", "cpu", block_size=args.block_size)
    requests, blocks = check_document_blocks(args.docs, len(args.passes), args.tokens,
                                             args.block_size)
    gpu_options, cpu_options = run_options(args, args.block_size, requests, blocks)
    result = run_blocks(gpu=args.gpu, docs=args.docs, tokens=args.tokens, passes=args.passes,
                        cpu=args.cpu, block_size=args.block_size, gpu_order=args.gpu_order,
                        cpu_order=args.cpu_order, gpu_model=args.gpu_model,
                        cpu_model=args.cpu_model, gpu_options=gpu_options,
                        cpu_options=cpu_options)
    if sizes:
        result["sizes"] = sizes
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0
