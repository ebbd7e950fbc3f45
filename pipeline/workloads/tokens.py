"""Token-id traces (JSONL ``{"timestamp": ..., "tokens": [...]}``) as chained block frames.

Optional per line: ``max_tokens`` (the request's output tokens, an integer >= 1) and
``output_token_ids`` (the sampled tokens; the output length is then their number, and
``max_tokens``, if given, must be at least that; a line with neither generates 1 token
under ``--output-tokens trace``). The blocks of prompt + sampled tokens
beyond the prompt's full blocks are keyed by the same chain, as vLLM hashes them
(``Workload.output_blocks``), so a later prompt that re-sends the reply has their keys.

Users bring their own logs: each prompt is cut into ``block_size``-token blocks (the last may
be partial) and each block gets a chained key that stands for the whole prefix up to its end,
as vLLM's block hashes do: equal prefixes give equal keys.

The hash is one compiled pass (numba, no temporaries): every token is hashed together with
its position in the prompt (splitmix64), a block's hash is the wrapping sum of its tokens'
hashes, and a block's key is the wrapping cumulative sum of its request's block hashes up to
it, mixed once more. A prefix is a set of (position, token) pairs with each position once, so two
different prefixes collide only when two sums of pseudo-random 64-bit words agree (about
2**-64 per pair).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from numba import njit

from pipeline.base.arrays import read_only
from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA
from pipeline.workloads.jsonl import Field, checked_pieces, refuse_backwards
from pipeline.workloads.token_scan import scan_piece
from pipeline.workloads.workload import Workload

__all__ = ["FIELDS", "OUTPUT_FIELDS", "line_checks", "mix", "read_tokens", "token_blocks",
           "sampled_blocks", "splitmix64"]

FIELDS = (Field("timestamp", "number"), Field("tokens", "int list"))
#: Optional fields: a line without them takes the run's ``--output-tokens``.
OUTPUT_FIELDS = (Field("max_tokens", "int"), Field("output_token_ids", "int list"))
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


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@njit(cache=True, nogil=True)
def mix(z: np.uint64) -> np.uint64:
    """``splitmix64`` of one word."""
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True)
def chain_block_keys(tokens: np.ndarray, lengths: np.ndarray, block_size: int, keys: np.ndarray,
           block_tokens: np.ndarray) -> None:
    """Fill each block's chained key and token count, requests one after another: a token's
    hash mixes it with the mix of its position, a block's hash sums its tokens', a key mixes
    the running sum of its request's block hashes."""
    token = 0
    block = 0
    for r in range(lengths.size):
        n = lengths[r]
        running = np.uint64(0)
        for start in range(0, n, block_size):
            end = min(start + block_size, n)
            total = np.uint64(0)
            for p in range(start, end):
                total += mix(np.uint64(tokens[token + p]) ^ mix(np.uint64(p)))
            running += total
            keys[block] = mix(running)
            block_tokens[block] = end - start
            block += 1
        token += n


def token_blocks(tokens: np.ndarray, lengths: np.ndarray, block_size: int,
                 first_request: int = 0) -> pl.DataFrame:
    """The block frame of prompts given as concatenated ``tokens`` (non-negative) and
    per-prompt ``lengths`` (each >= 1): chained keys, ``block_size``-token blocks, a partial
    last block. Requests are numbered from ``first_request``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n_blocks = -(-lengths // block_size)
    block_request = np.repeat(np.arange(lengths.size, dtype=np.int64), n_blocks)
    block_starts = np.concatenate(([0], np.cumsum(n_blocks)[:-1])).astype(np.int64)
    block_index = np.arange(block_request.size, dtype=np.int64) - block_starts[block_request]
    keys = np.empty(block_request.size, dtype=np.uint64)
    block_tokens = np.empty(block_request.size, dtype=np.int64)
    tokens = read_only(np.asarray(tokens, dtype=np.int64))
    chain_block_keys(tokens, lengths, int(block_size), keys, block_tokens)
    return pl.DataFrame({"request": block_request + first_request,
                         "block_index": block_index, "block_key": keys,
                         "block_tokens": block_tokens}).cast(dict(BLOCK_SCHEMA))


def line_checks() -> list[tuple[pl.Expr, str]]:
    missing = [(pl.col(f.name).is_null(), f"missing field {f.name!r}") for f in FIELDS]
    return missing + [
        (pl.col("tokens").list.len() == 0, "tokens is empty"),
        (pl.col("tokens").list.eval(pl.element().is_null()).list.any(),
         "non-integer tokens (null)"),
        (pl.col("tokens").list.min() < 0, "negative token id"),
    ]


def _output_checks() -> list[tuple[pl.Expr, str | pl.Expr]]:
    """The checks of the optional ``OUTPUT_FIELDS``."""
    outputs = pl.col("output_token_ids")
    return [
        (pl.col("max_tokens") < 1, pl.format("max_tokens must be >= 1, got {}",
                                             pl.col("max_tokens"))),
        (outputs.is_not_null() & (outputs.list.len() == 0), "output_token_ids is empty"),
        (outputs.list.eval(pl.element().is_null()).list.any(),
         "non-integer output_token_ids (null)"),
        (outputs.list.min() < 0, "negative token id in output_token_ids"),
        (outputs.is_not_null() & (pl.col("max_tokens") < outputs.list.len()),
         "max_tokens is smaller than the number of output_token_ids"),
    ]


def sampled_blocks(good: pl.DataFrame, block_size: int, first_request: int) -> pl.DataFrame:
    """(request, block_key) of the blocks of prompt + ``output_token_ids`` that vLLM caches
    beyond each prompt's full blocks: full blocks of the first prompt + output - 1 tokens
    (the last sampled token is never computed), chained as the prompt's."""
    numbered = good.with_row_index("request", offset=first_request)
    sampled = numbered.filter(pl.col("output_token_ids").is_not_null())
    if sampled.height == 0:
        return pl.DataFrame(schema={"request": pl.UInt32, "block_key": pl.UInt64})
    sequence = pl.concat_list("tokens", "output_token_ids")
    sampled = sampled.select("request", sequence=sequence,
                             prompt=pl.col("tokens").list.len(),
                             output=pl.col("output_token_ids").list.len())
    lengths = sampled["sequence"].list.len().cast(pl.Int64).to_numpy()
    frame = token_blocks(sampled["sequence"].explode().to_numpy(), lengths, block_size)
    prompt = sampled["prompt"].cast(pl.Int64).to_numpy()
    output = sampled["output"].cast(pl.Int64).to_numpy()
    per = -(-lengths // block_size)
    first = np.repeat(prompt // block_size, per)
    end = np.repeat((prompt + output - 1) // block_size, per)
    request = np.repeat(sampled["request"].to_numpy(), per)
    index = frame["block_index"].to_numpy()
    keep = (index >= first) & (index < end)
    return pl.DataFrame({"request": request[keep].astype(np.uint32),
                         "block_key": frame["block_key"].to_numpy()[keep]})


def _scanned_frame(raw: bytes) -> pl.DataFrame | None:
    """The compiled fast path (``token_scan``) as the frame polars would give, or None."""
    scanned = scan_piece(raw)
    if scanned is None:
        return None
    offsets = np.concatenate(([0], np.cumsum(scanned.lengths)))
    tokens = pl.Series("tokens", pa.LargeListArray.from_arrays(pa.array(offsets),
                                                                pa.array(scanned.tokens)))
    return pl.DataFrame({"timestamp": scanned.timestamps, "tokens": tokens,
                         "max_tokens": pl.Series([None] * len(scanned.lines), dtype=pl.Int64),
                         "output_token_ids": pl.Series([None] * len(scanned.lines),
                                                       dtype=pl.List(pl.Int64)),
                         "line": scanned.lines})


def read_tokens(path: str | Path, block_size: int, skip_bad_lines: bool = False) -> Workload:
    """Read a token-id JSONL trace into a ``Workload`` with chained ``block_size`` blocks.

    Raises ``TraceError`` (``file:line: reason``) on the first bad line unless
    ``skip_bad_lines``, which drops bad lines and lists them in ``Workload.skipped``. The file
    is read piece by piece (``pipeline.workloads.jsonl.checked_pieces``): memory holds one
    piece's tokens at a time, then only the blocks. A piece of plainly good lines takes the
    compiled fast path (``pipeline.workloads.token_scan``), any other polars and the checks.
    """
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    skipped: list[tuple[int, str]] = []
    blocks, requests, sampled = [], [], []
    for good in checked_pieces(path, FIELDS + OUTPUT_FIELDS, line_checks() + _output_checks(),
                               skip_bad_lines, skipped, _scanned_frame):
        column = good["tokens"]
        lengths = column.list.len()
        first = sum(frame.height for frame in requests)
        blocks.append(token_blocks(column.explode().to_numpy(), lengths.to_numpy(),
                                   block_size, first))
        sampled.append(sampled_blocks(good, block_size, first))
        requests.append(good.select(
            "line", "timestamp", prompt_tokens=lengths,
            output_tokens=pl.coalesce(pl.col("output_token_ids").list.len(),
                                      pl.col("max_tokens"), pl.lit(1)).cast(pl.Int64),
            given=pl.col("output_token_ids").is_not_null() | pl.col("max_tokens").is_not_null()))
    good = pl.concat(requests)
    refuse_backwards(good, "timestamp", path)
    outputs = good["output_tokens"].to_numpy() if good["given"].any() else None
    output_blocks = pl.concat(sampled) if outputs is not None else None
    request_frame = good.with_row_index("request").select(
        pl.col("request").cast(pl.UInt32), pass_name=pl.lit(None, pl.String),
        doc=pl.lit(None, pl.Int64), prompt_tokens=pl.col("prompt_tokens").cast(pl.UInt64),
        timestamp_ms=pl.col("timestamp"))
    return Workload(pl.concat(blocks), request_frame.match_to_schema(REQUEST_SCHEMA),
                    block_size, good["line"].to_numpy(), skipped, str(path),
                    output_tokens=outputs, output_blocks=output_blocks)
