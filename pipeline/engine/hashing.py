"""Chained block keys of a token sequence, vectorized (numpy; for many requests the trace
readers' token hash, compiled): equal prefixes, equal keys.

The same scheme as ``pipeline.workloads.tokens.token_blocks`` (each token hashed with its
position by splitmix64, a block's hash the wrapping sum of its tokens', a block's key the
mix of the running sum up to it), so a block of output tokens and the same tokens re-sent
in a later prompt get one key, as vLLM's chained block hashes do. Keys are Python ints.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from pipeline.engine.request import _PLACEHOLDER_STRIDE
from pipeline.workloads.tokens import mix, splitmix64

__all__ = ["block_keys", "request_keys", "bulk_request_keys", "flat_request_keys"]

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
    """``request_keys`` of every request, as lists (``flat_request_keys`` split)."""
    keys, counts = flat_request_keys(requests, block_size)
    keys = keys.tolist()
    first = (np.cumsum(counts) - counts).tolist()
    return [keys[a:a + n] for a, n in zip(first, counts.tolist())]


@njit(cache=True, nogil=True)
def _sequence_keys(prompts, prompt_at, prompt_len, outputs, output_at, output_len, index,
                   max_tokens, block_size, keys, key_at):
    """``chain_block_keys`` over each request's prompt + outputs (given ones, then the
    placeholders), without building the sequences: only its full blocks."""
    for r in range(index.size):
        n = prompt_len[r] + max_tokens[r]
        running = np.uint64(0)
        k = key_at[r]
        for start in range(0, n - block_size + 1, block_size):
            total = np.uint64(0)
            for p in range(start, start + block_size):
                j = p - prompt_len[r]
                if j < 0:
                    token = prompts[prompt_at[r] + p]
                elif j < output_len[r]:
                    token = outputs[output_at[r] + j]
                else:
                    token = -1 - index[r] * _PLACEHOLDER_STRIDE - j
                total += mix(np.uint64(token) ^ mix(np.uint64(p)))
            running += total
            keys[k] = mix(running)
            k += 1


@njit(cache=True, nogil=True)
def _place_keys(given, own, counts, at, index, keys):
    """Each keyed request's keys: its ``own`` given prompt keys, then fresh keys for the
    blocks that will hold its outputs (``request_keys``'s ``_FRESH`` scheme)."""
    g = 0
    for r in range(own.size):
        for j in range(counts[r]):
            if j < own[r]:
                keys[at[r] + j] = given[g]
                g += 1
            else:
                keys[at[r] + j] = mix(_FRESH ^ (index[r] << np.uint64(24))
                                       ^ np.uint64(j - own[r]))


def _int64s(parts: list) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.int64) for x in parts]) if parts \
        else np.zeros(0, np.int64)


def flat_request_keys(requests, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``request_keys`` of every request at once: (keys as one uint64 array in request
    order, the count per request)."""
    n = len(requests)
    prompt = np.fromiter((len(r.prompt_token_ids) for r in requests), np.int64, n)
    max_tokens = np.fromiter((r.max_tokens for r in requests), np.int64, n)
    index = np.fromiter((r.index for r in requests), np.int64, n)
    keyed = np.fromiter((r.prompt_keys is not None for r in requests), bool, n)
    counts = (prompt + max_tokens) // block_size
    own = np.where(keyed, prompt // block_size, 0)
    if keyed.any():                                  # prompt keys as given (a trace's)
        own = np.minimum(own, [len(r.prompt_keys) if k else 0
                               for r, k in zip(requests, keyed.tolist())])
        counts = np.where(keyed, (prompt + max_tokens) // block_size - prompt // block_size
                          + own, counts)
    keys = np.zeros(int(counts.sum()), np.uint64)
    at = np.cumsum(counts) - counts
    plain = np.flatnonzero(~keyed)
    if plain.size:
        reqs = [requests[i] for i in plain.tolist()]
        outs = [r.output_token_ids[:r.max_tokens] if r.output_token_ids is not None else ()
                for r in reqs]
        out_len = np.fromiter((len(o) for o in outs), np.int64, len(outs))
        p_len = prompt[plain]
        _sequence_keys(_int64s([r.prompt_token_ids for r in reqs]), np.cumsum(p_len) - p_len,
                       p_len, _int64s(outs), np.cumsum(out_len) - out_len, out_len,
                       index[plain], max_tokens[plain], block_size, keys, at[plain])
    if keyed.any():
        rows = np.flatnonzero(keyed)
        given = np.concatenate([np.asarray(requests[i].prompt_keys[:m]).astype(np.uint64)
                                for i, m in zip(rows.tolist(), own[rows].tolist())])
        _place_keys(given, own[rows], counts[rows], at[rows], index[rows].astype(np.uint64),
                    keys)
    return keys, counts
