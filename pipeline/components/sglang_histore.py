"""SGLang 0.5.23's HiCache L3 storage (``--hicache-storage-backend``), its decisions in plain
Python over ``sglang_hiradix.HiRadixTree``: which host copies are written to storage, what a
request's prefetch finds there, what it brings to the host and when the scheduler may admit
it. tests/test_sglang_histore.py holds it equal to SGLang's own ``UnifiedRadixCache`` and
``HybridCacheController`` storage code (scripts/sglang_hicache_reference.py) after every
operation; docs/sglang.md cites the lines.

* **Keys.** A page's storage key chains the page's tokens on the key of the page before it
  (``get_storage_hash_str``): a function of the whole token path to the page's end, so
  here an interned id of (previous page's id, the page's tokens).
* **Backup** (``write_backup_storage``): every node whose host copy is acked
  (``_finish_write_through_ack``: write-through at insert, write-back at eviction) writes
  its pages (``batch_set``: present keys skipped); the node is host-locked until the backup
  ack is drained.
* **Prefetch** (``prefetch_from_storage``, from ``Scheduler._prefetch_kvcache`` at enqueue):
  the pages after the request's device + host match, from a backed-up (or root) anchor,
  if at least ``prefetch_threshold`` tokens and fewer than half the host pool's tokens are
  reserved by prefetches (``prefetch_rate_limited``); the hit query (``batch_exists``: the
  run of present pages) and the transfer finish at once (their threads as synchronous
  steps); the scheduler's drain (``_drain_storage_control_queues_impl``) allocates the host
  pages (host eviction for room, a partial allocation of at least the threshold), the acks
  it drains next insert the pages into the tree as host nodes (``insert_host``).
* **Admission** (``check_prefetch_progress``): ``best_effort`` stops the prefetch at the
  first poll (whatever its drained acks completed); ``wait_complete`` waits for its last
  ack; ``timeout`` waits up to ``prefetch_timeout_base + pages * per_page`` seconds of the
  clock (never on the step clock, where a turn takes no time).
* **Retries**: ``sglang_prefetch.Retries``.

Every queue drain counts what the queue held when the turn began (``_sync_hicache_ready_
counts``): an ack put during the drain is drained the next turn.
"""

from __future__ import annotations

import math

from pipeline.components.sglang_hinode import HiNode
from pipeline.components.sglang_hiradix import HiRadixTree
from pipeline.components.sglang_prefetch import Prefetch, PrefetchWait, Retries
from pipeline.components.sglang_storage_spec import STORAGE_BATCH_SIZE, StorageSpec

__all__ = ["StoreRadixTree"]


class StoreRadixTree(HiRadixTree):
    """``HiRadixTree`` with an L3 store of unbounded size (SGLang's file backend has no cap
    unless its ``LRUFileEvictor`` is configured; ``max_size`` is not modelled)."""

    def __init__(self, page_size: int = 1, policy: str = "lru", *, device_tokens: int,
                 host_tokens: int, write_policy: str = "write_through",
                 storage: StorageSpec = StorageSpec()) -> None:
        self.spec = storage
        super().__init__(page_size, policy, device_tokens=device_tokens,
                         host_tokens=host_tokens, write_policy=write_policy)

    def reset(self) -> None:
        super().reset()
        self.page_ids: dict = {}                         # (previous id, page) -> id
        self.stored: set = set()
        self.ongoing: dict = {}                          # rid -> Prefetch
        self.hit_q: list = []
        self.ack_q: list = []
        self.backup_q: list = []                         # (node, receipt)
        self.release_q: list = []                        # host tokens to free
        self.loaded_by: dict = {}                        # rid -> tokens from L3
        self.waits: dict = {}
        self.retries = Retries()
        self.occupied = 0
        self.limit = int(0.5 * self.host_tokens)         # prefetch_capacity_limit
        self.prefetch_threshold = self.spec.threshold
        self.stored_pages = self.fetched = 0             # pages written, tokens read
        self.now_ms, self.timed = 0.0, False      # the time clock: transfers take time
        self.lanes: dict = {}                            # a storage thread's busy-until ms

    # ------------------------------------------------------------------ keys

    def _chain(self, last: int, tokens: tuple) -> list[int]:
        P, out = self.page_size, []
        for i in range(0, len(tokens) // P * P, P):
            last = self.page_ids.setdefault((last, tokens[i:i + P]), len(self.page_ids))
            out.append(last)
        return out

    def _path(self, node: HiNode) -> tuple:
        parts = []
        while node is not self.root:
            parts.append(node.key)
            node = node.parent
        return tuple(t for part in reversed(parts) for t in part)

    def _last_id(self, node: HiNode) -> int:
        chain = self._chain(-1, self._path(node))
        return chain[-1] if chain else -1

    # ------------------------------------------------------------------ backup

    def check_write_acks(self) -> None:
        for node, _ in self.acks:                        # _finish_write_through_ack
            for done in [node] + self.pending_splits.get(node.id, []):
                if done.wt_pending == node.id:
                    self._backup(done)
        super().check_write_acks()

    def _backup(self, node: HiNode) -> None:
        """``write_backup_storage``: the node's pages to storage, host-locked till acked."""
        if not node.host:
            return
        pages = self._chain(-1, self._path(node))[-(len(node.key) // self.page_size):] \
            if len(node.key) >= self.page_size else []
        new = [p for p in pages if p not in self.stored]
        self.stored.update(new)
        self.stored_pages += len(new)
        calls = -(-len(pages) // STORAGE_BATCH_SIZE)
        self.backup_q.append((self._after("backup", len(pages), calls), node,
                              self._host_lock(node)))

    def _after(self, lane: str, pages: int, calls: int = 1) -> float:
        """When a storage job of ``pages`` pages in ``calls`` storage calls, queued now on
        ``lane`` (one of SGLang's storage threads: query, io, backup), lands: after the
        lane's earlier jobs, a latency per call and the pages over the bandwidth."""
        if not self.timed:
            return self.now_ms
        spec = self.spec
        start = max(self.now_ms, self.lanes.get(lane, 0.0))
        self.lanes[lane] = end = start + calls * spec.latency_ms + \
            pages * spec.page_bytes / spec.bandwidth
        return end

    def next_landing(self) -> float:
        """When the next transfer in flight lands or the next timeout budget runs out
        (now when one has landed undrained, or when nothing is ahead)."""
        later = [e[0] for q in (self.hit_q, self.ack_q, self.backup_q) for e in q]
        if any(t <= self.now_ms for t in later):
            return self.now_ms
        later += [math.nextafter(w.since + w.timeout_s * 1e3, math.inf)
                  for w in self.waits.values() if not w.expired]
        return min((t for t in later if t > self.now_ms), default=self.now_ms)

    def _landed(self, queue: list) -> tuple[list, list]:
        """(the entries landed by now, in landing order; the rest): what a queue held
        when the turn began."""
        landed = sorted((e for e in queue if e[0] <= self.now_ms), key=lambda e: e[0])
        return landed, [e for e in queue if e[0] > self.now_ms]

    # ------------------------------------------------------------------ prefetch

    def submit(self, rid, anchor: HiNode, tokens, start: int, hit_end=None) -> None:
        """``prefetch_from_storage`` of ``tokens`` (after ``start`` matched tokens) below
        ``anchor``; ``hit_end``: a retry's known end of the stored run."""
        self.retries.cancel(rid)
        wait = self.waits.get(rid)
        if (wait is not None and wait.expired) or rid in self.ongoing:
            return
        tokens = tuple(tokens)
        assume = hit_end is not None and start < hit_end <= start + len(tokens)
        if assume:
            tokens = tokens[:hit_end - start]
        key = self._aligned(tokens)
        assume = assume and start + len(key) == hit_end
        if len(key) < self.prefetch_threshold:
            return
        if self.occupied >= self.limit:
            self.retries.poll_miss(rid, hit_end)
            return
        op = Prefetch(rid, anchor, key, self._host_lock(anchor), start)
        pages = self._chain(self._last_id(anchor), key)      # _storage_hit_query
        hit = len(pages)
        if not assume:
            hit = next((i for i, p in enumerate(pages) if p not in self.stored), len(pages))
        op.pages, op.hit = pages[:hit], hit * self.page_size
        self.hit_q.append((self._after("query", 0, max(1, -(-len(pages) //
                                                              STORAGE_BATCH_SIZE))), op))
        self.ongoing[rid] = op
        self.occupied += len(key)

    def _retire(self, rid) -> None:
        """``revoke_pending_prefetch`` / ``_retire_ongoing_prefetch``."""
        op = self.ongoing.pop(rid, None)
        if op is None:
            return
        self._release_host_lock(op.anchor, op.receipt)
        self.occupied = max(0, self.occupied - op.span)

    def _alloc(self, op: Prefetch) -> None:
        """``_try_alloc_storage_hit`` (``allocate_storage_hit``, allow_partial): the
        host pages, then the transfer (at once: its acks land when ``ready_ms`` says)."""
        hit, P = op.hit, self.page_size
        if self.host_tokens - self.host_used < hit:
            self.evict_host(hit)
        free = self.host_tokens - self.host_used
        size = hit if free >= hit else min(hit, free - free % P)
        if size < hit and size < self.prefetch_threshold:
            self.retries.poll_miss(op.rid, op.start + op.hit)
            self._retire(op.rid)
            return
        self.host_used += size
        op.hit, op.host = size, size
        op.pages = op.pages[:size // P]
        self.fetched += size
        landed = self.now_ms                             # _page_transfer: an ack a batch
        for first in range(0, len(op.pages), STORAGE_BATCH_SIZE):
            done = min(first + STORAGE_BATCH_SIZE, len(op.pages))
            landed = self._after("io", done - first)
            self.ack_q.append((landed, op, done * P, False))
        self.ack_q.append((landed, op, None, True))

    def check_events(self) -> None:
        """``check_hicache_events``: the write and load acks, then the storage queues as
        they stood when the turn began (``_sync_hicache_ready_counts``)."""
        hits, self.hit_q = self._landed(self.hit_q)
        acks, self.ack_q = self._landed(self.ack_q)
        backups, self.backup_q = self._landed(self.backup_q)
        released, self.release_q = self.release_q, []
        super().check_events()
        for _, op in hits:
            if op.rid not in self.ongoing:
                continue
            if op.terminated or op.hit < self.prefetch_threshold:   # (the request's
                # current prefetch retired, even when this is an earlier, stopped one)
                if not op.expired:
                    self.retries.poll_miss(op.rid)
                self._retire(op.rid)
                continue
            self._alloc(op)
        for _, op, tokens, final in acks:
            current = self.ongoing.get(op.rid) is op
            if tokens is not None and current:
                op.completed = tokens
            if final:
                if current:
                    self._result(op)
                if op.host > op.completed:
                    self.release_q.append(op.host - op.completed)
        for _, node, receipt in backups:
            self._release_host_lock(node, receipt)
        self.host_used -= sum(released)

    def _result(self, op: Prefetch) -> None:
        """``_handle_prefetch_result``: the completed pages join the tree on the host."""
        prefix, dropped = self.insert_host(op.anchor, op.key[:op.completed])
        if dropped:
            self.release_q.append(op.completed)
            loaded = 0
        else:
            self.host_used -= prefix
            loaded = op.completed - prefix
        self._release_host_lock(op.anchor, op.receipt)
        del self.ongoing[op.rid]
        self.occupied -= op.span
        self.loaded_by[op.rid] = loaded

    def insert_host(self, node: HiNode, key: tuple) -> tuple[int, bool]:
        """``UnifiedTreeCore.insert_host``: (tokens already on the host, dropped?)."""
        node.last_access_time = self.tick()
        if not key:
            return 0, False
        offset = matched = host_prefix = 0
        while offset < len(key):
            child = node.children.get(self._child_key(key, offset))
            if child is None:
                break
            node = child
            node.last_access_time = self.tick()
            length = self._match_len(node.key, key, offset)
            offset += length
            matched += length
            if length < len(node.key):
                node = self._split(node, length)
            if not self.write_back:
                if not node.host:                        # refilled from storage
                    node.host = True
                    self._dup_track(node)
                else:
                    host_prefix += length
        prefix = matched if self.write_back else host_prefix
        if offset == len(key):
            return prefix, False
        if node is not self.root and not node.host and not self.write_back:
            return prefix, True
        rest = key[offset:]
        leaf = HiNode(self, priority=node.priority)
        leaf.parent, leaf.key, leaf.host = node, rest, True
        node.children[self._child_key(rest)] = leaf
        return prefix, False

    # ------------------------------------------------------------------ admission

    def poll(self, rid) -> bool:
        """``check_prefetch_progress``: may the request be admitted now?"""
        op = self.ongoing.get(rid)
        if op is None:
            return True
        if not op.terminated:
            if not self._can_stop(op):
                if self.spec.prefetch_policy == "timeout" and rid not in self.waits:
                    pages = op.span // self.page_size
                    self.waits[rid] = PrefetchWait(self.now_ms, self.spec.timeout_base + pages *
                                            self.page_size / 1024 *
                                            self.spec.timeout_per_ki_token)
                return False
            if self.spec.prefetch_policy == "timeout":
                op.expired = True
                self.retries.cancel(rid)
                self.waits.setdefault(rid, PrefetchWait(self.now_ms, 0.0)).expired = True
        op.terminated = True
        if op.host is None:
            if not op.expired:
                self.retries.poll_miss(rid)
            self._retire(rid)
        else:
            self._result(op)
        return True

    def _can_stop(self, op: Prefetch) -> bool:
        policy = self.spec.prefetch_policy
        if policy == "best_effort":
            return True
        if policy == "wait_complete":
            return False
        if op.host is not None and op.completed >= len(op.pages) * self.page_size:
            return False
        wait = self.waits.get(op.rid)
        return wait is not None and (
            wait.expired or (self.now_ms - wait.since) / 1e3 > wait.timeout_s)

    def pop_loaded(self, rid) -> int:
        return self.loaded_by.pop(rid, 0)

    def admitted(self, rid) -> None:
        """``finish_storage_prefetch_admission``: the timeout budget closes."""
        self.waits.pop(rid, None)

    # ------------------------------------------------------------------ one request

    def prefetch(self, rid, tokens) -> int:
        """``Scheduler._prefetch_kvcache`` for a request of ``tokens`` (the match as
        ``init_next_round_input`` makes it, up to all but the last token): the tokens
        matched on the device and host."""
        limit = max(len(tokens) - 1, 0)
        device, host, best, _ = self.match(tokens[:limit])
        matched = device + host
        if best is self.root or best.host:
            self.submit(rid, best, tokens[matched:limit], matched)
        return matched

    def progress(self, rid) -> tuple[bool, int]:
        """The admission poll: (may be admitted, tokens loaded from L3)."""
        done = self.poll(rid)
        return done, (self.pop_loaded(rid) if done else 0)

    @property
    def stored_count(self) -> int:
        return len(self.stored)
