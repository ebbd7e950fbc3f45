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
* **match** returns the device prefix and the host run below it (``host_hit_length``).
* **evict** / **evict_host**: ``sglang_hieviction``; the acks and **load_back**:
  ``sglang_hitransfers``.
"""

from __future__ import annotations

from pipeline.components.sglang_hieviction import HiEviction
from pipeline.components.sglang_hinode import HiNode
from pipeline.components.sglang_hitransfers import HiTransfers
from pipeline.components.sglang_radix import RadixTree

__all__ = ["HiRadixTree", "WRITE_POLICIES"]

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


class HiRadixTree(HiEviction, HiTransfers, RadixTree):
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

    # ------------------------------------------------------------------ node bookkeeping

    def _dup_track(self, node: HiNode) -> None:
        if node is not self.root and node.device and node.host and node.wt_pending is None \
                and node.lb_pending is None:
            self.duplicates.setdefault(node.id, node)
        else:
            self.duplicates.pop(node.id, None)

    def _to_device(self, node: HiNode) -> None:
        """A node without a device copy gets one (counted protected when locked)."""
        node.device = True
        if node.lock_ref:
            self.protected_size += len(node.key)
        else:
            self.evictable_size += len(node.key)

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
                self._to_device(node)
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
