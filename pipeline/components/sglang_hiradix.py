"""SGLang 0.5.23's HiCache over its radix tree (``UnifiedRadixCache`` with ``init_hicache``,
one full-attention component), its decisions in plain Python: which node is copied to the
host and when, what eviction keeps, which host nodes go, what a match finds on the host and
what a load back brings. tests/test_sglang_hiradix.py holds it equal to SGLang's own code
(scripts/sglang_hicache_reference.py) after every operation; docs/sglang.md cites the lines.

A node holds a run of tokens on the device, on the host, or both (``device``, ``host``).
Per write policy (``write_through_threshold`` 1 for write_through, 2 for
write_through_selective; write_back counts no hits and copies nothing at insert):

* **insert** walks like ``RadixCache`` (split, priority, a hit on each node beyond
  ``inserted_len``), restoring an evicted node's device copy from the request's KV; a node
  whose hits reach the threshold without a host copy is copied together with its uncopied
  ancestors (ancestors first, stopping at the first that does not fit the host after host
  eviction); each copy locks its node until its ack (``check_events``).
* **evict(n)** takes device leaves (no device child, unlocked) in policy order: one with a
  host copy is *demoted* (device copy freed, the node stays), one without is deleted, or,
  under write_back, copied first (host eviction for room; the subtree dropped if none) then
  demoted. A demoted leaf's parent may become a device leaf in the same call.
* **evict_host(n)** (when a copy needs room): under write_back first the nodes on both tiers
  (``full_host_duplicates``, in their registration order; evictable device leaves spared on
  the first pass), then host leaves (evicted, copied, unlocked, childless) in policy order.
* **match** returns the device prefix and the host run below it (``host_hit_length``).
* **load_back** (``init_load_back``) brings a host run of at least ``load_back_threshold``
  (10) tokens back to the device (device eviction for room), the nodes locked until the ack.
"""

from __future__ import annotations

import heapq

from pipeline.components.sglang_radix import RadixTree

__all__ = ["HiNode", "HiRadixTree", "WRITE_POLICIES"]

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
LOAD_BACK_THRESHOLD = 10


class HiNode:
    """A node: token run, device / host residency, locks, eviction metadata."""

    __slots__ = ("key", "children", "parent", "lock_ref", "host_lock_ref", "last_access_time",
                 "creation_time", "hit_count", "priority", "device", "host", "wt_pending",
                 "lb_pending", "id", "host_uuid")

    def __init__(self, tree: HiRadixTree, priority: int = 0) -> None:
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


class HiRadixTree(RadixTree):
    """The tree with HiCache on: ``device_tokens`` / ``host_tokens`` pools, a write policy.
    The device pool here holds only the tree's tokens (``load_back`` evicts for its room)."""

    def __init__(self, page_size: int = 1, policy: str = "lru", *, device_tokens: int,
                 host_tokens: int, write_policy: str = "write_through") -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"unknown write policy {write_policy!r}")
        self.ids = 0
        self.write_policy = write_policy
        self.write_back = write_policy == "write_back"
        self.threshold = 1 if write_policy == "write_through" else 2
        self.device_tokens, self.host_tokens = device_tokens, host_tokens
        super().__init__(page_size, policy)

    def reset(self) -> None:
        self.root = HiNode(self, priority=-(2 ** 63 - 1))
        self.root.device = True
        self.evictable_size = self.protected_size = 0
        self.host_used = 0
        self.written = self.loaded = 0
        self.acks: list[tuple[HiNode, bool]] = []        # (node, locked): write acks
        self.load_acks: list[tuple[HiNode, int | None]] = []
        self.duplicates: dict[int, HiNode] = {}
        self.pending_splits: dict[int, list[HiNode]] = {}

    # ------------------------------------------------------------------ leaf sets

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

    def _dup_track(self, node: HiNode) -> None:
        if node is not self.root and node.device and node.host and node.wt_pending is None \
                and node.lb_pending is None:
            self.duplicates.setdefault(node.id, node)
        else:
            self.duplicates.pop(node.id, None)

    def _remove(self, node: HiNode) -> None:
        del node.parent.children[self._child_key(node.key)]
        self.duplicates.pop(node.id, None)

    # ------------------------------------------------------------------ match / insert

    def match(self, tokens) -> tuple[int, int, HiNode, HiNode]:
        """(device prefix, host hit, deepest matched node, deepest device node)."""
        key = self._aligned(tokens)
        node = best = best_device = self.root
        if not key:
            return 0, 0, best, best_device
        access = self.tick()
        device_len = host_len = offset = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None or (not child.device and not child.host):
                break                                    # a dead node ends the walk
            length = self._match_len(child.key, key, offset)
            split = length < len(child.key)
            node = best = self._split(child, length) if split else child
            if node.device:
                best_device = node
                device_len += length
            else:
                host_len += length
            if split:
                break
            offset += length
        walk = best
        while walk is not None:
            walk.last_access_time = access
            walk = walk.parent
        return device_len, host_len, best, best_device

    def match_prefix(self, tokens):
        device, _, _, last_device = self.match(tokens)
        return device, last_device

    def insert(self, tokens, priority: int = 0, inserted_len: int = 0,
               prev_prefix_len: int = 0):
        """(tokens already cached, node ending the key), as ``RadixTree.insert``; the request's
        slots the walk frees as duplicates (device nodes past ``prev_prefix_len``; an evicted
        node adopts them instead) are left in ``freed``."""
        self.freed = 0
        key = self._aligned(tokens)
        priority = priority or 0
        node = self.root
        access = self.tick()
        node.last_access_time = access
        node.priority = max(node.priority, priority)
        if not key:
            return 0, node
        total = offset = 0
        backups: list[HiNode] = []
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            child.last_access_time = access
            length = self._match_len(child.key, key, offset)
            if length < len(child.key):
                child = self._split(child, length)
            node = child
            node.priority = max(node.priority, priority)
            if node.device:
                self.freed += max(0, length - max(0, prev_prefix_len - total))
            else:                                        # restored from the request's KV
                node.device = True
                if node.lock_ref:
                    self.protected_size += len(node.key)
                else:
                    self.evictable_size += len(node.key)
                self._dup_track(node)
            total += length
            offset += length
            if total > inserted_len and self._count_hit(node):
                backups.append(node)
        if offset < len(key):
            rest = key[offset:]
            leaf = HiNode(self, priority=priority)
            leaf.parent, leaf.key, leaf.device = node, rest, True
            node.children[self._child_key(rest)] = leaf
            self.evictable_size += len(rest)
            node = leaf
            if total + len(rest) > inserted_len and self._count_hit(leaf):
                backups.append(leaf)
        for target in backups:
            self._write_through(target)
        return total, node

    def _count_hit(self, node: HiNode) -> bool:
        """``_inc_hit_count_and_check``: a hit (none under write_back); copy now?"""
        if self.write_back:
            return False
        node.hit_count += 1
        return not node.host and node.hit_count >= self.threshold

    def _write_through(self, node: HiNode) -> None:
        chain = [node]
        ancestor = node.parent
        while ancestor is not self.root and not ancestor.host:
            chain.append(ancestor)
            ancestor = ancestor.parent
        for target in reversed(chain):
            if target.host:
                continue
            if not self._write(target):
                return
            self.inc_lock_ref(target)
            target.wt_pending = target.id
            self.acks.append((target, True))

    def _write(self, node: HiNode) -> bool:
        """A device -> host copy of ``node``: host eviction for room; False if none."""
        n = len(node.key)
        free = self.host_tokens - self.host_used
        if free < n and self.evict_host(n - free) < n - free:
            return False
        self.host_used += n
        self.written += n
        node.host = True
        return True

    # ------------------------------------------------------------------ locks

    def inc_lock_ref(self, node: HiNode) -> int:
        delta = 0
        while node is not self.root and not node.device:
            node.lock_ref += 1
            node = node.parent
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
                delta -= len(node.key)
            node.lock_ref += 1
            node = node.parent
        return delta

    def dec_lock_ref(self, node: HiNode) -> None:
        while node is not self.root:
            if node.lock_ref == 1 and node.device:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent

    def _split(self, child: HiNode, length: int) -> HiNode:
        upper = HiNode(self, priority=child.priority)
        upper.hit_count, upper.lock_ref = child.hit_count, child.lock_ref
        upper.host_lock_ref = child.host_lock_ref
        upper.host_uuid, child.host_uuid = child.host_uuid, None
        upper.device, upper.host = child.device, child.host
        upper.wt_pending, upper.lb_pending = child.wt_pending, child.lb_pending
        upper.creation_time = child.creation_time
        upper.parent = child.parent
        upper.key = child.key[:length]
        upper.children = {self._child_key(child.key, length): child}
        child.parent = upper
        child.key = child.key[length:]
        child.last_access_time = self.tick()
        upper.parent.children[self._child_key(upper.key)] = upper
        if upper.wt_pending is not None:                 # the ack covers both parts
            self.pending_splits.setdefault(upper.wt_pending, []).append(upper)
        self._dup_track(upper)
        return upper

    # ------------------------------------------------------------------ eviction

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

    # ------------------------------------------------------------------ acks, load back

    def check_write_acks(self) -> None:
        for node, locked in self.acks:
            for done in [node] + self.pending_splits.pop(node.id, []):
                if done.wt_pending == node.id:
                    done.wt_pending = None
                    self._dup_track(done)
            if locked:
                self.dec_lock_ref(node)
        self.acks = []

    def check_events(self) -> None:
        """``check_hicache_events``: every write and load acked (transfers finish at once)."""
        self.check_write_acks()
        for node, locked_host in self.load_acks:
            self.dec_lock_ref(node)
            self._release_host_lock(node, locked_host)
            walk = node
            while walk is not self.root:
                if self.write_back:
                    if walk.lb_pending == node.id:
                        walk.lb_pending = None
                        self._dup_track(walk)
                else:
                    self._dup_track(walk)
                walk = walk.parent
        self.load_acks = []

    def _host_lock(self, node: HiNode) -> int | None:
        """Host-lock ``node`` (with a host copy, or any under write_back): the receipt."""
        if not node.host and not self.write_back:
            return None
        if node.host_uuid is None:
            self.ids += 1
            node.host_uuid = self.ids
        node.host_lock_ref += 1
        return node.host_uuid

    def _release_host_lock(self, node: HiNode, uuid: int | None) -> None:
        while uuid is not None:
            if not node.host and not self.write_back:
                return
            node.host_lock_ref -= 1
            if node.host_uuid == uuid:
                return
            node = node.parent

    def load_back(self, tokens, mem_quota: int | None = None) -> int:
        """``init_load_back`` for a request of ``tokens`` (the device pool holding only the
        tree): the host tokens brought back."""
        _, host, best, last = self.match(tokens)
        return self.init_load_back(best, last, host, self.device_tokens - self.total_size(),
                                   mem_quota)[0]

    def init_load_back(self, best: HiNode, last: HiNode, host_hit: int, available: int,
                       mem_quota: int | None = None) -> tuple[int, HiNode, int]:
        """``init_load_back`` (``load_back``): (tokens loaded, the request's last node,
        device tokens evicted for room), ``available`` device tokens free before."""
        if best.device and host_hit == 0:
            return 0, last, 0
        locked_host = self._host_lock(best)
        delta = -self.inc_lock_ref(best)
        run, walk = [], best
        while not walk.device:
            run.append(walk)
            walk = walk.parent
        if any(n.lb_pending not in (None, best.id) for n in run):
            run = []                                     # pinned by another load back
        n = sum(len(node.key) for node in run)
        evicted = 0
        if n < LOAD_BACK_THRESHOLD or (mem_quota is not None and n + delta > mem_quota):
            self.dec_lock_ref(best)
            self._release_host_lock(best, locked_host)
            return 0, last, 0
        if available < n:
            evicted = self.evict(n - available)
            if available + evicted < n:
                self.dec_lock_ref(best)
                self._release_host_lock(best, locked_host)
                return 0, last, evicted
        self.loaded += n
        self.dec_lock_ref(best)
        for node in run:
            if self.write_back:
                node.lb_pending = best.id
            node.device = True
            if node.lock_ref:
                self.protected_size += len(node.key)
            else:
                self.evictable_size += len(node.key)
        self.inc_lock_ref(best)
        self.load_acks.append((best, locked_host))
        return n, best, evicted

    @property
    def host_available(self) -> int:
        return self.host_tokens - self.host_used

    def node_states(self) -> list:
        """Every node but the root: (path, on device, on host, lock_ref, hits)."""
        rows, stack = [], [((), self.root)]
        while stack:
            prefix, node = stack.pop()
            path = prefix + node.key
            rows.append((path, node.device, node.host, node.lock_ref, node.hit_count))
            stack.extend((path, child) for child in node.children.values())
        return sorted(rows)[1:]
