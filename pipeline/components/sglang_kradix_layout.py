"""The layout of the compiled SGLang radix tree (``pipeline.components.sglang_kradix``).
A tree is a tuple ``(NI, TG, H)``:

* ``NI[node]``: one row per node (the columns ``N_*``): parent, the key as a span of the
  token array ``TOK`` (start, length: keys are runs of some request's tokens, which never
  change, so a split only cuts a span in two), lock count, access and creation ticks, hits,
  priority, children as a doubly linked list in insertion order (a dict's order: a split's
  upper node takes the old child's place), whether the node is an evictable leaf, and the
  free list (deleted nodes' rows are reused). Node 0 is the root. A child is found by
  walking its parent's list and comparing first pages.
* ``TG``: the clock, evictable / protected sizes, counts, page size, policy (the columns
  ``T_*``).
* ``H``: the lazy eviction heap (``pipeline.components.sglang_kradix_heap``), rows (key1,
  key2, access, seq, node), smallest first.

Capacity: a tree of ``pool`` tokens holds at most ``pool // page + 1`` nodes (each holds at
least one page of the pool); ``new_tree`` sizes the arrays so nothing grows.
"""

from __future__ import annotations

__all__ = ["POLICIES", "ROOT_PRIORITY", "N_COLUMNS", "T_COLUMNS", "OP_MATCH", "OP_INSERT",
           "OP_LOCK", "OP_UNLOCK", "OP_EVICT", "OP_RESET"]

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
