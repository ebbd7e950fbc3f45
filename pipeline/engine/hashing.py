"""Chained block keys of a token sequence, vectorized (numpy; for many requests the trace
readers' compiled ``chain_block_keys``): equal prefixes, equal keys.

The same scheme as ``pipeline.workloads.tokens.token_blocks`` (each token hashed with its
position by splitmix64, a block's hash the wrapping sum of its tokens', a block's key the
mix of the running sum up to it), so a block of output tokens and the same tokens re-sent
in a later prompt get one key, as vLLM's chained block hashes do. Keys are Python ints.
"""

from __future__ import annotations

import numpy as np

from pipeline.workloads.tokens import chain_block_keys, splitmix64

__all__ = ["block_keys", "request_keys"]

_FRESH = np.uint64(0xD1B54A32D192ED03)


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


def request_keys(request, block_size: int) -> list[int]:
    """Keys of every full block of the request's sequence (prompt + all its outputs)."""
    from pipeline.engine.request import sequence_tokens
    if request.prompt_keys is None:
        return block_keys(sequence_tokens(request), block_size)
    prompt = len(request.prompt_token_ids)
    full = (prompt + request.max_tokens) // block_size
    own = np.arange(full - prompt // block_size, dtype=np.uint64)
    with np.errstate(over="ignore"):                # blocks holding placeholders: fresh
        fresh = splitmix64(_FRESH ^ (np.uint64(request.index) << np.uint64(24)) ^ own)
    keys = request.prompt_keys[:prompt // block_size]
    keys = keys.tolist() if isinstance(keys, np.ndarray) else [int(k) for k in keys]
    return keys + fresh.tolist()


def bulk_request_keys(requests, block_size: int) -> list[list[int]]:
    """``request_keys`` of the token-id requests in one compiled pass (None for requests
    with ``prompt_keys``: ``request_keys`` is cheap for them, when they are added)."""
    from pipeline.engine.request import sequence_tokens
    out: list[list[int] | None] = [None] * len(requests)
    plain = [i for i, r in enumerate(requests) if r.prompt_keys is None]
    if not plain:
        return out
    sequences = [sequence_tokens(requests[i]) for i in plain]
    full = np.array([s.size // block_size for s in sequences], dtype=np.int64)
    # full blocks only: each sequence cut at its last full block, then the trace readers' keys
    body = np.concatenate([s[:n * block_size] for s, n in zip(sequences, full.tolist())])
    keys = np.empty(int(full.sum()), dtype=np.uint64)
    chain_block_keys(body.astype(np.int64), full * block_size, block_size, keys,
                     np.empty(keys.size, dtype=np.int64))
    keys = keys.tolist()
    first = np.concatenate(([0], np.cumsum(full)[:-1]))
    for i, a, n in zip(plain, first.tolist(), full.tolist()):
        out[i] = keys[a:a + n]
    return out


def flat_request_keys(requests, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``request_keys`` of every request at once: (keys as one uint64 array in request
    order, the count per request)."""
    from pipeline.engine.request import sequence_tokens
    n = len(requests)
    counts = np.zeros(n, np.int64)
    parts: list[np.ndarray | None] = [None] * n
    plain = [i for i, r in enumerate(requests) if r.prompt_keys is None]
    if plain:
        sequences = [sequence_tokens(requests[i]) for i in plain]
        full = np.array([s.size // block_size for s in sequences], dtype=np.int64)
        body = np.concatenate([s[:m * block_size] for s, m in zip(sequences, full.tolist())])
        keys = np.empty(int(full.sum()), dtype=np.uint64)
        chain_block_keys(body.astype(np.int64), full * block_size, block_size, keys,
                         np.empty(keys.size, dtype=np.int64))
        first = np.cumsum(full) - full
        for i, a, m in zip(plain, first.tolist(), full.tolist()):
            parts[i] = keys[a:a + m]
    keyed = [i for i, r in enumerate(requests) if r.prompt_keys is not None]
    if keyed:                                        # prompt keys + fresh output blocks
        prompt = np.fromiter((len(requests[i].prompt_token_ids) for i in keyed), np.int64)
        max_tokens = np.fromiter((requests[i].max_tokens for i in keyed), np.int64)
        index = np.fromiter((requests[i].index for i in keyed), np.int64)
        own_blocks = prompt // block_size
        fresh = (prompt + max_tokens) // block_size - own_blocks
        j = np.arange(int(fresh.sum()), dtype=np.int64) - np.repeat(np.cumsum(fresh) - fresh,
                                                                    fresh)
        with np.errstate(over="ignore"):
            mixed = splitmix64(_FRESH ^ (np.repeat(index, fresh).astype(np.uint64)
                                         << np.uint64(24)) ^ j.astype(np.uint64))
        at = np.cumsum(fresh) - fresh
        for t, i in enumerate(keyed):
            own = np.asarray(requests[i].prompt_keys[:own_blocks[t]]).astype(np.uint64)
            parts[i] = np.concatenate((own, mixed[at[t]:at[t] + fresh[t]]))
    for i, part in enumerate(parts):
        counts[i] = part.size
    keys = np.concatenate(parts) if n else np.zeros(0, np.uint64)
    return keys.astype(np.uint64, copy=False), counts
