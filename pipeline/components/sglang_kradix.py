"""SGLang's radix prefix cache (``RadixCache``, SGLang 0.5.23) compiled, over flat arrays
(``pipeline.components.sglang_kradix_layout``): the nodes and the tree's operations.

The rules of ``tests/oracles/sglang_radix.py`` (which is proven equal to SGLang's own class
and against which ``tests/test_sglang_kradix.py`` drives this one), for the compiled
scheduler (``sglang_ksched``); its eviction heap is ``sglang_kradix_heap``, the
Python-facing tree ``sglang_kradix_tree.RadixTree``.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.sglang_kradix_layout import (
    N_ACC, N_COLUMNS, N_CRE, N_FC, N_HIT, N_KL, N_KS, N_LC, N_LEAF, N_LOCK, N_NEXTFREE, N_NS,
    N_PAR, N_PRIO, N_PS, OP_EVICT, OP_INSERT, OP_LOCK, OP_MATCH, OP_RESET, OP_UNLOCK, POLICIES,
    ROOT_PRIORITY, T_CLOCK, T_COLUMNS, T_EVICT, T_FREE, T_HSIZE, T_NLEAF, T_PAGE, T_POLICY,
    T_PROT, T_SLRU, T_USED)
from pipeline.components.kjit import helper, kernel
from pipeline.components.sglang_kradix_heap import key_of, push, rebuild, sift_down, update_leaf

__all__ = ["new_tree", "tree_op", "match_prefix", "insert", "inc_lock", "dec_lock", "evict",
           "reset"]


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
