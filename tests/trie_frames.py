"""Block frames for property tests: requests as paths in a small trie, so prefixes are
shared across requests; a request may end in a partial block."""

from __future__ import annotations

import polars as pl
from hypothesis import strategies as st

from pipeline.workloads.blocks import BLOCK_SCHEMA


def trie_frame(draw, block_size: int, *, min_requests: int = 0, max_requests: int,
               branches: int, max_blocks: int, key_step: int, key_offset: int,
               partial_sometimes: bool = False, key_tokens: bool = True) -> pl.DataFrame:
    """Rows (request, index, key, tokens) of 0 or ``min_requests``..``max_requests``
    requests, each a path of 1..``max_blocks`` branch choices (0..``branches``) whose
    blocks share keys with every request on the same path (keys ``n * key_step +
    key_offset``). The last block is partial when a drawn 0..block_size-1 is not 0 (drawn
    for half the requests with ``partial_sometimes``); with ``key_tokens`` a block's key also
    depends on its tokens (as a chained hash of a partial block does)."""
    keys: dict[tuple, int] = {}
    rows = []
    for request in range(draw(st.integers(min_requests, max_requests))):
        path = draw(st.lists(st.integers(0, branches), min_size=1, max_size=max_blocks))
        if partial_sometimes:
            partial = draw(st.integers(0, block_size - 1)) if draw(st.booleans()) else 0
        else:
            partial = draw(st.integers(0, block_size - 1))
        for index in range(len(path)):
            tokens = partial if index == len(path) - 1 and partial else block_size
            node = (tuple(path[:index + 1]), tokens) if key_tokens else tuple(path[:index + 1])
            rows.append((request, index, keys.setdefault(node, len(keys) * key_step
                                                         + key_offset), tokens))
    return pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row")
