"""Size limits of the block commands (``blocks``, ``trace``): what they refuse up front.

* A capacity must fit an int64 (``MAX_CAPACITY``): the engines and the Parquet columns are
  int64. A larger one is a one-line error naming the argument.
* A run may hold at most ``MAX_BLOCKS`` block accesses (prompt blocks, plus the blocks the
  ``vllm`` model adds for output tokens): 10x the 10M-block benchmark trace of ``pipeline.bench.trace``.
  Beyond it the arrays alone need tens of GiB, so the commands say so instead of swapping,
  hanging or dying on a MemoryError.
* A block holds at most ``MAX_BLOCK_SIZE`` tokens (``block_tokens`` is a UInt32 column).
* ``model_capacities`` clips a capacity to ``CLIP_FACTOR`` times what a run can ever store.
  Past that size no registered model evicts or refuses anything (ideal, vllm, lmcache, their
  replays, and the policies: S3-FIFO's small queue, the smallest share of a tier, is 10 %
  of it), so every larger capacity gives the same answer (hypothesis-tested for every
  registered model in tests/test_trace_models.py); the clip only keeps the literal replays,
  which allocate the whole pool, from building a pool of 2**59 blocks.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pipeline.blocks.stream import BlockStream, output_lengths
from pipeline.errors import CLIError
from pipeline.limits import check_count

__all__ = ["MAX_BLOCKS", "MAX_CAPACITY", "MAX_BLOCK_SIZE", "CLIP_FACTOR", "check_capacities",
           "check_block_count", "check_block_size", "check_document_blocks", "output_blocks",
           "storable_tokens", "model_capacities"]

MAX_BLOCKS = 100_000_000
MAX_CAPACITY = int(np.iinfo(np.int64).max)
MAX_BLOCK_SIZE = int(np.iinfo(np.uint32).max)
#: A clipped capacity holds this many times everything a run stores (>= 10: S3-FIFO).
CLIP_FACTOR = 16


def check_block_size(block_size: int | None) -> None:
    """CLIError unless ``--block-size`` (None: the default) is at most ``MAX_BLOCK_SIZE``."""
    if block_size is not None and block_size > MAX_BLOCK_SIZE:
        raise CLIError(f"--block-size {block_size}: at most {MAX_BLOCK_SIZE} tokens")


def check_capacities(argument: str, capacities: int | Iterable[int] | None) -> None:
    """CLIError naming ``argument`` unless every capacity is an integer in 0..MAX_CAPACITY."""
    if capacities is None:
        return
    values = [capacities] if isinstance(capacities, int) else list(capacities)
    for value in values:
        if not 0 <= value <= MAX_CAPACITY:
            raise CLIError(f"{argument} {value}: capacities must be 0 .. {MAX_CAPACITY} tokens")


def check_block_count(blocks: int, what: str) -> None:
    """CLIError unless ``blocks`` (block accesses of a run; ``what`` names the arguments
    that set it) is at most ``MAX_BLOCKS``."""
    check_count(blocks, MAX_BLOCKS, what, "block accesses")


def check_document_blocks(docs: int, passes: int, tokens: int, block_size: int
                          ) -> tuple[int, int]:
    """(requests, block accesses) of ``docs`` documents of ``tokens`` read in ``passes``
    passes in ``block_size``-token blocks; CLIError naming --docs, --passes, --tokens and
    --block-size when the run would hold more than ``MAX_BLOCKS`` (checked before anything
    is built)."""
    requests, per_document = docs * passes, -(-tokens // block_size)
    blocks = requests * per_document
    check_block_count(max(requests, per_document, blocks),
                      f"--docs {docs} x {passes} --passes x --tokens {tokens} / --block-size "
                      f"{block_size}")
    return requests, blocks


def output_blocks(requests: int, output_tokens: object, block_size: int) -> int:
    """Blocks the vllm model adds for output tokens: at most ceil(output / block) + 1 each
    (``output_tokens`` one number, or one per request)."""
    outputs = np.asarray(output_tokens, dtype=np.int64)
    if outputs.ndim == 0:
        return requests * (-(-int(outputs) // block_size) + 1)
    return int(np.sum(-(-outputs // block_size) + 1))


def storable_tokens(stream: BlockStream, output_tokens: object = 1) -> int:
    """A capacity (tokens) at which no model evicts in a run of ``stream``: ``CLIP_FACTOR``
    times every block access (prompt and output blocks) plus vLLM's null block and a spare
    (``output_tokens`` as the vllm model takes it: a number, one per request, ``"trace"``)."""
    outputs = output_lengths(stream, output_tokens) if isinstance(output_tokens, str) \
        else output_tokens
    blocks = stream.blocks + output_blocks(stream.requests, outputs, stream.block_size)
    return CLIP_FACTOR * (blocks + 2) * stream.block_size


def model_capacities(stream: BlockStream, capacities: Iterable[int],
                     output_tokens: object = 1) -> list[int]:
    """``capacities`` with each clipped to ``storable_tokens`` (same answer, bounded work)."""
    top = storable_tokens(stream, output_tokens)
    return [min(int(c), top) for c in capacities]
