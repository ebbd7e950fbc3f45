"""SGLang 0.5.23's HiCache eviction in plain Python (``HiEviction``, a part of
``sglang_hiradix.HiRadixTree``): the device and host leaf sets and the two evictions
(``_evict_components``, ``drive_host_eviction``; docs/sglang.md cites the lines).

* **evict(n)** takes device leaves (no device child, unlocked) in policy order: one with a
  host copy is *demoted* (device copy freed, the node stays), one without is deleted, or,
  under write_back, copied first (host eviction for room; the subtree dropped if none) then
  demoted. A demoted leaf's parent may become a device leaf in the same call.
* **evict_host(n)** (when a copy needs room): under write_back first the nodes on both tiers
  (``full_host_duplicates``, in their registration order; evictable device leaves spared on
  the first pass), then host leaves (evicted, copied, unlocked, childless) in policy order.
"""

from __future__ import annotations

import heapq

from pipeline.components.sglang_hinode import HiNode

__all__ = ["HiEviction"]


class HiEviction:
    """``HiRadixTree``'s eviction: its device leaves demoted or deleted, its host leaves
    (and, under write_back, duplicates) dropped."""

    def _device_leaf(self, node: HiNode) -> bool:
        return (node is not self.root and node.device and node.lock_ref == 0
                and not any(child.device for child in node.children.values()))

    def _host_leaf(self, node: HiNode) -> bool:
        return (node is not self.root and not node.device and node.host
                and node.host_lock_ref == 0 and node.lock_ref == 0 and not node.children)

    def _nodes(self) -> list[HiNode]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def evict(self, num_tokens: int) -> int:
        """Device eviction (``_evict_components``); the device tokens freed."""
        heap = [(self.eviction_key(n), n) for n in self._nodes() if self._device_leaf(n)]
        heapq.heapify(heap)
        freed, last = 0, None
        while True:
            if last is not None and last.parent is not None and \
                    self._device_leaf(last.parent):
                heapq.heappush(heap, (self.eviction_key(last.parent), last.parent))
            last = None
            victim = None
            while freed < num_tokens and heap:
                _, node = heapq.heappop(heap)
                if self._device_leaf(node):
                    victim = node
                    break
            if victim is None:
                break
            last = victim
            if victim.host:
                freed += self._demote(victim)
            elif not self.write_back:
                freed += len(victim.key)
                self.evictable_size -= len(victim.key)
                self._remove(victim)
                self._delete_tombstones(victim.parent)
            elif self._write(victim):                    # acked at once, no lock
                victim.wt_pending = victim.id
                self.acks.append((victim, False))
                self.check_write_acks()
                freed += self._demote(victim)
            else:
                freed += self._drop_subtree(victim)
        return freed

    def _demote(self, node: HiNode) -> int:
        node.device = False
        self.evictable_size -= len(node.key)
        return len(node.key)

    def _drop_subtree(self, node: HiNode) -> int:
        if node.lb_pending is not None or node.lock_ref or node.host_lock_ref:
            return 0
        below, stack = [], list(node.children.values())
        while stack:
            cur = stack.pop()
            if cur.wt_pending is not None or cur.lb_pending is not None or cur.lock_ref \
                    or cur.host_lock_ref:
                return 0
            below.append(cur)
            stack.extend(cur.children.values())
        for desc in reversed(below):
            self.host_used -= len(desc.key)
            self._remove(desc)
        self.evictable_size -= len(node.key)
        self._remove(node)
        self._delete_tombstones(node.parent)
        return len(node.key)

    def _delete_tombstones(self, node: HiNode) -> None:
        while node is not self.root and not node.children and not node.lock_ref \
                and not node.host_lock_ref and not node.device and not node.host:
            self._remove(node)
            node = node.parent

    def evict_host(self, num_tokens: int) -> int:
        """Host eviction (``drive_host_eviction``); the host tokens freed."""
        freed = 0
        if self.write_back:
            swept = []
            for spare in (True, False):
                if freed >= num_tokens:
                    break
                for node in list(self.duplicates.values()):
                    if freed >= num_tokens:
                        break
                    if not node.device or not node.host:
                        swept.append(node.id)
                        continue
                    if spare and self._device_leaf(node):
                        continue
                    if node.wt_pending is not None or node.lb_pending is not None or \
                            node.host_lock_ref:
                        continue
                    node.host = False
                    self.host_used -= len(node.key)
                    freed += len(node.key)
                    swept.append(node.id)
            for node_id in swept:
                self.duplicates.pop(node_id, None)
        heap = [(self.eviction_key(n), n) for n in self._nodes() if self._host_leaf(n)]
        heapq.heapify(heap)
        while freed < num_tokens and heap:
            _, node = heapq.heappop(heap)
            if not self._host_leaf(node):
                continue
            node.host = False
            self.host_used -= len(node.key)
            freed += len(node.key)
            self._remove(node)
            self._delete_tombstones(node.parent)
            if node.parent is not None and self._host_leaf(node.parent):
                heapq.heappush(heap, (self.eviction_key(node.parent), node.parent))
        return freed
