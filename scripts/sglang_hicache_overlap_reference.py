"""SGLang 0.5.23's overlap loop (``event_loop_overlap``) over its HiCache, on CPU: the
reference loop of scripts/sglang_scheduler_reference.py (``overlap=True``, SGLang's own
``SchedulePolicy`` / ``PrefillAdder`` / ``match_kv_cache`` over its ``UnifiedRadixCache``
with HiCache, scripts/sglang_hicache_reference.py) with the one line the overlap turn adds
for HiCache: ``check_hicache_events`` at the top of every turn's ``get_next_batch_to_run``
(``managers/scheduler.py:3894-3898`` calling ``_process_hicache_events``, ``:3878-3892``),
as the non-overlap turn of that loop already does.

The timing-dependent path is pinned as in the non-overlap loop: the reference's transfer
controller finishes every copy and load at once, so each ack is taken by the next turn's
poll (a write-through lock lasts until the next turn; on a GPU the copy may still run then,
the lock lasting a turn longer). In the overlap loop a finished batch's checkpoint (its
insert, its write-through) runs in the turn after it, after that turn's batch was scheduled,
so its ack is polled a turn later than in the non-overlap loop: the loop's order, not time.

Used by tests/test_sglang_hicache_overlap.py in a process of its own.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_scheduler_reference as reference  # noqa: E402


class HiCacheOverlapLoop(reference.Loop):
    """``Loop`` whose overlap turn polls HiCache's events first; ``moved``: per launched
    batch, the host tokens (loaded, written) since the last one's (a turn that only
    processed a result counts toward the next batch, as the engine's step rows do)."""

    last: HiCacheOverlapLoop | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.moved, self.mark = [], (0, 0)
        HiCacheOverlapLoop.last = self

    def iterate_overlap(self, step: int):
        self.rc.time = self.clock
        if self.hicache:                             # scheduler.py:3898
            self.tree.check_hicache_events()
        result = super().iterate_overlap(step)
        if result is not None and self.hicache:
            now = self.controller.loaded, self.controller.written
            self.moved.append((now[0] - self.mark[0], now[1] - self.mark[1]))
            self.mark = now
        return result


def run_overlap(requests, size: int, **settings) -> dict:
    """``reference.run`` with the overlap loop over SGLang's ``UnifiedRadixCache`` (with
    ``hicache=(write policy, host tokens)``); ``host`` as ``HiCacheOverlapLoop.moved``."""
    logging.disable(logging.WARNING)
    plain, reference.Loop = reference.Loop, HiCacheOverlapLoop
    try:
        result = reference.run(requests, size, tree="unified", overlap=True, **settings)
    finally:
        reference.Loop = plain
    if settings.get("hicache") is not None:
        result["host"] = HiCacheOverlapLoop.last.moved
    return result
