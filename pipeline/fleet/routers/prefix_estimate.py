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

from collections import deque
from itertools import islice, repeat

from pipeline.fleet.routers.base import (InstanceView, Parameter, RouteRequest, Router,
                                         max_score_pick, rng_for)
from pipeline.fleet.routers.prefix_approx import flag

DEFAULT_LRU_CAPACITY = 31250


class RoutedIndex:
    """``indexer.go``: per instance an LRU of hashes; hash -> instances holding it.

    The hash -> instances map is not kept block by block: an instance holds a hash when
    its LRU does, or when an ``Add`` marked the hash after evicting it in the same call
    (``Add`` evicts while inserting, then marks every hash of the prompt; only a prompt
    longer than the LRU does that), kept in ``marked``. ``holders`` rebuilds the map."""

    def __init__(self, num_instances: int) -> None:
        self.lru: list[dict | None] = [None] * num_instances
        self.capacity = [0] * num_instances
        self.marked: list[set] = [set() for _ in range(num_instances)]

    def add(self, hashes, instance: int, capacity: int) -> None:
        """``Add``: each hash moved to the LRU's end (or inserted, evicting the oldest when
        over capacity), then the instance marked on every hash. Done in bulk: an LRU
        ends holding the ``capacity`` most recent distinct keys of its accesses, so
        removing the prompt's hashes, appending them in order and evicting from the front
        leaves the same LRU (chained hashes are distinct within a prompt)."""
        if self.lru[instance] is None:
            self.lru[instance], self.capacity[instance] = {}, capacity
        lru, capacity, marked = self.lru[instance], self.capacity[instance], \
            self.marked[instance]
        deque(map(lru.pop, hashes, repeat(None)), maxlen=0)
        lru.update(zip(hashes, repeat(None)))
        excess = len(lru) - capacity
        if excess > 0:
            evicted = list(islice(lru, excess))
            deque(map(lru.__delitem__, evicted), maxlen=0)
            if marked:
                marked.difference_update(evicted)
            if len(hashes) > capacity:            # this prompt's own hashes went too
                marked.update(set(hashes).intersection(evicted))
        if marked:
            marked.difference_update(lru.keys() & set(hashes))

    def match(self, hashes) -> dict[int, int]:
        """``matchLongestPrefix``: walk while any instance holds the hash, counting one
        per instance that holds it. In chunks (set operations over a chunk, growing), so
        the work follows the matched length, as the walk's does."""
        holders = [(i, lru.keys(), self.marked[i]) for i, lru in enumerate(self.lru)
                   if lru is not None]
        counts = dict.fromkeys((i for i, _, _ in holders), 0)
        start, size = 0, 64
        while start < len(hashes):
            chunk = hashes[start:start + size]
            found = {}
            for instance, keys, marked in holders:
                held = keys & chunk
                if marked:
                    held |= marked.intersection(chunk)
                found[instance] = held
            union = set().union(*found.values())
            if len(union) < len(chunk):               # the walk stops in this chunk
                stop = next(k for k, block in enumerate(chunk) if block not in union)
                for instance, held in found.items():
                    counts[instance] += sum(map(held.__contains__, chunk[:stop]))
                break
            for instance, held in found.items():
                counts[instance] += len(held)
            start, size = start + size, size * 2
        return {instance: c for instance, c in counts.items() if c}

    @property
    def holders(self) -> dict:
        """hash -> the instances holding it (``indexer.go``'s ``hashToPods``)."""
        out: dict = {}
        for instance, lru in enumerate(self.lru):
            for block in [*(lru or ()), *self.marked[instance]]:
                out.setdefault(block, set()).add(instance)
        return out


def load_score(waiting: int, threshold: float) -> float:
    """llm-d's load-aware scorer."""
    if waiting == 0:
        return 0.5
    return 0.5 * (1.0 - min(waiting, threshold) / threshold)


class PrefixEstimate(Router):
    NAME = "prefix-estimate"
    COST = 3
    PARAMETERS = {
        "prefix_weight": Parameter(1.0, float, "weight of the approximate prefix scorer"),
        "load_weight": Parameter(1.0, float, "weight of the load-aware scorer"),
        "queue_threshold": Parameter(128.0, float, "load-aware: waiting requests that score 0"),
        "auto_tune": Parameter(True, flag, "1: LRU capacity = the instance's GPU blocks"),
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
