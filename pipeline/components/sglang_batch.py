"""The plain-Python SGLang scheduler's state per request and per batch (``Req``, ``Batch``):
the fields of SGLang 0.5.23's ``Req`` / ``req.kv`` and ``ScheduleBatch`` the loop of
``sglang_sched`` reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Req", "Batch"]


@dataclass(eq=False)
class Req:
    """One request: its whole token sequence (``tokens``: prompt then outputs), lengths and
    the scheduler's per-request state (``Req`` and ``req.kv`` fields of the same names)."""

    index: int
    tokens: list
    n: int                                          # len(origin_input_ids)
    max_new: int                                    # sampling_params.max_new_tokens
    out: int = 0                                    # len(output_ids)
    prefix_len: int = 0
    num_matched: int = 0
    last_node: object = None
    lock: object = None                             # the node req.lock holds
    extend_end: int = 0
    kv_len: int = 0                                 # kv_committed_len == kv_allocated_len
    protected: int = 0                              # cache_protected_len
    inserted: int = 0                               # cache_inserted_len
    middle_chunks: int = 0                          # inflight_middle_chunks
    finished: bool = False
    retracted: bool = False                         # is_retracted: until re-prefilled
    retractions: int = 0
    first_sched: int = -1
    first_token: int = -1
    finish_step: int = -1
    hit: int = -1                                   # prefix at the first admission

    def fill(self) -> list:
        return self.tokens[:self.n + self.out]


@dataclass
class Batch:
    """A batch: ``extend`` (prefill) or decode; ``reqs`` in order; ``scheduled`` rows."""

    extend: bool
    reqs: list
    scheduled: list = field(default_factory=list)
    batch_is_full: bool = False
    sampling: list = field(default_factory=list)    # overlap: first tokens at launch
    finishing: list = field(default_factory=list)   # overlap: finishes at launch
