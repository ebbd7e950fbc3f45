"""``prefix-precise``: llm-d's precise prefix-cache scorer with its KV-utilization and
queue scorers, summed by weight, and the max-score picker.

Sources (llm-d/llm-d-inference-scheduler, commit 520af47):
``pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/`` (``Score``: the longest
run of the prompt's leading blocks an instance holds, from its KV events, divided by the
prompt's blocks, clipped to [0, 1]; 0 for a prompt without a full block),
``scorer/kvcacheutilization/kvcache_utilization.go`` (``1 - KVCacheUsagePercent``),
``scorer/queuedepth/queue.go`` (``(max - waiting) / (max - min)`` over instances, 1.0 when
all queues are equal), ``picker/maxscore/picker.go`` (shuffle, then a stable sort by score:
ties go to a random one of the best) and the weights of
``deploy/config/epp-precise-prefix-cache-config.yaml``: prefix 2.0, KV utilization 1.0,
queue 1.0.

The block scorer is llm-d-kv-cache's ``LongestPrefixScorer`` (``pkg/kvcache/
kvblock_scorer.go``: consecutive hits from block 0). Cache contents count the GPU tier only
(its per-tier weights, e.g. 0.8 for CPU-pinned blocks, are not modeled). KV usage is vLLM's
``BlockPool.get_usage``: ``1 - free / (num_gpu_blocks - 1)``. The engine-side inputs (cache
contents, waiting counts, usage) come from the view, so ``--staleness-ms`` delays them as
KV events and metric scrapes would. The shuffle uses numpy's generator seeded by ``--seed``.
"""

from __future__ import annotations

from pipeline.fleet.routers.base import (InstanceView, Parameter, RouteRequest, Router,
                                         max_score_pick, rng_for)


def prefix_scores(request: RouteRequest, view: InstanceView) -> list[float]:
    """Per instance: its longest cached prefix / the prompt's blocks, clipped to [0, 1]."""
    total = len(request.hashes)
    n = view.num_instances
    if total <= 0:
        return [0.0] * n
    return [min(view.cached_blocks(i, request.hashes) / total, 1.0) for i in range(n)]


def queue_scores(view: InstanceView) -> list[float]:
    """llm-d's queue scorer: the shortest waiting queue scores 1, the longest 0."""
    queues = [view.num_waiting(i) for i in range(view.num_instances)]
    high, low = max(queues), min(queues)
    if high == low:
        return [1.0] * len(queues)
    return [(high - queue) / (high - low) for queue in queues]


class PrefixPrecise(Router):
    NAME = "prefix-precise"
    PARAMETERS = {
        "prefix_weight": Parameter(2.0, float, "weight of the precise prefix-cache scorer"),
        "kv_utilization_weight": Parameter(1.0, float, "weight of the KV-utilization scorer"),
        "queue_weight": Parameter(1.0, float, "weight of the queue scorer"),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rng = rng_for(self.seed, self.NAME)

    def scores(self, request: RouteRequest, view: InstanceView) -> list[float]:
        options = self.options
        prefix = prefix_scores(request, view)
        queue = queue_scores(view)
        return [options["prefix_weight"] * prefix[i]
                + options["kv_utilization_weight"] * (1.0 - view.kv_usage(i))
                + options["queue_weight"] * queue[i] for i in range(view.num_instances)]

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        scores = self.scores(request, view)
        choice = max_score_pick(scores, self.rng)
        hit = view.cached_blocks(choice, request.hashes) > 0
        return choice, "cache-hit" if hit else "load"


ROUTER = PrefixPrecise
