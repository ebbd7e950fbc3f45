"""The block stream: the one derived form of a ``Workload`` in blocks, the arrays the
block-mode models read.

``Workload.block_stream()`` builds it, through ``block_stream(blocks, block_size)`` (the
workload's item frame, ``pipeline.workloads.blocks.BLOCK_SCHEMA``, and its block size; tests
and benchmarks pass a bare frame), which validates the frame once and returns a
``BlockStream``: per request its block range, its *cacheable* blocks (the leading run of full
blocks: a block of exactly ``block_size`` tokens; a partial block and everything after it is
never cached) and its prompt tokens; per block a dense key code. It is derived, not a second
workload type: it holds no pass names, documents or timestamps (those stay in the
workload's request frame).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.workloads.stream_kernels import REPEATED, UNORDERED, dense_codes, request_runs
from pipeline.workloads.blocks import UNORDERED_MESSAGE, check_schema

__all__ = ["ORDERS", "TAIL_FIRST", "HEAD_FIRST", "TRACE", "RequestOutputs", "BlockStream",
           "block_stream", "capacity_blocks", "check_order", "output_lengths"]

TAIL_FIRST, HEAD_FIRST = "tail-first", "head-first"
#: How a tier orders a request's blocks among themselves when it makes them most recent.
#: tail-first: the head becomes the most recent, the tail goes first (vLLM's free queue).
#: head-first: the tail becomes the most recent, the head goes first (LMCache's LRU).
ORDERS = (TAIL_FIRST, HEAD_FIRST)


def check_order(order: str) -> str:
    """Return ``order`` if it is one of ``ORDERS``, else raise ValueError."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: expected one of {', '.join(ORDERS)}")
    return order


@dataclass(frozen=True)
class RequestOutputs:
    """What a trace says each request generates: ``lengths`` (R) its output tokens (a value
    < 1 counts as 1), and where the trace gives the sampled ids, ``codes[starts[r]:starts[r + 1]]``
    the key codes of request r's blocks of prompt + output beyond its full prompt blocks
    (a prompt holding the same prefix has the same code; other codes are >= the stream's
    ``n_codes``); ``n_codes`` is the stream's codes plus these."""

    lengths: np.ndarray
    codes: np.ndarray
    starts: np.ndarray
    n_codes: int


@dataclass(frozen=True)
class BlockStream:
    """A workload's validated block-level request stream (R requests, N blocks).

    ``starts`` (R + 1): request r's blocks are ``starts[r]:starts[r + 1]``;
    ``cacheable`` (R): its leading full blocks; ``prompt_tokens`` (R); ``request`` (R): the
    frame's request numbers; ``codes`` (N): dense block-key codes 0..n_codes-1;
    ``block_index`` (N): the frame's block_index; ``outputs``: the trace's per-request
    output lengths (and sampled blocks), None when the workload gives none.
    """

    block_size: int
    request: np.ndarray
    starts: np.ndarray
    cacheable: np.ndarray
    prompt_tokens: np.ndarray
    codes: np.ndarray
    block_index: np.ndarray
    n_codes: int
    outputs: RequestOutputs | None = None

    @property
    def requests(self) -> int:
        return int(self.request.size)

    @property
    def blocks(self) -> int:
        return int(self.codes.size)

    def cacheable_mask(self) -> np.ndarray:
        """Per block: True for the cacheable blocks (each request's leading full blocks)."""
        lengths = np.diff(self.starts)
        return self.block_index < np.repeat(self.cacheable, lengths)


#: ``output_tokens="trace"``: each request's own output length from the trace.
TRACE = "trace"


def output_lengths(stream: BlockStream, output_tokens: object = 1) -> np.ndarray:
    """Each request's output tokens (int64, R): ``output_tokens`` (one number, or one per
    request) broadcast, or with ``"trace"`` the stream's own lengths (1 where none)."""
    if isinstance(output_tokens, str) and output_tokens == TRACE:
        if stream.outputs is None:
            return np.ones(stream.requests, np.int64)
        return np.maximum(stream.outputs.lengths.astype(np.int64), 1)
    return np.broadcast_to(np.asarray(output_tokens, dtype=np.int64),
                           (stream.requests,)).astype(np.int64)


def capacity_blocks(capacity_tokens: object, block_size: int) -> np.ndarray:
    """Token capacities as whole blocks: a tier of C tokens holds C // block_size blocks."""
    tokens = np.atleast_1d(np.asarray(capacity_tokens))
    if tokens.size and (tokens.dtype.kind not in "iu" or tokens.min() < 0):
        raise ValueError(f"capacities must be integers >= 0, got {tokens.tolist()}")
    return tokens.astype(np.int64) // block_size


def block_stream(blocks: pl.DataFrame, block_size: int) -> BlockStream:
    """Validate a block frame and turn it into a ``BlockStream``.

    Raises ValueError on a block size < 1, a frame that fails ``check_blocks``, or a block
    key repeated inside one request (chained keys are distinct along a prefix).
    """
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) \
            or block_size < 1:
        raise ValueError(f"block size must be an integer >= 1, got {block_size!r}")
    check_schema(blocks)
    codes, n_codes = dense_codes(blocks["block_key"].to_numpy())
    rows = blocks.height
    starts, tokens, cacheable, numbers = (np.empty(rows + 1, np.int64) for _ in range(4))
    runs, status, repeated = request_runs(
        blocks["request"].to_numpy(), blocks["block_index"].to_numpy(),
        blocks["block_tokens"].to_numpy(), int(block_size), codes, n_codes, starts, tokens,
        cacheable, numbers)
    if status == UNORDERED:
        raise ValueError(UNORDERED_MESSAGE)
    if status == REPEATED:
        raise ValueError(f"request {numbers[repeated]} repeats a block key: chained keys are "
                         "distinct along a prefix")
    return BlockStream(
        block_size=int(block_size), request=numbers[:runs].copy(),
        starts=starts[:runs + 1].copy(), cacheable=cacheable[:runs].copy(),
        prompt_tokens=tokens[:runs].copy(), codes=codes,
        block_index=blocks["block_index"].cast(pl.Int64).to_numpy(), n_codes=n_codes)
