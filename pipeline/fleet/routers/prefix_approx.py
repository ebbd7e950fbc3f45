"""``prefix-approx``: SGLang router's ``cache_aware`` policy (a router-side tree of what it
routed where, a cache threshold, and a shortest-queue fallback when load is imbalanced).

Sources: sgl-project/sglang ``sgl-router/src/policies/cache_aware.rs`` (commit b6f2064,
``select_worker``) and ``sgl-router/src/policies/tree.rs`` (commit 4d40eec, ``Tree``);
defaults from ``sgl-router/py_src/sglang_router/router_args.py`` (``RouterArgs``, the
launcher users run): ``cache_threshold=0.3``, ``balance_abs_threshold=64``,
``balance_rel_threshold=1.5``, ``eviction_interval_secs=120``, ``max_tree_size=2**26``
(the Rust ``CacheAwareConfig::default()`` has 0.5 / 32 / 1.1 / 30 / 10000).

Per request, with ``load`` = the requests the router sent to an instance that have not
finished:

1. imbalanced = ``max - min > balance_abs_threshold`` and ``max > min *
   balance_rel_threshold``: route to the least loaded instance (ties: lowest index, Rust's
   ``min_by_key``) and still insert the prompt into the tree for it (decision ``balance``);
2. else match the prompt against the tree: ``rate = matched / length``; if ``rate >
   cache_threshold`` route to a tenant of the deepest matched node (``cache-hit``), else to
   the tenant holding the fewest units (``smallest-tree``); insert the prompt for the choice.

Units: SGLang's tree holds characters; here it holds the prompt's full-block hashes (one
unit per block, as llm-d's and Dynamo's routers hash prompts), so ``rate`` is matched
blocks / full blocks, and a prompt with no full block matches nothing. Because block hashes
are chained, a prefix is identified by its last block's hash and the radix tree is a map
hash -> node (the literal radix tree with node splitting is ``reference.SGLangTree``).

Ties the project leaves to hash-map order (``DashMap`` iteration: "the first tenant" of the
matched node, and the smallest tenant): the lowest instance index. Eviction runs every
``eviction_interval_secs`` of simulated time (at the first routing at or after each
interval) and removes least-recently-used leaves of every tenant above ``max_tree_size``
units (timestamps in simulated milliseconds; equal timestamps: lower instance, then older
insertion first).

With ``oracle=1`` the tree is replaced by the instances' actual GPU cache contents (what the
router would do with exact knowledge): ``matched`` = the longest cached prefix over
instances, the tenant = the instance holding it, "fewest units" = fewest cached blocks.
"""

from __future__ import annotations

import heapq
from typing import Any

from pipeline.fleet.routers.base import InstanceView, Parameter, RouteRequest, Router, \
    leading_run


def flag(value: str) -> bool:
    if value not in ("0", "1", "true", "false"):
        raise ValueError(value)
    return value in ("1", "true")


class _Node:
    __slots__ = ("parent", "tenants", "children")

    def __init__(self, parent: Any) -> None:
        self.parent = parent
        self.tenants: dict[int, float] = {}       # tenant -> last access (ms)
        self.children: dict[int, int] = {}        # tenant -> children holding it


class BlockTree:
    """SGLang's multi-tenant tree on chained block hashes (one node per block)."""

    def __init__(self, num_tenants: int) -> None:
        self.nodes: dict[Any, _Node] = {}
        self.size = [0] * num_tenants             # SGLang's tenant_char_count
        self.sequence = 0

    def insert(self, hashes, tenant: int, now: float) -> None:
        parent = None
        for block in hashes:
            node = self.nodes.get(block)
            if node is None:
                node = self.nodes[block] = _Node(parent)
            if tenant not in node.tenants:
                self.size[tenant] += 1
                if parent is not None:
                    parent_node = self.nodes[parent]
                    parent_node.children[tenant] = parent_node.children.get(tenant, 0) + 1
            node.tenants[tenant] = now
            parent = block

    def prefix_match(self, hashes, now: float) -> tuple[int, int | None]:
        """(matched units, the deepest matched node's first tenant or None)."""
        matched, last = 0, None
        for block in hashes:
            if block not in self.nodes:
                break
            matched, last = matched + 1, block
        if last is None or not self.nodes[last].tenants:
            return matched, None                  # SGLang's "empty" tenant
        tenant = min(self.nodes[last].tenants)
        block = last
        while block is not None:                  # refresh the path, as prefix_match does
            node = self.nodes[block]
            if tenant in node.tenants:
                node.tenants[tenant] = now
            block = node.parent
        return matched, tenant

    def smallest_tenant(self) -> int:
        return min(range(len(self.size)), key=lambda tenant: self.size[tenant])

    def evict(self, max_size: int) -> None:
        """``evict_tenant_by_size``: LRU leaves of each tenant above ``max_size``."""
        if max(self.size, default=0) <= max_size:
            return                                # no tenant over: nothing to pop
        heap = []
        for block, node in self.nodes.items():
            for tenant, stamp in node.tenants.items():
                if not node.children.get(tenant):
                    heap.append((stamp, tenant, self._next(), block))
        heapq.heapify(heap)
        while heap:
            _, tenant, _, block = heapq.heappop(heap)
            if self.size[tenant] <= max_size:
                continue
            node = self.nodes[block]
            if tenant not in node.tenants:
                continue
            del node.tenants[tenant]
            self.size[tenant] -= 1
            parent = node.parent
            if not node.tenants and not any(node.children.values()):
                del self.nodes[block]
            if parent is not None:
                parent_node = self.nodes[parent]
                parent_node.children[tenant] -= 1
                if tenant in parent_node.tenants and not parent_node.children[tenant]:
                    heapq.heappush(heap, (parent_node.tenants[tenant], tenant,
                                          self._next(), parent))

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence


class _Union:
    """Membership in any of some sets."""

    def __init__(self, sets: list[set]) -> None:
        self.sets = sets

    def __contains__(self, key) -> bool:
        for held in self.sets:
            if key in held:
                return True
        return False


class LazyTree:
    """``BlockTree``'s answers without its per-block nodes while nothing is evicted.

    Until an eviction has a tenant over the limit, the tree is the union of the prompts
    inserted: a tenant holds a block iff it inserted a prompt containing it, so a set per
    tenant answers ``size``, and chained hashes make each tenant's set prefix-closed, so
    the matched length (in any tenant) and an insert's new tail are binary searches
    (``leading_run``). Timestamps matter only to eviction: the
    inserts and matches are logged, and the first eviction that must remove something
    replays them into a ``BlockTree``, which answers from then on (the same operations in
    the same order: the same state)."""

    def __init__(self, num_tenants: int) -> None:
        self.exact: BlockTree | None = None
        self.held = [set() for _ in range(num_tenants)]
        self.log: list[tuple] = []
        self._size = [0] * num_tenants

    @property
    def size(self) -> list[int]:
        return self.exact.size if self.exact is not None else self._size

    def insert(self, hashes, tenant: int, now: float) -> None:
        if self.exact is not None:
            return self.exact.insert(hashes, tenant, now)
        held = self.held[tenant]              # prefix-closed: only the new tail goes in
        held.update(hashes[leading_run(held, hashes):])
        self._size[tenant] = len(held)
        self.log.append((True, hashes, tenant, now))

    def prefix_match(self, hashes, now: float) -> tuple[int, int | None]:
        if self.exact is not None:
            return self.exact.prefix_match(hashes, now)
        matched = leading_run(_Union(self.held), hashes)
        if not matched:
            return 0, None
        last = hashes[matched - 1]
        tenant = next(t for t, held in enumerate(self.held) if last in held)
        self.log.append((False, hashes, tenant, now))
        return matched, tenant

    def smallest_tenant(self) -> int:
        size = self.size
        return min(range(len(size)), key=lambda tenant: size[tenant])

    def evict(self, max_size: int) -> None:
        if self.exact is None:
            if max(self._size, default=0) <= max_size:
                return
            self.exact = BlockTree(len(self._size))
            for inserted, hashes, _tenant, now in self.log:
                if inserted:
                    self.exact.insert(hashes, _tenant, now)
                else:
                    self.exact.prefix_match(hashes, now)
            self.held = self.log = None
        self.exact.evict(max_size)


class PrefixApprox(Router):
    NAME = "prefix-approx"
    PARAMETERS = {
        "cache_threshold": Parameter(0.3, float, "route by match when rate > this"),
        "balance_abs_threshold": Parameter(64, int, "imbalanced if max - min load > this"),
        "balance_rel_threshold": Parameter(1.5, float, "... and max > min * this"),
        "eviction_interval_secs": Parameter(120.0, float, "tree eviction period (0: never)"),
        "max_tree_size": Parameter(2 ** 26, int, "units kept per tenant at eviction"),
        "oracle": Parameter(False, flag, "1: match against actual cache contents"),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tree = LazyTree(self.num_instances)
        interval = self.options["eviction_interval_secs"] * 1000.0
        self.next_eviction = interval if interval > 0 else None

    def _maybe_evict(self, now: float) -> None:
        if self.next_eviction is None:
            return
        interval = self.options["eviction_interval_secs"] * 1000.0
        while now >= self.next_eviction:
            self.tree.evict(self.options["max_tree_size"])
            self.next_eviction += interval

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        now = request.arrival_ms
        self._maybe_evict(now)
        n = self.num_instances
        loads = [view.routed_outstanding(i) for i in range(n)]
        high, low = max(loads), min(loads)
        options = self.options
        if (high - low > options["balance_abs_threshold"]
                and high > low * options["balance_rel_threshold"]):
            choice = loads.index(low)
            decision = "balance"
        elif options["oracle"]:
            cached = [view.cached_blocks(i, request.hashes) for i in range(n)]
            matched = max(cached)
            rate = matched / len(request.hashes) if len(request.hashes) else 0.0
            if rate > options["cache_threshold"]:
                choice, decision = cached.index(matched), "cache-hit"
            else:
                counts = [view.cached_block_count(i) for i in range(n)]
                choice, decision = counts.index(min(counts)), "smallest-tree"
        else:
            matched, tenant = self.tree.prefix_match(request.hashes, now)
            rate = matched / len(request.hashes) if len(request.hashes) else 0.0
            if rate > options["cache_threshold"] and tenant is None:
                return 0, "fallback"             # "empty" is no worker: first healthy one
            if rate > options["cache_threshold"]:
                choice, decision = tenant, "cache-hit"
            else:
                choice, decision = self.tree.smallest_tenant(), "smallest-tree"
        self.tree.insert(request.hashes, choice, now)
        return choice, decision


ROUTER = PrefixApprox
