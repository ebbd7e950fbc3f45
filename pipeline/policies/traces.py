"""Object-level streams for the policy family: each block of a Mooncake trace is one object
(no prefix rule), and the lab's documents as objects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pipeline.errors import CLIError
from pipeline.workloads.documents import DocumentWorkload

__all__ = ["MOONCAKE_BLOCK", "mooncake_objects", "lab_objects"]

#: tokens per Mooncake hash id (FAST'25 traces; ../shared/traces/SOURCES.md)
MOONCAKE_BLOCK = 512


def mooncake_objects(path: str | Path, unit: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(keys, sizes) of every block access of a Mooncake JSONL trace, in request order.

    ``unit``: every block has size 1; else its tokens (512, the last block of a request
    ``input_length - 512 * (blocks - 1)``)."""
    path = Path(path)
    try:
        frame = pl.read_ndjson(path, schema={"input_length": pl.Int64,
                                             "hash_ids": pl.List(pl.Int64)})
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise CLIError(f"--trace {path}: cannot read a Mooncake JSONL trace ({exc})") from None
    if frame.height == 0 or frame["hash_ids"].null_count() or frame["input_length"].null_count():
        raise CLIError(f"--trace {path}: needs input_length and hash_ids on every line")
    blocks = (frame.with_row_index("request")
              .with_columns(n=pl.col("hash_ids").list.len())
              .explode("hash_ids").drop_nulls("hash_ids")
              .with_columns(last=pl.int_range(pl.len()).over("request") == pl.col("n") - 1))
    keys = blocks["hash_ids"].to_numpy().astype(np.int64)
    if unit:
        return keys, np.ones(keys.size, dtype=np.int64)
    tail = (pl.col("input_length") - MOONCAKE_BLOCK * (pl.col("n") - 1)).clip(0, MOONCAKE_BLOCK)
    sizes = blocks.select(pl.when(pl.col("last")).then(tail).otherwise(MOONCAKE_BLOCK))
    return keys, sizes.to_series().to_numpy().astype(np.int64)


def lab_objects(docs: int, tokens: int, passes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The lab's document mode (``pipeline.workloads.documents.DocumentWorkload``): one
    object per document, ``tokens`` each, read per pass (fwd: 0..docs-1, rev: docs-1..0)."""
    accesses = DocumentWorkload(docs, tokens, tuple(passes)).accesses()
    return (accesses["doc"].to_numpy().astype(np.int64),
            accesses["size"].to_numpy().astype(np.int64))
