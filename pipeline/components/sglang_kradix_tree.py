"""``RadixTree``: the compiled SGLang radix tree (``pipeline.components.sglang_kradix``)
behind the oracle's methods, for Python callers that drive it one operation at a time (the
tests, docs/sglang.md).
"""

from __future__ import annotations

import numpy as np

from pipeline.components.sglang_kradix_layout import (
    N_ACC, N_COLUMNS, N_CRE, N_FC, N_HIT, N_KL, N_KS, N_LEAF, N_LOCK, N_NS, N_PAR, N_PRIO,
    OP_EVICT, OP_INSERT, OP_LOCK, OP_MATCH, OP_RESET, OP_UNLOCK, T_CLOCK, T_EVICT, T_FREE,
    T_PROT, T_USED)
from pipeline.components.sglang_kradix import new_tree, tree_op

__all__ = ["RadixTree"]


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
