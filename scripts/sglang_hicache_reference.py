"""SGLang 0.5.23's HiCache decisions on CPU: its ``UnifiedRadixCache`` (Python tree core,
one full component; scripts/sglang_unified_reference.py) with HiCache switched on as
``init_hicache`` leaves it, and a stand-in for the transfer engine.

In 0.5.23 there is no ``hiradix_cache.py``: HiCache is ``UnifiedRadixCache.init_hicache``
(``mem_cache/unified_radix_cache.py:455``) over the unified tree core, which decides what
moves (write-through on insert, ``unified_tree_core.py:1100-1122``, ``:1430-1465``; the
write-back backup and demotion on device eviction, ``:1788-1810`` and
``unified_radix_cache.py:1020-1050``; host eviction, ``evict_host`` ``:1433``; the load
back, ``init_load_back`` ``:3586`` and ``_load_back_transfers`` ``:1857``). Those run as
shipped. Stubbed, because they only move bytes or need CUDA:

* ``HybridCacheController`` (``cache_controller``): ``write`` takes host slots from a
  counter pool (``None`` when the host pool is full), ``load`` device slots from a counter;
  every transfer is finished at once (its ack's event ``query()`` is True), so an ack is
  seen at the next ``check_hicache_events`` (the scheduler calls it once a turn,
  ``managers/scheduler.py:3889``): that pins SGLang's one timing-dependent decision.
* the host pool group (``attach_hybrid_pool_to_unified_cache``): a slot counter with
  ``available_size`` / ``free``.
* ``init_hicache``'s own body (it builds the CUDA pools): its four assignments that decide
  (``write_through_threshold`` 1 for write_through, else 2; ``is_write_back``;
  ``load_back_threshold`` 10; ``host_memory_mode`` "cache"), and ``tree_core.
  set_hicache_enabled()``, are made here with the same values.
"""

from __future__ import annotations

import types
from array import array

from sglang_unified_reference import UnifiedTree, slots


class _Event:
    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class HostPool:
    """The host KV pool as the cache sees it: free slots counted."""

    def __init__(self, size: int) -> None:
        self.size, self.used, self.next = size, 0, 0
        self.logical_size, self.page_size = size, 1
        self.entry_map = {}
        self.shared_allocation_domain = None
        self.anchor_entry = types.SimpleNamespace(host_pool=self, host_evict_fn=None)

    def available_size(self) -> int:
        return self.size - self.used

    def free(self, indices, pool=None) -> None:
        self.used -= len(indices)

    def alloc(self, n: int, pool=None):
        """``n`` host slots (fresh ids), or None when fewer are free."""
        if self.available_size() < n:
            return None
        self.used += n
        self.next += n
        return slots(range(self.next - n, self.next))

    def get_dummy_flat_data_page(self):
        return None

    def set_from_flat_data_page(self, index, data) -> None:
        pass

    def get_data_page(self, index):
        return index

    def clear(self) -> None:
        self.used = 0


class Controller:
    """The HiCache controller's decisions' interface; transfers finish at once."""

    enable_storage = False

    def __init__(self, write_policy: str, host: HostPool, allocate) -> None:
        self.write_policy, self.mem_pool_host, self.allocate = write_policy, host, allocate
        self.ack_write_queue, self.ack_load_queue = [], []
        self.written = self.loaded = 0

    def write(self, device_indices, node_id, extra_pools=None, flush=True, **kw):
        host_indices = self.mem_pool_host.alloc(len(device_indices))
        if host_indices is None:
            return None
        self.written += len(device_indices)
        self.ack_write_queue.append(types.SimpleNamespace(
            node_ids=[node_id], finish_event=_Event(), num_tokens_by_pool={}, num_bytes=0,
            timing_enabled=False))
        return host_indices

    def load(self, host_indices, node_id, extra_pools=None):
        n = len(host_indices)
        self.loaded += n
        self.ack_load_queue.append(types.SimpleNamespace(
            node_ids=[node_id], finish_event=_Event(), num_tokens_by_pool={}, num_bytes=0,
            timing_enabled=False))
        return slots(self.allocate(n))

    def start_writing(self) -> None:
        pass

    def start_loading(self) -> int:
        return -1

    def reset(self) -> None:
        self.ack_write_queue.clear()
        self.ack_load_queue.clear()


def attach(cache, write_policy: str, host_tokens: int, allocate) -> Controller:
    """Switch HiCache on in SGLang's ``cache`` as ``init_hicache`` leaves it (its deciding
    assignments), with the stand-in controller; ``allocate(n)``: n device slot ids."""
    host = HostPool(host_tokens)
    controller = Controller(write_policy, host, allocate)
    cache.cache_controller = controller
    cache.host_pool_group = types.SimpleNamespace(free=host.free, get_pool=lambda name: host)
    full = next(c for c in cache.components.values() if c.component_type == 0)
    full._full_kv_pool_host = host
    cache.tree_core.set_hicache_enabled()
    cache.write_through_threshold = 1 if write_policy == "write_through" else 2
    cache.tree_core.write_through_threshold = cache.write_through_threshold
    cache.is_write_back = cache.tree_core.is_write_back = write_policy == "write_back"
    cache.load_back_threshold = 10
    cache.metrics_collector = None
    return controller


class HiTree(UnifiedTree):
    """UnifiedTree with HiCache on: ``write_policy`` and a host pool of ``host_tokens``."""

    def __init__(self, page_size: int = 1, policy: str = "lru", *, device_tokens: int,
                 host_tokens: int, write_policy: str = "write_through") -> None:
        super().__init__(page_size, policy)
        self.device_tokens = device_tokens
        self.controller = attach(self.cache, write_policy, host_tokens, self.new_slots)
        self.host = self.controller.mem_pool_host
        self.allocator.available_size = lambda: self.device_tokens - self.device_used()
        self.allocator.mamba_full_cache_donor = lambda: None      # no Mamba pool

    def new_slots(self, n: int) -> range:
        self.next_slot += n
        return range(self.next_slot - n, self.next_slot)

    def device_used(self) -> int:
        return self.cache.total_size()[0]

    def match(self, tokens):
        """(device prefix, host hit, best match node, last device node)."""
        r = self.cache.match_prefix(self.m.bpc.MatchPrefixParams(key=self.key(tokens)))
        return r.device_prefix_len, r.host_hit_length, r.best_match_node, r.last_device_node

    def load_back(self, tokens, mem_quota=None) -> int:
        """``init_load_back`` for a request of ``tokens``: the tokens it brought back."""
        device, host, best, last = self.match(tokens)
        req = types.SimpleNamespace(rid="r", last_node=last, swa_host_hit_length=0,
                                    kv=types.SimpleNamespace(mamba_pool_idx=None),
                                    mamba_host_hit_length=0)
        loaded, _ = self.cache.init_load_back(self.m.bpc.InitLoadBackParams(
            best_match_node=best, host_hit_length=host, mem_quota=mem_quota, req=req))
        return loaded

    def check_events(self) -> None:
        self.cache.check_hicache_events()

    def dec_lock_ref(self, node) -> None:
        super().dec_lock_ref(node)

    @property
    def host_available(self) -> int:
        return self.host.available_size()

    @property
    def written(self) -> int:
        return self.controller.written

    @property
    def loaded(self) -> int:
        return self.controller.loaded

    def node_states(self) -> list:
        """Every node but the root: (path, on device, on host, lock_ref, hits)."""
        full = self.m.FULL

        def row(path, node):
            data = node.component_data[full]
            return (path, data.value is not None, data.host_value is not None, data.lock_ref,
                    node.hit_count)
        return self.node_rows(row)


def scenario(write_policy: str, host_tokens: int = 100, tree_class=None) -> dict:
    """One prefix of 20 tokens through SGLang's HiCache: inserted twice (an ack check after
    each), evicted from the device, matched, loaded back; then a 5-token prefix evicted and
    matched (under the load-back threshold). What each step shows."""
    tree = (tree_class or HiTree)(device_tokens=40, host_tokens=host_tokens,
                                  write_policy=write_policy)
    a, b = list(range(1, 21)), list(range(100, 105))
    seen = {}

    def state():                                 # the prefix's node, None once deleted
        rows = [row[1:] for row in tree.node_states() if row[0] == tuple(a)]
        return rows[0] if rows else None

    tree.insert(a)
    seen["insert"] = (state(), tree.written)
    tree.check_events()
    seen["ack"] = state()
    tree.insert(a)
    tree.check_events()
    seen["second insert"] = (state(), tree.written)
    seen["evict"] = (tree.evict(20), state(), tree.written)
    seen["match"] = tree.match(a + [7])[:2]
    seen["load back"] = (tree.load_back(a + [7]), tree.loaded)
    tree.check_events()
    seen["loaded"] = state()
    tree.insert(b)
    tree.check_events()
    tree.insert(b)
    tree.check_events()
    _, node = tree.match_prefix(a)
    tree.inc_lock_ref(node)                      # keep a on the device
    tree.evict(5)
    seen["short"] = (tree.match(b + [7])[:2], tree.load_back(b + [7]),
                     tree.host_available)
    return seen


def observe(tree, capacity: int, operations) -> list:
    """What ``operations`` show on a HiCache tree (SGLang's ``HiTree`` or the oracle):
    insert (the device pool kept to ``capacity`` by evicting the overflow, as the
    scheduler's allocation does), match (device and host lengths), lock, unlock, evict,
    load back, check (the per-turn ack poll); after each, the sizes, the host pool, the
    tokens written and loaded, and every node (path, device, host, lock count, hits)."""
    seen, held = [], []
    for step in list(operations) + [("drain",)]:
        kind = step[0]
        if kind == "insert":
            _, tokens, inserted, lock = step
            length, node = tree.insert(tokens, 0, inserted)
            seen.append(length)
            if lock:
                tree.inc_lock_ref(node)
                held.append(node)
            if tree.total_size() > capacity:
                seen.append(tree.evict(tree.total_size() - capacity))
        elif kind == "match":
            _, tokens, lock = step
            device, host, _, last = tree.match(tokens)
            seen.append((device, host))
            if lock:
                tree.inc_lock_ref(last)
                held.append(last)
        elif kind == "unlock" and held:
            tree.dec_lock_ref(held.pop(step[1] % len(held)))
        elif kind == "evict":
            seen.append(tree.evict(step[1]))
        elif kind == "load":
            seen.append(tree.load_back(step[1]))
        elif kind == "check":
            tree.check_events()
        elif kind == "prefetch":
            tree.prefetch(step[1], step[2])
        elif kind == "progress":
            seen.append(tree.progress(step[1]))
        elif kind == "drain":
            tree.check_events()
            for node in held:
                tree.dec_lock_ref(node)
            seen.append(tree.evict(10 ** 6))
        seen.append((step, tree.evictable_size, tree.protected_size, tree.total_size(),
                     tree.host_available, tree.written, tree.loaded, tree.node_states(),
                     getattr(tree, "stored_count", None)))
    return seen


def replay(write_policy: str, device_tokens: int, host_tokens: int, operations,
           page_size: int = 1, policy: str = "lru", storage: dict | None = None) -> list:
    """``observe`` on SGLang's HiCache (run it in a process of its own); ``storage``:
    ``StorageTree``'s settings (prefetch_policy, threshold) for one with an L3 store."""
    if storage is not None:
        import logging
        logging.disable(logging.WARNING)
        tree = StorageTree(page_size, policy, device_tokens=device_tokens,
                           host_tokens=host_tokens, write_policy=write_policy, **storage)
        return observe(tree, device_tokens, operations)
    tree = HiTree(page_size, policy, device_tokens=device_tokens, host_tokens=host_tokens,
                  write_policy=write_policy)
    return observe(tree, device_tokens, operations)


# --------------------------------------------------------------------------- L3 storage

def _sources(name: str):
    """SGLang's module ``name`` from its own file, replacing the inert stub the unified
    reference's importer gives for it (the HiCache controllers: their storage half runs as
    shipped here; only their CUDA-bound ``__init__`` is skipped)."""
    import importlib.util
    import sys

    import sglang_reference as ref
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None):
        return module
    sys.modules.setdefault("psutil", types.ModuleType("psutil"))    # host RAM probes only
    path = ref.SOURCES.joinpath(*name.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _page_hashes(token_ids, prior_digest, page_size=None):
    """``cpp_utils.native_hash.get_native_hash`` (compiled, absent here) in Python: one
    SHA-256 per page, each chained on the one before (the prior digest seeds the chain).
    Only equality of keys matters to what moves."""
    import hashlib
    tokens = list(getattr(token_ids, "token_ids", token_ids))
    size = page_size or len(tokens) or 1
    out, prior = [], prior_digest or b""
    for start in range(0, len(tokens) - len(tokens) % size if page_size else len(tokens),
                       size):
        digest = hashlib.sha256(prior + repr(tokens[start:start + size]).encode())
        out.append(digest.hexdigest())
        prior = digest.digest()
    return out if page_size else (out[0] if out else hashlib.sha256(prior).hexdigest())


class FileStore:
    """``HiCacheFile``'s semantics (``mem_cache/hicache_storage.py:728``) on a dict instead
    of a directory of ``.bin`` pages: ``set`` of a present key is skipped and succeeds,
    ``get`` of an absent key is None, ``batch_exists`` is the base class's (the run of
    present keys from the start). No size cap: the file backend's ``LRUFileEvictor`` is
    inert unless ``max_size``/``min_free`` are configured (``lru_file_evictor.py``)."""

    def __init__(self) -> None:
        self.pages: dict[str, object] = {}

    def exists(self, key: str) -> bool:
        return key in self.pages

    def batch_exists(self, keys, extra_info=None) -> int:
        for i, key in enumerate(keys):                  # hicache_storage.py:462-473
            if not self.exists(key):
                return i
        return len(keys)

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [self.pages.get(key) for key in keys]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        for key, value in zip(keys, values):
            self.pages.setdefault(key, value)
        return True


class _Now:
    """A queue whose consumer thread runs at once, inside ``put`` (the storage threads
    replaced by synchronous steps: each finishes its item the moment it is queued)."""

    def __init__(self, consume) -> None:
        from queue import Queue
        self.consume, self.inner = consume, Queue()

    def put(self, item) -> None:
        self.consume(item)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True


def attach_storage(cache, controller: Controller, policy: str = "best_effort",
                   threshold: int = 256, timeout_base: float = 1.0,
                   timeout_per_ki_token: float = 0.25) -> FileStore:
    """Attach an L3 store to a HiCache tree as ``attach_storage_backend`` and
    ``apply_runtime_config`` leave it (their deciding assignments), with SGLang's own
    ``HybridCacheController`` storage methods bound to the stand-in controller."""
    import queue
    import types as _types

    cc_module = _sources("sglang.srt.managers.cache_controller")
    hybrid = _sources("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller")
    import sglang.srt.mem_cache.unified_radix_cache as urc
    import sglang.srt.mem_cache.utils as mem_utils
    mem_utils.get_native_hash = _page_hashes
    slot_type = type(slots([]))                  # torch.Tensor.split, for the release queue
    slot_type.split = lambda self, n: [self[i:i + n] for i in range(0, len(self), n)]
    timer = _sources("sglang.srt.utils.poll_timer")        # the timeout policy's budget:
    timer.time = _types.SimpleNamespace(perf_counter=lambda: 0.0)   # a clock that stands
    for name in ("running", "elapsed", "observe"):          # still (transfers take no time)
        setattr(urc.PollTimer, name, timer.PollTimer.__dict__[name])
    urc.PollTimer.started_at = None
    urc.PrefetchOperation = hybrid.PrefetchOperation
    urc.PPPrefetchDecision = hybrid.PPPrefetchDecision
    store = FileStore()
    host = controller.mem_pool_host
    controller.__class__ = type("StorageController", (Controller, hybrid.HybridCacheController),
                                {"_sync_prefetch_hit_query": lambda self, op, count: count,
                                 "_all_reduce": lambda self, *args, **kw: None,
                                 "backup_skip": False})          # one rank
    controller.storage_backend = store
    controller.storage_host_pool = host
    controller.page_get_func = controller._generic_page_get
    controller.page_set_func = controller._generic_page_set
    controller.enable_storage = True
    controller.host_memory_mode = "cache"
    controller.storage_backend_type = "file"
    controller.pp_prefetch_command_group = None
    controller.pp_prefetch_decisions = {}
    controller.extra_host_mem_release_queues = {}
    controller.prefetch_threshold = max(threshold, cache.page_size)
    controller.prefetch_capacity_limit = int(0.5 * host.size)         # cache_controller:634
    controller.prefetch_tokens_occupied = 0
    controller.storage_config = _types.SimpleNamespace(pp_rank=0, is_storage_writer=True)
    controller.prefetch_hits_sync_groups = controller.prefetch_completion_sync_groups = []
    controller.page_size = host.page_size = cache.page_size

    def hit_query(operation):                    # prefetch_thread_func, cache_controller:1333
        if operation.is_terminated():
            hash_value, count = [], 0
        else:
            hash_value, count = controller._storage_hit_query(operation)
        operation.hash_value = hash_value[:count // controller.page_size]
        operation.storage_hit_count = count
        controller.prefetch_hit_queue.put(operation)

    def transfer(operation):                     # prefetch_io_aux_func, :1247
        try:
            controller._page_transfer(operation)
        finally:
            controller.prefetch_sync_queue.put(cc_module.PrefetchAck(
                rid=operation.request_id, completed_req=True, operation=operation))

    def sync(ack):                               # prefetch_sync_thread_func, hybrid :1940
        controller._reduce_prefetch_ack(ack)
        controller.ack_prefetch_queue.put(ack)

    def backup(operation):                       # backup_thread_func, hybrid :1761
        controller._page_backup_or_log(operation)
        controller.ack_backup_queue.put(operation)

    controller.prefetch_queue = _Now(hit_query)
    controller.prefetch_buffer = _Now(transfer)
    controller.prefetch_sync_queue = _Now(sync)
    controller.backup_queue = _Now(backup)
    controller.prefetch_hit_queue = queue.Queue()
    controller.ack_prefetch_queue = queue.Queue()
    controller.ack_backup_queue = queue.Queue()
    controller.host_mem_release_queue = queue.Queue()
    controller.mem_pool_host.layout_lease = _Lease
    cache.tree_core.enable_storage = True
    cache.tree_core.backfill_missing_hash_values()
    cache.enable_storage = True                  # storage_attachment.py:281-295
    cache.prefetch_threshold = threshold
    cache.prefetch_timeout_base = timeout_base
    cache.prefetch_timeout_per_page = cache.page_size / 1024 * timeout_per_ki_token
    cache.hicache_storage_pass_prefix_keys = False
    cache.enable_storage_metrics = False
    cache.storage_metrics_collector = None
    cache.prefetch_stop_policy = policy
    return store


class _Lease:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


class StorageTree(HiTree):
    """``HiTree`` with an L3 store: the scheduler's two storage calls on a request
    (``prefetch``: ``_prefetch_kvcache`` at enqueue, ``progress``: the admission poll)."""

    def __init__(self, page_size: int = 1, policy: str = "lru", *, device_tokens: int,
                 host_tokens: int, write_policy: str = "write_through",
                 prefetch_policy: str = "best_effort", threshold: int = 256) -> None:
        super().__init__(page_size, policy, device_tokens=device_tokens,
                         host_tokens=host_tokens, write_policy=write_policy)
        self.store = attach_storage(self.cache, self.controller, prefetch_policy, threshold)

    def handle(self, rid):
        return self.m.bpc.CacheRequestHandle(str(rid), 0)

    def prefetch(self, rid, tokens) -> None:
        """``Scheduler._prefetch_kvcache`` (managers/scheduler.py:3342-3392) for a request
        of ``tokens`` (prompt; no logprobs): match, then ``prefetch_from_storage`` of what
        follows the device + host match, from a backed-up (or root) last host node."""
        cache = self.cache
        limit = max(len(tokens) - 1, 0)                  # _compute_max_prefix_len
        result = cache.match_prefix(self.m.bpc.MatchPrefixParams(key=self.key(tokens[:limit])))
        matched = result.device_prefix_len + result.host_hit_length
        node = result.last_host_node
        if cache.is_backuped(node) or cache.is_root(node):
            fill = array("q", tokens)                   # full_untruncated_fill_ids
            cache.prefetch_from_storage(self.handle(rid), node, fill[matched:limit],
                                        cache.get_last_hash_value(node), None,
                                        matched_prefix_tokens=fill[:matched])

    def progress(self, rid) -> tuple[bool, int]:
        """The admission poll (scheduler.py:4240-4256): done?, tokens loaded from L3."""
        done = self.cache.check_prefetch_progress(self.handle(rid))
        loaded = self.cache.pop_prefetch_loaded_span(self.handle(rid))[0] if done else 0
        return done, loaded

    @property
    def stored_count(self) -> int:
        return len(self.store.pages)


# --------------------------------------------------------------------------- the scheduler

def storage_loop(size: int, storage: dict, **settings):
    """scripts/sglang_scheduler_reference.py's ``Loop`` over SGLang's HiCache with an L3
    store (``storage``: ``attach_storage``'s settings, write policy and host tokens in
    ``settings["hicache"]``), with the scheduler's storage steps (transcribed, cited):
    ``_prefetch_kvcache`` at every enqueue, the paced retries after each turn's events, the
    prefetch poll and the device-hit-loss re-issue in the admission loop."""
    import sglang_scheduler_reference as sched

    class Waiting(list):
        """The waiting queue; ``extend`` is the retraction's ``_add_request_to_queue``."""

        def extend(self, reqs) -> None:
            for req in reqs:
                req.storage_prefetch_retry_attempts = 0          # scheduler.py:3474-3477
                req.storage_prefetch_last_match_len = None
                loop.prefetch(req)
                self.append(req)

    class StorageLoop(sched.Loop):
        def prefetch(self, req, storage_hit_end=None) -> None:
            """``Scheduler._prefetch_kvcache`` (scheduler.py:3342-3392)."""
            fill = req.full_untruncated_fill_ids      # a list, as the loop's tree keys
            self.cm.match_kv_cache(req, self.tree, fill,
                                   max_prefix_len=req._compute_max_prefix_len(len(fill)))
            tree, node = self.tree, req.last_host_node
            matched = req.prefix_len + req.host_hit_length
            req.storage_prefetch_last_match_len = matched
            if tree.is_backuped(node) or tree.is_root(node):
                tree.prefetch_from_storage(
                    req.cache_request_handle, node, fill[matched:len(fill) - 1],
                    tree.get_last_hash_value(node), None,
                    matched_prefix_tokens=fill[:matched], storage_hit_end=storage_hit_end)

        def retries(self) -> None:
            """``_process_storage_prefetch_retries`` (:3394-3425), default pacing."""
            for req, end in self.tree.storage_prefetch_retries.pop_ready(
                    self.waiting, INTERVAL, MAX_ATTEMPTS):
                req.storage_prefetch_retry_attempts += 1
                self.prefetch(req, end)

        def hit_lost(self, req) -> bool:
            """``_prefetch_after_device_hit_loss`` (:3427-3451)."""
            previous = req.storage_prefetch_last_match_len
            current = req.prefix_len + req.host_hit_length
            if not previous or current >= previous:
                return False
            if req.storage_prefetch_retry_attempts >= MAX_ATTEMPTS:
                req.storage_prefetch_last_match_len = current
                return False
            req.storage_prefetch_retry_attempts += 1
            self.prefetch(req)
            return True

        def match(self, req) -> bool:
            """``Loop.match`` with the storage poll (scheduler.py:4240-4256) before it and
            the device-hit-loss re-issue (:4258-4262) after it."""
            if not self.tree.check_prefetch_progress(req.cache_request_handle):
                return False
            loaded, start = self.tree.pop_prefetch_loaded_span(req.cache_request_handle)
            if loaded > 0:
                req.storage_hit_length, req.storage_hit_start = loaded, start
                req.host_hit_is_storage = False
            super().match(req)
            return not self.hit_lost(req)

        def first_scheduled(self, req) -> None:
            req.storage_loaded = req.storage_hit_length

        def after_events(self) -> None:
            """``Loop.iterate``'s step after the events: the prefetch retries."""
            self.retries()

    loop = StorageLoop(size, tree="unified", **settings)
    loop.store = attach_storage(loop.tree, loop.controller, **storage)
    loop.waiting = Waiting()
    return loop


INTERVAL = MAX_ATTEMPTS = 8          # hicache_storage_prefetch_retry_{poll_interval,max_attempts}


def run_storage(requests, size: int, storage: dict, **settings) -> dict:
    """``sglang_scheduler_reference.run`` over ``storage_loop``: a request is prefetched as
    it is queued; a turn that runs no batch while a prefetch is in flight waits (no step);
    per request also the tokens its first admission had from storage, per step the pages
    stored."""
    import logging

    import sglang_scheduler_reference as sched
    logging.disable(logging.WARNING)
    loop = storage_loop(size, storage, **settings)
    reqs = [sched.Req(i, tokens, n, m) for i, (tokens, n, m, _) in enumerate(requests)]
    for req in reqs:
        req.cache_request_handle = _handle(req.rid)
        req.storage_prefetch_retry_attempts, req.storage_prefetch_last_match_len = 0, None
        req.staged_prefetch_plan, req.storage_loaded = None, 0
    due = [a for *_, a in requests]
    steps, host, now, pointer, step, idle = [], [], 0, 0, 0, 0
    controller = loop.controller

    def busy() -> bool:
        return bool(loop.waiting or loop.chunked is not None or any(
            not r.finished() for r in loop.running + (loop.last[1] if loop.last and
                                                       loop.last[0] else [])))

    while pointer < len(reqs) or busy():
        if not busy():
            now = max(now, due[pointer])
        while pointer < len(reqs) and due[pointer] <= now:
            loop.prefetch(reqs[pointer])                          # _add_request_to_queue
            loop.waiting.append(reqs[pointer])
            pointer += 1
        if not idle:                 # what moved in the turns up to a batch is the batch's
            moved = controller.loaded, controller.written, len(loop.store.pages)
        result = loop.iterate(step)
        if result is None:
            idle += 1
            if idle > 3:
                raise RuntimeError("stuck")
            continue
        idle = 0
        steps.append(result)
        host.append((controller.loaded - moved[0], controller.written - moved[1],
                     len(loop.store.pages) - moved[2]))
        step += 1
        now += 1
    return {"requests": [(r.first_sched, r.first_token, r.finish_step, r.hit, r.retractions)
                         for r in reqs], "steps": steps,
            "host_loaded": [r.host_loaded for r in reqs],
            "storage_loaded": [r.storage_loaded for r in reqs], "host": host}


def _handle(rid):
    import sglang.srt.mem_cache.base_prefix_cache as bpc
    return bpc.CacheRequestHandle(rid, 0)
