"""What a trace reader returns: the block and request frames, and what it skipped."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

__all__ = ["Trace"]


@dataclass(frozen=True)
class Trace:
    """A trace as block-mode frames (``pipeline.workloads.blocks``).

    ``lines``: the file line of each request (in request order); ``skipped``: (line, reason)
    of every bad line dropped under ``skip_bad_lines``.
    """

    blocks: pl.DataFrame
    requests: pl.DataFrame
    block_size: int
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def repeat_ratio(self) -> float:
        """The infinite-cache block hit ratio as traces count it: the share of block accesses
        whose key was seen before (every block, partial ones included)."""
        if self.blocks.height == 0:
            return 0.0
        return 1.0 - self.blocks["block_key"].n_unique() / self.blocks.height
