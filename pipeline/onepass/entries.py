"""The one-pass engines' registry entries (``pipeline.cache.registry``'s interface; collected
by ``pipeline.catalog``): ``block-lru`` (every capacity of block LRU in one pass), ``vllm``
(vLLM's block pool by block depths), and the one-pass fast paths of the policies LRU, MRU
and OPT (``FAST_PATHS``, added to their entries by ``with_fast_paths``)."""

from __future__ import annotations

from dataclasses import replace

from pipeline.cache.registry import CacheModel
from pipeline.components.entries import VLLM_OPTIONS, describe_vllm
from pipeline.components.vllm_gpu import VllmTier
from pipeline.onepass import vllm_fast
from pipeline.onepass.lru_depths import block_lru_gpu, block_lru_cpu
from pipeline.onepass.stack_passes import LRU_PASS, MRU_PASS, OPT_PASS
from pipeline.policies.simple import LRU
from pipeline.workloads.stream import TAIL_FIRST

__all__ = ["BLOCK_LRU", "VLLM", "FAST_PATHS", "with_fast_paths"]

BLOCK_LRU = CacheModel(
    "block-lru", "one-pass block LRU, CPU tier fed past the GPU hit: no engine's rules, not a "
    "bound", "block", tier=LRU, gpu=block_lru_gpu, cpu=block_lru_cpu)
VLLM = CacheModel("vllm", "vLLM's v1 block allocator (one pass)", "block", tier=VllmTier,
                  gpu=vllm_fast.vllm_gpu, order=TAIL_FIRST, options=VLLM_OPTIONS,
                  describes=describe_vllm)
#: policy name -> the entry fields its one-pass engines fill (lru in block mode is the
#: one-pass block-lru engine, proven equal to its class replay)
FAST_PATHS: dict[str, dict[str, object]] = {
    "lru": {"onepass": LRU_PASS, "gpu": block_lru_gpu, "cpu": block_lru_cpu},
    "mru": {"onepass": MRU_PASS},
    "opt": {"onepass": OPT_PASS},
}


def with_fast_paths(model: CacheModel) -> CacheModel:
    """``model`` with the one-pass fast paths declared for its name (itself when none)."""
    return replace(model, **FAST_PATHS.get(model.name, {}))
