"""SGLang 0.5.23's ``SchedulePolicy.calc_priority`` in plain Python, for ``sglang_sched``'s
loop: the waiting queue's order per ``--schedule-policy`` (``fcfs``, ``lpm`` with in-batch
prefix deprioritizing and its fcfs fallback above 128 waiting, ``dfs-weight``, ``lof``,
``random``) and, for the cache-agnostic ones, the LRU touch of waiting prefixes every 32
passes (``managers/schedule_policy.py``, ``mem_cache/common.py``)."""

from __future__ import annotations

import random
from collections.abc import Callable

from pipeline.components.sglang_batch import Req
from pipeline.components.sglang_radix import RadixTree
from pipeline.components.sglang_settings import IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE, \
    WAITING_PREFIX_REFRESH_INTERVAL, WAITING_QUEUE_PREFIX_MATCH_MAX, SchedulerSettings

__all__ = ["SchedulePolicy", "dfs_weight_order"]


class SchedulePolicy:
    """``SchedulePolicy``: the policy, its random order's seed and its refresh counter."""

    def __init__(self, settings: SchedulerSettings) -> None:
        self.policy = settings.schedule_policy
        self.eviction_policy = settings.radix_eviction_policy
        self.refresh_calls = 0
        self.random = random.Random(settings.seed)

    def calc_priority(self, queue: list[Req], tree: RadixTree,
                      match: Callable[..., None]) -> None:
        """``SchedulePolicy.calc_priority`` on the waiting ``queue`` (in place) over the
        radix ``tree``; ``match(req, limit=False)`` sets a request's prefix."""
        policy = self.policy
        active = "fcfs" if policy == "lpm" and len(queue) > WAITING_QUEUE_PREFIX_MATCH_MAX \
            else policy
        if active in ("lpm", "dfs-weight"):
            deprioritized = compute_prefix_matches(queue, match)
            if active == "lpm":
                queue.sort(key=lambda r: -r.num_matched if r.index not in deprioritized
                           else float("inf"))
            else:
                order = dfs_weight_order(tree.root, [r.last_node for r in queue])
                queue[:] = [queue[i] for i in order]
            return
        if active == "lof":
            queue.sort(key=lambda r: -r.max_new)
        elif active == "random":
            self.random.shuffle(queue)
        if queue and self.eviction_policy == "lru":              # _touch_waiting_prefixes
            refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
            self.refresh_calls += 1
            if refresh:
                for r in reversed(queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                    tree.match_prefix(r.fill())


def compute_prefix_matches(queue: list[Req], match: Callable[..., None]) -> set[int]:
    """``_compute_prefix_matches``: match every waiting request; the indices of those
    deprioritized by the in-batch prefix check."""
    deprioritized: set[int] = set()
    in_batch = RadixTree(1, "lru")                       # waiting_queue_radix_tree, reset
    for r in queue:
        match(r, limit=False)
        if r.prefix_len <= IN_BATCH_CHECK:
            fill = r.fill()
            if in_batch.match_prefix(fill)[0] >= IN_BATCH_DEPRIORITIZE:
                deprioritized.add(r.index)
            else:
                in_batch.insert(fill)
    return deprioritized


def dfs_weight_order(root, nodes: list) -> list[int]:
    """``_dfs_weight_order`` (``base_prefix_cache.py``): request indices, depth first,
    heavier subtrees first, a node's requests after its subtree."""
    at: dict[int, list[int]] = {}
    by_id: dict[int, object] = {}
    for index, node in enumerate(nodes):
        at.setdefault(id(node), []).append(index)
        by_id[id(node)] = node
    weight = {key: len(indices) for key, indices in at.items()}
    stack = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if visited:
            total = weight.get(id(node), 0)
            for child in node.children.values():
                total += weight.get(id(child), 0)
            weight[id(node)] = total
            continue
        stack.append((node, True))
        for child in reversed(list(node.children.values())):
            stack.append((child, False))
    order: list[int] = []
    stack = [(root, False)]
    while stack:
        node, visited = stack.pop()
        if visited:
            order.extend(at.get(id(node), ()))
            continue
        children = sorted(node.children.values(), key=lambda c: -weight.get(id(c), 0))
        stack.append((node, True))
        for child in reversed(children):
            stack.append((child, False))
    return order
