"""Document mode with a cache policy per tier: what ``python -m pipeline policies`` runs on
documents (kvlab's two tiers, the CPU fed the GPU's misses), planned.

The GPU policy replays every access once at the one GPU capacity; the CPU policy replays the
GPU's misses at each CPU capacity asked for (``pipeline.catalog.policy_replay``: a compiled kernel
where the entry declares one, else its class). A policy compares capacities only with sums of
the sizes it holds, so its figures change only where the CPU capacity reaches a sum of
distinct items' sizes: those sums are the candidates, and every one is scanned (a policy's
hits need not rise with its capacity). That is exact for the policies that compare their
capacity only with sums of what they hold (LRU, FIFO, MRU, LFU, CLOCK, SIEVE, OPT); S3-FIFO
and ARC derive queue targets from it, so between two candidates their figures can change and
the answer is the smallest candidate that meets the target.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.catalog import models_field, models_line
from pipeline.cache.tiers import CPU_CODE, GPU_CODE, MISS_CODE, access_tiers
from pipeline.plan.search import Evaluator, requests_frame
from pipeline.catalog.policy_replay import encode, policy_hits
from pipeline.ttft.model import TOKEN_COLUMNS, TTFTModel
from pipeline.workloads.workload import Workload

__all__ = ["PolicyDocumentEvaluator", "size_sums"]

#: the largest total of distinct item sizes whose sums are enumerated (tokens)
MAX_SUMS = 10_000_000


def size_sums(sizes: np.ndarray) -> np.ndarray:
    """Every sum > 0 of a subset of ``sizes`` (one size per distinct item), sorted; items of
    one size give its multiples. ValueError when the total exceeds ``MAX_SUMS``."""
    sizes = sizes[sizes > 0].astype(np.int64)
    if sizes.size == 0:
        return np.zeros(0, dtype=np.int64)
    if np.unique(sizes).size == 1:
        return sizes[0] * np.arange(1, sizes.size + 1, dtype=np.int64)
    total = int(sizes.sum())
    if total > MAX_SUMS:
        raise ValueError(f"items of {np.unique(sizes).size} sizes totalling {total:,} tokens: "
                         f"too many CPU capacities to plan a policy exactly")
    reached = np.zeros(total + 1, dtype=bool)
    reached[0] = True
    for size in sizes.tolist():
        reached[size:] |= reached[:-size].copy()
    return np.flatnonzero(reached[1:]) + 1


class PolicyDocumentEvaluator(Evaluator):
    """Document mode (whole items) with policy ``gpu_model`` on the GPU and ``cpu_model`` on
    the CPU (see the module docstring)."""

    hits_monotone = False

    def __init__(self, description: str, workload: Workload, gpu_capacity: int,
                 models: dict[str, TTFTModel], gpu_model: str, cpu_model: str) -> None:
        keys, sizes = workload.items()
        codes = encode(keys) if keys.size else np.zeros(0, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.description, self.gpu_capacity, self.models = description, gpu_capacity, models
        self.requests_frame = requests_frame(workload.requests, self.sizes)
        self.cpu_model, self.evaluations = cpu_model, 0
        self.gpu_hit = (policy_hits(gpu_model, codes, self.sizes, gpu_capacity) if codes.size
                        else np.zeros(0, dtype=bool))
        missed = np.flatnonzero(~self.gpu_hit)
        self.miss_codes, self.miss_sizes = codes[missed], self.sizes[missed]
        positive = self.miss_sizes[self.miss_sizes > 0]
        self.smallest_item = int(positive.min()) if positive.size else 0
        self.cache_models = models_field(gpu_model, cpu_model)
        self.models_line = models_line(gpu_model, cpu_model)

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(every sum of the missed items' sizes: all scanned, nothing bisected)."""
        first = np.unique(self.miss_codes, return_index=True)[1]
        return size_sums(self.miss_sizes[first]), np.zeros(0, dtype=np.int64)

    def requests(self, cpu_capacity: int) -> pl.DataFrame:
        """The workload's requests with TOKEN_COLUMNS at this CPU capacity."""
        cpu_hit = (policy_hits(self.cpu_model, self.miss_codes, self.miss_sizes, cpu_capacity)
                   if self.miss_codes.size else np.zeros(0, dtype=bool))
        tiers = access_tiers(self.gpu_hit, cpu_hit)
        return self.requests_frame.with_columns(
            pl.Series(name, self.sizes * (tiers == code))
            for name, code in zip(TOKEN_COLUMNS, (GPU_CODE, CPU_CODE, MISS_CODE)))
