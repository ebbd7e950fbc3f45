"""``sglang``: SGLang 0.5.23's scheduler and radix cache as an engine of the registry
(``pipeline.engine.engines``): ``simulate --engine sglang``, ``fleet --engine sglang``.

The loop is ``pipeline.components.sglang_ksched`` (compiled, over the flat radix tree of
``sglang_kradix``; its plain-Python oracle is ``tests/oracles/sglang_sched.py``); this
module turns the lab's requests into token sequences, drives the loop on the step clock
(one compiled call for the whole run), the time clock or a closed loop (one compiled call
per batch, the step time priced in Python), and writes the same frames as vLLM's engine (``loop.REQUEST_COLUMNS``,
``STEP_COLUMNS``; ``gpu_hit_tokens`` is the radix-tree prefix at a request's first
admission, ``preemptions`` its retractions, ``free_blocks`` the free and evictable pages).
With ``--enable-hierarchical-cache`` the same compiled loop runs over HiCache's tree
(``sglang_khiradix``); HiCache settings it does not run (``PYTHON_HICACHE_FIELDS``: L3
storage) go to the plain-Python HiCache engine (``sglang_hicache``).

Tokens: a token-id trace's own ids (outputs: the sampled ids, else placeholders no prompt
has); a trace of block keys (Mooncake) gives token ``j`` of a block with key ``k`` a symbol of
its own, shared by every prompt with that block, and the tokens past the last full block
fresh ones. So ``--page-size`` must divide ``--block-size``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from pipeline.components import engine_layout as L
from pipeline.components import sglang_ksched as K
from pipeline.components.sglang_kradix_layout import T_EVICT, T_PROT
from pipeline.components.sglang_ksched import SGLangState
from pipeline.engine.compiled import STUCK_MESSAGE, compiled_model, request_table, with_times
from pipeline.engine.loop import STEP_COLUMNS, SimResult
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang_hicache import HOST_COLUMNS, SGLangHiInstance, key_symbols, \
    request_symbols
from pipeline.engine.sglang_intake import refusal
from pipeline.engine.sglang_options import HICACHE_SUMMARY, HICACHE_WRITE_POLICY, OPTIONS, \
    SGLangConfig, sglang_config, storage_clause
from pipeline.engine.kstep import reload_term
from pipeline.engine.step import StepRecord, TimedSteps, timed_batches

__all__ = ["SGLang", "SGLangConfig", "SGLangInstance"]

#: HiCache settings the compiled engine does not run (the L3 storage backend's): a run
#: that gives one is the plain-Python HiCache engine (``sglang_hicache``)
PYTHON_HICACHE_FIELDS = ("storage",)


def compiled_hicache(spec) -> bool:
    """Whether a run with HiCache ``spec`` (None: without) runs compiled."""
    return spec is None or not any(getattr(spec, name, None) for name in
                                   PYTHON_HICACHE_FIELDS)


OUT_OF_MEMORY = ("SGLang aborts the last request: out of memory even after retracting all "
                 "others (the pool is too small)")


class SGLangInstance:
    """One SGLang engine for ``fleet`` (``EngineSim``'s interface over the compiled
    scheduler, ``sglang_ksched``; with ``config.hicache`` over the compiled HiCache tree,
    ``sglang_khiradix``)."""

    def __init__(self, config: SGLangConfig, cpu_tier=None, capacity: int = 64) -> None:
        if cpu_tier is not None:
            raise ValueError("the sglang engine takes no CPU tier (its host tier: "
                             "--enable-hierarchical-cache)")
        self.config, self.block_size = config, config.block_size
        s = config.settings
        self.P = s.page_size
        spec = config.hicache
        self.kv_bytes = spec.kv_bytes_per_token if spec is not None else 0
        self.extra_names = HOST_COLUMNS if spec is not None else ()
        self.state = SGLangState(
            max_total_tokens=s.max_total_tokens, page_size=s.page_size,
            schedule_policy=s.schedule_policy, max_running_requests=s.max_running_requests,
            chunked_prefill_size=s.chunked_prefill_size,
            max_prefill_tokens=s.max_prefill_tokens,
            schedule_conservativeness=s.schedule_conservativeness,
            radix_eviction_policy=s.radix_eviction_policy, seed=s.seed,
            block_size=config.block_size, requests=capacity, overlap=config.overlap,
            hicache=None if spec is None else (spec.write_policy, spec.host_tokens))
        self.step_no = 0
        self.queued = 0                              # requests that joined the queue
        self.idle = False                            # the last step found no work
        self.rows: dict[int, int] = {}               # request index -> its row in R
        self.codes: dict[int, int] = {}
        self.blocks: dict[int, np.ndarray] = {}      # block key -> its token symbols
        self.clipped: dict[int, int] = {}            # request index -> tokens intake cut
        self._row = np.zeros(K.S_COLUMNS, np.int64)

    # ------------------------------------------------------------------ requests

    def tokens(self, request: SimRequest) -> np.ndarray:
        """The request's prompt + output token symbols (module docstring)."""
        return request_symbols(request, self.block_size, self.codes)

    def intake(self, request: SimRequest) -> SimRequest:
        """The request as SGLang's intake queues it, its clip recorded in ``clipped``."""
        taken = self.config.intake(request)
        if taken is not request:
            self.clipped[request.index] = request.max_tokens - taken.max_tokens
        return taken

    def add_request(self, request: SimRequest, keys=None, queue: bool = True) -> None:
        request = self.intake(request)
        tokens = self.tokens(request)
        n = len(request.prompt_token_ids)
        self.rows[request.index] = self.state.add(request.index, tokens, n,
                                                  request.max_tokens, queue)
        self.queued += queue
        if keys is not None:
            B = self.block_size
            for i, key in enumerate(np.asarray(keys).view(np.uint64).tolist()[:n // B]):
                if key not in self.blocks:
                    self.blocks[key] = tokens[i * B:(i + 1) * B].copy()

    def add_all(self, requests: Sequence[SimRequest]) -> None:
        """Every request at once, not queued (``run_on_steps`` queues them by arrival)."""
        requests = [self.intake(r) for r in requests]
        count = len(requests)
        if all(r.prompt_keys is None and r.output_token_ids is not None
               and len(r.output_token_ids) == r.max_tokens for r in requests):
            parts = [part for r in requests for part in (r.prompt_token_ids,
                                                        r.output_token_ids)]
            lengths = np.fromiter(map(len, parts), np.int64, len(parts))
            prompts, sizes = lengths[0::2], lengths[0::2] + lengths[1::2]
        else:
            parts = [self.tokens(r) for r in requests]
            sizes = np.fromiter(map(len, parts), np.int64, count)
            prompts = np.fromiter((len(r.prompt_token_ids) for r in requests), np.int64,
                                  count)
        indices = np.fromiter((r.index for r in requests), np.int64, count)
        first = int(self.state.SG[K.G_NREQ])
        self.rows.update(zip(indices.tolist(), range(first, first + count)))
        self.state.add_many(indices, parts, sizes, prompts, sizes - prompts)

    def enqueue(self, request: SimRequest) -> None:
        """A request given to ``add_all`` joins the waiting queue (it arrives)."""
        self.state.enqueue(self.rows[request.index])
        self.queued += 1

    @property
    def outstanding(self) -> int:
        """Requests queued and not finished."""
        return self.queued - int(self.state.SG[K.G_NDONE])

    def has_work(self) -> bool:
        return bool(K.has_work_py(self.state.state()))

    @property
    def num_waiting(self) -> int:
        return int(self.state.SG[K.G_NWAIT])

    @property
    def num_running(self) -> int:
        return int(K.num_running_py(self.state.state()))

    @property
    def free_blocks(self) -> int:
        """Free and evictable tokens in blocks of ``--block-size`` (vLLM's free queue)."""
        return int(self.state.SG[K.G_FREE] + self.state.tree[1][T_EVICT]) // self.block_size

    def request(self, index: int) -> np.ndarray:
        """The request's row of the scheduler's table (``sglang_ksched.R_*``)."""
        return self.state.R[self.rows[index]]

    # ------------------------------------------------------------------ cache queries

    def _symbols(self, keys) -> np.ndarray:
        return key_symbols(self.blocks, keys)

    def cached_prefix_blocks(self, keys) -> int:
        NI, TG = self.state.tree[:2]
        return int(K.peek(NI, TG, self.state.TOK, self._symbols(keys),
                          self.state.device_flags())) // self.block_size

    def cached_key_count(self) -> int:
        TG = self.state.tree[1]
        return int(TG[T_EVICT] + TG[T_PROT]) // self.block_size

    def cache_snapshot(self) -> _Snapshot:
        return _Snapshot(self)

    # ------------------------------------------------------------------ running

    def step(self) -> StepRecord | None:
        """One loop turn; its StepRecord, or None when it ran no batch (``idle``: there was
        no work, and the turn was not taken)."""
        S, row = self.state.state(), self._row
        count = K.step(S, row)
        while count == -2:
            self.state.grow_batch_tree()
            count = K.step(self.state.state(), row)
        self.idle = count == -3
        if count == -1:
            raise RuntimeError(OUT_OF_MEMORY)
        if count <= 0:
            return None
        R, SG = self.state.R, self.state.SG
        index = R[:, K.R_INDEX]
        BQ = self.state.BQ[:count]
        scheduled = list(zip(index[BQ[:, 0]].tolist(), BQ[:, 1].tolist(), BQ[:, 2].tolist()))
        record = StepRecord(int(row[0]), scheduled, *row[1:K.S_LOADED].tolist(),
                            index[self.state.BF[:SG[K.G_NF]]].tolist(),
                            index[self.state.BX[:SG[K.G_NX]]].tolist(),
                            extra=tuple(self._values()[len(STEP_COLUMNS):]))
        self.step_no += 1
        return record

    def run_until(self, until_ms: float, now_ms: float, step_ms) -> TimedSteps:
        """Batches that start before ``until_ms`` (``step_ms(record)``: each one's time)."""
        return timed_batches(self, self._values, len(STEP_COLUMNS) + len(self.extra_names),
                             until_ms, now_ms, step_ms)

    def _values(self) -> list:
        """The last step's row: ``STEP_COLUMNS``, with HiCache the host bytes loaded and
        written."""
        row = self._row.tolist()
        if not self.extra_names:
            return row[:K.S_LOADED]
        return row[:K.S_LOADED] + [row[K.S_LOADED] * self.kv_bytes,
                                   row[K.S_WRITTEN] * self.kv_bytes]

    def host_loaded(self, requests: Sequence[SimRequest]) -> np.ndarray:
        """Host tokens each request's first admission loaded (HiCache)."""
        return self.state.R[[self.rows[r.index] for r in requests], K.R_HLOADED].copy()

    def request_rows(self, requests: Sequence[SimRequest]) -> np.ndarray:
        R = self.state.R[[self.rows[r.index] for r in requests]]
        rows = np.full((len(requests), L.R_COLUMNS), L.NONE, np.int64)
        rows[:, L.INDEX], rows[:, L.FSCHED] = R[:, K.R_INDEX], R[:, K.R_FSCHED]
        rows[:, L.FTOK], rows[:, L.FIN] = R[:, K.R_FTOK], R[:, K.R_FINSTEP]
        rows[:, L.GPUHIT] = np.maximum(R[:, K.R_HIT], 0) - R[:, K.R_HLOADED]
        rows[:, L.CPUHIT] = R[:, K.R_HLOADED]
        rows[:, L.NPROMPT], rows[:, L.NTOK] = R[:, K.R_N], R[:, K.R_N] + R[:, K.R_MAXNEW]
        rows[:, L.PREEMPT] = R[:, K.R_RETR]
        return rows


class _Snapshot:
    """A frozen copy of an instance's tree for a stale fleet view."""

    def __init__(self, instance: SGLangInstance) -> None:
        NI, TG = instance.state.tree[:2]
        self.instance, self.NI, self.TG = instance, NI.copy(), TG.copy()
        self.DEV = instance.state.device_flags().copy()
        self.TOK = instance.state.TOK                # append-only: old spans stay valid
        self.size = int(TG[T_EVICT] + TG[T_PROT])

    def prefix_blocks(self, keys) -> int:
        return int(K.peek(self.NI, self.TG, self.TOK, self.instance._symbols(keys),
                          self.DEV)) // self.instance.block_size

    def key_count(self) -> int:
        return self.size // self.instance.block_size


def adjust_models_line(args, line: str) -> str:
    """The run's models line: which loop ran; with HiCache its host tier (and, with the L3
    storage options, the plain-Python HiCache engine, the non-overlap loop)."""
    if getattr(args, "disable_overlap_schedule", False):
        line = line.replace("(overlap loop)", "(non-overlap loop)", 1)
    if not getattr(args, "enable_hierarchical_cache", False):
        return line
    if getattr(args, "hicache_storage_backend", None):
        line = line.replace(SGLang.SUMMARY, HICACHE_SUMMARY, 1)
    else:
        line = line.replace("radix cache", "radix cache with HiCache", 1)
    return line.replace("CPU none (no CPU tier)", "host tier HiCache (write policy "
                        f"{args.hicache_write_policy or HICACHE_WRITE_POLICY})"
                        f"{storage_clause(args)}", 1)


def adjust_models_field(args, field: dict) -> dict:
    """The run's ``models`` field with HiCache: its host tier and write policy as ``cpu``."""
    if not getattr(args, "enable_hierarchical_cache", False):
        return field
    field = {**field, "cpu": "hicache",
             "hicache_write_policy": args.hicache_write_policy or HICACHE_WRITE_POLICY}
    if getattr(args, "hicache_storage_backend", None) is not None:
        field["hicache_storage_backend"] = args.hicache_storage_backend
    return field


class SGLang:
    """SGLang's engine: ``SGLangConfig``, ``SGLangInstance`` per instance, ``simulate``."""

    NAME = "sglang"
    SUMMARY = "SGLang 0.5.23's scheduler and radix cache (overlap loop), compiled"
    COMPILED = False
    OPTIONS = OPTIONS
    config = staticmethod(sglang_config)

    adjust_models_line = staticmethod(adjust_models_line)
    adjust_models_field = staticmethod(adjust_models_field)

    @staticmethod
    def instance(config: SGLangConfig, cpu_tier=None, capacity: int = 64):
        """One engine: compiled, or with HiCache's L3 storage the plain-Python one."""
        make = SGLangInstance if compiled_hicache(config.hicache) else SGLangHiInstance
        return make(config, cpu_tier, capacity)

    @staticmethod
    def refusal(request: SimRequest, config: SGLangConfig) -> str | None:
        """Why SGLang's intake does not queue this request as modelled, or None."""
        s = config.settings
        return refusal(len(request.prompt_token_ids), request.max_tokens,
                       s.max_total_tokens, s.page_size, config.context_len)

    @staticmethod
    def simulate(requests: Sequence[SimRequest], config: SGLangConfig, *, cpu_tier=None,
                 clock: str = "steps", step_ms: Callable | None = None,
                 concurrency: int | None = None, decode_run_ms=None) -> SimResult:
        return simulate(requests, config, cpu_tier=cpu_tier, clock=clock, step_ms=step_ms,
                        concurrency=concurrency)


def simulate(requests: Sequence[SimRequest], config: SGLangConfig, *, cpu_tier=None,
             clock: str = "steps", step_ms: Callable | None = None,
             concurrency: int | None = None) -> SimResult:
    """A whole run: arrivals by step (``arrival_step``), by time (``arrival_s``, each batch
    ``step_ms(record)`` long) or a closed loop of ``concurrency``; vLLM's engine's frames."""
    if clock == "time" and step_ms is None:
        raise ValueError("the time clock needs a step-time model (step_ms)")
    timed = clock == "time"
    if not timed and concurrency is None and compiled_hicache(config.hicache):
        return run_on_steps(requests, config)
    engine = SGLang.instance(config, cpu_tier, capacity=len(requests))
    engine.add_all(requests)
    engine.timed = timed
    n = len(requests)
    price = step_ms if timed else (lambda record: 1.0)
    due = np.zeros(n, np.float64)
    if concurrency is None:
        due = np.array([(r.arrival_s or 0.0) * 1000.0 if timed else float(r.arrival_step or 0)
                        for r in requests], np.float64)
    arrival = np.zeros(n, np.float64)
    parts, now, pointer = [], 0.0, 0
    while pointer < n or engine.has_work():
        if concurrency is None:
            if not engine.has_work():
                now = max(now, due[pointer])
            while pointer < n and due[pointer] <= now:
                arrival[pointer] = due[pointer]
                engine.enqueue(requests[pointer])
                pointer += 1
            until = due[pointer] if pointer < n else np.inf
        else:
            outstanding = engine.outstanding
            while pointer < n and outstanding < concurrency:
                arrival[pointer] = now
                engine.enqueue(requests[pointer])
                pointer, outstanding = pointer + 1, outstanding + 1
            until = now                                  # one batch, then look again
        part = engine.run_until(max(until, np.nextafter(now, np.inf)), now, price)
        parts.append(part)
        now = part.now_ms
    names = STEP_COLUMNS + getattr(engine, "extra_names", ())
    steps = np.concatenate([p.steps for p in parts]) if parts else \
        np.zeros((0, len(names)), np.int64)
    rows = engine.request_rows(requests)
    frame = with_clipped(request_table(rows, arrival, timed), engine.clipped, requests)
    if hasattr(engine, "with_request_columns"):                  # an L3 store's column
        frame = engine.with_request_columns(frame, requests)
    step_frame = pl.DataFrame({name: steps[:, j] for j, name in enumerate(names)},
                              schema={name: pl.Int64 for name in names})
    if not timed:
        return SimResult(frame, step_frame)
    if config.hicache is not None:
        frame = _with_load_ms(frame, engine.host_loaded(requests), step_ms)
    start = np.concatenate([p.start_ms for p in parts]) if parts else np.zeros(0)
    end = start + np.concatenate([p.duration_ms for p in parts]) if parts else np.zeros(0)
    return SimResult(with_times(frame, arrival, start[rows[:, L.FSCHED]],
                                end[rows[:, L.FTOK]], end[rows[:, L.FIN]]),
                     step_frame.with_columns(start_ms=pl.Series(start, dtype=pl.Float64),
                                             duration_ms=pl.Series(end - start,
                                                                   dtype=pl.Float64)))


def _with_load_ms(frame: pl.DataFrame, host: np.ndarray, step_ms) -> pl.DataFrame:
    """``load_ms``: the step model's reload term for each request's host tokens (what its
    load adds to its batch; null without a load or for a model without that term)."""
    model = compiled_model(step_ms)
    ms = [reload_term(*model, n) if model is not None and n else None
          for n in host.tolist()]
    return frame.with_columns(load_ms=pl.Series(ms, dtype=pl.Float64))


def run_on_steps(requests: Sequence[SimRequest], config: SGLangConfig,
                 engine: SGLangInstance | None = None, record: bool = False) -> SimResult:
    """The step clock, compiled whole (``sglang_ksched.run_steps``): arrivals by
    ``arrival_step``, the idle jump; the frames of ``simulate``. ``engine.steps`` keeps the
    raw rows (step row + first batch row; with ``record`` every batch's (request, new,
    cached) rows; events) for the equality tests and the benchmark."""
    engine = engine if engine is not None else SGLangInstance(config, capacity=len(requests))
    engine.add_all(requests)
    due = np.array([float(r.arrival_step or 0) for r in requests], np.float64)
    n, room = len(requests), 2 * config.settings.max_running_requests + 64
    STEPS = np.zeros((2 * n + 64, K.S_COLUMNS + 1), np.int64)
    SCHED = np.zeros((min(64 * n, 1 << 24) + room if record else 0, 3), np.int64)
    EVENTS = np.zeros((2 * n + 2 * room, 3), np.int64)
    Lp = np.zeros(6, np.int64)
    Lp[5] = record
    while True:
        status = K.run_steps(engine.state.state(), due, Lp, STEPS, SCHED, EVENTS)
        if status == K.SMALL_TREE:
            engine.state.grow_batch_tree()
            continue
        if status == K.FULL:
            STEPS, SCHED, EVENTS = (_grown(A, used) for A, used in
                                    ((STEPS, Lp[1]), (SCHED, Lp[2]), (EVENTS, Lp[4])))
            continue
        if status == K.FAILED:
            raise RuntimeError(OUT_OF_MEMORY if engine.state.SG[K.G_ERROR] else STUCK_MESSAGE)
        break
    index = engine.state.R[:, K.R_INDEX]
    STEPS, SCHED, EVENTS = STEPS[:Lp[1]], SCHED[:Lp[2]], EVENTS[:Lp[4]]
    SCHED[:, 0], EVENTS[:, 2] = index[SCHED[:, 0]], index[EVENTS[:, 2]]
    engine.steps = (STEPS, SCHED, EVENTS)
    engine.step_no = int(Lp[1])
    rows = engine.request_rows(requests)
    arrival = due.copy()
    frame = with_clipped(request_table(rows, arrival, False), engine.clipped, requests)
    columns = {name: STEPS[:, j] for j, name in enumerate(STEP_COLUMNS)}
    if engine.extra_names:
        columns.update(zip(engine.extra_names, (STEPS[:, K.S_LOADED] * engine.kv_bytes,
                                                STEPS[:, K.S_WRITTEN] * engine.kv_bytes)))
    return SimResult(frame, pl.DataFrame(columns, schema={name: pl.Int64 for name in columns}))


def with_clipped(frame: pl.DataFrame, clipped: dict[int, int],
                 requests: Sequence[SimRequest]) -> pl.DataFrame:
    """``output_clipped``: the output tokens SGLang's intake cut from each request (0 where
    none), only in a run where it cut some (``sglang_intake``)."""
    if not clipped:
        return frame
    cut = [clipped.get(r.index, 0) for r in requests]
    return frame.with_columns(output_clipped=pl.Series(cut, dtype=pl.Int64))


def _grown(A: np.ndarray, used: int) -> np.ndarray:
    """``A`` twice as long (its ``used`` rows kept)."""
    grown = np.empty((2 * A.shape[0] + 64,) + A.shape[1:], A.dtype)
    grown[:used] = A[:used]
    return grown
