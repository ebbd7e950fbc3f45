"""What each request of a block stream holds and caches under vLLM, as flat arrays (the
input of ``vllm_fast`` and ``vllm_compiled``; ``vllm_gpu.vllm_requests`` is the readable
form)."""

from __future__ import annotations

import numpy as np
from numba import njit

from pipeline.workloads.stream import BlockStream
from pipeline.components.vllm_gpu import OutputTokens, given_output_codes, request_outputs

__all__ = ["VllmLayout", "vllm_layout"]


class VllmLayout:
    """Flat arrays of what each request caches: ``keys[key_starts[r]:key_starts[r+1]]`` its
    hashed keys (``prompt_keys[r]`` leading prompt keys, then fresh output keys), ``lookup``
    its hittable leading blocks, ``slots`` the blocks it holds, ``n_codes`` key codes used;
    ``sampled``: some output keys are the trace's sampled blocks (not fresh)."""

    def __init__(self, keys, key_starts, prompt_keys, lookup, slots, n_codes, sampled=False):
        self.keys, self.key_starts, self.prompt_keys = keys, key_starts, prompt_keys
        self.lookup, self.slots, self.n_codes = lookup, slots, n_codes
        self.sampled = sampled


@njit(cache=True)
def _fill_keys(codes, starts, prompt_keys, hashed, key_starts, first_fresh, sampled,
               sampled_starts, keys):
    fresh = first_fresh
    for r in range(starts.size - 1):
        out = key_starts[r]
        for j in range(prompt_keys[r]):
            keys[out + j] = codes[starts[r] + j]
        given = sampled_starts[r + 1] - sampled_starts[r]
        for j in range(prompt_keys[r], hashed[r]):
            if j - prompt_keys[r] < given:
                keys[out + j] = sampled[sampled_starts[r] + j - prompt_keys[r]]
            else:
                keys[out + j] = fresh
                fresh += 1
    return fresh


def vllm_layout(stream: BlockStream, output_tokens: OutputTokens = 1) -> VllmLayout:
    """The arrays of ``vllm_gpu.vllm_requests``, built without a Python loop per request."""
    size = stream.block_size
    prompt = stream.prompt_tokens.astype(np.int64)
    computed = prompt + request_outputs(stream, output_tokens) - 1
    hashed = computed // size
    prompt_keys = np.minimum(stream.cacheable, hashed).astype(np.int64)
    key_starts = np.concatenate(([0], np.cumsum(hashed))).astype(np.int64)
    keys = np.zeros(int(key_starts[-1]), np.int64)
    given = given_output_codes(stream, output_tokens)
    sampled, sampled_starts = given if given else (np.zeros(0, np.int64),
                                                   np.zeros(stream.requests + 1, np.int64))
    first_fresh = stream.outputs.n_codes if given else stream.n_codes
    n_codes = _fill_keys(stream.codes.astype(np.int64), stream.starts.astype(np.int64),
                         prompt_keys, hashed, key_starts, first_fresh, sampled,
                         sampled_starts, keys)
    lookup = np.minimum(stream.cacheable, np.maximum(prompt - 1, 0) // size).astype(np.int64)
    return VllmLayout(keys, key_starts, prompt_keys, lookup, -(-computed // size), n_codes,
                      given is not None)
