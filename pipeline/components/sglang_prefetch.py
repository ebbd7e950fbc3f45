"""The bookkeeping of SGLang 0.5.23's HiCache L3 prefetches, for ``sglang_histore``'s
``StoreRadixTree``: one prefetch operation (``Prefetch``), the timeout policy's budget
(``PrefetchWait``) and the paced retries (``Retries``).

* **Retries** (``StoragePrefetchRetries``): a prefetch that found nothing is asked again
  after ``interval`` scheduling passes, at most ``max_attempts`` times per request.
"""

from __future__ import annotations

from pipeline.components.sglang_hinode import HiNode

__all__ = ["Prefetch", "PrefetchWait", "Retries"]


class Prefetch:
    """One prefetch operation (``PrefetchOperation`` + its ``_OngoingPrefetch``)."""

    __slots__ = ("rid", "anchor", "key", "receipt", "pages", "hit", "host", "completed",
                 "terminated", "expired", "start", "span")

    def __init__(self, rid, anchor: HiNode, key: tuple, receipt, start: int) -> None:
        self.rid, self.anchor, self.key, self.receipt = rid, anchor, key, receipt
        self.pages: list = []
        self.hit = self.completed = 0
        self.host: int | None = None                     # host tokens allocated
        self.terminated = self.expired = False
        self.start, self.span = start, len(key)


class PrefetchWait:
    """``_StoragePrefetchWait``: the timeout policy's budget from the first blocked poll."""

    __slots__ = ("since", "timeout_s", "expired")

    def __init__(self, since: float, timeout_s: float) -> None:
        self.since, self.timeout_s, self.expired = since, timeout_s, False


class Retries:
    """``StoragePrefetchRetries`` (``mem_cache/storage_prefetch.py``)."""

    def __init__(self) -> None:
        self.pending: dict = {}                          # rid -> [immediate, end, due]
        self.step = 0

    def poll_miss(self, rid, end=None) -> None:
        self.pending[rid] = [False, end, None]

    def cancel(self, rid) -> None:
        self.pending.pop(rid, None)

    def pop_ready(self, waiting: list, interval: int, max_attempts: int) -> list:
        self.step += 1
        if not waiting or not self.pending:
            return []
        head = self.pending.get(waiting[0].index)
        if head is not None and not head[0]:
            self.cancel(waiting[0].index)
        if not any(r[2] is None or r[2] <= self.step for r in self.pending.values()):
            return []
        ready = []
        for req in waiting:
            retry = self.pending.get(req.index)
            if retry is None:
                continue
            if req.storage_attempts >= max_attempts:
                self.cancel(req.index)
                continue
            if not retry[0]:
                if interval <= 0:
                    self.cancel(req.index)
                    continue
                if retry[2] is None:
                    retry[2] = self.step + interval
                if retry[2] > self.step:
                    continue
            self.cancel(req.index)
            ready.append((req, retry[1]))
        return ready
