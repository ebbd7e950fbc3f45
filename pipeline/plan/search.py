"""The smallest CPU tier that meets a TTFT or hit-ratio target, for one GPU capacity.

Every CPU capacity at once: the GPU tier's hits come from one LRU pass over the whole
stream; the CPU tier sees exactly the GPU misses, so one stack-distance pass over that
substream (``pipeline.onepass.stack_distance``) says, for every CPU capacity C >= the largest
item, which accesses it serves (distance <= C). Below the largest item, kvlab's oversize rule
splits capacities into size bands, each with its own exact pass. Figures change only at those
distances (the candidates), so the search visits candidates only:

* above the largest item, a larger C only turns misses into CPU hits, so hit ratios rise
  and, when a CPU-served token costs no more than a recomputed one (checked on the model),
  TTFT falls: the search bisects the candidates (exact under that check, else it scans);
* below it (the oversize bands, where hits are not monotone) it scans every candidate.

``Evaluator`` holds what every mode shares (figures per pass, the monotonicity check);
``DocumentEvaluator`` is document mode (one access per request, ``pipeline.onepass.stack_distance``);
``pipeline.plan.blocks.BlockEvaluator`` is block mode through ``pipeline.blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.onepass.stack_distance import COLD, lru_hits, stack_distances
from pipeline.cache.tiers import CPU_CODE as CPU
from pipeline.cache.tiers import GPU_CODE as GPU
from pipeline.cache.tiers import MISS_CODE as MISS
from pipeline.cache.tiers import access_tiers
from pipeline.ttft.model import TOKEN_COLUMNS, TTFTModel, model_for_capacity
from pipeline.workloads.workload import Workload

__all__ = ["requests_frame", "Target", "Evaluator", "DocumentEvaluator", "PlanResult", "plan"]


def requests_frame(requests: pl.DataFrame, prompt_tokens: np.ndarray) -> pl.DataFrame:
    """request, pass_index, pass_name, context from a workload's request frame
    (``REQUEST_SCHEMA``, requests in stream order) and its prompt tokens per request; a
    request without a pass name is in the pass called ``all``; passes are numbered in order
    of first appearance."""
    frame = (requests.sort("request")
             .select(pl.col("request").cast(pl.Int64), pl.col("pass_name").fill_null("all"))
             .with_columns(context=pl.Series(prompt_tokens, dtype=pl.Int64)))
    order = frame.group_by("pass_name", maintain_order=True).agg().with_row_index("pass_index")
    return frame.join(order, on="pass_name", how="left").select(
        "request", pl.col("pass_index").cast(pl.Int64), "pass_name", "context")


@dataclass(frozen=True)
class Target:
    """TTFT (``statistic`` p50 or mean, ms, at most ``value``) or hit ratio (at least)."""

    kind: str                     # "ttft" or "hit_ratio"
    value: float
    statistic: str = "p50"
    passes: tuple[int, ...] = ()  # 0-based pass indices that must meet it

    def column(self) -> str:
        return f"{self.statistic}_ms" if self.kind == "ttft" else "hit_ratio"

    def met(self, figures: pl.DataFrame) -> bool:
        chosen = figures.filter(pl.col("pass_index").is_in(list(self.passes)))[self.column()]
        if chosen.len() != len(set(self.passes)):
            raise ValueError(f"target passes {self.passes} are not all in the workload")
        if chosen.null_count():
            return False
        return bool((chosen <= self.value).all() if self.kind == "ttft"
                    else (chosen >= self.value).all())


class Evaluator:
    """Per-pass figures of one workload at one GPU capacity, for any CPU capacity.

    A subclass sets ``description``, ``requests_frame`` (request, pass_index, pass_name,
    context), ``gpu_capacity``, ``models`` and ``smallest_item`` (tokens of the smallest
    cacheable item), and implements ``requests(cpu)`` (TOKEN_COLUMNS per request) and
    ``candidates()`` (the capacities where figures change).
    """

    description: str
    requests_frame: pl.DataFrame
    gpu_capacity: int
    models: dict[str, TTFTModel]
    smallest_item: int
    evaluations: int = 0
    #: hits provably never fall as the CPU tier grows (above the oversize bands)
    hits_monotone: bool = True
    #: the cache models ({"gpu": name, "cpu": name}) and the answer's first line naming them
    cache_models: dict = {"gpu": "two-tier", "cpu": "two-tier"}
    models_line: str = ("models: kvlab's TwoTierCache (whole documents, an LRU per tier, the "
                        "CPU fed the GPU's misses; --block-size for the block models)")

    def requests(self, cpu_capacity: int) -> pl.DataFrame:
        """``requests_frame`` plus TOKEN_COLUMNS at this CPU capacity."""
        raise NotImplementedError

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(scanned candidates of the oversize bands, bisectable candidates above), > 0."""
        raise NotImplementedError

    def figures(self, cpu_capacity: int) -> pl.DataFrame:
        """Per pass: requests, p50_ms, mean_ms (predicted), hit_ratio (tokens), tier tokens."""
        self.evaluations += 1
        model = model_for_capacity(self.models, cpu_capacity)
        frame = self.requests(cpu_capacity).with_columns(ttft_ms=model.expression())
        hit = pl.col("gpu_tokens") + pl.col("cpu_tokens")
        return (frame.group_by("pass_index", "pass_name", maintain_order=True)
                .agg(requests=pl.len(), p50_ms=pl.col("ttft_ms").median(),
                     mean_ms=pl.col("ttft_ms").mean(),
                     hit_ratio=pl.when(pl.col("context").sum() > 0)
                     .then(hit.sum() / pl.col("context").sum()),
                     **{name: pl.col(name).sum() for name in TOKEN_COLUMNS})
                .sort("pass_index"))

    def monotone(self) -> bool:
        """True when serving a token from CPU (or GPU) never costs more than recomputing it
        under the offload model, so TTFT cannot rise with the CPU capacity."""
        model = model_for_capacity(self.models, 1)
        if hasattr(model, "monotone"):               # a fitted step-time file
            return model.monotone()
        if model.method != "least squares":
            t = model.tier_ms
            return t.get("cpu", 0) <= t.get("miss", 0) and t.get("gpu", 0) <= t.get("miss", 0)
        p = model.params
        contexts = self.requests_frame["context"]
        context = (contexts.min() if p.get("attention_ms_per_token2", 0) >= 0
                   else contexts.max()) or 0
        recompute = p.get("recompute_ms_per_token", 0) + p.get("attention_ms_per_token2", 0) * context
        slack = recompute - max(p.get("cpu_ms_per_token", 0), p.get("gpu_ms_per_token", 0))
        # a token moving off recompute saves slack >= 0; the last one also drops the fixed a
        return slack >= 0 and p.get("recompute_fixed_ms", 0) + slack * self.smallest_item >= 0


class DocumentEvaluator(Evaluator):
    """Document mode: a workload of whole items (``block_size`` None, one item per request,
    read as ``Workload.items()``): the GPU tier from one LRU pass, every CPU capacity from one
    stack-distance pass over the GPU-miss stream (kvlab's ``TwoTierCache``, exactly)."""

    def __init__(self, description: str, workload: Workload, gpu_capacity: int,
                 models: dict[str, TTFTModel]) -> None:
        if workload.block_size is not None or workload.blocks.height != workload.requests.height:
            raise ValueError("document mode takes one whole item per request (no block size)")
        self.gpu_capacity, self.models, self.description = gpu_capacity, models, description
        keys, sizes = workload.items()
        self.sizes = sizes
        self.requests_frame = requests_frame(workload.requests, sizes)
        self.gpu_hit = (lru_hits(keys, sizes, [gpu_capacity])[0] if keys.size
                        else np.zeros(0, dtype=bool))
        self.miss_index = np.flatnonzero(~self.gpu_hit)
        self.miss_keys, self.miss_sizes = keys[self.miss_index], sizes[self.miss_index]
        self.max_size = int(self.miss_sizes.max()) if self.miss_sizes.size else 0
        positive = self.miss_sizes[self.miss_sizes > 0]
        self.smallest_item = int(positive.min()) if positive.size else 0
        self.distances = stack_distances(self.miss_keys, self.miss_sizes)
        self.evaluations = 0

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(band candidates below the largest item, sorted candidates from it up), all > 0."""
        sizes = np.unique(self.miss_sizes)
        low: set[int] = {int(s) for s in sizes if 0 < s < self.max_size}
        for j, limit in enumerate(sizes[:-1]):
            banded = stack_distances(self.miss_keys, self.miss_sizes, int(limit))
            inside = banded[(banded >= limit) & (banded < sizes[j + 1]) & (banded != COLD)]
            low.update(int(d) for d in inside if d > 0)
        finite = self.distances[(self.distances != COLD) & (self.distances >= self.max_size)]
        high = np.unique(np.concatenate(([self.max_size], finite))).astype(np.int64)
        return np.array(sorted(low), dtype=np.int64), high[high > 0]

    def tiers(self, cpu_capacity: int) -> np.ndarray:
        """Tier code per access (GPU, CPU, MISS)."""
        if cpu_capacity >= self.max_size:
            cpu_hit = (self.distances <= cpu_capacity) & (self.distances != COLD)
        elif self.miss_keys.size:
            cpu_hit = lru_hits(self.miss_keys, self.miss_sizes, [cpu_capacity])[0]
        else:
            cpu_hit = np.zeros(0, dtype=bool)
        return access_tiers(self.gpu_hit, cpu_hit)

    def requests(self, cpu_capacity: int) -> pl.DataFrame:
        """The workload's requests with TOKEN_COLUMNS at this CPU capacity."""
        tiers = self.tiers(cpu_capacity)
        counts = {name: self.sizes * (tiers == code)
                  for name, code in zip(TOKEN_COLUMNS, (GPU, CPU, MISS))}
        return self.requests_frame.with_columns(
            pl.Series(name, values) for name, values in counts.items())


@dataclass(frozen=True)
class PlanResult:
    """status: "gpu_alone", "met" or "unreachable"; cpu_tokens: the answer (or the largest
    useful CPU capacity when unreachable); figures there and one token below."""

    status: str
    cpu_tokens: int
    figures: pl.DataFrame
    below: pl.DataFrame | None
    search: str
    evaluations: int


def plan(evaluator: Evaluator, target: Target) -> PlanResult:
    """The smallest CPU capacity (tokens) whose figures meet ``target``."""
    at_zero = evaluator.figures(0)
    if target.met(at_zero):
        return PlanResult("gpu_alone", 0, at_zero, None, "CPU 0 meets it", evaluator.evaluations)
    low, high = evaluator.candidates()
    answer = next((int(c) for c in low if target.met(evaluator.figures(int(c)))), None)
    search = f"scanned {low.size} candidate(s)" if low.size else "nothing to scan"
    if answer is None and high.size:
        if not evaluator.hits_monotone or target.kind == "hit_ratio" or evaluator.monotone():
            lo, hi = 0, high.size            # first index that meets it, in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if target.met(evaluator.figures(int(high[mid]))):
                    hi = mid
                else:
                    lo = mid + 1
            answer = int(high[lo]) if lo < high.size else None
            search += f"; bisected {high.size} candidate(s) from {int(high[0]):,} tokens"
            if not evaluator.hits_monotone or (target.kind == "ttft" and not evaluator.monotone()):
                search += " (assuming the figures improve with the CPU tier: not proven here)"
        else:
            answer = next((int(c) for c in high if target.met(evaluator.figures(int(c)))), None)
            search += f"; scanned {high.size} candidate(s) (TTFT may rise with CPU capacity)"
    if answer is None:
        top = int(high[-1]) if high.size else int(low[-1]) if low.size else 0
        return PlanResult("unreachable", top, evaluator.figures(top), None, search,
                          evaluator.evaluations)
    return PlanResult("met", answer, evaluator.figures(answer), evaluator.figures(answer - 1),
                      search, evaluator.evaluations)
