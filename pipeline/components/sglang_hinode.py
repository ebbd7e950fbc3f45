"""A node of SGLang 0.5.23's HiCache tree (``sglang_hiradix.HiRadixTree``): its token run,
device / host residency, locks, pending write / load acks and eviction metadata."""

from __future__ import annotations

from pipeline.components.sglang_radix import RadixTree

__all__ = ["HiNode"]


class HiNode:
    """A node: token run, device / host residency, locks, eviction metadata; ``tree``: the
    ``HiRadixTree`` it belongs to (its clock and node ids)."""

    __slots__ = ("key", "children", "parent", "lock_ref", "host_lock_ref", "last_access_time",
                 "creation_time", "hit_count", "priority", "device", "host", "wt_pending",
                 "lb_pending", "id", "host_uuid")

    def __init__(self, tree: RadixTree, priority: int = 0) -> None:
        self.key: tuple = ()
        self.children: dict = {}
        self.parent: HiNode | None = None
        self.lock_ref = self.host_lock_ref = self.hit_count = 0
        self.last_access_time = tree.tick()
        self.creation_time = tree.tick()
        self.priority = priority
        self.device = self.host = False
        self.wt_pending = self.lb_pending = None
        self.host_uuid = None             # a host lock's segment ends where its uuid is
        tree.ids += 1
        self.id = tree.ids

    def __lt__(self, other: HiNode) -> bool:
        return self.last_access_time < other.last_access_time

