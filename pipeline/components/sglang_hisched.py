"""SGLang 0.5.23's scheduler over its HiCache, in plain Python: ``sglang_sched``'s loop over
``sglang_hiradix.HiRadixTree`` (the unified tree's rules with a host tier), with what HiCache
changes in the loop (docs/sglang.md cites each line). It is the engine of ``--engine sglang
--enable-hierarchical-cache`` (``pipeline.engine.sglang_hicache``) and the test oracle
(tests/test_sglang_hisched.py holds it equal to SGLang's pieces):

* every turn starts with ``check_hicache_events`` (``managers/scheduler.py:3883-3889``): the
  write and load acks, the locks they held released;
* ``match_kv_cache`` (``mem_cache/common.py:221-268``) also returns the host run below the
  device prefix (``host_hit_length``) and the deepest matched node; ``num_matched`` counts
  both;
* ``PrefillAdder.add_one_req`` (``managers/schedule_policy.py:1395-1575``) sizes the
  admission with the host run as cached (``_select_prefill_admission``), then, with the
  host node locked on both tiers, loads it back (``init_load_back``: 10 tokens at least,
  device eviction for room); what is loaded joins the prefix, a load back that brings
  nothing sizes the admission again without it;
* a checkpoint is the unified one (``unified_radix_cache.py:1164-1336``): the insert's own
  last node is the request's, and only device nodes past the protected prefix free the
  request's duplicate slots (an evicted node adopts them).

With an L3 store (``storage``, ``sglang_histore``): ``_prefetch_kvcache`` at every enqueue
(arrival and retraction, ``managers/scheduler.py:3342-3392``, ``:3486-3497``); the paced
retries after each turn's events (``_process_storage_prefetch_retries``, ``:3391``); in the
admission loop the prefetch poll before the match (a request still prefetching is skipped,
``:4240-4256``) and, after it, a re-issue when the device match shrank while queued
(``_prefetch_after_device_hit_loss``, ``:3427-3451``).

``host_loaded`` per request: the tokens its first admission loaded from the host;
``storage_loaded``: the tokens its prefetch brought from storage to the host by then
(``storage_hit_length``).
"""

from __future__ import annotations

from pipeline.components.sglang_batch import Batch, Req
from pipeline.components.sglang_hiradix import HiRadixTree
from pipeline.components.sglang_histore import StoreRadixTree
from pipeline.components.sglang_prefill_adder import Adder
from pipeline.components.sglang_sched import Scheduler
from pipeline.components.sglang_settings import CLIP_MAX_NEW_TOKENS
from pipeline.components.sglang_storage_spec import StorageSpec

__all__ = ["HiScheduler"]


class HiScheduler(Scheduler):
    """``Scheduler`` with HiCache: ``write_policy``, a host pool of ``host_tokens``, an L3
    store when ``storage`` is given."""

    def __init__(self, settings, *, write_policy: str, host_tokens: int,
                 storage: StorageSpec | None = None, overlap: bool = False) -> None:
        super().__init__(settings, overlap)
        self.storage = storage
        kind, extra = (HiRadixTree, {}) if storage is None else \
            (StoreRadixTree, {"storage": storage})
        self.tree = kind(self.P, settings.radix_eviction_policy,
                         device_tokens=settings.max_total_tokens, host_tokens=host_tokens,
                         write_policy=write_policy, **extra)

    def next_batch(self, step: int) -> Batch | None:
        """``get_next_batch_to_run`` after ``_process_hicache_events`` (``scheduler.py:
        3883-3898``): the tree's events, then with a store its paced prefetch retries."""
        self.tree.check_events()
        if self.storage is not None:                     # _process_storage_prefetch_retries
            for req, end in self.tree.retries.pop_ready(
                    self.waiting, self.storage.retry_interval,
                    self.storage.retry_max_attempts):
                req.storage_attempts += 1
                self.prefetch(req, end)
        return super().next_batch(step)

    # ------------------------------------------------------------------ L3 storage

    def enqueue(self, req: Req, retracted: bool = False) -> None:
        if self.storage is not None:
            if retracted or not hasattr(req, "storage_attempts"):
                req.storage_attempts, req.last_match = 0, None
                req.storage_hit = getattr(req, "storage_hit", 0)
            self.prefetch(req)
        self.waiting.append(req)

    def prefetch(self, req: Req, hit_end: int | None = None) -> None:
        """``_prefetch_kvcache``: match, then prefetch what follows the device and host
        match from a backed-up (or root) anchor."""
        self.match(req, limit=True)
        matched = req.prefix_len + req.host_hit
        req.last_match = matched
        anchor = req.best_node
        if anchor is self.tree.root or anchor.host:
            fill = req.fill()
            self.tree.submit(req.index, anchor, fill[matched:max(len(fill) - 1, 0)],
                             matched, hit_end)

    def ready(self, req: Req) -> bool:
        if self.storage is None:
            return super().ready(req)
        if not self.tree.poll(req.index):
            return False
        loaded = self.tree.pop_loaded(req.index)
        if loaded > 0:
            req.storage_hit = loaded
        self.match(req, limit=True)
        previous, current = req.last_match, req.prefix_len + req.host_hit
        if not previous or current >= previous:          # _prefetch_after_device_hit_loss
            return True
        if req.storage_attempts >= self.storage.retry_max_attempts:
            req.last_match = current
            return True
        req.storage_attempts += 1
        self.prefetch(req)
        return False

    def match(self, req: Req, limit: bool) -> None:
        fill = req.fill()
        max_len = max(len(fill) - 1, 0)
        device, host, best, last = self.tree.match(fill[:max_len] if limit else fill)
        req.prefix_len, req.last_node = device, last
        req.host_hit, req.best_node = host, best
        req.num_matched = min(device + host, max_len)

    def checkpoint(self, req: Req, up_to: int) -> None:
        tokens = req.fill()[:up_to]
        key_len = len(tokens) // self.P * self.P
        _, node = self.tree.insert(tokens[:key_len], 0, req.inserted, req.protected)
        self.free += self.tree.freed
        req.inserted = max(req.inserted, key_len)
        prompt = req.n // self.P * self.P
        if 0 < prompt < key_len:
            self.tree.insert(tokens[:prompt], 1, prompt, prompt)
        req.protected = key_len
        self.unlock(req.lock)
        req.lock, req.last_node = self.lock(node), node

    def make_adder(self, running: Batch) -> Adder:
        return HiAdder(self, running)


class HiAdder(Adder):
    """``PrefillAdder.add_one_req`` with a host hit: admission, then the load back."""

    def add_one_req(self, req: Req, has_chunked: bool) -> str:
        max_new = min(max(req.max_new - req.out, 0), CLIP_MAX_NEW_TOKENS)
        total = len(req.fill()) - req.prefix_len + max_new + self.P
        sched, tree = self.sched, self.sched.tree
        anchor = req.last_node
        tree.inc_lock_ref(anchor)                        # _lock_node
        try:
            admission = self._select(req, total, req.host_hit)
            if isinstance(admission, str):
                return admission
            loaded = 0
            if req.host_hit > 0:
                best = req.best_node
                receipt = tree._host_lock(best)          # _lock_node(lock_host=True)
                tree.inc_lock_ref(best)
                loaded, node, evicted = tree.init_load_back(best, req.last_node,
                                                            req.host_hit, sched.free)
                sched.free += evicted - loaded
                tree.dec_lock_ref(best)
                tree._release_host_lock(best, receipt)
                req.last_node = node
                if loaded < req.host_hit:                # nothing loaded: size it again
                    admission = self._select(req, total, 0)
                    if isinstance(admission, str):
                        return admission
                req.prefix_len += loaded
                req.protected = req.prefix_len           # load_back_is_cache_owned
            if req.first_sched < 0:
                req.host_loaded = loaded
                req.storage_loaded = getattr(req, "storage_hit", 0)
            if sched.storage is not None:
                tree.admitted(req.index)                 # finish_storage_prefetch_admission
            prefix, extend, new_tokens, chunked = admission
            req.extend_end = prefix + extend             # _commit_prefill_admission
            req.lock = sched.lock(req.last_node)
            self.can_run.append(req)
            if chunked:
                self.new_chunked = req
            self._charge(extend, new_tokens)
        finally:
            tree.dec_lock_ref(anchor)
        return self.budget_state()
