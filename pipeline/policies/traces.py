"""Object-level streams for the policy family: each block of a Mooncake trace is one object
(no prefix rule), and the lab's documents as objects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pipeline.errors import CLIError
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.mooncake import MOONCAKE_BLOCK_SIZE, read_mooncake

__all__ = ["MOONCAKE_BLOCK", "mooncake_objects", "lab_objects"]

#: tokens per Mooncake hash id (FAST'25 traces; ../shared/traces/SOURCES.md)
MOONCAKE_BLOCK = MOONCAKE_BLOCK_SIZE


def mooncake_objects(path: str | Path, unit: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(keys, sizes) of every block access of a Mooncake JSONL trace, in request order, read
    by ``pipeline.workloads.mooncake.read_mooncake`` (its checks; errors as ``file:line:
    reason``). ``unit``: every block has size 1; else its tokens (512, the last block of a
    request ``input_length - 512 * (blocks - 1)``)."""
    try:
        blocks = read_mooncake(path, MOONCAKE_BLOCK).blocks
    except (OSError, ValueError) as exc:
        raise CLIError(f"--trace {exc}" if isinstance(exc, TraceError)
                       else f"--trace {path}: {exc}") from None
    keys = blocks["block_key"].cast(pl.Int64).to_numpy()
    if unit:
        return keys, np.ones(keys.size, dtype=np.int64)
    return keys, blocks["block_tokens"].cast(pl.Int64).to_numpy()


def lab_objects(docs: int, tokens: int, passes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The lab's document mode (``pipeline.workloads.documents.DocumentWorkload``): one
    object per document, ``tokens`` each, read per pass (fwd: 0..docs-1, rev: docs-1..0)."""
    accesses = DocumentWorkload(docs, tokens, tuple(passes)).accesses()
    return (accesses["doc"].to_numpy().astype(np.int64),
            accesses["size"].to_numpy().astype(np.int64))
