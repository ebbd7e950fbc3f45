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
the one derived form of block mode (``pipeline.workloads.stream.BlockStream``: per request
its block range and cacheable prefix, prefix rule included).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from pipeline.workloads.stream import BlockStream, RequestOutputs, block_stream

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """Item and request frames, the block size (None: whole items), and provenance.

    ``lines``: the file line of each request (traces; empty otherwise); ``skipped``:
    (line, reason) of every bad line dropped under ``skip_bad_lines``; ``label``: what the
    workload is (a path, a pattern's name, the lab's documents); ``output_tokens``: each
    request's output length where the trace gives one (Mooncake ``output_length``, token
    JSONL ``max_tokens`` or the number of ``output_token_ids``, 1 on a line with neither),
    None when it gives none; ``output_blocks``: (request, block_key) of the blocks of prompt + sampled
    tokens beyond each request's full prompt blocks, chained as its prompt's (token JSONL
    with ``output_token_ids``), None otherwise.
    """

    blocks: pl.DataFrame
    requests: pl.DataFrame
    block_size: int | None
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    skipped: list[tuple[int, str]] = field(default_factory=list)
    label: str = ""
    output_tokens: np.ndarray | None = None
    output_blocks: pl.DataFrame | None = None

    def items(self, unit: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Every item of every request as one access, in order, with no prefix rule: its key
        (``block_key``'s 64 bits read as int64: equal keys stay equal, a key below 2**63 keeps
        its value) and size (its tokens; 1 each with ``unit``), both int64."""
        keys = self.blocks["block_key"].to_numpy().view(np.int64)
        if unit:
            return keys, np.ones(keys.size, dtype=np.int64)
        return keys, self.blocks["block_tokens"].cast(pl.Int64).to_numpy()

    def block_stream(self) -> BlockStream:
        """The block stream derived from this workload (``pipeline.workloads.stream``): what
        every block-mode model reads. ValueError without a block size."""
        if self.block_size is None:
            raise ValueError("a workload of whole items has no block stream: give a block size")
        stream = block_stream(self.blocks, self.block_size)
        if self.output_tokens is None:
            return stream
        return replace(stream, outputs=self._outputs(stream))

    def _outputs(self, stream: BlockStream) -> RequestOutputs:
        """The per-request outputs in the stream's codes: a sampled block whose key some
        prompt block has takes its code, the others new codes from ``stream.n_codes``."""
        lengths = np.asarray(self.output_tokens, dtype=np.int64)
        if self.output_blocks is None or self.output_blocks.height == 0:
            return RequestOutputs(lengths, np.zeros(0, np.int64),
                                  np.zeros(stream.requests + 1, np.int64), stream.n_codes)
        prompt = pl.DataFrame({"block_key": self.blocks["block_key"],
                               "code": stream.codes}).unique("block_key")
        out = self.output_blocks.join(prompt, on="block_key", how="left",
                                      maintain_order="left")
        codes = out["code"].fill_null(-1).cast(pl.Int64).to_numpy().copy()
        new = codes < 0
        _, fresh = np.unique(out["block_key"].to_numpy()[new], return_inverse=True)
        codes[new] = stream.n_codes + fresh
        index = np.searchsorted(stream.request, out["request"].to_numpy())
        counts = np.bincount(index, minlength=stream.requests)
        starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return RequestOutputs(lengths, codes, starts,
                              stream.n_codes + int(fresh.max(initial=-1)) + 1)

    def repeat_ratio(self) -> float:
        """The infinite-cache block hit ratio as traces count it: the share of block accesses
        whose key was seen before (every block, partial ones included)."""
        if self.blocks.height == 0:
            return 0.0
        return 1.0 - self.blocks["block_key"].n_unique() / self.blocks.height
