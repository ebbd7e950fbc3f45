"""Speed of the engine models' fast forms (printed figures): vLLM's one-pass depths against
its compiled pool replayed per capacity, LMCache's compiled backend (its literal port is a
test oracle).

On a Mooncake trace (default the shared one) it asserts the one-pass and replayed forms
agree on every request and prints one line per model. The replays run on a few
capacities and are scaled to all of them (they cost the same per capacity).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.bench import timed
from pipeline.workloads.stream import block_stream
from pipeline.base.config import ROOT
from pipeline.components.lmcache import lmcache_chunks, lmcache_hits
from pipeline.onepass.vllm_fast import vllm_hits
from pipeline.components.vllm_gpu import replay_vllm
from pipeline.workloads.blocks import BLOCK_SCHEMA

__all__ = ["mooncake_blocks", "bench"]

MOONCAKE_BLOCK = 512
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl"


def mooncake_blocks(path: Path, block_size: int = MOONCAKE_BLOCK) -> pl.DataFrame:
    """A Mooncake JSONL trace as a block frame (the last block holds the remainder)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    frame = pl.DataFrame({"hash_ids": [r["hash_ids"] for r in rows],
                          "input_length": [r["input_length"] for r in rows]},
                         schema={"hash_ids": pl.List(pl.UInt64), "input_length": pl.Int64})
    return (frame.with_row_index("request").explode("hash_ids")
            .with_columns(block_index=pl.int_range(pl.len()).over("request"))
            .select(pl.col("request").cast(pl.UInt32), pl.col("block_index").cast(pl.UInt32),
                    block_key=pl.col("hash_ids"),
                    block_tokens=pl.min_horizontal(
                        pl.lit(block_size, pl.Int64),
                        pl.col("input_length") - pl.col("block_index") * block_size
                    ).cast(pl.UInt32))
            .cast(dict(BLOCK_SCHEMA)))


def bench(trace: Path = DEFAULT_TRACE, capacities: int = 50, literal: int = 3) -> list[str]:
    """Lines of figures on ``trace``: vllm fast vs literal, lmcache compiled."""
    stream = block_stream(mooncake_blocks(trace), MOONCAKE_BLOCK)
    total = int(stream.prompt_tokens.sum())
    vllm_caps = np.linspace(MOONCAKE_BLOCK * 2, total // 4, capacities).astype(np.int64)
    vllm_hits(stream, np.array([1]))                                   # compile
    replay_vllm(stream, 2 * MOONCAKE_BLOCK)
    (fast, exact), fast_s = timed(vllm_hits, stream, vllm_caps // MOONCAKE_BLOCK - 1)
    picks = np.linspace(0, capacities - 1, literal).astype(int)
    slow_s = 0.0
    for k in picks:
        hits, seconds = timed(replay_vllm, stream, int(vllm_caps[k]))
        slow_s += seconds
        assert not exact[k] or hits.tolist() == fast[k].tolist()
    lines = [f"trace: {stream.requests} requests, {stream.blocks} blocks of {MOONCAKE_BLOCK}",
             f"vllm: one-pass {fast_s:.3f} s for {capacities} capacities "
             f"({int(exact.sum())} exact in one pass); the pool replayed per capacity "
             f"{slow_s / literal * capacities:.2f} s (scaled); "
             f"{slow_s / literal * capacities / fast_s:.0f}x"]
    chunks = lmcache_chunks(stream, MOONCAKE_BLOCK)
    cpu_caps = np.linspace(MOONCAKE_BLOCK, total // 4, capacities).astype(np.int64)
    lmcache_hits(chunks, cpu_caps[:1])                                 # compile
    _, fast_s = timed(lmcache_hits, chunks, cpu_caps)
    lines.append(f"lmcache: compiled replay {fast_s:.3f} s for {capacities} capacities")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--capacities", type=int, default=50)
    args = parser.parse_args()
    print("\n".join(bench(args.trace, args.capacities)))


if __name__ == "__main__":
    main()
