"""What one executed batch looks like (``StepRecord``), and a run of pure decode steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["StepRecord", "DecodeRun", "DecodeRows", "TimedSteps", "timed_batches"]


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
    #: the engine's ``extra_names`` columns (a tier stack's or the native offload's bytes)
    extra: tuple = field(default=(), compare=False)
    #: a tier stack's load ms of the batch (in place of the step model's reload term)
    load_ms: float = field(default=-1.0, compare=False)


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


class DecodeRows:
    """StepRecord.scheduled of a pure decode step: every running request (``indices``), one
    token, from ``starts`` + ``offset`` computed tokens; built when read."""

    __slots__ = ("indices", "starts", "offset")

    def __init__(self, indices, starts, offset):
        self.indices, self.starts, self.offset = indices, starts, offset

    def __iter__(self):
        return ((index, 1, start + self.offset)
                for index, start in zip(self.indices, self.starts))

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, item):
        return list(self)[item]

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return repr(list(self))


@dataclass
class TimedSteps:
    """The steps ``EngineSim.run_until`` executed: ``steps`` one row per batch (the columns
    of ``loop.STEP_COLUMNS``, then the engine's ``extra_names``), their ``start_ms`` and ``duration_ms``, the outputs processed
    meanwhile as ``events`` rows (step, 0 first token / 1 finished, request index), and
    the clock after the last step (``now_ms``)."""

    now_ms: float
    steps: np.ndarray
    start_ms: np.ndarray
    duration_ms: np.ndarray
    events: np.ndarray


def timed_batches(instance, row, width: int, until_ms: float, now_ms: float,
                  step_ms) -> TimedSteps:
    """The batches a Python-stepped ``instance`` starts before ``until_ms``: each
    ``instance.step()``'s record priced by ``step_ms(record)``, its step row ``row()`` (of
    ``width`` columns) and its first-token and finish events; a turn with no batch ends the
    run when ``instance.idle`` (no work), else it is stuck."""
    from pipeline.engine.compiled import STUCK_MESSAGE
    steps, starts, durations, events, now = [], [], [], [], now_ms
    while now < until_ms:
        record = instance.step()
        if record is None:
            if instance.idle:                            # no work: nothing was done
                now = max(now, getattr(instance, "sleep_ms", now))  # (or asleep on L3)
                break
            raise RuntimeError(STUCK_MESSAGE)
        duration = float(step_ms(record))
        record.duration_ms = duration
        now += getattr(record, "idle_ms", 0.0)           # waited before it (HiCache's L3)
        steps.append(row())
        starts.append(now)
        durations.append(duration)
        now += duration
        events += [[record.step, 0, i] for i in record.first_tokens]
        events += [[record.step, 1, i] for i in record.finished]
    return TimedSteps(now, np.array(steps, np.int64).reshape(-1, width),
                      np.array(starts, np.float64), np.array(durations, np.float64),
                      np.array(events, np.int64).reshape(-1, 3))
