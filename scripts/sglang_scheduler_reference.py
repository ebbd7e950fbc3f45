"""SGLang 0.5.23's scheduling pieces on CPU, unmodified, in its batch loop
(tests/test_engine_sglang_equal.py runs it when the sources are present).

Run as shipped (``scripts/ensure_sglang_sources.sh`` puts them in ``~/.cache/kvlab``):

* ``managers/schedule_policy.py``: ``SchedulePolicy.calc_priority`` (every policy's sort, the
  in-batch prefix check, the lpm -> fcfs fallback, the waiting-prefix LRU touch) and
  ``PrefillAdder`` (``add_one_req``, ``add_chunked_req``, ``budget_state``,
  ``_select_prefill_admission``, ``_commit_prefill_admission``, ``_update_prefill_budget``);
* ``mem_cache/prefill_budget.py``: ``PrefillBudget`` (the KV admission budget);
* ``mem_cache/radix_cache.py``: ``RadixCache`` (match, insert, ``checkpoint``, lock, evict);
* ``mem_cache/common.py``: ``match_kv_cache``, ``touch_waiting_prefix``;
* ``managers/scheduler_components/new_token_ratio_tracker.py``: the ratio after a retraction.

Stubbed: torch and every module those files import but these paths never run
(``stub_importer``; ``STUBBED`` below), and the run-time configuration getters they read
(``get_schedule()``, ``get_memory()``, ``envs``..., set to SGLang's defaults: ``Config``).
``Req`` is a plain object with the fields these files read; KV slot ids are lists
(``sglang_reference.Values``); the clock is a counter (``sglang_reference._Clock``).

Transcribed here, cited (scripts/sglang_scheduler_unmodified.py runs these same methods
themselves, unmodified, over a numpy-backed torch and a ``Scheduler`` made by
``object.__new__``, on ``RadixCache`` and the ``UnifiedRadixCache``; this loop stays for the
HiCache runs, whose controller and host pool come from sglang_hicache_reference.py with its
own stand-ins, and as bench_sglang.py's baseline): ``event_loop_normal``, ``get_next_batch_to_run``,
``_get_new_batch_prefill_raw``, ``update_running_batch``, ``ScheduleBatch.retract_decode``
and its ``length`` order, ``prepare_for_extend`` / ``prepare_for_decode`` (allocation and
``evict_from_tree_cache``), ``check_decode_mem``, ``release_kv_cache`` / ``release_req``,
``process_batch_result_prefill`` / ``_decode`` (append, finish by length, checkpoint).
The paged allocator is a page counter (``Pool``): a page taken where a token starts one,
whole pages freed.

``overlap=True`` runs ``event_loop_overlap`` instead (SGLang's default, ``scheduler.py:2061-
2130``), transcribed with what it changes in the methods above: the result queue (a turn
schedules and launches batch N+1, then processes batch N's result; a copy of the batch's
requests is queued, ``ScheduleBatch.copy``), ``_reqs_finishing_inflight``
(``:4444-4457``) and the skip-instead-of-retract in ``update_running_batch``
(``:4459-4472``), the result processors' skip of a request retracted since launch
(``batch_result_processor.py:343-345``, ``:1022-1027``; ``is_retracted`` set by
``Req.reset_for_retract``, ``schedule_batch.py:2066``, cleared by ``prepare_for_extend``,
``:2996``). ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` is off (its default,
``environ.py:693``), so ``is_disable_overlap_for_batch`` is false for these batches.
"""

from __future__ import annotations

import random
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import sglang_reference as ref  # noqa: E402
from stub_importer import Importer  # noqa: E402

#: more SGLang modules stubbed than for the tree alone: what schedule_policy.py imports
STUBBED = ref.STUBBED + (
    "sglang.srt.dllm", "sglang.srt.server_args", "sglang.srt.managers.schedule_batch",
    "sglang.srt.lora", "sglang.srt.layers", "sglang.srt.model_executor",
    "sglang.srt.speculative", "sglang.srt.managers.prefill_delayer",
    "sglang.srt.mem_cache.swa_radix_cache", "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.sampling", "sglang.srt.constrained", "sglang.srt.multimodal",
    "sglang.srt.managers.io_struct", "sglang.srt.hardware_backend", "sglang.srt.platforms",
    "sglang.srt.mem_cache.mamba_radix_cache", "sglang.srt.arg_groups",
    "sglang.srt.beam_search")
RETRACT_DECODE_STEPS = 20           # envs.SGLANG_RETRACT_DECODE_STEPS


class _Finder(ref._SGLangFinder):
    def __init__(self, source: Path) -> None:
        self.inner = Importer(source, top="sglang", stubbed=STUBBED)
        self.busy = False


def NS(**fields) -> types.SimpleNamespace:
    return types.SimpleNamespace(**fields)


class Slots(ref.Values):
    """KV slot ids standing for an int64 tensor: slicing, ``to``, ``clone``."""

    def __getitem__(self, index):
        item = list.__getitem__(self, index)
        return Slots(item) if isinstance(index, slice) else item

    def to(self, **kw) -> Slots:
        return Slots(self)

    def clone(self) -> Slots:
        return Slots(self)

    def numel(self) -> int:
        return len(self)


def _empty(shape, dtype=None, device=None) -> Slots:
    return Slots([0] * (shape[0] if isinstance(shape, tuple) else shape))


#: the torch calls radix_cache.py and schedule_policy.py make on these paths
TORCH = types.SimpleNamespace(
    empty=_empty, cat=lambda parts: Slots(t for part in parts for t in part),
    tensor=lambda data, dtype=None: Slots(data), iinfo=lambda dtype: NS(max=2 ** 63 - 1),
    int64="int64", bool="bool", device=lambda name: name, Tensor=Slots)


class _Envs(ref.Envs):
    """``sglang.srt.environ.envs`` at its defaults (the ones these paths read)."""

    DEFAULTS = {"SGLANG_ENABLE_WAITING_PREFIX_REFRESH": True, "SGLANG_RADIX_FORCE_MISS": False,
                "SGLANG_EXACT_CHUNK_FILL": False, "SGLANG_RETRACT_DECODE_STEPS": 20}


def load(policy: str, eviction: str = "lru", tree: str = "radix"):
    """(schedule_policy, radix_cache, common, prefill_budget, ratio tracker) modules, with the
    configuration getters set for this run. ``tree="unified"`` loads SGLang's
    ``UnifiedRadixCache`` first (scripts/sglang_unified_reference.py; in a process of its
    own)."""
    if not ref.sources_present():
        raise FileNotFoundError(f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}")
    if tree == "unified":
        import sglang_unified_reference as unified
        unified.load()
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(ref.SOURCES))
    import sglang.srt.managers.schedule_policy as sp
    import sglang.srt.mem_cache.common as cm
    import sglang.srt.mem_cache.prefill_budget as pb
    import sglang.srt.mem_cache.radix_cache as rc
    import sglang.srt.managers.scheduler_components.new_token_ratio_tracker as nt
    envs = _Envs()
    for module in (sp, cm, rc, pb, nt):
        module.envs = envs
    sp._IS_HIP, sp.PREFILL_TILE_BUDGET = False, 0
    sp.torch = rc.torch = TORCH
    sp._use_exact_chunk_fill = lambda: False
    sp.mamba_prefill_chunk_grid = lambda: 1
    sp.page_interleave_shard_size = lambda allocator: 1
    sp.split_cached_prefix_by_tier = lambda **kw: (kw["prefix_len"], 0, 0)
    sp.get_disagg = cm.get_disagg = lambda: NS(disaggregation_mode="null")
    sp.get_memory = lambda: NS(radix_eviction_policy=eviction)
    sp.get_schedule = lambda: NS(prefill_max_requests=None, schedule_policy=policy,
                                 schedule_low_priority_values_first=False)
    sp.get_exec = lambda: NS(features=NS(enable_encoder_swa_bounded_replay=False),
                             mamba=NS(enable_mamba_extra_buffer=False))
    return sp, rc, cm, pb, nt


class Req:
    """The fields of ``schedule_batch.Req`` that the pieces read, for a plain request."""

    def __init__(self, index: int, tokens: list, n: int, max_new: int) -> None:
        self.rid, self.index, self.tokens = str(index), index, tokens
        self.origin_input_ids = list(tokens[:n])
        self.output_ids: list = []
        self.sampling_params = NS(max_new_tokens=max_new, ignore_eos=False)
        self.extra_key = self.cache_salt = None
        self.priority = None
        self.prefix_len = self.num_matched_prefix_tokens = 0
        self.last_node = self.lock = None
        self.host_hit_length = self.swa_host_hit_length = self.mamba_host_hit_length = 0
        self.auxiliary_swa_host_hit_length = self.storage_hit_length = 0
        self.storage_hit_start, self.host_hit_is_storage = 0, False
        self.host_loaded_length = 0
        self.last_host_node = self.best_match_node = None
        self.swa_branching_seqlen = self.mamba_branching_seqlen = None
        self.cache_request_handle = None
        self.token_indices_to_pool = None
        self.retracted_stain = False
        self.session = self.session_id = None     # the unified tree asks for these
        self.kv_rotation_base = self.finished_reason = None
        self.extend_end = 0
        self.inflight_middle_chunks = 0
        self.finished_flag = False
        self.retractions = 0
        self.time_stats = NS(wait_queue_entry_time=0.0)
        self.kv = NS(holds_mamba=False, req_pool_idx=index, holds_kv=False,
                     cache_protected_len=0, cache_inserted_len=0, swa_evict_floor=0,
                     kv_committed_len=0, mamba_pool_idx=None)
        self.first_sched = self.first_token = self.finish_step = self.hit = -1
        self.host_loaded = 0
        self.is_retracted = False

    @property
    def full_untruncated_fill_ids(self) -> list:
        return self.origin_input_ids + self.output_ids

    @property
    def extend_len(self) -> int:
        return self.extend_end - self.prefix_len

    def _compute_max_prefix_len(self, input_len: int) -> int:
        return max(input_len - 1, 0)

    def needs_host_load_back(self) -> bool:              # schedule_batch.py:1522-1529
        return self.host_hit_length > 0

    def materialized_host_hit_len(self) -> int:          # :1531-1535
        return min(self.host_hit_length, self.host_loaded_length)

    def fulfilled_storage_hit_len(self, prefix_len: int) -> int:
        return 0

    def finished(self) -> bool:
        return self.finished_flag


class Pool:
    """The token pool (paged: ``page_size`` tokens a page, ``available`` in tokens) and the
    req_to_token rows, as the tree and the budget see them."""

    device = "cpu"

    def __init__(self, size: int, page_size: int = 1) -> None:
        self.page_size = page_size
        self.available, self.next_slot = size // page_size * page_size, 0
        self.rows: dict[int, Slots] = {}
        self.req_to_token = self

    def __getitem__(self, index):                  # req_to_token[row, :n]
        row, cut = index
        return Slots(self.rows.setdefault(row, Slots())[cut])

    def write(self, index, values) -> None:
        row, cut = index
        self.rows[row][cut] = values

    def alloc(self, row: int, n: int) -> None:
        """Grow the row by ``n`` tokens: a new page where a token starts one."""
        tokens, P = self.rows.setdefault(row, Slots()), self.page_size
        for _ in range(n):
            if len(tokens) % P == 0:
                self.available -= P
                self.next_slot += P
                base = self.next_slot - P
            else:
                base = tokens[-1] - (len(tokens) - 1) % P
            tokens.append(base + len(tokens) % P)

    def free_segment(self, indices, start_pos=0) -> None:
        self.available += len(indices)

    free = free_segment

    def take(self, n: int) -> range:
        """``n`` fresh slots (HiCache's load back; whole pages, as its runs are)."""
        self.available -= n
        self.next_slot += n
        return range(self.next_slot - n, self.next_slot)

    def available_size(self) -> int:
        return self.available

    def request_slot_reserve(self, **kw) -> int:
        return 0

    def create_prefill_budget(self, tree_cache, *, num_mixed_decode_tokens=0):
        return self.pb.PrefillBudget(self, tree_cache,
                                     num_mixed_decode_tokens=num_mixed_decode_tokens)


class Loop:
    """SGLang's scheduler loop (transcribed, cited) over its own pieces (run as shipped)."""

    def __init__(self, size: int, policy: str = "fcfs", max_running: int = 256,
                 chunk: int | None = 8192, max_prefill: int = 16384,
                 conservativeness: float = 1.0, eviction: str = "lru", seed: int = 0,
                 page: int = 1, tree: str = "radix", hicache: tuple | None = None,
                 overlap: bool = False) -> None:
        self.sp, self.rc, self.cm, pb, nt = load(policy, eviction, tree)
        self.clock = ref._Clock()
        self.rc.time = self.clock
        self.pool = Pool(size, page)
        self.P = page
        self.pool.pb = pb
        params = self.rc.CacheInitParams(disable=False, req_to_token_pool=self.pool,
                                         token_to_kv_pool_allocator=self.pool,
                                         page_size=page,
                                         eviction_policy=eviction)
        if tree == "unified":                 # what SGLang's scheduler builds (registry.py:146)
            import sglang_unified_reference as unified
            m = unified.load()
            params = m.cip.CacheInitParams(
                disable=False, req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.pool,
                page_size=page, eviction_policy=eviction, tree_components=(m.FULL,),
                tree_core_backend="python")
            self.tree = m.urc.UnifiedRadixCache(params)
            if hicache is not None:           # (write policy, host tokens)
                import sglang_hicache_reference as hi
                self.pool.mamba_full_cache_donor = lambda: None
                self.controller = hi.attach(self.tree, *hicache, allocate=self.pool.take)
        else:
            self.tree = self.rc.RadixCache(params)
        self.policy = self.sp.SchedulePolicy(policy, self.tree, False, False, False)
        init = min(0.7 * conservativeness, 1.0)               # NewTokenRatioTracker
        self.ratio_min, self.ratio = min(init * 0.14, 1.0), init
        self.ratio_decay = (init - self.ratio_min) / 600
        self.estimate = nt.NewTokenRatioTracker.estimate_new_token_ratio_after_retract
        self.max_running, self.chunk, self.max_prefill = max_running, chunk, max_prefill
        self.waiting, self.running, self.running_full = [], [], False
        self.last = None                     # (is_extend, reqs) of the last batch
        self.chunked = None
        self.hicache = hicache is not None
        self.overlap = overlap               # enable_skip_finishing_decode (:2063)
        self.result_queue = []               # (is_extend, reqs copy, result lists)
        self.popped = False
        random.seed(seed)                    # the random policy: random.shuffle

    # -- mem_cache/common.py, allocator/base.py (transcribed)
    def evict_to_free(self, num_tokens: int) -> None:
        shortfall = num_tokens - self.pool.available
        if shortfall > 0:
            self.tree.evict(self.rc.EvictParams(num_tokens=shortfall))

    def checkpoint(self, req, up_to: int) -> None:          # checkpoint_kv_cache
        self.tree.checkpoint(req, up_to=up_to)
        req.prefix_len = req.extend_end

    def release(self, req, checkpoint: bool) -> None:        # release_kv_cache
        owned = req.kv.kv_committed_len
        if checkpoint:
            self.tree.checkpoint(req, up_to=owned)
        P = self.pool.page_size                 # paged free(): whole pages
        self.pool.available += (-(-owned // P) - req.kv.cache_protected_len // P) * P
        self.tree.unlock(req.lock)
        req.lock = None
        self.pool.rows.pop(req.kv.req_pool_idx, None)

    # -- scheduler.py: get_next_batch_to_run
    def next_batch(self, step: int):
        exclude = set()
        if self.chunked is not None:
            exclude.add(id(self.chunked))
            if self.chunked.extend_end > self.chunked.prefix_len:
                self.checkpoint(self.chunked, self.chunked.extend_end)
        if self.last is not None and self.last[0]:
            reqs = self.last[1]
            kept = [r for r in reqs if not r.finished() and id(r) not in exclude]
            if len(kept) < len(reqs):
                self.running_full = False
            if kept:
                if not self.running:
                    self.running_full = False
                self.running = self.running + kept
        kept = [r for r in self.running if not r.finished()]
        if len(kept) < len(self.running):
            self.running_full = False
        self.running = kept
        batch = self.prefill(step)
        if batch is not None:
            return batch
        if self.running:
            return self.update_running_batch()
        return None

    # -- scheduler.py: _get_new_batch_prefill_raw
    def prefill(self, step: int):
        if not self.running:
            self.running_full = False
        if (self.running_full or not self.waiting) and self.chunked is None:
            return None
        allocatable = self.max_running - len(self.running)       # get_num_allocatable_reqs
        if allocatable <= 0 and self.chunked is None:
            self.running_full = True
            return None
        batch_view = NS(reqs=self.running)
        self.policy.calc_priority(self.waiting, batch_view, processed_tokens=0)
        adder = self.sp.PrefillAdder(self.P, self.tree, self.pool, batch_view, self.ratio,
                                     self.max_prefill, self.chunk, 0, 0,
                                     max_running_requests=self.max_running)
        if self.chunked is not None:
            self.chunked = adder.add_chunked_req(self.chunked)
        result_enum = self.sp.AddReqResult
        for req in self.waiting:
            if adder.budget_state() == result_enum.OTHER:
                break
            if len(adder.can_run_list) >= allocatable:
                self.running_full = True
            if self.running_full:
                break
            if not self.match(req):
                continue
            req.kv.cache_protected_len = req.prefix_len
            res = adder.add_one_req(req, has_chunked_req=self.chunked is not None,
                                    truncation_align_size=None)
            if res != result_enum.CONTINUE:
                if res == result_enum.NO_TOKEN:
                    self.running_full = bool(adder.can_run_list) or bool(self.running)
                break
        if not adder.can_run_list:
            return None
        chosen = {id(r) for r in adder.can_run_list}
        self.waiting = type(self.waiting)(r for r in self.waiting if id(r) not in chosen)
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        if self.chunked is not None:
            self.chunked.inflight_middle_chunks += 1
        reqs = list(adder.can_run_list)                # prepare_for_extend, alloc_for_extend
        extend = sum(r.extend_end - r.prefix_len for r in reqs)      # alloc_paged_token_
        self.evict_to_free(extend if self.P == 1 else extend + len(reqs) * self.P)  # slots_extend
        scheduled = []
        for r in reqs:
            scheduled.append((r.index, r.extend_end - r.prefix_len, r.prefix_len))
            row = self.pool.rows.setdefault(r.kv.req_pool_idx, Slots())
            prefix = list(self.tree.path_device_indices(r.last_node)[:r.prefix_len]) \
                if not row else []
            if prefix:
                row.extend(prefix)
            self.pool.alloc(r.kv.req_pool_idx, r.extend_end - r.prefix_len)
            r.kv.kv_committed_len = r.extend_end
            r.is_retracted = False                             # schedule_batch.py:2996
            if r.first_sched < 0:
                r.first_sched, r.hit = step, r.prefix_len
                r.host_loaded = r.host_loaded_length
                self.first_scheduled(r)
        return True, reqs, scheduled

    def match(self, req) -> bool:
        """The waiting request's prefix match (``match_kv_cache``); False skips it this
        turn (a subclass's storage prefetch still running)."""
        self.cm.match_kv_cache(req, self.tree, req.full_untruncated_fill_ids,
                               max_prefix_len=req._compute_max_prefix_len(
                                   len(req.full_untruncated_fill_ids)))
        return True

    def first_scheduled(self, req) -> None:
        """What a subclass records when ``req`` is first scheduled."""

    # -- scheduler.py: update_running_batch; schedule_batch.py: retract_decode
    def check_decode_mem(self, reqs) -> bool:
        num = sum(1 for r in reqs if r.kv.kv_committed_len % self.P == 0) * self.P
        self.evict_to_free(num)
        return self.pool.available >= num

    def reqs_finishing_inflight(self):                      # scheduler.py:4444-4457
        if not self.overlap or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued = {id(r) for r in self.result_queue[0][1]}
        return [r for r in self.running if id(r) in queued and
                len(r.output_ids) + 1 >= r.sampling_params.max_new_tokens]  # :1661-1663

    def update_running_batch(self):
        initial = len(self.running)
        finishing = self.reqs_finishing_inflight()              # :4462-4466
        gone = {id(r) for r in finishing}
        self.running = [r for r in self.running if id(r) not in gone]
        if not self.running:
            self.running_full = False
            return None
        kv_full = not self.check_decode_mem(self.running)       # :4468
        if kv_full and finishing:                               # :4469-4472
            self.running_full = False
            return None
        if kv_full:
            reqs = self.running
            order = sorted(range(len(reqs)), key=lambda i: (len(reqs[i].output_ids),
                                                            -len(reqs[i].origin_input_ids)),
                           reverse=True)
            retracted, first = [], True
            while first or not self.check_decode_mem([reqs[i] for i in order]):
                if len(order) == 1:
                    break
                first = False
                req = reqs[order.pop()]
                self.release(req, checkpoint=False)               # release_req
                self.evict_to_free(len(order) * RETRACT_DECODE_STEPS)
                req.prefix_len, req.last_node, req.extend_end = 0, None, 0
                req.kv.cache_protected_len = req.kv.cache_inserted_len = 0
                req.kv.kv_committed_len, req.inflight_middle_chunks = 0, 0
                req.retracted_stain = req.is_retracted = True      # :2066
                req.retractions += 1
                retracted.append(req)
            if len(order) <= 1 and not self.check_decode_mem([reqs[i] for i in order]):
                raise RuntimeError("out of memory even after retracting all others")
            self.running = [reqs[i] for i in order]
            self.ratio = self.estimate(self.running)
            self.waiting.extend(retracted)
        else:
            self.ratio = max(self.ratio - self.ratio_decay, self.ratio_min)
        if len(self.running) < initial:
            self.running_full = False
        if not self.running:
            return None
        self.evict_to_free(len(self.running) * self.P)            # alloc_for_decode
        scheduled = []
        for r in self.running:
            scheduled.append((r.index, 1, r.kv.kv_committed_len))
            self.pool.alloc(r.kv.req_pool_idx, 1)
            r.kv.kv_committed_len += 1
        return False, self.running, scheduled

    # -- batch_result_processor.py: process_batch_result_prefill / _decode
    def process(self, batch, step: int, first=None, done=None) -> tuple[list, list]:
        extend, reqs, _ = batch
        first, done = ([], []) if first is None else (first, done)
        for r in reqs:
            if (r.finished() and r.inflight_middle_chunks <= 0) or r.is_retracted:
                continue                      # batch_result_processor.py:343-345, 1022-1027
            if extend and r.inflight_middle_chunks > 0:
                r.inflight_middle_chunks -= 1
                continue
            r.output_ids.append(r.tokens[len(r.origin_input_ids) + len(r.output_ids)])
            if r.first_token < 0:
                r.first_token = step
                first.append(r.index)
            if len(r.output_ids) >= r.sampling_params.max_new_tokens:
                r.finished_flag, r.finish_step = True, step
                done.append(r.index)
                self.release(r, checkpoint=True)
            elif extend:
                self.checkpoint(r, r.extend_end)
        return first, done

    def iterate_overlap(self, step: int):
        """One ``event_loop_overlap`` turn (scheduler.py:2084-2127): (is_extend, scheduled,
        first, finished) of the batch launched, its first / finished lists filled when its
        result is processed in the next turn; or None."""
        self.rc.time = self.clock
        batch = self.next_batch(step)                           # :2085-2089
        entry = None
        if batch is not None:                                   # :2109-2113
            entry = (batch[0], list(batch[1]), batch[2], step, [], [])
            self.result_queue.append(entry)
        self.popped = self.last is not None                     # :2118-2120
        if self.popped:
            extend, reqs, scheduled, at, first, done = self.result_queue.pop(0)
            self.process((extend, reqs, scheduled), at, first, done)
        self.last = None if batch is None else (batch[0], list(batch[1]))   # :2131
        return None if entry is None else (entry[0], entry[2], entry[4], entry[5])

    def iterate(self, step: int):
        """One ``event_loop_normal`` turn: (is_extend, scheduled, first, finished) or None."""
        if self.overlap:
            return self.iterate_overlap(step)
        self.rc.time = self.clock
        if self.hicache:                     # scheduler.py:3883-3889, before scheduling
            self.tree.check_hicache_events()
            self.after_events()
        batch = self.next_batch(step)
        if batch is None:
            self.last = None
            return None
        first, done = self.process(batch, step)
        self.last = (batch[0], list(batch[1]))
        return batch[0], batch[2], first, done

    def after_events(self) -> None:
        """What the loop does right after HiCache's events, before scheduling (nothing here;
        the L3 store's loop retries its prefetches)."""


def run(requests: list[tuple[list, int, int, int]], size: int, **settings) -> dict:
    """``requests``: (tokens, prompt length, max_new_tokens, arrival step), in order; the
    step clock as the lab's engines run it. Per request (first scheduled, first token,
    finish, hit, retractions) and per step (is_extend, scheduled, first, finished)."""
    loop = Loop(size, **settings)
    reqs = [Req(i, tokens, n, m) for i, (tokens, n, m, _) in enumerate(requests)]
    due = [a for *_, a in requests]
    steps, now, pointer, step = [], 0, 0, 0
    host = []                                # per step: (tokens loaded, tokens written)
    controller = getattr(loop, "controller", None)
    while pointer < len(reqs) or loop.waiting or loop.chunked is not None or \
            loop.result_queue or any(
            not r.finished() for r in loop.running + (loop.last[1] if loop.last and
                                                       loop.last[0] else [])):
        busy = loop.waiting or loop.chunked is not None or loop.result_queue or any(
            not r.finished() for r in loop.running + (loop.last[1] if loop.last and
                                                       loop.last[0] else []))
        if not busy:
            now = max(now, due[pointer])
        while pointer < len(reqs) and due[pointer] <= now:
            loop.waiting.append(reqs[pointer])
            pointer += 1
        moved = (controller.loaded, controller.written) if controller else (0, 0)
        result = loop.iterate(step)
        if result is None:
            if loop.waiting and not loop.popped:
                raise RuntimeError("stuck")
            continue
        steps.append(result)
        if controller is not None:
            host.append((controller.loaded - moved[0], controller.written - moved[1]))
        step += 1
        now += 1
    return {"requests": [(r.first_sched, r.first_token, r.finish_step, r.hit, r.retractions)
                         for r in reqs], "steps": steps,
            "host_loaded": [r.host_loaded for r in reqs], "host": host}


def hicache_demo(write_policy: str | None) -> dict:
    """Three requests on a 60-token pool: A (40 shared + 3 + 3 outputs), B (40 others),
    A's stem again; with HiCache (``write_policy``, a 200-token host pool) or without."""
    a, b = list(range(100, 140)), list(range(200, 240))
    requests = [(a + [1, 2, 3, 9, 9, 9], 43, 3, 0), (b + [4, 5, 6, 9, 9, 9], 43, 3, 10),
                (a + [7, 8, 9, 9, 9, 9], 43, 3, 20)]
    hicache = None if write_policy is None else (write_policy, 200)
    return run_unified(requests, 60, policy="fcfs", hicache=hicache)


def run_unified(requests, size: int, **settings) -> dict:
    """``run`` over SGLang's ``UnifiedRadixCache`` (Python core), what its scheduler
    builds; in a process of its own (scripts/sglang_unified_reference.py)."""
    import logging
    logging.disable(logging.WARNING)
    return run(requests, size, tree="unified", **settings)


if __name__ == "__main__":
    shared = list(range(100, 140))
    demo = [(shared + [i] * 5 + [-1 - i * 100 - j for j in range(6)], 45, 6, i // 2)
            for i in range(6)]
    print(run(demo, 200, policy="lpm"))
