"""What one executed batch looks like (``StepRecord``), and a run of pure decode steps."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StepRecord", "DecodeRun", "Rows", "DecodeRows", "Batch"]


@dataclass
class StepRecord:
    """One executed batch (a ``schedule()`` that scheduled > 0 tokens)."""

    step: int
    scheduled: list[tuple[int, int, int]]
    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    reload_tokens: int
    num_running: int
    num_waiting: int
    free_blocks: int
    first_tokens: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    duration_ms: float | None = None          # set by the time clock


@dataclass
class DecodeRun:
    """``count`` consecutive pure decode steps from ``first_step`` (``EngineSim.advance``):
    every one of the ``num_running`` running requests decodes one token; ``free_blocks``
    per step. ``records()`` gives the StepRecords ``step()`` would have returned."""

    first_step: int
    count: int
    num_running: int
    num_waiting: int
    context_base: int
    free_blocks: list[int]
    rows: list = field(repr=False, default_factory=list)
    starts: list[int] = field(repr=False, default_factory=list)
    tail: StepRecord | None = field(repr=False, default=None)   # async: still in flight

    def context_tokens(self, j: int) -> int:
        return self.context_base + self.num_running * j

    def records(self) -> list[StepRecord]:
        n = self.num_running
        out = [StepRecord(self.first_step + j, DecodeRows(self.rows, self.starts, j), 0, n,
                          self.context_tokens(j), 0, n, self.num_waiting, self.free_blocks[j])
               for j in range(self.count - (self.tail is not None))]
        return out + ([self.tail] if self.tail is not None else [])


class Rows:
    """StepRecord.scheduled: (request index, new tokens, computed before) per request,
    built when read."""

    __slots__ = ("entries",)

    def __init__(self, entries):
        self.entries = entries

    def __iter__(self):
        return ((req.index, num_new, start) for req, num_new, start in self.entries)

    def __len__(self):
        return len(self.entries)

    def __getitem__(self, item):
        return list(self)[item]

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return repr(list(self))


class DecodeRows(Rows):
    """StepRecord.scheduled of a pure decode step: every running request, one token, from
    ``starts`` + ``offset`` computed tokens."""

    __slots__ = ("starts", "offset")

    def __init__(self, reqs, starts, offset):
        super().__init__(reqs)
        self.starts, self.offset = starts, offset

    def __iter__(self):
        return ((req.index, 1, start + self.offset)
                for req, start in zip(self.entries, self.starts))


class Batch:
    """A scheduled batch: ``scheduled`` (request state, new tokens, computed before), the
    requests whose token it samples, its record (None when it scheduled nothing)."""

    __slots__ = ("step", "scheduled", "samples", "record")

    def __init__(self, step, scheduled, samples, record):
        self.step, self.scheduled, self.samples, self.record = step, scheduled, samples, record
