"""SGLang's radix prefix cache (``RadixCache``, SGLang 0.5.23), its rules in plain Python: the
test oracle of the compiled tree (``pipeline.components.sglang_kradix``,
tests/test_sglang_kradix.py) and the base of HiCache's (``sglang_hiradix``).

The rules of ``python/sglang/srt/mem_cache/radix_cache.py`` and ``evict_policy.py``
(docs/sglang.md cites each line). ``tests/test_sglang_radix.py`` drives it and SGLang's own
class side by side and asserts equal state after every operation.

* **Keys.** A node holds a run of tokens (``key``, a tuple); a parent's children are keyed by
  the first token of the child (page_size 1) or by the tuple of its first page. With
  page_size > 1 every key is first cut to a whole number of pages (``page_aligned``), and
  every common-prefix length is rounded down to a page multiple (``RadixKey.match``).
* **match_prefix(tokens)** walks from the root; each visited child gets the call's one access
  time; a match ending inside a node splits it (``_split_node``) and returns the new upper
  part. Returns (matched tokens, last node). Match never changes hit counts.
* **insert(tokens)** walks the same way (splitting where the key diverges inside a node),
  raises priorities along the path (max), counts a hit on each node beyond
  ``inserted_len``, and hangs the rest of the key as a new leaf (evictable).
* **inc_lock_ref / dec_lock_ref(node)** walk to the root; a node's tokens move from
  evictable to protected when its lock count leaves 0, and back when it returns to 0.
* **evict(n)** pops whole unlocked leaves from a heap ordered by the policy's key until at
  least n tokens are freed; a parent left childless and unlocked joins the heap.

Time is a counter (``tick``): SGLang reads ``time.monotonic()`` at the same points (two reads
per new node, one per match or insert), and its tests pin that clock to the same counter, so
the two trees hold equal access and creation times.
"""

from __future__ import annotations

import heapq

__all__ = ["POLICIES", "Node", "RadixTree"]

#: Eviction policies of SGLang 0.5.23's evict_policy.py that need no configuration.
POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
_ROOT_PRIORITY = -(2 ** 63 - 1)     # -sys.maxsize on 64-bit


class Node:
    """A tree node: a run of tokens, its children, lock count and eviction metadata."""

    __slots__ = ("key", "children", "parent", "lock_ref", "last_access_time",
                 "creation_time", "hit_count", "priority")

    def __init__(self, tree: RadixTree, priority: int = 0) -> None:
        self.key: tuple = ()
        self.children: dict = {}
        self.parent: Node | None = None
        self.lock_ref = 0
        self.last_access_time = tree.tick()
        self.creation_time = tree.tick()
        self.hit_count = 0
        self.priority = priority

    def __lt__(self, other: Node) -> bool:
        return self.last_access_time < other.last_access_time


class RadixTree:
    """SGLang's RadixCache without KV values: token runs, locks, policy-ordered eviction."""

    def __init__(self, page_size: int = 1, policy: str = "lru",
                 slru_threshold: int = 2) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        policy = policy.lower()
        if policy not in POLICIES:
            raise ValueError(f"unknown eviction policy {policy!r}; one of {', '.join(POLICIES)}")
        self.page_size, self.policy, self.slru_threshold = page_size, policy, slru_threshold
        self.clock = 0.0
        self.reset()

    # ------------------------------------------------------------------ helpers

    def tick(self) -> float:
        """The next clock reading (SGLang's time.monotonic(), pinned to a counter)."""
        self.clock += 1.0
        return self.clock

    def _aligned(self, tokens) -> tuple:
        tokens = tuple(tokens)
        if self.page_size == 1:
            return tokens
        return tokens[:len(tokens) // self.page_size * self.page_size]

    def _child_key(self, tokens: tuple, offset: int = 0):
        if self.page_size == 1:
            return tokens[offset]
        return tokens[offset:offset + self.page_size]

    def _match_len(self, stored: tuple, key: tuple, offset: int) -> int:
        """Common prefix of ``stored`` and ``key[offset:]``, rounded down to whole pages:
        one C-level comparison when all of ``stored`` matches, else a binary search."""
        n = min(len(stored), len(key) - offset)
        if stored[:n] == key[offset:offset + n]:
            i = n
        else:
            lo, hi = 0, n                       # stored[:lo] matches; stored[:hi] does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if stored[lo:mid] == key[offset + lo:offset + mid]:
                    lo = mid
                else:
                    hi = mid
            i = lo
        return i if self.page_size == 1 else i // self.page_size * self.page_size

    def eviction_key(self, node: Node):
        """The policy's heap key (evict_policy.py): smaller is evicted first."""
        policy = self.policy
        if policy == "lru":
            return node.last_access_time
        if policy == "lfu":
            return (node.hit_count, node.last_access_time)
        if policy == "fifo":
            return node.creation_time
        if policy == "mru":
            return -node.last_access_time
        if policy == "filo":
            return -node.creation_time
        if policy == "priority":
            return (node.priority, node.last_access_time)
        return (1 if node.hit_count >= self.slru_threshold else 0, node.last_access_time)

    # ------------------------------------------------------------------ API

    def reset(self) -> None:
        self.root = Node(self, priority=_ROOT_PRIORITY)
        self.root.lock_ref = 1
        self.evictable_size = 0
        self.protected_size = 0
        self.evictable_leaves: set[Node] = set()
        self.heap: list = []            # (key, access, seq, node), stale entries skipped
        self.pushes = 0

    def match_prefix(self, tokens) -> tuple[int, Node]:
        """(cached prefix length, last matched node); may split a node."""
        key = self._aligned(tokens)
        if not key:
            return 0, self.root
        node = self.root
        access = self.tick()
        node.last_access_time = access
        matched = 0
        offset = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            child.last_access_time = access
            self._push(child)
            length = self._match_len(child.key, key, offset)
            if length < len(child.key):
                node = self._split(child, length)
                matched += length
                break
            matched += length
            node = child
            offset += length
        return matched, node

    def insert(self, tokens, priority: int = 0, inserted_len: int = 0) -> tuple[int, Node]:
        """(tokens already cached, node ending the key): adds the rest as a new leaf."""
        key = self._aligned(tokens)
        priority = priority or 0
        node = self.root
        node.last_access_time = self.tick()
        access = node.last_access_time
        node.priority = max(node.priority, priority)
        if not key:
            return 0, node
        total = 0
        offset = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            node = child
            node.last_access_time = access
            self._push(node)
            length = self._match_len(node.key, key, offset)
            total += length
            offset += length
            if length < len(node.key):
                node = self._split(node, length)
            node.priority = max(node.priority, priority)
            if total > inserted_len:
                node.hit_count += 1
            self._push(node)
        if offset < len(key):
            rest = key[offset:]
            leaf = Node(self, priority=priority)
            leaf.parent = node
            leaf.key = rest
            if total + len(rest) > inserted_len:
                leaf.hit_count += 1
            node.children[self._child_key(rest)] = leaf
            self.evictable_size += len(rest)
            self._update_leaf_status(node)
            self._update_leaf_status(leaf)
            node = leaf
        return total, node

    def inc_lock_ref(self, node: Node) -> int:
        """Lock the path root..node; returns the change of the evictable size (<= 0)."""
        delta = 0
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
                delta -= len(node.key)
            node.lock_ref += 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def dec_lock_ref(self, node: Node) -> int:
        """Unlock the path root..node; returns the change of the evictable size (>= 0)."""
        delta = 0
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def evict(self, num_tokens: int) -> int:
        """Drop whole unlocked leaves, policy order, until >= num_tokens freed; the count."""
        heap, leaves, evicted = self.heap, self.evictable_leaves, 0
        if len(heap) > 2 * len(leaves) + 1024:
            self._rebuild()
            heap = self.heap
        while evicted < num_tokens and heap:
            key, access, _, leaf = heapq.heappop(heap)
            if leaf not in leaves or key != self.eviction_key(leaf) or \
                    access != leaf.last_access_time:
                continue                        # stale: the node changed or left
            evicted += len(leaf.key)
            self._delete_leaf(leaf)             # a parent left a leaf is pushed there
        return evicted

    def total_size(self) -> int:
        """Tokens in the tree: every node but the root is either evictable or protected."""
        return self.evictable_size + self.protected_size

    # ------------------------------------------------------------------ internals

    def _split(self, child: Node, length: int) -> Node:
        """Cut ``child`` after ``length`` tokens; the new upper node is returned."""
        upper = Node(self, priority=child.priority)
        upper.hit_count = child.hit_count
        upper.parent = child.parent
        upper.lock_ref = child.lock_ref
        upper.key = child.key[:length]
        upper.children = {self._child_key(child.key, length): child}
        child.parent = upper
        child.key = child.key[length:]
        upper.parent.children[self._child_key(upper.key)] = upper
        return upper

    def _delete_leaf(self, node: Node) -> None:
        del node.parent.children[self._child_key(node.key)]
        self.evictable_size -= len(node.key)
        self.evictable_leaves.discard(node)
        self._update_leaf_status(node.parent)

    def _push(self, node: Node) -> None:
        """Queue ``node`` under its current key when it is an evictable leaf (SGLang builds
        the heap afresh at each evict; entries whose node changed since are skipped)."""
        if node in self.evictable_leaves:
            self.pushes += 1
            heapq.heappush(self.heap, (self.eviction_key(node), node.last_access_time,
                                       self.pushes, node))

    def _rebuild(self) -> None:
        self.heap = []
        for node in self.evictable_leaves:
            self.pushes += 1
            self.heap.append((self.eviction_key(node), node.last_access_time, self.pushes,
                              node))
        heapq.heapify(self.heap)

    def _update_leaf_status(self, node: Node) -> None:
        # SGLang also skips nodes whose value is None (evicted); RadixCache never sets that
        # (an evicted leaf leaves its parent's children), so a child here is resident.
        if node.lock_ref > 0 or node.children:
            self.evictable_leaves.discard(node)
        elif node not in self.evictable_leaves:
            self.evictable_leaves.add(node)
            self._push(node)
