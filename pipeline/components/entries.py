"""The engine components' registry entries (``pipeline.cache.registry``'s interface; collected
by ``pipeline.catalog``): vLLM's block pool replayed per capacity (``vllm-replay``), LMCache's
CPU backend (``lmcache``), the block-lru model replayed by the ``LRU`` class
(``block-lru-replay``), and the measured configs' models (``llamacpp``: llama.cpp's
prompt cache; ``two-tier``: kvlab's TwoTierCache); the options vllm and lmcache declare."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from pipeline.base.arguments import checked, positive_int
from pipeline.cache.registry import CacheModel, Option
from pipeline.components import lmcache, sglang_gpu, vllm_gpu
from pipeline.components.lmcache import DEFAULT_CHUNK_SIZE
from pipeline.components.vllm_gpu import DEFAULT_VLLM_VERSION, PREPEND_SINCE, unhashed_to_head
from pipeline.policies.blockmode import policy_cpu_model, policy_gpu_model
from pipeline.policies.simple import LRU
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, TRACE

__all__ = ["vllm_version", "output_tokens", "VLLM_OPTIONS", "LMCACHE_OPTIONS",
           "describe_vllm", "BLOCK_LRU_REPLAY", "VLLM_REPLAY", "LMCACHE",
           "LLAMACPP", "TWO_TIER", "SGLANG_RADIX"]

#: argparse type: a vLLM version such as 0.33.0
vllm_version = checked(unhashed_to_head)


def _default_chunk_size(block_size: int | None) -> int:
    """LMCache's chunk size (256) on the block grid: the smallest multiple of ``block_size``
    that is at least 256 (256 itself for 16-token blocks, 512 for a Mooncake trace's 512)."""
    if not block_size:
        return DEFAULT_CHUNK_SIZE
    return -(-DEFAULT_CHUNK_SIZE // block_size) * block_size


def _chunk_on_grid(chunk: object, block_size: int | None) -> str | None:
    if chunk is not None and block_size and chunk % block_size:
        return (f"--chunk-size {chunk}: must be a multiple of the block size {block_size} "
                f"(--block-size)")
    return None


def output_tokens(text: str) -> int | str:
    """argparse type of ``--output-tokens``: an integer >= 1, or ``trace``."""
    if text == TRACE:
        return TRACE
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or {TRACE!r}, "
                                         f"got {text!r}") from None


_SINCE = ".".join(map(str, PREPEND_SINCE))
VLLM_OPTIONS = (
    Option("output_tokens", "vllm model: tokens generated per request (max_tokens): N for "
           "every request, or 'trace': each request's own (Mooncake output_length, token "
           "JSONL max_tokens or output_token_ids; 1 where none) (default: trace when the "
           "input gives lengths, else 1)",
           output_tokens, 1),
    Option("vllm_version", f"vllm model: free-queue placement of unhashed blocks, head since "
           f"{_SINCE}, tail before (default {DEFAULT_VLLM_VERSION})", vllm_version,
           DEFAULT_VLLM_VERSION),
)
LMCACHE_OPTIONS = (
    Option("chunk_size", f"lmcache model: chunk_size in tokens, a multiple of the block size "
           f"(default the smallest multiple >= {DEFAULT_CHUNK_SIZE}: {DEFAULT_CHUNK_SIZE} for "
           f"16-token blocks, 512 for 512)", positive_int, _default_chunk_size,
           check=_chunk_on_grid),
    Option("save_unfull_chunk", "lmcache model: store a prompt's partial last chunk (default "
           "off, as LMCache >= 0.4)", default=False, boolean=True),
)


def _lmcache_tier(capacity: int, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  save_unfull_chunk: bool = False):
    """LMCache's CPU backend over chunk keys (full chunks: ``save_unfull_chunk`` is the
    block-mode model's)."""
    return lmcache.LMCacheTier(capacity, chunk_size, chunk_size)


def _llamacpp_tier(capacity: int | None, state_size=None):
    """llama.cpp's live context and RAM prompt cache of ``capacity`` bytes (None: no RAM
    cache); it serves ``request(prompt, completion)`` (token sequences, not keys)."""
    from pipeline.components.llamacpp_cache import LlamaCppPromptCache
    return LlamaCppPromptCache(capacity, state_size)


def _two_tier_cache(gpu: int, cpu: int = 0):
    from kvlab.kvsim import TwoTierCache
    return TwoTierCache(gpu, cpu)


def describe_vllm(options: Mapping) -> str:
    return f"vLLM {options.get('vllm_version', DEFAULT_VLLM_VERSION)} block pool"


def _describe_lmcache(options: Mapping) -> str:
    return "LMCache LocalCPUBackend"


BLOCK_LRU_REPLAY = CacheModel(
    "block-lru-replay", "block-lru replayed literally (reference)", "block", tier=LRU,
    gpu=policy_gpu_model("block-lru-replay", LRU), cpu=policy_cpu_model("block-lru-replay", LRU))
VLLM_REPLAY = CacheModel(
    "vllm-replay", "vLLM's v1 block allocator replayed literally", "block", tier=vllm_gpu.VllmTier,
    gpu=vllm_gpu.replay_gpu, order=TAIL_FIRST, options=VLLM_OPTIONS, describes=describe_vllm)
LMCACHE = CacheModel(
    "lmcache", "LMCache's local CPU backend (compiled)", "chunk", tier=_lmcache_tier,
    cpu=lmcache.lmcache_cpu, order=HEAD_FIRST, options=LMCACHE_OPTIONS,
    describes=_describe_lmcache)
SGLANG_RADIX_OPTIONS = (
    Option("radix_page_size", "sglang-radix model: SGLang's page_size in tokens, dividing "
           "the block size (default 1)", positive_int, 1,
           check=lambda page, block_size: sglang_gpu.check_page_size(page, block_size)
           if block_size else None),
    VLLM_OPTIONS[0],
)
SGLANG_RADIX = CacheModel(
    "sglang-radix", "SGLang 0.5.23's RadixCache (LRU), one request at a time, replayed",
    "token", gpu=sglang_gpu.radix_gpu, options=SGLANG_RADIX_OPTIONS,
    describes=lambda options: f"SGLang 0.5.23 RadixCache, page size "
                              f"{options.get('radix_page_size', 1)}")
LLAMACPP = CacheModel("llamacpp", "llama.cpp's prompt cache (live context + RAM cache)",
                      "context", tier=_llamacpp_tier, measured=True)
TWO_TIER = CacheModel("two-tier", "kvlab's TwoTierCache in tokens", "object",
                      tier=_two_tier_cache, measured=True)
