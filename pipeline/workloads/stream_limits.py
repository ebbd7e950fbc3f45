"""The limits of the block commands (``blocks``, ``trace``) that depend on a block stream;
the limits themselves and their plain checks are ``pipeline.sizes.limits``.

* ``check_document_blocks``: the block accesses of the lab's documents read in blocks stay
  within ``MAX_BLOCKS``.
* ``model_capacities`` clips a capacity to ``CLIP_FACTOR`` times what a run can ever store.
  Past that size no registered model evicts or refuses anything (block-lru, vllm, lmcache, their
  replays, and the policies: S3-FIFO's small queue, the smallest share of a tier, is 10 %
  of it), so every larger capacity gives the same answer (hypothesis-tested for every
  registered model in tests/test_trace_models.py); the clip only keeps the literal replays,
  which allocate the whole pool, from building a pool of 2**59 blocks.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pipeline.workloads.stream import BlockStream, output_lengths
from pipeline.sizes.limits import check_block_count

__all__ = ["CLIP_FACTOR", "check_document_blocks", "output_blocks", "storable_tokens",
           "model_capacities"]

#: A clipped capacity holds this many times everything a run stores (>= 10: S3-FIFO).
CLIP_FACTOR = 16


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
