"""What each request of a block stream holds and caches under vLLM, as flat arrays: the input
of the pool (``vllm_gpu``) and of the one-pass depths (``vllm_fast``).

A request computes ``prompt + output - 1`` tokens (the last sampled token is never fed
back) and holds ``ceil(computed / block_size)`` slots; its full blocks are hashed: the
leading full prompt blocks with their stream codes, then blocks holding output tokens with
the trace's sampled block codes (``output_token_ids`` with ``"trace"``: a next turn that
re-sends the reply hits them) or fresh codes no prompt matches. Its lookup reads at most
``num_tokens - 1`` tokens (``get_computed_blocks``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import TRACE, BlockStream, output_lengths

__all__ = ["OutputTokens", "VllmLayout", "vllm_layout", "given_output_codes"]

OutputTokens = int | np.ndarray | str


def given_output_codes(stream: BlockStream, output_tokens: OutputTokens = 1
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(codes, starts) of the sampled blocks the trace hashes (``RequestOutputs``), used
    with ``"trace"`` only; None when there are none (every output block gets a fresh key)."""
    outputs = stream.outputs
    if not (isinstance(output_tokens, str) and output_tokens == TRACE) or outputs is None \
            or outputs.codes.size == 0:
        return None
    return outputs.codes.astype(np.int64), outputs.starts.astype(np.int64)


class VllmLayout:
    """Flat arrays of what each request caches: ``keys[key_starts[r]:key_starts[r+1]]`` its
    hashed keys (``prompt_keys[r]`` leading prompt keys, then output keys), ``lookup`` its
    hittable leading blocks, ``slots`` the blocks it holds, ``n_codes`` key codes used;
    ``repeated``: some output key (a sampled block of the trace) was a key of an earlier
    block, so it may be cached when its request runs (not fresh)."""

    def __init__(self, keys, key_starts, prompt_keys, lookup, slots, n_codes, repeated=False):
        self.keys, self.key_starts, self.prompt_keys = keys, key_starts, prompt_keys
        self.lookup, self.slots, self.n_codes = lookup, slots, n_codes
        self.repeated = repeated


@njit(cache=True)
def _fill_keys(codes, starts, prompt_keys, hashed, key_starts, first_fresh, sampled,
               sampled_starts, seen, keys):
    """Fill ``keys``; return the codes used and whether a sampled output key was seen
    before (``seen``: a flag per code below ``first_fresh``)."""
    fresh = first_fresh
    repeated = False
    for r in range(starts.size - 1):
        out = key_starts[r]
        for j in range(prompt_keys[r]):
            keys[out + j] = codes[starts[r] + j]
            seen[keys[out + j]] = True
        given = sampled_starts[r + 1] - sampled_starts[r]
        for j in range(prompt_keys[r], hashed[r]):
            if j - prompt_keys[r] < given:
                keys[out + j] = sampled[sampled_starts[r] + j - prompt_keys[r]]
                repeated |= seen[keys[out + j]]
                seen[keys[out + j]] = True
            else:
                keys[out + j] = fresh
                fresh += 1
    return fresh, repeated


def vllm_layout(stream: BlockStream, output_tokens: OutputTokens = 1) -> VllmLayout:
    """Per request of ``stream``: the keys it caches, the blocks it may hit and the slots it
    holds (``output_tokens`` one number, one per request, or ``"trace"``)."""
    size = stream.block_size
    prompt = stream.prompt_tokens.astype(np.int64)
    computed = prompt + output_lengths(stream, output_tokens) - 1
    hashed = computed // size
    prompt_keys = np.minimum(stream.cacheable, hashed).astype(np.int64)
    key_starts = np.concatenate(([0], np.cumsum(hashed))).astype(np.int64)
    keys = np.zeros(int(key_starts[-1]), np.int64)
    given = given_output_codes(stream, output_tokens)
    sampled, sampled_starts = given if given else (np.zeros(0, np.int64),
                                                   np.zeros(stream.requests + 1, np.int64))
    first_fresh = stream.outputs.n_codes if given else stream.n_codes
    n_codes, repeated = _fill_keys(stream.codes.astype(np.int64),
                                   stream.starts.astype(np.int64), prompt_keys, hashed,
                                   key_starts, first_fresh, sampled, sampled_starts,
                                   np.zeros(max(first_fresh, stream.n_codes), np.bool_), keys)
    lookup = np.minimum(stream.cacheable, np.maximum(prompt - 1, 0) // size).astype(np.int64)
    return VllmLayout(keys, key_starts, prompt_keys, lookup, -(-computed // size), n_codes,
                      bool(repeated))
