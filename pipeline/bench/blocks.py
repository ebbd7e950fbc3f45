"""Benchmark: the one-pass block engine vs the literal replay (figures, not tests).

Trace: ``--block-blocks`` blocks (default 2,000,000) of 16 tokens in requests that each take
a prefix of one of ``--block-contexts`` shared contexts (Zipf(1.0) popularity, 32..256 blocks
each; the prefix is the whole context or, one time in four, a random part of it) followed by
8..64 blocks of their own; half the requests end in a partial block. Capacities:
``--block-capacities`` GPU capacities evenly spaced from 2 % to 100 % of the distinct
blocks, tail-first.

(c) the fast engine (``lru_depths.block_lru_gpu``: one pass per size band, then every capacity)
runs at every capacity (median of 3 runs); (a) the literal replay (``block-lru-replay``: the
LRU class, request by request) runs at ``--block-sample`` evenly spaced capacities and its
time is extrapolated to all of them (``--block-full`` runs all); every replayed capacity's per-request hits must equal the fast
engine's, else exit 1. It also writes the trace's block events (``sweep.block_events``) to a
temporary Parquet file and reports bytes per block access.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import polars as pl

from pipeline.base.arguments import positive_int
from pipeline.bench import timed
from pipeline.onepass import lru_depths
from pipeline.catalog.model_api import GPU_MODELS
from pipeline.workloads.stream import TAIL_FIRST, block_stream
from pipeline.blocks.sweep import block_events
from pipeline.sweeps import write_parquet_atomic
from pipeline.workloads.blocks import BLOCK_SCHEMA

BLOCK_SIZE = 16
CONTEXT_BLOCKS = (32, 256)
OWN_BLOCKS = (8, 64)
SUFFIX_KEYS = 1 << 40            # own blocks get keys from here up, contexts below
FAST_REPEATS = 3                 # (c) is timed as the median of this many runs


def shared_prefix_trace(blocks: int, contexts: int, seed: int) -> pl.DataFrame:
    """A block frame (BLOCK_SCHEMA) of about ``blocks`` blocks, as the module docstring says."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(CONTEXT_BLOCKS[0], CONTEXT_BLOCKS[1] + 1, contexts)
    weights = 1.0 / np.arange(1, contexts + 1)
    per_request = (CONTEXT_BLOCKS[0] + CONTEXT_BLOCKS[1] + OWN_BLOCKS[0] + OWN_BLOCKS[1]) // 2
    n = max(blocks // per_request * 2, 1)
    context = rng.choice(contexts, size=n, p=weights / weights.sum())
    shared = np.where(rng.random(n) < 0.25, rng.integers(1, lengths[context] + 1),
                      lengths[context])
    own = rng.integers(OWN_BLOCKS[0], OWN_BLOCKS[1] + 1, n)
    total = shared + own
    n = int(np.searchsorted(np.cumsum(total), blocks, side="right")) or 1
    shared, own, total, context = shared[:n], own[:n], total[:n], context[:n]
    request = np.repeat(np.arange(n, dtype=np.uint32), total)
    index = (np.arange(total.sum()) - np.repeat(np.cumsum(total) - total, total)).astype(np.int64)
    in_context = index < np.repeat(shared, total)
    ctx_key = np.repeat(context, total).astype(np.uint64) * 1024 + index.astype(np.uint64)
    own_key = SUFFIX_KEYS + np.arange(index.size, dtype=np.uint64)
    tokens = np.full(index.size, BLOCK_SIZE, np.uint32)
    partial = rng.random(n) < 0.5
    last = np.cumsum(total) - 1
    tokens[last[partial]] = rng.integers(1, BLOCK_SIZE, int(partial.sum()))
    return pl.DataFrame({"request": request, "block_index": index.astype(np.uint32),
                         "block_key": np.where(in_context, ctx_key, own_key),
                         "block_tokens": tokens}, schema=BLOCK_SCHEMA)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the block benchmark (prefixed ``--block-``, so ``pipeline.bench`` can
    add them beside its own)."""
    parser.add_argument("--block-blocks", type=positive_int, default=2_000_000,
                        help="block accesses in the trace (default %(default)s)")
    parser.add_argument("--block-contexts", type=positive_int, default=2000,
                        help="shared contexts (default %(default)s)")
    parser.add_argument("--block-capacities", type=positive_int, default=100,
                        help="GPU capacities (default %(default)s)")
    parser.add_argument("--block-sample", type=positive_int, default=3,
                        help="capacities the literal replay runs (default %(default)s)")
    parser.add_argument("--block-full", action="store_true",
                        help="run the literal replay at every capacity (slow)")
    parser.add_argument("--block-seed", type=int, default=20261130, help="trace seed")


def main(args: argparse.Namespace) -> int:
    """Print the figures from parsed options; 1 if the engines disagree."""
    return run_bench(blocks=args.block_blocks, contexts=args.block_contexts,
                     capacities=args.block_capacities, sample=args.block_sample,
                     full=args.block_full, seed=args.block_seed)


def run_bench(blocks: int = 2_000_000, contexts: int = 2000, capacities: int = 100,
              sample: int = 3, full: bool = False, seed: int = 20261130) -> int:
    """Print the figures; 1 if the engines disagree."""
    stream, prepare_s = timed(lambda: block_stream(shared_prefix_trace(blocks, contexts, seed),
                                                   BLOCK_SIZE))
    distinct = stream.n_codes
    grid = (np.linspace(0.02, 1.0, capacities) * distinct).round().astype(np.int64) \
        * BLOCK_SIZE
    print(f"trace: {stream.blocks:,} block accesses in {stream.requests:,} requests, "
          f"{distinct:,} distinct blocks, largest request {int(stream.cacheable.max())} "
          f"cacheable blocks; prepared in {prepare_s:.2f} s")

    lru_depths.block_lru_gpu(stream, grid[:1], TAIL_FIRST)          # compile outside timing
    runs = [timed(lru_depths.block_lru_gpu, stream, grid, TAIL_FIRST) for _ in range(FAST_REPEATS)]
    fast, fast_s = runs[-1][0], float(np.median([seconds for _, seconds in runs]))
    print(f"(c) one pass, {grid.size} capacities: {fast_s:.2f} s, median of "
          f"{FAST_REPEATS} ({stream.blocks / fast_s / 1e6:.1f} M block accesses/s)")

    rows = (np.arange(grid.size) if full else
            np.unique(np.linspace(0, grid.size - 1, min(sample, grid.size)).round().astype(int)))
    replay_s = []
    for row in rows:
        literal, seconds = timed(GPU_MODELS["block-lru-replay"], stream, grid[row:row + 1],
                                 TAIL_FIRST)
        literal = literal[0]
        replay_s.append(seconds)
        if not np.array_equal(literal, fast[row]):
            print(f"MISMATCH at capacity {grid[row]}: replay and one pass differ",
                  file=sys.stderr)
            return 1
        print(f"(a) literal replay at {grid[row]:,} tokens: {replay_s[-1]:.1f} s, "
              f"{int(literal.sum()):,} hit tokens (identical per request)")
    total = float(np.mean(replay_s)) * grid.size
    how = "measured" if full else f"extrapolated from {len(rows)} capacities"
    print(f"(a) literal replay, {grid.size} capacities: {total:.0f} s ({how}); "
          f"(a)/(c) = {total / fast_s:.0f}x  (target >= 50x)")

    with tempfile.TemporaryDirectory(prefix="kvlab-blocks-") as tmp:
        events = block_events(stream, (TAIL_FIRST,))
        path = write_parquet_atomic(events, os.path.join(tmp, "events.parquet"))
        size = os.path.getsize(path)
    print(f"events: {events.height:,} block accesses, {size:,} bytes on disk = "
          f"{size / max(events.height, 1):.2f} bytes per block access  (target <= 8)")
    return 0


if __name__ == "__main__":
    from pipeline.bench import standalone

    standalone("pipeline.bench.blocks", __doc__, add_arguments, main)
