"""The one workload type: requests of items with tokens, cut into blocks or whole.

Every source produces a ``Workload``: the trace readers (``tokens``, ``mooncake``), the
generated patterns (``Pattern.workload``) and the lab's documents
(``DocumentWorkload.workload``). ``blocks`` is the item frame (``BLOCK_SCHEMA``: one row per
item of each request, in request then item order) and ``requests`` the per-request frame
(``REQUEST_SCHEMA``). With a ``block_size`` the items are prefix-chained blocks of at most
that many tokens (only a full block is cacheable); with ``block_size`` None each request is
one whole item (document mode: the key is the document).

Two views feed the cache models: ``items()``, every item as one access (keys and sizes: the
per-access policies, stack distances, the document-mode planner), and ``block_stream()``,
the one derived form of block mode (``pipeline.blocks.stream.BlockStream``: per request
its block range and cacheable prefix, prefix rule included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from pipeline.blocks.stream import BlockStream, block_stream

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """Item and request frames, the block size (None: whole items), and provenance.

    ``lines``: the file line of each request (traces; empty otherwise); ``skipped``:
    (line, reason) of every bad line dropped under ``skip_bad_lines``; ``label``: what the
    workload is (a path, a pattern's name, the lab's documents).
    """

    blocks: pl.DataFrame
    requests: pl.DataFrame
    block_size: int | None
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    skipped: list[tuple[int, str]] = field(default_factory=list)
    label: str = ""

    def items(self, unit: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Every item of every request as one access, in order, with no prefix rule: its key
        (``block_key``'s 64 bits read as int64: equal keys stay equal, a key below 2**63 keeps
        its value) and size (its tokens; 1 each with ``unit``), both int64."""
        keys = self.blocks["block_key"].to_numpy().view(np.int64)
        if unit:
            return keys, np.ones(keys.size, dtype=np.int64)
        return keys, self.blocks["block_tokens"].cast(pl.Int64).to_numpy()

    def block_stream(self) -> BlockStream:
        """The block stream derived from this workload (``pipeline.blocks.stream``): what
        every block-mode model reads. ValueError without a block size."""
        if self.block_size is None:
            raise ValueError("a workload of whole items has no block stream: give a block size")
        return block_stream(self.blocks, self.block_size)

    def repeat_ratio(self) -> float:
        """The infinite-cache block hit ratio as traces count it: the share of block accesses
        whose key was seen before (every block, partial ones included)."""
        if self.blocks.height == 0:
            return 0.0
        return 1.0 - self.blocks["block_key"].n_unique() / self.blocks.height
