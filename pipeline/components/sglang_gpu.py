"""``sglang-radix``: SGLang 0.5.23's radix cache as a block-mode GPU model, one request at a
time (concurrency 1), replayed per capacity.

A request of ``n`` prompt tokens and ``o`` output tokens goes through the radix tree as SGLang's
scheduler drives it when it runs alone (docs/sglang.md cites each line):

1. ``match_prefix`` of the prompt cut to ``n - 1`` tokens (``Req._compute_max_prefix_len``),
   page-aligned: the hit ``h``; the matched node is locked;
2. the prefill allocates ``ceil(n / P) - h/P`` pages, evicting whole unlocked leaves for the
   shortfall first (``alloc_token_slots``; the paged allocator asks one page more,
   ``alloc_paged_token_slots_extend``);
3. after the prefill ``checkpoint`` inserts the prompt's whole pages and re-matches (one
   more access) and moves the lock there;
4. each decode step first makes one page free (evicting when none is:
   ``alloc_paged_token_slots_decode`` asks a page per request, ``alloc_token_slots`` one
   token), then takes a page when its token starts one;
5. every 32nd request (the first included) is first matched whole, the scheduler's LRU
   touch of the waiting queue's prefixes (``_touch_waiting_prefixes``, ``fcfs``), which can
   split a node where the n - 1 match would not;
6. at the finish ``release_kv_cache`` checkpoints the ``n + o - 1`` tokens that have KV
   (whole pages; the prompt's pages inserted again with priority 1, ``split_prompt``, when
   output pages follow), re-matches and unlocks; the partial last page is freed.

Tokens are pages here: block ``b`` of the stream (``block_size`` tokens) is the pages
``b * (block_size / P) + j``; the prompt's partial block, its tail pages and every output
page are fresh symbols (never shared: as the vllm model, only full blocks of the trace are
known to repeat). ``P`` must divide the block size. A request larger than the pool (``ceil((n
+ o - 1) / P)`` pages) is not admitted: hit 0, the tree untouched.

The one-pass stack-distance curve is **not** exact for this cache, for any page size or
policy: the tree evicts whole leaves, so one eviction can free more than it needs, and the
tree then holds fewer tokens than a token-level LRU of the same size
(tests/test_sglang_gpu.py shows a case). So every capacity is replayed.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import kernel
from pipeline.components.sglang_kradix import (dec_lock, evict, inc_lock, insert, match_prefix,
                                               new_tree)
from pipeline.components.sglang_kradix_layout import T_EVICT, T_PROT
from pipeline.components.sglang_settings import WAITING_PREFIX_REFRESH_INTERVAL
from pipeline.workloads.stream import TAIL_FIRST, BlockStream, capacity_blocks, output_lengths

__all__ = ["page_sequences", "serve_alone", "replay_radix", "radix_gpu", "check_page_size"]


def check_page_size(page_size: int, block_size: int, flag: str = "--radix-page-size"
                    ) -> str | None:
    """A message naming ``flag`` when ``page_size`` does not divide the trace's
    ``block_size``, else None."""
    if block_size % page_size:
        return (f"{flag} {page_size}: must divide the block size {block_size} "
                f"(--block-size, the trace's tokens per hash block)")
    return None


def page_sequences(stream: BlockStream, page_size: int, outputs: np.ndarray
                   ) -> list[tuple[list[int], int, int]]:
    """Per request: (its page symbols up to the last whole page with KV, n, o)."""
    per = stream.block_size // page_size
    fresh = stream.n_codes * per
    result = []
    for r in range(stream.requests):
        n, o = int(stream.prompt_tokens[r]), int(outputs[r])
        blocks = stream.codes[stream.starts[r]:stream.starts[r] + stream.cacheable[r]]
        pages = (blocks[:, None] * per + np.arange(per)).ravel().tolist()
        total = (n + o - 1) // page_size
        pages = pages[:total]
        extra = total - len(pages)
        pages.extend(range(fresh, fresh + extra))
        fresh += extra
        result.append((pages, n, o))
    return result


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def serve_alone(tree, pages: list[int], n: int, o: int, page_size: int,
                capacity_pages: int, touch: bool = False) -> int:
    """One request served alone on ``tree`` (page units, a page_size-1 tree over page
    symbols; ``RadixTree`` or SGLang's own, same methods) in a pool of ``capacity_pages``;
    its hit in pages. ``touch``: the scheduler's LRU touch of the waiting prefix first."""
    P = page_size
    kv_pages = _ceil(n + o - 1, P)
    if kv_pages > capacity_pages:
        return 0
    if touch:
        tree.match_prefix(pages[:n // P])
    hit, node = tree.match_prefix(pages[:(n - 1) // P])
    tree.inc_lock_ref(node)
    prefill = _ceil(n, P) - hit
    # alloc_token_slots evicts the extend's shortfall; the paged allocator one page more
    demand = prefill if P == 1 else _ceil(n - hit * P + P, P)
    free = capacity_pages - tree.total_size()
    if demand > free:
        free += tree.evict(demand - free)
    free -= prefill
    prompt = n // P                                     # prefill checkpoint
    tree.insert(pages[:prompt])
    lock_node = _relock(tree, node, pages[:prompt])
    for k in range(1, o):                               # decode steps: one free page first,
        if free == 0:                                   # a new page at a page boundary
            free += tree.evict(1)
        if (n + k - 1) % P == 0:
            free -= 1
    full = (n + o - 1) // P                             # finish checkpoint
    tree.insert(pages[:full], 0, prompt)
    if 0 < prompt < full:
        tree.insert(pages[:prompt], 1, prompt)
    lock_node = _relock(tree, lock_node, pages[:full])
    tree.dec_lock_ref(lock_node)
    return hit


def _relock(tree, node, pages: list[int]):
    """``checkpoint``'s tail: re-match the inserted key, lock its node, unlock the old."""
    _, new = tree.match_prefix(pages)
    tree.inc_lock_ref(new)
    tree.dec_lock_ref(node)
    return new


def replay_radix(stream: BlockStream, capacity_tokens: int, page_size: int = 1,
                 output_tokens: object = 1, policy: str = "lru", tree=None,
                 sequences: list | None = None) -> np.ndarray:
    """Hit tokens per request (R,) of one pool of ``capacity_tokens`` (SGLang's
    ``max_total_tokens``), every request served alone in order (``tree``: a fresh
    compiled tree of ``policy`` unless ``tree`` is given, e.g. the oracle or SGLang's own;
    ``sequences``: ``page_sequences``'s, reused)."""
    problem = check_page_size(page_size, stream.block_size)
    if problem:
        raise ValueError(problem)
    if sequences is None:
        sequences = page_sequences(stream, page_size, output_lengths(stream, output_tokens))
    capacity = int(capacity_tokens) // page_size
    hits = np.zeros(stream.requests, np.int64)
    if tree is None:                                    # compiled: every request in one call
        if not sequences:
            return hits
        sizes = np.fromiter((len(p) for p, _, _ in sequences), np.int64, len(sequences))
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        TOK = np.fromiter((t for p, _, _ in sequences for t in p), np.int64,
                          int(offsets[-1]))
        ns = np.fromiter((n for _, n, _ in sequences), np.int64, len(sequences))
        os = np.fromiter((o for _, _, o in sequences), np.int64, len(sequences))
        arrays = new_tree(capacity + int(sizes.max()) + 8, 1, policy)
        _replay(arrays, TOK, offsets, ns, os, page_size, capacity,
                WAITING_PREFIX_REFRESH_INTERVAL, hits)
        return hits * page_size
    for r, (pages, n, o) in enumerate(sequences):
        hits[r] = serve_alone(tree, pages, n, o, page_size, capacity,
                              r % WAITING_PREFIX_REFRESH_INTERVAL == 0)
    return hits * page_size


@kernel
def _replay(T, TOK, offsets, ns, os, P, capacity, touch_every, hits):
    """``serve_alone`` for every request in order, on the compiled tree (request r's pages
    are ``TOK[offsets[r]:offsets[r + 1]]``); hits in pages."""
    TG = T[1]
    for r in range(ns.shape[0]):
        start, total, n, o = offsets[r], offsets[r + 1] - offsets[r], ns[r], os[r]
        if -(-(n + o - 1) // P) > capacity:
            continue
        if r % touch_every == 0:
            match_prefix(T, TOK, start, min(n // P, total))
        hit, node = match_prefix(T, TOK, start, min((n - 1) // P, total))
        inc_lock(T, node)
        prefill = -(-n // P) - hit
        demand = prefill if P == 1 else -(-(n - hit * P + P) // P)
        free = capacity - (TG[T_EVICT] + TG[T_PROT])
        if demand > free:
            free += evict(T, demand - free)
        free -= prefill
        prompt = min(n // P, total)
        insert(T, TOK, start, prompt, 0, 0)
        _, new = match_prefix(T, TOK, start, prompt)          # _relock
        inc_lock(T, new)
        dec_lock(T, node)
        node = new
        for k in range(1, o):
            if free == 0:
                free += evict(T, 1)
            if (n + k - 1) % P == 0:
                free -= 1
        full = min((n + o - 1) // P, total)
        insert(T, TOK, start, full, 0, n // P)
        if 0 < n // P < full:
            insert(T, TOK, start, n // P, 1, n // P)
        _, new = match_prefix(T, TOK, start, full)
        inc_lock(T, new)
        dec_lock(T, node)
        dec_lock(T, new)
        hits[r] = hit


def radix_gpu(stream: BlockStream, capacities: object, order: str = TAIL_FIRST, *,
              radix_page_size: int = 1, output_tokens: object = 1) -> np.ndarray:
    """GPU model API (``pipeline.catalog.model_api``): hit tokens per (capacity, request),
    (K, R), each capacity replayed (the one-pass curve is not exact here). ``order`` is
    not used: the tree keeps a request's pages as one path and evicts its leaves first."""
    page_size = radix_page_size
    problem = check_page_size(page_size, stream.block_size)
    if problem:
        raise ValueError(problem)
    tokens = capacity_blocks(capacities, 1).tolist()
    hits = np.zeros((len(tokens), stream.requests), np.int64)
    if tokens:
        sequences = page_sequences(stream, page_size, output_lengths(stream, output_tokens))
        for k, capacity in enumerate(tokens):
            hits[k] = replay_radix(stream, capacity, page_size, sequences=sequences)
    return hits
