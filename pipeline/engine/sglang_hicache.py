"""``--engine sglang --enable-hierarchical-cache``: SGLang 0.5.23's scheduler over HiCache
(``UnifiedRadixCache.init_hicache``: a host pool beside the device's), an instance of the
engine registry's interface run in plain Python (``pipeline.components.sglang_hisched``,
held equal to SGLang's own code by tests/test_sglang_hisched.py and
tests/test_engine_sglang_hicache.py): the reference the compiled HiCache
(``pipeline.engine.sglang`` over ``sglang_khiradix``) is held equal to, and the engine of
runs with an L3 store (non-overlap loop).

What moves between the tiers, per batch: ``reload_tokens`` is the host tokens loaded back
for the batch (``init_load_back`` at admission; the load starts when the batch is prepared,
``ready_to_load_host_cache``, and each layer's forward waits for that layer's load,
``layer_transfer_counter.wait_until``: synchronous in the batch), priced by the step-time
model's reload term as vLLM's CPU tier is; ``host_load_bytes`` / ``host_write_bytes`` the
bytes loaded and copied to the host (write-through at insert, write-back at eviction). Per
request, ``cpu_hit_tokens`` is the host tokens its first admission loaded, and
``gpu_hit_tokens`` the device prefix without them.

With an L3 store (``HiCacheSpec.storage``, ``pipeline.components.sglang_histore``): per
batch ``storage_read_bytes`` / ``storage_write_bytes`` (pages fetched into the host, pages
newly written to storage); per request ``storage_hit_tokens``, the tokens its prefetch
brought from storage to the host by its first admission (SGLang's ``storage_hit_length``;
they reach the device through the host load back, so they are part of ``cpu_hit_tokens``
when it loads them). On the time clock a transfer lands ``latency_ms`` plus its pages over
the bandwidth after it is issued; a turn that can admit nobody while a prefetch is in
flight waits for the next landing (the idle time before the batch). On the step clock
transfers take no time, as in the reference (scripts/sglang_hicache_reference.py).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.components import engine_layout as L
from pipeline.components.sglang_batch import Req
from pipeline.components.sglang_hisched import HiScheduler
from pipeline.components.sglang_storage_spec import StorageSpec
from pipeline.engine.loop import STEP_COLUMNS
from pipeline.engine.request import SimRequest, placeholder_tokens, sequence_tokens
from pipeline.engine.step import StepRecord, TimedSteps, timed_batches

__all__ = ["HiCacheSpec", "SGLangHiInstance", "host_pool_tokens", "request_symbols",
           "key_symbols"]

HOST_COLUMNS = ("host_load_bytes", "host_write_bytes")
STORAGE_COLUMNS = ("storage_read_bytes", "storage_write_bytes")
IDLE_TURNS = 4                  # turns in a row a prefetch in flight may hold every request


def request_symbols(request: SimRequest, block_size: int, codes: dict) -> np.ndarray:
    """A request's prompt + output token symbols (``pipeline.engine.sglang_instance``'s
    docstring): its own token ids, or per block key (``codes`` numbers them) a run of its
    own."""
    if request.prompt_keys is None:
        return np.asarray(sequence_tokens(request), np.int64)
    B = block_size
    keys = np.asarray(request.prompt_keys).view(np.uint64).tolist()
    numbers = np.array([codes.setdefault(k, len(codes)) for k in keys], np.int64)
    head = (numbers[:, None] * B + np.arange(B)).ravel()
    tail = len(request.prompt_token_ids) - head.size + request.max_tokens
    return np.concatenate([head, placeholder_tokens(request.index, tail)]).astype(np.int64)


def key_symbols(blocks: dict, keys) -> np.ndarray:
    """The symbols of the leading block keys an instance has seen (``blocks``)."""
    out = []
    for key in np.asarray(keys).view(np.uint64).tolist():
        block = blocks.get(key)
        if block is None:
            break
        out.append(block)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


@dataclass(frozen=True)
class HiCacheSpec:
    """HiCache's settings: the write policy, the host pool in tokens, one token's KV bytes
    (for the step's byte columns)."""

    write_policy: str
    host_tokens: int
    kv_bytes_per_token: int
    storage: StorageSpec | None = None


def host_pool_tokens(device_tokens: int, page: int, ratio: float, size_gb: int,
                     kv_bytes_per_token: int) -> int:
    """The host pool SGLang sizes (``pool_host/base.py:221-229``): ``--hicache-size`` GB over
    the token's bytes, else ``--hicache-ratio`` x the device pool; then whole pages plus one
    padding page."""
    size = int(size_gb * 1e9 // kv_bytes_per_token) if size_gb > 0 \
        else int(device_tokens * ratio)
    return (size // page + 1) * page


class SGLangHiInstance:
    """One SGLang engine with HiCache (``SGLangInstance``'s interface over the plain-Python
    ``HiScheduler``; ``make(settings)`` another scheduler of the same interface, e.g. the
    plain ``Scheduler`` in the tests)."""

    extra_names = HOST_COLUMNS

    def __init__(self, config, cpu_tier=None, capacity: int = 64, make=None) -> None:
        if cpu_tier is not None:
            raise ValueError("the sglang engine has no CPU tier (HiCache is its host tier)")
        self.config, self.block_size = config, config.block_size
        spec = config.hicache
        self.kv_bytes = spec.kv_bytes_per_token if spec is not None else 0
        self.sched = make(config.settings) if make is not None else HiScheduler(
            config.settings, write_policy=spec.write_policy, host_tokens=spec.host_tokens,
            storage=spec.storage)
        self.storage = spec is not None and spec.storage is not None and make is None
        if self.storage:
            self.extra_names = HOST_COLUMNS + STORAGE_COLUMNS
        self.timed, self.clock_ms = True, 0.0        # simulate sets it: the step clock False
        self.until_ms = self.sleep_ms = float("inf")
        self.reqs: dict[int, Req] = {}
        self.loaded: dict[int, int] = {}             # request -> host tokens, first admission
        self.step_no = self.queued = self.done = 0
        self.idle = False
        self.codes: dict[int, int] = {}
        self.blocks: dict[int, np.ndarray] = {}
        self.clipped: dict[int, int] = {}            # request index -> tokens intake cut
        self.row: list[int] = []

    # ------------------------------------------------------------------ requests

    def tokens(self, request: SimRequest) -> np.ndarray:
        return request_symbols(request, self.block_size, self.codes)

    def _symbols(self, keys) -> np.ndarray:
        return key_symbols(self.blocks, keys)

    def _load(self, request: SimRequest) -> Req:
        taken = self.config.intake(request)             # SGLang's intake clip
        if taken is not request:
            self.clipped[request.index] = request.max_tokens - taken.max_tokens
        request = taken
        tokens = self.tokens(request)
        req = Req(request.index, tokens.tolist(), len(request.prompt_token_ids),
                  request.max_tokens)
        self.reqs[request.index] = req
        return req

    def add_request(self, request: SimRequest, keys=None, queue: bool = True) -> None:
        req = self._load(request)
        if queue:
            self.sched.enqueue(req)
            self.queued += 1
        if keys is not None:
            B, n = self.block_size, req.n
            for i, key in enumerate(np.asarray(keys).view(np.uint64).tolist()[:n // B]):
                self.blocks.setdefault(key, np.asarray(req.tokens[i * B:(i + 1) * B]))

    def add_all(self, requests: Sequence[SimRequest]) -> None:
        for request in requests:
            self._load(request)

    def enqueue(self, request: SimRequest) -> None:
        if self.storage:                                 # its prefetch is issued now
            tree = self.sched.tree
            tree.now_ms = max(self.clock_ms, (request.arrival_s or 0.0) * 1000.0) \
                if self.timed else 0.0
            tree.timed = self.timed
        self.sched.enqueue(self.reqs[request.index])
        self.queued += 1

    @property
    def outstanding(self) -> int:
        return self.queued - self.done

    def _last(self) -> list:
        last = self.sched.last_batch
        return last.reqs if last is not None and last.extend else []

    def has_work(self) -> bool:
        s = self.sched
        return bool(s.waiting or s.chunked is not None or
                    any(not r.finished for r in s.running.reqs + self._last()))

    @property
    def num_waiting(self) -> int:
        return len(self.sched.waiting)

    @property
    def num_running(self) -> int:
        return sum(not r.finished for r in self.sched.running.reqs + self._last())

    @property
    def free_blocks(self) -> int:
        return (self.sched.free + self.sched.tree.evictable_size) // self.block_size

    # ------------------------------------------------------------------ cache queries

    def _device_prefix(self, tree, keys) -> int:
        """The device prefix of ``keys``' symbols in whole pages, touching nothing."""
        symbols = self._symbols(keys).tolist()
        P = self.sched.P
        key, node, matched = tuple(symbols[:len(symbols) // P * P]), tree.root, 0
        while matched < len(key):
            child = node.children.get(tree._child_key(key, matched))
            if child is None or not getattr(child, "device", True):
                break
            length = tree._match_len(child.key, key, matched)
            matched += length
            if length < len(child.key):
                break
            node = child
        return matched

    def cached_prefix_blocks(self, keys) -> int:
        return self._device_prefix(self.sched.tree, keys) // self.block_size

    def cached_key_count(self) -> int:
        tree = self.sched.tree
        return (tree.evictable_size + tree.protected_size) // self.block_size

    def cache_snapshot(self) -> _Snapshot:
        return _Snapshot(self)

    # ------------------------------------------------------------------ running

    def step(self) -> StepRecord | None:
        """One loop turn (``HiScheduler.iterate``); its StepRecord, or None (``idle``: no
        work, the turn not taken)."""
        self.idle = not self.has_work()
        if self.idle:
            return None
        sched = self.sched
        tree = sched.tree
        written, loaded = getattr(tree, "written", 0), getattr(tree, "loaded", 0)
        stored, fetched = getattr(tree, "stored_pages", 0), getattr(tree, "fetched", 0)
        batch, idle_ms = self._turn(tree)
        if batch is None:
            self.idle = self.sleep_ms == self.until_ms      # asleep on a transfer
            return None
        moved_in = getattr(tree, "loaded", 0) - loaded
        moved_out = getattr(tree, "written", 0) - written
        rows = batch.scheduled
        new = sum(r[1] for r in rows)
        context = sum(r[1] + r[2] for r in rows)
        record = StepRecord(self.step_no, list(rows), new if batch.extend else 0,
                            0 if batch.extend else len(rows), context, moved_in,
                            self.num_running, self.num_waiting, self.free_blocks,
                            list(batch.first_tokens), list(batch.finished),
                            extra=(moved_in * self.kv_bytes, moved_out * self.kv_bytes))
        if self.storage:
            record.extra += ((tree.fetched - fetched) * self.kv_bytes,
                             (tree.stored_pages - stored) * sched.P * self.kv_bytes)
            record.idle_ms = idle_ms
        for req in batch.reqs:
            if req.first_sched == self.step_no and req.index not in self.loaded:
                self.loaded[req.index] = getattr(req, "host_loaded", 0)
        self.done += len(batch.finished)
        self.row = [record.step, record.prefill_tokens, record.decode_seqs,
                    record.context_tokens, record.reload_tokens, record.num_running,
                    record.num_waiting, record.free_blocks, *record.extra]
        self.step_no += 1
        return record

    def _turn(self, tree):
        """``HiScheduler.iterate`` until a batch runs: (the batch or None, the idle ms
        before it). With an L3 store a turn may run none while a prefetch holds its request
        back: on the time clock it waits for the next transfer to land (None when that is
        past ``until_ms``: asleep till then), on the step clock the next turn drains it
        (None after ``IDLE_TURNS`` such turns: stuck)."""
        idle_ms, empty = 0.0, 0
        while True:
            if self.storage:
                tree.now_ms, tree.timed = self.clock_ms + idle_ms, self.timed
            batch = self.sched.iterate(self.step_no)
            if batch is not None or not self.storage:
                return batch, idle_ms
            landing = tree.next_landing()
            if landing > tree.now_ms:
                if landing >= self.until_ms:
                    self.sleep_ms = self.until_ms
                    return None, idle_ms
                idle_ms = landing - self.clock_ms
                continue
            empty += 1
            if empty >= IDLE_TURNS:
                return None, idle_ms

    def run_until(self, until_ms: float, now_ms: float, step_ms) -> TimedSteps:
        """Batches that start before ``until_ms`` (``step_ms(record)``: each one's time)."""
        self.clock_ms, self.until_ms, self.sleep_ms = now_ms, until_ms, now_ms

        def priced(record) -> float:
            duration = float(step_ms(record))
            self.clock_ms += getattr(record, "idle_ms", 0.0) + duration
            return duration

        return timed_batches(self, lambda: self.row, len(STEP_COLUMNS) +
                             len(self.extra_names), until_ms, now_ms, priced)

    def host_loaded(self, requests: Sequence[SimRequest]) -> np.ndarray:
        """Host tokens each request's first admission loaded."""
        return np.array([self.loaded.get(r.index, 0) for r in requests], np.int64)

    def request_rows(self, requests: Sequence[SimRequest]) -> np.ndarray:
        reqs = [self.reqs[r.index] for r in requests]
        rows = np.full((len(reqs), L.R_COLUMNS), L.NONE, np.int64)
        if not reqs:
            return rows
        host = self.host_loaded(requests)
        rows[:, L.INDEX] = [r.index for r in reqs]
        for column, name in ((L.FSCHED, "first_sched"), (L.FTOK, "first_token"),
                             (L.FIN, "finish_step")):
            values = np.array([getattr(r, name) for r in reqs], np.int64)
            rows[:, column] = np.where(values < 0, L.NONE, values)
        rows[:, L.GPUHIT] = np.maximum(np.array([r.hit for r in reqs]), 0) - host
        rows[:, L.CPUHIT] = host
        rows[:, L.NPROMPT] = [r.n for r in reqs]
        rows[:, L.DISKHIT] = [getattr(r, "storage_loaded", 0) for r in reqs]
        rows[:, L.NTOK] = [r.n + r.max_new for r in reqs]
        rows[:, L.PREEMPT] = [r.retractions for r in reqs]
        return rows


    def with_request_columns(self, frame, requests: Sequence[SimRequest]):
        """``storage_hit_tokens`` with an L3 store (else the frame unchanged)."""
        if not self.storage:
            return frame
        import polars as pl
        rows = self.request_rows(requests)
        return frame.with_columns(storage_hit_tokens=pl.Series(rows[:, L.DISKHIT]))


class _Snapshot:
    """A frozen copy of an instance's tree for a stale fleet view."""

    def __init__(self, instance: SGLangHiInstance) -> None:
        tree = instance.sched.tree
        self.instance, self.tree = instance, copy.deepcopy(tree)
        self.size = tree.evictable_size + tree.protected_size

    def prefix_blocks(self, keys) -> int:
        return self.instance._device_prefix(self.tree, keys) // self.instance.block_size

    def key_count(self) -> int:
        return self.size // self.instance.block_size
