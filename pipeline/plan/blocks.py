"""Block mode for the planner: the project's block model (``pipeline.blocks``), every CPU
capacity from one pass.

The GPU tier's prefix hit per request comes from the fast engine at the one GPU capacity.
The CPU tier places blocks g.. of each request (g = its GPU hit), and a request's CPU
prefix at a tier of C blocks is the number of its leading blocks whose running-max depth is
<= C (``pipeline.onepass.lru_depths``): one unfiltered depth pass gives every C >= the largest
placement, one pass per size band the rest. The CPU serves max(0, cpu - gpu) tokens, the
rest is recomputed (``pipeline.catalog.model_api.request_result``), so the tokens by tier change
only where some running-max depth equals C: those capacities (in tokens: blocks x block
size) are the candidates the search visits.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.catalog.model_api import CPU_MODELS, GPU_MODELS, request_result
from pipeline.catalog import models_field, models_line
from pipeline.onepass.lru_depths import COLD, block_distances, prefix_blocks, prefix_counts
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, check_order
from pipeline.plan.search import Evaluator, requests_frame
from pipeline.ttft.model import TTFTModel
from pipeline.workloads.workload import Workload

__all__ = ["BlockEvaluator", "SCAN_LIMIT"]

#: Other CPU models: scan every capacity step up to this many, else bisect (and say so).
SCAN_LIMIT = 2000


class BlockEvaluator(Evaluator):
    """Per-pass figures of a workload in blocks (its ``block_stream()``).

    Any GPU model of ``pipeline.catalog.model_api`` runs once. The ``block-lru`` CPU model gets every
    capacity from one pass (the candidates are exact); any other CPU model (``lmcache``, the
    policies) is run per capacity on a grid of its granularity (the chunk size, else the
    block size), every step scanned up to ``SCAN_LIMIT`` steps, bisected above that on the
    stated assumption that its hits do not fall as the tier grows.
    """

    def __init__(self, description: str, workload: Workload, gpu_capacity: int,
                 models: dict[str, TTFTModel],
                 gpu_order: str = TAIL_FIRST, cpu_order: str = HEAD_FIRST,
                 gpu_model: str = "block-lru", cpu_model: str = "block-lru",
                 gpu_options: dict | None = None, cpu_options: dict | None = None) -> None:
        self.stream = stream = workload.block_stream()
        requests, block_size = workload.requests, stream.block_size
        if requests.height != stream.requests:
            raise ValueError(f"{requests.height} request rows for {stream.requests} requests "
                             "in the block frame")
        self.description, self.gpu_capacity, self.models = description, gpu_capacity, models
        self.gpu_order, self.cpu_order = check_order(gpu_order), check_order(cpu_order)
        self.requests_frame = requests_frame(requests, stream.prompt_tokens)
        self.smallest_item, self.evaluations = block_size, 0
        self.cpu_model, self.cpu_options = cpu_model, dict(cpu_options or {})
        self.hits_monotone = cpu_model == "block-lru"
        self.cache_models = models_field(gpu_model, cpu_model)
        self.models_line = models_line(gpu_model, cpu_model, gpu_options, cpu_options)
        self.gpu_hit = GPU_MODELS[gpu_model](stream, [gpu_capacity], gpu_order,
                                             **(gpu_options or {}))[0]
        self.gpu_blocks = self.gpu_hit // block_size
        placed = stream.cacheable - np.minimum(self.gpu_blocks, stream.cacheable)
        self.placements = np.unique(placed)
        self.max_blocks = int(self.placements.max()) if self.placements.size else 0
        self.prefix = block_distances(stream, cpu_order, self.gpu_blocks).prefix

    def _cpu_prefix(self, cpu_capacity: int) -> np.ndarray:
        """CPU prefix hit tokens per request (counted from block 0) at ``cpu_capacity``."""
        if self.cpu_model != "block-lru":
            return CPU_MODELS[self.cpu_model](self.stream, self.gpu_hit, [cpu_capacity],
                                              self.cpu_order, **self.cpu_options)[0]
        blocks = np.array([cpu_capacity // self.stream.block_size], np.int64)
        if blocks[0] >= self.max_blocks:
            counts = prefix_counts(self.stream, self.prefix, blocks)[0]
        else:
            counts = prefix_blocks(self.stream, blocks, self.cpu_order, self.gpu_blocks)[0]
        return counts * self.stream.block_size

    def requests(self, cpu_capacity: int) -> pl.DataFrame:
        result = request_result(self.stream, self.gpu_hit, self._cpu_prefix(cpu_capacity))
        return self.requests_frame.with_columns(
            gpu_tokens=result["gpu_hit_tokens"], cpu_tokens=result["cpu_hit_tokens"],
            miss_tokens=result["miss_tokens"])

    def candidates(self) -> tuple[np.ndarray, np.ndarray]:
        size = self.stream.block_size
        if self.cpu_model != "block-lru":
            step = int(self.cpu_options.get("chunk_size", size))
            top = self.stream.n_codes * size + step          # every distinct block, and more
            grid = np.arange(step, top + step, step, dtype=np.int64)
            return (grid, np.zeros(0, np.int64)) if grid.size <= SCAN_LIMIT else \
                (np.zeros(0, np.int64), grid)
        low: set[int] = {int(s) for s in self.placements if 0 < s < self.max_blocks}
        for j, limit in enumerate(self.placements[:-1]):
            banded = block_distances(self.stream, self.cpu_order, self.gpu_blocks,
                                     int(limit)).prefix
            inside = banded[(banded >= limit) & (banded < self.placements[j + 1])]
            low.update(int(d) for d in np.unique(inside) if d > 0)
        finite = self.prefix[(self.prefix != COLD) & (self.prefix >= self.max_blocks)]
        high = np.unique(np.concatenate(([self.max_blocks], finite))).astype(np.int64)
        return (np.array(sorted(low), dtype=np.int64) * size, high[high > 0] * size)
