"""The lab's documents: the ordered stream of (key, size) accesses a cache model replays.

A workload knows nothing about caches. ``DocumentWorkload`` is the lab's: documents
0..docs-1 of ``tokens`` each, read pass by pass (fwd = 0..docs-1, rev = docs-1..0).
``documents_workload`` builds them once as the one workload type (``Workload``): one
request per read, in ``block_size``-token blocks or as whole documents; ``accesses()`` (the
document-mode events' frame) is read from the whole-document workload.
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvlab.scenario import PASS_ORDERS, pass_keys
from pipeline.base.config import LAB_DOCS, LAB_PASSES, LAB_TOKENS
from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA, document_blocks
from pipeline.workloads.workload import Workload

PASS_ORDER = pl.Enum(list(PASS_ORDERS))

#: Columns of ``DocumentWorkload.accesses()``, one row per access in reading order.
ACCESS_SCHEMA = pl.Schema({
    "pass_index": pl.Int16,   # 0-based pass number
    "pass_order": PASS_ORDER,  # fwd or rev
    "step": pl.Int32,         # position within the pass
    "seq": pl.Int32,          # global access index
    "doc": pl.Int32,          # the key: document number
    "size": pl.Int64,         # tokens
})


def pass_name(pass_index: pl.Expr, pass_order: pl.Expr) -> pl.Expr:
    """The pass-name vocabulary of the lab's documents: ``pass<i>-<order>`` with ``i``
    1-based (``pass1-fwd``, ``pass3-rev``), from the 0-based index and the order."""
    return pl.format("pass{}-{}", pass_index + 1, pass_order)


@dataclass(frozen=True)
class DocumentWorkload:
    """``docs`` documents of ``tokens`` tokens read in ``passes`` (each fwd or rev)."""

    docs: int = LAB_DOCS
    tokens: int = LAB_TOKENS
    passes: tuple[str, ...] = LAB_PASSES

    def __post_init__(self) -> None:
        if self.docs < 0 or self.tokens < 0:
            raise ValueError(f"docs and tokens must be >= 0, got {self.docs}, {self.tokens}")
        if not self.passes:
            raise ValueError("the pass list is empty: give e.g. fwd,fwd,rev")
        bad = [order for order in self.passes if order not in PASS_ORDERS]
        if bad:
            raise ValueError(f"unknown pass {bad[0]!r}: each pass is fwd or rev")

    @property
    def working_set(self) -> int:
        """Tokens needed to hold every document at once."""
        return self.docs * self.tokens

    def workload(self, block_size: int | None) -> Workload:
        """The documents as the one workload type (``documents_workload``)."""
        return documents_workload(self.docs, self.tokens, self.passes, block_size)

    def accesses(self) -> pl.DataFrame:
        """One row per access, in reading order (see ACCESS_SCHEMA): the requests of the
        whole-document workload (``workload(None)``) with their pass and step."""
        requests = self.workload(None).requests
        per_pass = max(self.docs, 1)
        index = requests["request"].to_numpy().astype(np.int64) // per_pass
        return requests.select(
            pl.Series("pass_index", index, dtype=pl.Int16),
            pl.Series("pass_order", np.asarray(self.passes)[index], dtype=PASS_ORDER),
            step=(pl.col("request") % per_pass).cast(pl.Int32),
            seq=pl.col("request").cast(pl.Int32),
            doc=pl.col("doc").cast(pl.Int32),
            size=pl.col("prompt_tokens").cast(pl.Int64),
        ).match_to_schema(ACCESS_SCHEMA)


def documents_workload(docs: int, tokens: int, passes: Sequence[str],
                       block_size: int | None) -> Workload:
    """``docs`` documents of ``tokens`` tokens read in ``passes``: one request per read
    (``pass_name`` ``pass<i>-<order>``, ``doc``), cut into ``block_size``-token blocks
    (``document_blocks``), or one whole item per request (key = document) when
    ``block_size`` is None."""
    order = [doc for name in passes for doc in pass_keys(name, docs)]
    reads = pl.DataFrame({"pass_index": np.repeat(np.arange(len(passes)), docs),
                          "pass_order": np.repeat(list(passes), docs)})
    requests = pl.DataFrame({
        "request": np.arange(len(order)),
        "pass_name": reads.select(pass_name(pl.col("pass_index"), pl.col("pass_order")))
        .to_series(),
        "doc": order, "prompt_tokens": np.full(len(order), tokens), "timestamp_ms": None},
        schema=REQUEST_SCHEMA)
    if block_size is None:
        blocks = pl.DataFrame({"request": np.arange(len(order)), "block_index": 0,
                               "block_key": order, "block_tokens": tokens}, schema=BLOCK_SCHEMA)
    else:
        blocks = document_blocks(order, tokens, block_size)
    return Workload(blocks, requests, block_size,
                    label=f"{docs} documents x {tokens} tokens, passes {','.join(passes)}")
