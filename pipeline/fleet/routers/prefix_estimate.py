"""``prefix-estimate``: llm-d's approximate ("estimate") prefix-cache scorer with its
load-aware scorer, summed by weight, and the max-score picker.

Sources (llm-d/llm-d-inference-scheduler, commit 520af47):
``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/`` (``indexer.go``:
per instance an LRU of the block hashes the router sent it, capacity = the instance's
``CacheNumBlocks`` with ``autoTune``, else 31250; ``plugin.go`` ``matchLongestPrefix``:
walk the prompt's hashes while any instance holds the hash, counting one for every
instance that holds it; ``PreRequest``: add the prompt's hashes for the chosen instance),
``scheduling/scorer/prefix/plugin.go`` (``matched / total`` blocks),
``scheduling/scorer/loadaware/load_aware.go`` (0.5 with an empty queue, else ``0.5 * (1 -
min(waiting, 128) / 128)``), ``picker/maxscore`` (shuffle, stable sort: ties random) and
the weights of ``deploy/config/epp-estimate-prefix-cache-config.yaml``: prefix 1.0, load
1.0.

Kept literally: an instance missing hash k but holding k+1 still counts k+1 (the walk
stops only when no instance holds a hash), and ``Add`` evicts while inserting, then marks
the instance on every hash of the prompt (even one evicted by the same ``Add``). The LRU
is the router's own record, so it is always current; the waiting counts come from the
view (``--staleness-ms``). The shuffle uses numpy's generator seeded by ``--seed``.
"""

from __future__ import annotations

from collections import OrderedDict

from pipeline.fleet.routers.base import (InstanceView, Parameter, RouteRequest, Router,
                                         max_score_pick, rng_for)
from pipeline.fleet.routers.prefix_approx import _flag

DEFAULT_LRU_CAPACITY = 31250


class RoutedIndex:
    """``indexer.go``: per instance an LRU of hashes; hash -> instances holding it."""

    def __init__(self, num_instances: int) -> None:
        self.lru: list[OrderedDict | None] = [None] * num_instances
        self.capacity = [0] * num_instances
        self.holders: dict = {}

    def add(self, hashes, instance: int, capacity: int) -> None:
        if self.lru[instance] is None:
            self.lru[instance], self.capacity[instance] = OrderedDict(), capacity
        lru, index, capacity = self.lru[instance], self.holders, self.capacity[instance]
        move, popitem = lru.move_to_end, lru.popitem
        for block in hashes:
            if block in lru:
                move(block)
                continue
            lru[block] = None
            if len(lru) > capacity:
                evicted, _ = popitem(last=False)
                holders = index.get(evicted)
                if holders is not None:
                    holders.discard(instance)
                    if not holders:
                        del index[evicted]
        for block in hashes:
            holders = index.get(block)
            if holders is None:
                index[block] = {instance}
            else:
                holders.add(instance)

    def match(self, hashes) -> dict[int, int]:
        """``matchLongestPrefix``."""
        counts: dict[int, int] = {}
        for block in hashes:
            holders = self.holders.get(block)
            if not holders:
                break
            for instance in holders:
                counts[instance] = counts.get(instance, 0) + 1
        return counts


def load_score(waiting: int, threshold: float) -> float:
    """llm-d's load-aware scorer."""
    if waiting == 0:
        return 0.5
    return 0.5 * (1.0 - min(waiting, threshold) / threshold)


class PrefixEstimate(Router):
    NAME = "prefix-estimate"
    PARAMETERS = {
        "prefix_weight": Parameter(1.0, float, "weight of the approximate prefix scorer"),
        "load_weight": Parameter(1.0, float, "weight of the load-aware scorer"),
        "queue_threshold": Parameter(128.0, float, "load-aware: waiting requests that score 0"),
        "auto_tune": Parameter(True, _flag, "1: LRU capacity = the instance's GPU blocks"),
        "lru_capacity": Parameter(DEFAULT_LRU_CAPACITY, int, "LRU capacity without auto_tune"),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.index = RoutedIndex(self.num_instances)
        self.rng = rng_for(self.seed, self.NAME)

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        options = self.options
        total = len(request.hashes)
        matched = self.index.match(request.hashes)
        scores = [options["prefix_weight"] * (matched.get(i, 0) / total if total else 0.0)
                  + options["load_weight"] * load_score(view.num_waiting(i),
                                                        options["queue_threshold"])
                  for i in range(self.num_instances)]
        choice = max_score_pick(scores, self.rng)
        capacity = options["lru_capacity"]
        if options["auto_tune"] and view.gpu_blocks(choice) > 0:
            capacity = view.gpu_blocks(choice)
        self.index.add(request.hashes, choice, capacity)
        return choice, "cache-hit" if matched.get(choice) else "load"


ROUTER = PrefixEstimate
