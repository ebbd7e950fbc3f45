"""Token-id traces (JSONL ``{"timestamp": ..., "tokens": [...]}``) as chained block frames.

Users bring their own logs: each prompt is cut into ``block_size``-token blocks (the last may
be partial) and each block gets a chained key that stands for the whole prefix up to its end,
as vLLM's block hashes do: equal prefixes give equal keys.

The hash is vectorized (numpy, no per-request loop): every token is hashed together with its
position in the prompt (splitmix64), a block's hash is the wrapping sum of its tokens' hashes,
and a block's key is the wrapping cumulative sum of its request's block hashes up to it, mixed
once more. A prefix is a set of (position, token) pairs with each position once, so two
different prefixes collide only when two sums of pseudo-random 64-bit words agree (about
2**-64 per pair).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA
from pipeline.workloads.jsonl import Field, apply_checks, read_lines
from pipeline.workloads.trace import Trace

__all__ = ["FIELDS", "read_tokens", "token_blocks", "splitmix64"]

FIELDS = (Field("timestamp", "number"), Field("tokens", "int list"))
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic; a bijection)."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += _GOLDEN
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def token_blocks(tokens: np.ndarray, lengths: np.ndarray, block_size: int) -> pl.DataFrame:
    """The block frame of prompts given as concatenated ``tokens`` and per-prompt ``lengths``
    (each >= 1): chained keys, ``block_size``-token blocks, a partial last block."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    position = np.arange(tokens.size, dtype=np.int64) - np.repeat(starts, lengths)
    with np.errstate(over="ignore"):
        token_hash = splitmix64(tokens.astype(np.int64).view(np.uint64)
                                ^ splitmix64(position.view(np.uint64)))
    n_blocks = -(-lengths // block_size)
    block_request = np.repeat(np.arange(lengths.size, dtype=np.int64), n_blocks)
    block_starts = np.concatenate(([0], np.cumsum(n_blocks)[:-1])).astype(np.int64)
    block_index = np.arange(block_request.size, dtype=np.int64) - block_starts[block_request]
    first_token = starts[block_request] + block_index * block_size
    block_hash = np.add.reduceat(token_hash, first_token) if tokens.size else token_hash
    with np.errstate(over="ignore"):
        running = np.cumsum(block_hash, dtype=np.uint64)
        before = np.concatenate(([np.uint64(0)], running))[block_starts]
        keys = splitmix64(running - np.repeat(before, n_blocks))
    block_tokens = np.minimum(block_size, lengths[block_request] - block_index * block_size)
    return pl.DataFrame({"request": block_request, "block_index": block_index,
                         "block_key": keys, "block_tokens": block_tokens}
                        ).cast(dict(BLOCK_SCHEMA))


def _checks() -> list[tuple[pl.Expr, str]]:
    missing = [(pl.col(f.name).is_null(), f"missing field {f.name!r}") for f in FIELDS]
    return missing + [
        (pl.col("tokens").list.len() == 0, "tokens is empty"),
        (pl.col("tokens").list.eval(pl.element().is_null()).list.any(),
         "non-integer tokens (null)"),
        (pl.col("tokens").list.min() < 0, "negative token id"),
    ]


def read_tokens(path: str | Path, block_size: int, skip_bad_lines: bool = False) -> Trace:
    """Read a token-id JSONL trace into a ``Trace`` with chained ``block_size`` blocks.

    Raises ``TraceError`` (``file:line: reason``) on the first bad line unless
    ``skip_bad_lines``, which drops bad lines and lists them in ``Trace.skipped``.
    """
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    good, skipped = apply_checks(read_lines(path, FIELDS), _checks(), skip_bad_lines)
    lengths = good["tokens"].list.len().to_numpy()
    tokens = good["tokens"].explode().to_numpy()
    blocks = token_blocks(tokens, lengths, block_size)
    requests = good.with_row_index("request").select(
        pl.col("request").cast(pl.UInt32), pass_name=pl.lit(None, pl.String),
        doc=pl.lit(None, pl.Int64), prompt_tokens=pl.col("tokens").list.len().cast(pl.UInt64),
        timestamp_ms=pl.col("timestamp"))
    return Trace(blocks, requests.match_to_schema(REQUEST_SCHEMA), block_size,
                 good["line"].to_numpy(), skipped)
