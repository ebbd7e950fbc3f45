"""Chained block keys of a token sequence, vectorized (numpy): equal prefixes, equal keys.

The same scheme as ``pipeline.workloads.tokens.token_blocks`` (each token hashed with its
position by splitmix64, a block's hash the wrapping sum of its tokens', a block's key the
mix of the running sum up to it), so a block of output tokens and the same tokens re-sent
in a later prompt get one key, as vLLM's chained block hashes do. Keys are Python ints.
"""

from __future__ import annotations

import numpy as np

from pipeline.workloads.tokens import splitmix64

__all__ = ["block_keys"]


def block_keys(tokens: np.ndarray, block_size: int) -> list[int]:
    """Keys of the full ``block_size`` blocks of ``tokens`` (the partial tail has none)."""
    full = tokens.size // block_size
    if full == 0:
        return []
    body = tokens[:full * block_size].astype(np.int64)
    position = np.arange(body.size, dtype=np.int64)
    with np.errstate(over="ignore"):
        token_hash = splitmix64(body.view(np.uint64) ^ splitmix64(position.view(np.uint64)))
        running = np.cumsum(token_hash.reshape(full, block_size).sum(axis=1, dtype=np.uint64),
                            dtype=np.uint64)
        return splitmix64(running).tolist()
