"""Mooncake traces (JSONL ``timestamp, input_length, output_length, hash_ids``) as block frames.

Mooncake (FAST'25, github.com/kvcache-ai/Mooncake ``FAST25-release/traces``) gives one
prefix-chained hash id per ``block_size``-token block of the prompt (512 by default);
``output_length`` is each request's output tokens (``Workload.output_tokens``). Each id
is one block; the last one holds ``input_length - (n - 1) * block_size`` tokens, which must be
1..block_size (a last block shorter than ``block_size`` is partial: never cacheable). Read
with polars (``read_ndjson`` + explode, piece by piece), checked line by line as expressions.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA
from pipeline.workloads.jsonl import Field, checked_pieces, refuse_backwards
from pipeline.workloads.workload import Workload

__all__ = ["MOONCAKE_BLOCK_SIZE", "FIELDS", "line_checks", "read_mooncake"]

MOONCAKE_BLOCK_SIZE = 512
FIELDS = (Field("timestamp", "number"), Field("input_length", "int"),
          Field("output_length", "int"), Field("hash_ids", "int list"))


def line_checks(block_size: int) -> list[tuple[pl.Expr, str | pl.Expr]]:
    """(bad-line condition, reason) of a Mooncake line read in ``block_size`` blocks, as
    ``pipeline.workloads.jsonl.apply_checks`` takes them."""
    n = pl.col("hash_ids").list.len()
    length = pl.col("input_length")
    missing = [(pl.col(f.name).is_null(), f"missing field {f.name!r}") for f in FIELDS]
    return missing + [
        (n == 0, "hash_ids is empty"),
        (pl.col("hash_ids").list.eval(pl.element().is_null()).list.any(),
         "non-integer hash_ids (null)"),
        (pl.col("hash_ids").list.n_unique() != n,
         "hash_ids repeats an id (chained ids are distinct along a prefix)"),
        (pl.col("output_length") < 0, "output_length is negative"),
        (((n - 1) * block_size >= length) | (n * block_size < length),
         pl.format("input_length {} is inconsistent with {} hash_ids of {} tokens "
                   "(expected {}..{})", length, n, pl.lit(block_size),
                   (n - 1) * block_size + 1, n * block_size)),
    ]


def _blocks(requests: pl.DataFrame, block_size: int) -> pl.DataFrame:
    """One row per hash id of the numbered ``requests``; the last holds the remainder."""
    n = pl.col("hash_ids").list.len()
    return (requests
            .select("request", "input_length", "hash_ids", n=n,
                    block_index=pl.int_ranges(0, n, dtype=pl.UInt32))
            .explode("hash_ids", "block_index")
            .select(pl.col("request").cast(pl.UInt32), "block_index",
                    block_key=pl.col("hash_ids").reinterpret(signed=False),
                    block_tokens=pl.when(pl.col("block_index") == pl.col("n") - 1)
                    .then(pl.col("input_length") - (pl.col("n") - 1) * block_size)
                    .otherwise(block_size).cast(pl.UInt32)))


def read_mooncake(path: str | Path, block_size: int = MOONCAKE_BLOCK_SIZE,
                  skip_bad_lines: bool = False) -> Workload:
    """Read a Mooncake JSONL trace into a ``Workload`` (block and request frames).

    Raises ``TraceError`` (``file:line: reason``) on the first bad line unless
    ``skip_bad_lines``, which drops bad lines and lists them in ``Workload.skipped``, and on a
    timestamp that goes backwards (``refuse_backwards``; skipped or not). The file is read
    piece by piece (``pipeline.workloads.jsonl.checked_pieces``).
    """
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    skipped: list[tuple[int, str]] = []
    blocks, requests, first = [], [], 0
    for good in checked_pieces(path, FIELDS, line_checks(block_size), skip_bad_lines, skipped):
        numbered = good.with_row_index("request", offset=first)
        blocks.append(_blocks(numbered, block_size))
        requests.append(numbered.select("request", "line", "input_length", "timestamp",
                                        "output_length"))
        first += good.height
    good = pl.concat(requests)
    refuse_backwards(good, "timestamp", path)
    request_frame = good.select(
        pl.col("request").cast(pl.UInt32), pass_name=pl.lit(None, pl.String),
        doc=pl.lit(None, pl.Int64), prompt_tokens=pl.col("input_length").cast(pl.UInt64),
        timestamp_ms=pl.col("timestamp"))
    return Workload(pl.concat(blocks).match_to_schema(BLOCK_SCHEMA),
                    request_frame.match_to_schema(REQUEST_SCHEMA), block_size,
                    good["line"].to_numpy(), skipped, str(path),
                    output_tokens=good["output_length"].to_numpy())
