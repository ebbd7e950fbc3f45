"""The block-level request stream: the one shape every block-mode workload produces.

A request is a list of prefix-chained blocks (a block's key stands for the whole prefix up
to and including it, as vLLM's block hashes, LMCache's chunk keys and Mooncake's
``hash_ids`` do). One row per block of each request, in request order, then block order:

* ``request``      0-based request number, in arrival order (non-decreasing down the frame)
* ``block_index``  0-based position of the block inside its request (0, 1, 2, ...)
* ``block_key``    the chained key: equal keys mean the same prefix (UInt64)
* ``block_tokens`` tokens in the block; only a block of exactly ``block_size`` tokens is
                   cacheable (a partial last block is always recomputed)

Per-request attributes (pass name, document number, prompt tokens, timestamp) live in a
separate frame keyed by ``request`` (``REQUEST_SCHEMA``), so the block frame stays small.
"""

from __future__ import annotations

import polars as pl

__all__ = ["BLOCK_SCHEMA", "REQUEST_SCHEMA", "UNORDERED_MESSAGE", "check_schema", "check_blocks",
           "document_blocks"]

BLOCK_SCHEMA = pl.Schema({
    "request": pl.UInt32, "block_index": pl.UInt32, "block_key": pl.UInt64,
    "block_tokens": pl.UInt32,
})
#: One row per request. ``pass_name``/``doc`` are null for traces; ``timestamp_ms`` for patterns.
REQUEST_SCHEMA = pl.Schema({
    "request": pl.UInt32, "pass_name": pl.String, "doc": pl.Int64, "prompt_tokens": pl.UInt64,
    "timestamp_ms": pl.Float64,
})


#: Why a block frame's rows are refused (``check_blocks``, ``blocks.stream.block_stream``).
UNORDERED_MESSAGE = "block frame rows must be in request order with block_index 0, 1, ..."


def check_schema(blocks: pl.DataFrame) -> None:
    """Raise ValueError unless ``blocks`` has ``BLOCK_SCHEMA``."""
    if blocks.schema != BLOCK_SCHEMA:
        raise ValueError(f"block frame schema {dict(blocks.schema)} != {dict(BLOCK_SCHEMA)}")


def check_blocks(blocks: pl.DataFrame) -> pl.DataFrame:
    """Return ``blocks`` if it has ``BLOCK_SCHEMA`` and its rows are in request, block order
    with block indices 0, 1, 2, ... per request; raise ValueError otherwise."""
    check_schema(blocks)
    expected = pl.int_range(pl.len()).over("request").cast(pl.UInt32)
    bad = blocks.select(
        unordered=(pl.col("request").diff().fill_null(0) < 0).any(),
        misnumbered=(pl.col("block_index") != expected).any())
    if bad.row(0) != (False, False):
        raise ValueError(UNORDERED_MESSAGE)
    return blocks


def document_blocks(doc_order: list[int], tokens: int, block_size: int) -> pl.DataFrame:
    """The lab's documents as block requests: one request per read of a document (in
    ``doc_order``), ``tokens`` tokens each, cut into ``block_size``-token blocks; the last
    block holds the remainder (partial unless ``tokens`` is a multiple of ``block_size``).
    Document ``d``'s block ``i`` has key ``d * stride + i`` (chained: unique per prefix)."""
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    n_blocks = -(-tokens // block_size)
    stride = max(n_blocks, 1)
    requests = pl.DataFrame({"doc": pl.Series(doc_order, dtype=pl.Int64)}).with_row_index(
        "request")
    block_index = pl.int_ranges(0, n_blocks, dtype=pl.UInt32)
    return (requests.with_columns(block_index=block_index).explode("block_index")
            .drop_nulls("block_index")
            .select(pl.col("request").cast(pl.UInt32), "block_index",
                    block_key=(pl.col("doc") * stride + pl.col("block_index")).cast(pl.UInt64),
                    block_tokens=pl.min_horizontal(
                        pl.lit(block_size, pl.Int64),
                        tokens - pl.col("block_index").cast(pl.Int64) * block_size
                    ).cast(pl.UInt32)))
