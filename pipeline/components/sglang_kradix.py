"""SGLang's radix prefix cache (``RadixCache``, SGLang 0.5.23) compiled, over flat arrays.

The rules of ``tests/oracles/sglang_radix.py`` (which is proven equal to SGLang's own class
and against which ``tests/test_sglang_kradix.py`` drives this one), for the compiled
scheduler (``sglang_ksched``). A tree is a tuple ``(NI, TG, H)``:

* ``NI[node]``: one row per node (the columns ``N_*``): parent, the key as a span of the
  token array ``TOK`` (start, length: keys are runs of some request's tokens, which never
  change, so a split only cuts a span in two), lock count, access and creation ticks, hits,
  priority, children as a doubly linked list in insertion order (a dict's order: a split's
  upper node takes the old child's place), whether the node is an evictable leaf, and the
  free list (deleted nodes' rows are reused). Node 0 is the root. A child is found by
  walking its parent's list and comparing first pages.
* ``TG``: the clock, evictable / protected sizes, counts, page size, policy.
* ``H``: the lazy eviction heap, rows (key1, key2, access, seq, node), smallest first;
  entries whose node changed since are skipped, as in the oracle. Live leaves never tie on
  (key, access) (every leaf's access tick is its own), so the order is the oracle's.

Capacity: a tree of ``pool`` tokens holds at most ``pool // page + 1`` nodes (each holds at
least one page of the pool); ``new_tree`` sizes the arrays so nothing grows.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper, kernel

__all__ = ["POLICIES", "RadixTree", "new_tree", "tree_op", "OP_MATCH", "OP_INSERT", "OP_LOCK",
           "OP_UNLOCK", "OP_EVICT", "OP_RESET", "N_COLUMNS"]

#: Eviction policies of SGLang 0.5.23's evict_policy.py that need no configuration.
POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
ROOT_PRIORITY = -(2 ** 63 - 1)      # -sys.maxsize on 64-bit

(N_PAR, N_KS, N_KL, N_LOCK, N_ACC, N_CRE, N_HIT, N_PRIO, N_FC, N_LC, N_NS, N_PS, N_LEAF,
 N_NEXTFREE) = range(14)
N_COLUMNS = 14
(T_CLOCK, T_EVICT, T_PROT, T_FREE, T_USED, T_HSIZE, T_PUSH, T_PAGE, T_POLICY, T_SLRU,
 T_NLEAF) = range(11)
T_COLUMNS = 11
OP_MATCH, OP_INSERT, OP_LOCK, OP_UNLOCK, OP_EVICT, OP_RESET = range(6)


def new_tree(nodes: int, page_size: int = 1, policy: str = "lru",
             slru_threshold: int = 2) -> tuple:
    """An empty tree with room for ``nodes`` nodes (root included)."""
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    policy = policy.lower()
    if policy not in POLICIES:
        raise ValueError(f"unknown eviction policy {policy!r}; one of {', '.join(POLICIES)}")
    nodes = max(int(nodes), 2)
    NI = np.zeros((nodes, N_COLUMNS), np.int64)
    TG = np.zeros(T_COLUMNS, np.int64)
    H = np.zeros((2 * nodes + 16, 5), np.int64)
    TG[T_PAGE], TG[T_POLICY], TG[T_SLRU] = page_size, POLICIES.index(policy), slru_threshold
    tree_op((NI, TG, H), np.zeros(1, np.int64), OP_RESET, 0, 0, 0, 0)
    return NI, TG, H


# --------------------------------------------------------------------------- nodes

@helper
def tick(TG):
    TG[T_CLOCK] += 1
    return TG[T_CLOCK]


@helper
def new_node(T, priority):
    """A fresh node (two clock reads, as SGLang's TreeNode): its row."""
    NI, TG = T[0], T[1]
    n = TG[T_FREE]
    if n >= 0:
        TG[T_FREE] = NI[n, N_NEXTFREE]
    else:
        n = TG[T_USED]
        TG[T_USED] += 1
    NI[n, :] = 0
    NI[n, N_PAR] = -1
    NI[n, N_FC] = NI[n, N_LC] = NI[n, N_NS] = NI[n, N_PS] = -1
    NI[n, N_NEXTFREE] = -1
    NI[n, N_ACC] = tick(TG)
    NI[n, N_CRE] = tick(TG)
    NI[n, N_PRIO] = priority
    return n


@helper
def reset(T):
    NI, TG, H = T
    clock = TG[T_CLOCK]
    TG[:T_PAGE] = 0
    TG[T_NLEAF] = 0
    TG[T_CLOCK] = clock
    TG[T_FREE] = -1
    root = new_node(T, ROOT_PRIORITY)
    NI[root, N_LOCK] = 1


@helper
def append_child(NI, parent, child):
    last = NI[parent, N_LC]
    NI[child, N_PS], NI[child, N_NS] = last, -1
    if last >= 0:
        NI[last, N_NS] = child
    else:
        NI[parent, N_FC] = child
    NI[parent, N_LC] = child
    NI[child, N_PAR] = parent


@helper
def unlink_child(NI, child):
    parent, prev, nxt = NI[child, N_PAR], NI[child, N_PS], NI[child, N_NS]
    if prev >= 0:
        NI[prev, N_NS] = nxt
    else:
        NI[parent, N_FC] = nxt
    if nxt >= 0:
        NI[nxt, N_PS] = prev
    else:
        NI[parent, N_LC] = prev


@helper
def find_child(NI, TOK, page, node, Q, start):
    """The child of ``node`` whose first page equals ``Q[start:start + page]`` (``Q``: the
    tree's own token array, or a query); -1."""
    c = NI[node, N_FC]
    while c >= 0:
        ks = NI[c, N_KS]
        same = True
        for i in range(page):
            if TOK[ks + i] != Q[start + i]:
                same = False
                break
        if same:
            return c
        c = NI[c, N_NS]
    return -1


@helper
def match_len(NI, TOK, page, c, Q, start, length):
    """Common prefix of child ``c``'s key and ``Q[start:start + length]``, whole pages."""
    ks, n = NI[c, N_KS], min(NI[c, N_KL], length)
    i = 0
    while i < n and TOK[ks + i] == Q[start + i]:
        i += 1
    return i // page * page


# --------------------------------------------------------------------------- heap

@helper
def key_of(NI, TG, n):
    """The policy's heap key (evict_policy.py), two numbers: smaller is evicted first."""
    policy = TG[T_POLICY]
    if policy == 0:
        return NI[n, N_ACC], 0
    if policy == 1:
        return NI[n, N_HIT], NI[n, N_ACC]
    if policy == 2:
        return NI[n, N_CRE], 0
    if policy == 3:
        return -NI[n, N_ACC], 0
    if policy == 4:
        return -NI[n, N_CRE], 0
    if policy == 5:
        return NI[n, N_PRIO], NI[n, N_ACC]
    return (1 if NI[n, N_HIT] >= TG[T_SLRU] else 0), NI[n, N_ACC]


@helper
def less(H, a, b):
    for j in range(4):
        if H[a, j] != H[b, j]:
            return H[a, j] < H[b, j]
    return False


@helper
def swap(H, a, b):
    for j in range(5):
        H[a, j], H[b, j] = H[b, j], H[a, j]


@helper
def sift_up(H, i):
    while i > 0:
        parent = (i - 1) // 2
        if less(H, i, parent):
            swap(H, i, parent)
            i = parent
        else:
            break


@helper
def sift_down(H, size, i):
    while True:
        left, smallest = 2 * i + 1, i
        if left < size and less(H, left, smallest):
            smallest = left
        if left + 1 < size and less(H, left + 1, smallest):
            smallest = left + 1
        if smallest == i:
            break
        swap(H, i, smallest)
        i = smallest


@helper
def put(T, n):
    NI, TG, H = T
    if TG[T_HSIZE] >= H.shape[0]:
        rebuild(T)
    k1, k2 = key_of(NI, TG, n)
    TG[T_PUSH] += 1
    i = TG[T_HSIZE]
    H[i, 0], H[i, 1], H[i, 2], H[i, 3], H[i, 4] = k1, k2, NI[n, N_ACC], TG[T_PUSH], n
    TG[T_HSIZE] = i + 1
    sift_up(H, i)


@helper
def push(T, n):
    """Queue ``n`` under its current key when it is an evictable leaf."""
    if T[0][n, N_LEAF]:
        put(T, n)


@helper
def rebuild(T):
    """The heap afresh from the evictable leaves (stale entries dropped)."""
    NI, TG, H = T
    TG[T_HSIZE] = 0
    for n in range(TG[T_USED]):
        if NI[n, N_LEAF]:
            k1, k2 = key_of(NI, TG, n)
            TG[T_PUSH] += 1
            i = TG[T_HSIZE]
            H[i, 0], H[i, 1], H[i, 2], H[i, 3], H[i, 4] = k1, k2, NI[n, N_ACC], TG[T_PUSH], n
            TG[T_HSIZE] = i + 1
    for i in range(TG[T_HSIZE] // 2 - 1, -1, -1):
        sift_down(H, TG[T_HSIZE], i)


@helper
def update_leaf(T, n):
    NI, TG = T[0], T[1]
    if NI[n, N_LOCK] > 0 or NI[n, N_FC] >= 0:
        if NI[n, N_LEAF]:
            NI[n, N_LEAF] = 0
            TG[T_NLEAF] -= 1
    elif not NI[n, N_LEAF]:
        NI[n, N_LEAF] = 1
        TG[T_NLEAF] += 1
        put(T, n)


# --------------------------------------------------------------------------- API

@helper
def take_place_above(NI, upper, c, length):
    """The tree part of ``_split``: ``upper`` holds ``c``'s first ``length`` tokens, takes
    c's place among its siblings and becomes c's parent (HiCache's split shares it)."""
    parent = NI[c, N_PAR]
    NI[upper, N_KS], NI[upper, N_KL] = NI[c, N_KS], length
    NI[upper, N_PAR] = parent
    prev, nxt = NI[c, N_PS], NI[c, N_NS]
    NI[upper, N_PS], NI[upper, N_NS] = prev, nxt
    if prev >= 0:
        NI[prev, N_NS] = upper
    else:
        NI[parent, N_FC] = upper
    if nxt >= 0:
        NI[nxt, N_PS] = upper
    else:
        NI[parent, N_LC] = upper
    NI[upper, N_FC] = NI[upper, N_LC] = -1
    append_child(NI, upper, c)
    NI[c, N_KS] += length
    NI[c, N_KL] -= length


@helper
def split(T, c, length):
    """Cut ``c`` after ``length`` tokens; the new upper node."""
    NI = T[0]
    upper = new_node(T, NI[c, N_PRIO])
    NI[upper, N_HIT], NI[upper, N_LOCK] = NI[c, N_HIT], NI[c, N_LOCK]
    take_place_above(NI, upper, c, length)
    return upper


@helper
def match_prefix(T, TOK, start, length):
    """(cached prefix of ``TOK[start:start + length]``, last node); may split a node."""
    NI, TG = T[0], T[1]
    page = TG[T_PAGE]
    length = length // page * page
    if length <= 0:
        return 0, 0
    node = 0
    access = tick(TG)
    NI[node, N_ACC] = access
    offset = 0
    while offset < length:
        child = find_child(NI, TOK, page, node, TOK, start + offset)
        if child < 0:
            break
        NI[child, N_ACC] = access
        push(T, child)
        m = match_len(NI, TOK, page, child, TOK, start + offset, length - offset)
        if m < NI[child, N_KL]:
            node = split(T, child, m)
            offset += m
            break
        node = child
        offset += m
    return offset, node


@helper
def insert(T, TOK, start, length, priority, inserted_len):
    """(tokens already cached, node ending the key): adds the rest as a new leaf."""
    NI, TG = T[0], T[1]
    page = TG[T_PAGE]
    length = length // page * page
    node = 0
    access = tick(TG)
    NI[node, N_ACC] = access
    NI[node, N_PRIO] = max(NI[node, N_PRIO], priority)
    if length <= 0:
        return 0, node
    offset = 0
    while offset < length:
        child = find_child(NI, TOK, page, node, TOK, start + offset)
        if child < 0:
            break
        node = child
        NI[node, N_ACC] = access
        push(T, node)
        m = match_len(NI, TOK, page, node, TOK, start + offset, length - offset)
        offset += m
        if m < NI[node, N_KL]:
            node = split(T, node, m)
        NI[node, N_PRIO] = max(NI[node, N_PRIO], priority)
        if offset > inserted_len:
            NI[node, N_HIT] += 1
        push(T, node)
    total = offset
    if offset < length:
        leaf = new_node(T, priority)
        NI[leaf, N_KS], NI[leaf, N_KL] = start + offset, length - offset
        append_child(NI, node, leaf)
        if length > inserted_len:
            NI[leaf, N_HIT] += 1
        TG[T_EVICT] += length - offset
        update_leaf(T, node)
        update_leaf(T, leaf)
        node = leaf
    return total, node


@helper
def inc_lock(T, node):
    """Lock the path root..node; the change of the evictable size (<= 0)."""
    NI, TG = T[0], T[1]
    delta = 0
    while node != 0:
        if NI[node, N_LOCK] == 0:
            size = NI[node, N_KL]
            TG[T_EVICT] -= size
            TG[T_PROT] += size
            delta -= size
        NI[node, N_LOCK] += 1
        update_leaf(T, node)
        node = NI[node, N_PAR]
    return delta


@helper
def dec_lock(T, node):
    """Unlock the path root..node; the change of the evictable size (>= 0)."""
    NI, TG = T[0], T[1]
    delta = 0
    while node != 0:
        if NI[node, N_LOCK] == 1:
            size = NI[node, N_KL]
            TG[T_EVICT] += size
            TG[T_PROT] -= size
            delta += size
        NI[node, N_LOCK] -= 1
        update_leaf(T, node)
        node = NI[node, N_PAR]
    return delta


@helper
def evict(T, num_tokens):
    """Drop whole unlocked leaves, policy order, until >= num_tokens freed; the count."""
    NI, TG, H = T
    if TG[T_HSIZE] > 2 * TG[T_NLEAF] + 1024:
        rebuild(T)
    evicted = 0
    while evicted < num_tokens and TG[T_HSIZE] > 0:
        k1, k2, acc, n = H[0, 0], H[0, 1], H[0, 2], H[0, 4]
        size = TG[T_HSIZE] - 1
        TG[T_HSIZE] = size
        if size > 0:
            for j in range(5):
                H[0, j] = H[size, j]
            sift_down(H, size, 0)
        if not NI[n, N_LEAF] or acc != NI[n, N_ACC]:
            continue
        c1, c2 = key_of(NI, TG, n)
        if c1 != k1 or c2 != k2:
            continue
        evicted += NI[n, N_KL]
        parent = NI[n, N_PAR]                   # delete the leaf, recycle its row
        unlink_child(NI, n)
        TG[T_EVICT] -= NI[n, N_KL]
        NI[n, N_LEAF] = 0
        TG[T_NLEAF] -= 1
        NI[n, N_NEXTFREE] = TG[T_FREE]
        TG[T_FREE] = n
        update_leaf(T, parent)
    return evicted


@kernel
def tree_op(T, TOK, op, start, length, priority, inserted_len):
    """One operation from Python (tests, ``sglang_gpu``): (result, node).

    ``OP_MATCH`` / ``OP_INSERT`` on ``TOK[start:start + length]``; ``OP_LOCK`` /
    ``OP_UNLOCK`` node ``start``; ``OP_EVICT`` ``length`` tokens; ``OP_RESET``."""
    if op == OP_MATCH:
        return match_prefix(T, TOK, start, length)
    if op == OP_INSERT:
        return insert(T, TOK, start, length, priority, inserted_len)
    if op == OP_LOCK:
        return inc_lock(T, start), start
    if op == OP_UNLOCK:
        return dec_lock(T, start), start
    if op == OP_EVICT:
        return evict(T, length), 0
    reset(T)
    return 0, 0


class RadixTree:
    """The compiled tree behind the oracle's methods (``match_prefix``, ``insert``,
    ``inc_lock_ref``, ``dec_lock_ref``, ``evict``, ``total_size``), for Python callers that
    drive it one operation at a time (``sglang_gpu``, the tests). Nodes are row numbers;
    inserted keys are kept in a token buffer (the nodes' spans point there), matched ones
    only written past its end. The arrays grow when a node more might not fit."""

    def __init__(self, page_size: int = 1, policy: str = "lru", slru_threshold: int = 2,
                 nodes: int = 64) -> None:
        self.page_size, self.policy = page_size, policy.lower()
        self.arrays = new_tree(nodes, page_size, policy, slru_threshold)
        self.TOK = np.zeros(1024, np.int64)
        self.used = 0                              # tokens kept for the spans

    @property
    def root(self) -> int:
        return 0

    @property
    def clock(self) -> int:
        return int(self.arrays[1][T_CLOCK])

    @property
    def evictable_size(self) -> int:
        return int(self.arrays[1][T_EVICT])

    @property
    def protected_size(self) -> int:
        return int(self.arrays[1][T_PROT])

    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    def _room(self, tokens: list, keep: bool) -> int:
        NI, TG, H = self.arrays
        if TG[T_USED] + 4 > NI.shape[0] and TG[T_FREE] < 0:      # a split and a leaf
            grown = np.zeros((2 * NI.shape[0], N_COLUMNS), np.int64)
            grown[:NI.shape[0]] = NI
            heap = np.zeros((2 * grown.shape[0] + 16, 5), np.int64)
            heap[:H.shape[0]] = H
            self.arrays = (grown, TG, heap)
        size = len(tokens)
        if self.used + size > self.TOK.shape[0]:
            TOK = np.zeros(2 * (self.used + size), np.int64)
            TOK[:self.used] = self.TOK[:self.used]
            self.TOK = TOK
        start = self.used
        self.TOK[start:start + size] = tokens
        if keep:
            self.used += size
        return start

    def match_prefix(self, tokens) -> tuple[int, int]:
        """(cached prefix length, last matched node); may split a node."""
        start = self._room(tokens, False)
        hit, node = tree_op(self.arrays, self.TOK, OP_MATCH, start, len(tokens), 0, 0)
        return int(hit), int(node)

    def insert(self, tokens, priority: int = 0, inserted_len: int = 0) -> tuple[int, int]:
        """(tokens already cached, node ending the key): adds the rest as a new leaf."""
        start = self._room(tokens, True)
        hit, node = tree_op(self.arrays, self.TOK, OP_INSERT, start, len(tokens),
                            priority or 0, inserted_len)
        return int(hit), int(node)

    def inc_lock_ref(self, node: int) -> int:
        return int(tree_op(self.arrays, self.TOK, OP_LOCK, node, 0, 0, 0)[0])

    def dec_lock_ref(self, node: int) -> int:
        return int(tree_op(self.arrays, self.TOK, OP_UNLOCK, node, 0, 0, 0)[0])

    def evict(self, num_tokens: int) -> int:
        return int(tree_op(self.arrays, self.TOK, OP_EVICT, 0, num_tokens, 0, 0)[0])

    def reset(self) -> None:
        tree_op(self.arrays, self.TOK, OP_RESET, 0, 0, 0, 0)

    def nodes(self) -> list[tuple]:
        """Every node: (path of tokens from the root, lock, access, creation, hits,
        priority), sorted: the state the tests compare with the oracle's."""
        NI = self.arrays[0]
        out, stack = [], [(0, ())]
        while stack:
            node, path = stack.pop()
            ks, kl = NI[node, N_KS], NI[node, N_KL]
            path = path + tuple(self.TOK[ks:ks + kl].tolist()) if node else ()
            out.append((path, int(NI[node, N_LOCK]), int(NI[node, N_ACC]),
                        int(NI[node, N_CRE]), int(NI[node, N_HIT]), int(NI[node, N_PRIO])))
            child = NI[node, N_FC]
            while child >= 0:
                stack.append((int(child), path))
                child = NI[child, N_NS]
        return sorted(out)

    def leaves(self) -> list[tuple]:
        """The evictable leaves' paths, sorted."""
        NI = self.arrays[0]
        paths = []
        for node in np.flatnonzero(NI[:self.arrays[1][T_USED], N_LEAF]).tolist():
            path = []
            while node:
                ks, kl = NI[node, N_KS], NI[node, N_KL]
                path[:0] = self.TOK[ks:ks + kl].tolist()
                node = int(NI[node, N_PAR])
            paths.append(tuple(path))
        return sorted(paths)
