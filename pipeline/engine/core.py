"""``EngineSim``: vLLM v1's engine loop (scheduler + KV cache manager + optional CPU tier)
over the compiled state, for callers that step it one batch at a time (the fleet, tests)
or run it whole (``pipeline.engine.loop.simulate``).

The scheduler itself is ``pipeline.engine.ksched`` (numba; its docstring lists the rules
kept from vLLM 0.33.0), the block pool ``kpool``, the CPU tier ``ktier``, whole runs and
decode stretches ``krun``. This class owns the arrays (``layout``): it grows them as
requests arrive, calls one compiled step per ``step()`` and turns the results into
``StepRecord``s; ``views`` reads a request's counters and the pool out of them.
"""

from __future__ import annotations

import numpy as np

from pipeline.components import engine_layout as L
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.hashing import block_keys, request_keys
from pipeline.components.kpool import leading_cached, pool_arrays
from pipeline.engine.compiled import STUCK_MESSAGE, compiled_model, extra_step_names
from pipeline.engine.krun import DONE, FULL, STUCK_CALLS, advance, run_until, step_once
from pipeline.components.ktier import no_tier
from pipeline.components.kstack import engine_arrays
from pipeline.engine.native_tier import no_offload
from pipeline.engine.request import SimRequest
from pipeline.engine.snapshot import CacheSnapshot
from pipeline.engine.step import DecodeRows, DecodeRun, StepRecord, TimedSteps
from pipeline.engine.views import PoolView, RequestView

__all__ = ["EngineSim", "StepRecord", "DecodeRun", "RequestView", "TimedSteps",
           "CacheSnapshot"]

_STEP_FIELDS = [L.X_STEP, L.X_PREFILL, L.X_DECODE, L.X_CONTEXT, L.X_RELOAD, L.X_NRUN,
                L.X_NWAIT, L.X_FREE]


class EngineSim:
    """vLLM's scheduler + KV cache manager (+ an optional CPU tier) for ``config``.

    ``cpu_tier``: a CPU tier of ``pipeline.engine.cpu_tier`` (``LMCacheTier``, compiled,
    or ``ModelTier``, any registered CPU model; its ``arrays``), shared by the engines given
    the same object. ``offload``: vLLM's native offloading (``native_tier.NativeTier``,
    this engine's own), instead of a CPU tier.
    """

    def __init__(self, config: SchedulerConfig, cpu_tier=None, capacity: int = 16,
                 offload=None) -> None:
        if cpu_tier is not None and not hasattr(cpu_tier, "arrays"):
            raise TypeError("cpu_tier must be a CPU tier of pipeline.engine.cpu_tier "
                            "(LMCacheTier or ModelTier)")
        if offload is not None and cpu_tier is not None:
            raise ValueError("native offloading takes no other CPU tier")
        self.config = config
        self.cpu_tier = cpu_tier
        self.block_size = config.block_size
        blocks = config.num_gpu_blocks
        entries = max(1, min(config.max_num_seqs, config.max_num_batched_tokens))
        self.P, self.BH, self.HT = pool_arrays(blocks)   # block keys as int64 bits
        hsize = self.HT.shape[0]
        self.C = np.zeros(L.C_SIZE, np.int64)
        self.C[[L.C_BS, L.C_NBLOCKS, L.C_MAXSEQS, L.C_MAXBATCH, L.C_MAXLEN, L.C_CHUNKED,
                L.C_THRESH, L.C_ASYNC, L.C_HMASK, L.C_MAXE]] = [
            config.block_size, blocks, config.max_num_seqs, config.max_num_batched_tokens,
            config.max_model_len, int(config.chunked_prefill),
            config.long_prefill_token_threshold, int(config.async_scheduling), hsize - 1,
            entries]
        self.G = np.zeros(L.G_SIZE, np.int64)
        self.G[L.G_NFREE] = blocks - 1
        self.R = np.zeros((0, L.R_COLUMNS), np.int64)
        self.KEYS = np.zeros(0, np.int64)               # uint64 keys as int64 bits
        self.BT = np.zeros(0, np.int32 if blocks < 2**31 else np.int64)
        self.RUN = np.zeros(0, np.int64)
        self.WQ = np.zeros(1, np.int64)
        self.BQ = np.zeros((2, entries, 3), np.int64)
        self.BSMP = np.zeros((2, entries), np.int64)
        self.BMETA = np.zeros((2, 4), np.int64)
        self.HIT = np.zeros(blocks + 1, np.int64)
        self.BUF = np.zeros(blocks + 1, np.int64)
        self.EV = np.zeros((16 * entries + 64, 3), np.int64)
        self.REC = np.zeros(L.X_SIZE, np.int64)
        self.T = engine_arrays(cpu_tier.arrays if cpu_tier is not None else no_tier())
        self.native = offload
        if offload is not None:
            offload.defer_frees(config.async_scheduling)
        self.O = offload.arrays if offload is not None else no_offload()
        self.rows = self.nkeys = self.nblocks = 0
        self.slots: dict[int, int] = {}
        self.open: dict[int, StepRecord] = {}     # records whose outputs may still come
        self.frees = np.zeros(config.max_model_len + 2, np.int64)
        self._priced, self._model = None, None    # run_until's step model, compiled
        #: the step columns after the 8 of ``StepRecord`` (``compiled.extra_step_names``)
        self.extra_names = extra_step_names(self.T, offload is not None)
        self.width = 8 + len(self.extra_names)
        self._buffers = (np.zeros((256, self.width), np.int64),
                         np.zeros((256, 2), np.float64), np.zeros(3, np.int64),
                         np.zeros(1, np.float64))
        self._row = (np.zeros((1, self.width), np.int64), np.zeros(1, np.float64))
        self.reserve(capacity, 0, 0)

    # ------------------------------------------------------------------ state

    def reserve(self, rows: int, keys: int, blocks: int) -> None:
        """Room for ``rows`` more requests, ``keys`` more block keys, ``blocks`` more
        block-table entries (arrays grow by doubling)."""
        def grown(array, need):
            if need <= array.shape[0]:
                return array
            size = max(need, 2 * array.shape[0])
            out = np.zeros((size,) + array.shape[1:], array.dtype)   # pages on first use
            out[:array.shape[0]] = array
            return out
        need = self.rows + rows
        self.R = grown(self.R, need)
        self.RUN = grown(self.RUN, need)
        if need + 1 > self.WQ.size:                   # the circular queue, re-linearized
            head, count = int(self.G[L.G_WHEAD]), int(self.G[L.G_WLEN])
            order = self.WQ[(head + np.arange(count)) % self.WQ.size]
            self.WQ = np.zeros(max(need + 1, 2 * self.WQ.size), np.int64)
            self.WQ[:count] = order
            self.G[L.G_WHEAD] = 0
        self.KEYS = grown(self.KEYS, self.nkeys + keys)
        self.BT = grown(self.BT, self.nblocks + blocks)
        self.S = (self.C, self.G, self.R, self.KEYS, self.BT, self.P, self.BH, self.HT,
                  self.RUN, self.WQ, self.BQ, self.BSMP, self.BMETA, self.HIT,
                  self.BUF, self.EV, self.REC)
        if self.native is not None:
            self.native.reserve(self.R.shape[0])
            self.O = self.native.arrays

    def load(self, requests, keys: np.ndarray, counts: np.ndarray) -> None:
        """Put ``requests`` in rows (not queued): ``keys`` their block keys, ``counts``
        per request. Row i's slot is ``self.rows + i`` at the call."""
        n = len(requests)
        prompt = np.fromiter((len(r.prompt_token_ids) for r in requests), np.int64, n)
        max_tokens = np.fromiter((r.max_tokens for r in requests), np.int64, n)
        limit = np.minimum(prompt + max_tokens, self.config.max_model_len)
        bcap = -(-limit // self.block_size) + 1
        counts = np.asarray(counts, np.int64)
        self.reserve(n, int(counts.sum()), int(bcap.sum()))
        rows = self.R[self.rows:self.rows + n]
        rows[:] = 0
        rows[:, L.INDEX] = np.fromiter((r.index for r in requests), np.int64, n)
        rows[:, L.NPROMPT], rows[:, L.NTOK], rows[:, L.MAXTOK] = prompt, prompt, max_tokens
        rows[:, L.LIMIT], rows[:, L.BCAP], rows[:, L.NKEYS] = limit, bcap, counts
        rows[:, L.KOFF] = self.nkeys + np.cumsum(counts) - counts
        rows[:, L.BOFF] = self.nblocks + np.cumsum(bcap) - bcap
        rows[:, [L.NCACHED, L.FSCHED, L.FTOK, L.FIN]] = L.NONE
        self.KEYS[self.nkeys:self.nkeys + keys.size] = np.asarray(keys, np.uint64).view(
            np.int64)
        for i, r in enumerate(requests):
            if r.index in self.slots:
                raise ValueError(f"request {r.index} added twice")
            self.slots[r.index] = self.rows + i
        if self.native is not None:
            self.native.add(np.arange(self.rows, self.rows + n), self.KEYS,
                            rows[:, L.KOFF].copy(), counts)
            self.O = self.native.arrays
        self.rows += n
        self.nkeys += keys.size
        self.nblocks += int(bcap.sum())

    def add_request(self, request: SimRequest, keys=None) -> None:
        """Queue ``request`` (vLLM's ``add_request``): FCFS at the back of the queue.
        ``keys``: its ``hashing.request_keys``, if computed already."""
        if request.index in self.slots:
            raise ValueError(f"request {request.index} added twice")
        keys = request_keys(request, self.block_size) if keys is None else keys
        keys = np.asarray(keys, np.uint64).reshape(-1)
        self._load_one(request, keys)
        self.enqueue(self.rows - 1)

    def _load_one(self, request: SimRequest, keys: np.ndarray) -> None:
        """``load([request], keys, [keys.size])`` without its per-batch array work."""
        prompt, max_tokens = len(request.prompt_token_ids), request.max_tokens
        limit = min(prompt + max_tokens, self.config.max_model_len)
        bcap = -(-limit // self.block_size) + 1
        count = keys.size
        if (self.rows + 1 > self.R.shape[0] or self.rows + 2 > self.WQ.size
                or self.nkeys + count > self.KEYS.size or self.nblocks + bcap > self.BT.size):
            self.reserve(1, count, bcap)
        row = self.R[self.rows]
        row[:] = 0
        row[[L.INDEX, L.NPROMPT, L.NTOK, L.MAXTOK, L.LIMIT, L.BCAP, L.NKEYS, L.KOFF,
             L.BOFF, L.NCACHED, L.FSCHED, L.FTOK, L.FIN]] = (
            request.index, prompt, prompt, max_tokens, limit, bcap, count, self.nkeys,
            self.nblocks, L.NONE, L.NONE, L.NONE, L.NONE)
        self.KEYS[self.nkeys:self.nkeys + count] = keys.view(np.int64)
        self.slots[request.index] = self.rows
        if self.native is not None:
            self.native.add(np.array([self.rows]), self.KEYS, np.array([self.nkeys]),
                            np.array([count]))
            self.O = self.native.arrays
        self.rows += 1
        self.nkeys += count
        self.nblocks += bcap

    def enqueue(self, slot: int) -> None:
        """Queue the request loaded in row ``slot`` (``load``)."""
        self.WQ[(self.G[L.G_WHEAD] + self.G[L.G_WLEN]) % self.WQ.size] = slot
        self.G[L.G_WLEN] += 1

    # ------------------------------------------------------------------ public API

    def has_unfinished(self) -> bool:
        return bool(self.G[L.G_NRUN] or self.G[L.G_WLEN] or self.O[0][L.O_KLEN])

    def has_work(self) -> bool:
        """Anything left for ``step()``: requests, finished ids not yet flushed by a
        ``schedule()``, or batches in flight."""
        G, OC = self.G, self.O[0]
        return bool(G[L.G_NRUN] or G[L.G_WLEN] or G[L.G_FIN] or G[L.G_QLEN]
                    or OC[L.O_KLEN] or OC[L.O_JLEN])

    @property
    def num_running(self) -> int:
        return int(self.G[L.G_NRUN])

    @property
    def num_waiting(self) -> int:
        return int(self.G[L.G_WLEN])

    @property
    def free_blocks(self) -> int:
        return int(self.G[L.G_NFREE])

    @property
    def step_count(self) -> int:
        return int(self.G[L.G_STEP])

    @property
    def pool(self) -> PoolView:
        return PoolView(self)

    def outstanding(self) -> int:
        return int(self.G[L.G_NRUN] + self.G[L.G_WLEN] + self.O[0][L.O_KLEN])

    def request_block_hashes(self, request: SimRequest) -> list[int]:
        """The block keys of ``request``'s prompt, as the engine computes them."""
        if request.prompt_keys is not None:
            return [int(k) for k in request.prompt_keys[:len(request.prompt_token_ids)
                                                        // self.block_size]]
        tokens = np.asarray(request.prompt_token_ids, dtype=np.int64)
        return block_keys(tokens, self.block_size)

    def cached_keys(self) -> set[int]:
        """The block keys in the GPU prefix cache now (the hash map's taken slots; a key
        leaves when its last block is evicted)."""
        return set(self.HT[self.HT[:, 1] >= 0, 0].view(np.uint64).tolist())

    def cached_key_count(self) -> int:
        """How many block keys the GPU prefix cache holds now."""
        return int(np.count_nonzero(self.HT[:, 1] >= 0))

    def cache_snapshot(self) -> CacheSnapshot:
        """The GPU prefix cache now, frozen (later steps do not change it)."""
        return CacheSnapshot(self.HT.copy(), self.C[L.C_HMASK])

    def cached_prefix_blocks(self, block_hashes) -> int:
        """Leading blocks of ``block_hashes`` in the GPU prefix cache now (no change)."""
        keys = np.asarray(block_hashes, np.uint64).reshape(-1).view(np.int64)
        return int(leading_cached(self.HT, self.C[L.C_HMASK], keys)) if keys.size else 0

    def result(self, index: int) -> RequestView:
        """The counters of request ``index`` (finished or not)."""
        return RequestView(self.R[self.slots[index]])

    def request_rows(self, requests) -> np.ndarray:
        """The request-table rows (``layout``'s columns) of ``requests``, in their order."""
        slots = np.fromiter((self.slots[r.index] for r in requests), np.int64, len(requests))
        return self.R[slots]

    def running_slots(self) -> np.ndarray:
        return self.RUN[:self.G[L.G_NRUN]]

    # ------------------------------------------------------------------ stepping

    def check_state(self) -> None:
        """Raise if the compiled state overflowed (a kernel flags it; it cannot raise)."""
        if self.G[L.G_ERROR]:
            raise RuntimeError("engine state overflow (a block table outgrew its request)")
        if self.native is not None:
            self.native.check()

    def _record(self) -> StepRecord:
        REC, q = self.REC, int(self.REC[L.X_Q])
        entries = self.BQ[q, :REC[L.X_NSCHED]]
        rows = list(zip(self.R[entries[:, 0], L.INDEX].tolist(), entries[:, 1].tolist(),
                        entries[:, 2].tolist()))
        record = StepRecord(*REC[[L.X_STEP]].tolist(), rows, *REC[
            [L.X_PREFILL, L.X_DECODE, L.X_CONTEXT, L.X_RELOAD, L.X_NRUN, L.X_NWAIT,
             L.X_FREE]].tolist())
        self.open[record.step] = record
        return record

    def _outputs(self) -> None:
        """Apply the outputs the last call processed to their records."""
        count = int(self.G[L.G_NEV])
        for step, kind, index in self.EV[:count].tolist():
            record = self.open.get(step)
            if record is not None:
                (record.finished if kind else record.first_tokens).append(index)
        if len(self.open) > 3:
            for step in sorted(self.open)[:-3]:
                del self.open[step]

    def step(self) -> StepRecord | None:
        """One engine iteration (``EngineCore.step`` or ``step_with_batch_queue``).

        Returns the record of the batch this call scheduled when it scheduled > 0 tokens,
        else None. Outputs of a batch are applied to its record when processed (at once
        in sync mode, one call later with async scheduling)."""
        self.G[L.G_NEV], self.G[L.G_EVON] = 0, 1
        row, loads = self._row
        scheduled = step_once(self.S, self.T, self.O, row, loads)
        self.check_state()
        record = self._record() if scheduled else None
        if record is not None and self.extra_names:
            record.extra = tuple(row[0, 8:].tolist())
            record.load_ms = float(loads[0])
        self._outputs()
        return record

    def advance(self, limit: int) -> DecodeRun | None:
        """Up to ``limit`` pure decode steps at once (``krun.advance``); None when the
        next step is not one. ``DecodeRun.records()`` = what ``step()`` would return."""
        self.G[L.G_NEV], self.G[L.G_EVON] = 0, 1
        k = int(advance(self.S, self.T, self.O, min(int(limit), self.frees.size), self.frees))
        self.check_state()
        if k == 0:
            return None
        slots = self.running_slots()
        n = slots.size
        starts = self.R[slots, L.COMPUTED] - k
        run = DecodeRun(self.step_count - k, k, n, self.num_waiting, int(starts.sum()) + n,
                        self.frees[:k].tolist(), self.R[slots, L.INDEX].tolist(),
                        starts.tolist())
        if self.config.async_scheduling:             # the run's last batch is in flight
            last = k - 1
            run.tail = StepRecord(run.first_step + last, DecodeRows(run.rows, run.starts, last),
                                  0, n, run.context_tokens(last), 0, n, run.num_waiting,
                                  run.free_blocks[last])
            self.open[run.tail.step] = run.tail
        self._outputs()
        return run

    def run_until(self, until_ms: float, now_ms: float, step_ms) -> TimedSteps:
        """Step from ``now_ms`` while there is work and the clock is before ``until_ms``
        (no arrivals meanwhile), pricing each batch with ``step_ms``: in one compiled call
        when it is a compiled model's (``compiled.compiled_model``), else one ``step()``
        and one ``step_ms`` call per batch."""
        if step_ms is not self._priced:           # the same model as the last call's
            self._priced, self._model = step_ms, compiled_model(step_ms)
        model = self._model
        if self.native is not None:
            self.native.price_with(model)
        if model is None:
            return self._run_until_python(until_ms, now_ms, step_ms)
        steps, times, state, now = self._buffers
        now[0] = now_ms
        parts, events = [], []
        while True:
            self.G[L.G_NEV], self.G[L.G_EVON], state[2] = 0, 1, 0
            code = run_until(self.S, self.T, self.O, float(until_ms), model[0], model[1], steps,
                             times, state, now)
            self.check_state()
            count = int(state[2])
            parts.append((steps[:count].copy(), times[:count].copy()))
            events.append(self.EV[:self.G[L.G_NEV]].copy())
            if code == DONE:
                break
            if code != FULL:
                raise RuntimeError(STUCK_MESSAGE)
            if count == steps.shape[0]:
                rows = 4 * steps.shape[0]
                steps = np.zeros((rows, self.width), np.int64)
                times = np.zeros((rows, 2), np.float64)
                self._buffers = (steps, times, state, now)
        if len(parts) == 1:
            (steps, times), = parts
            return TimedSteps(float(now[0]), steps, times[:, 0], times[:, 1], events[0])
        times = np.concatenate([t for _, t in parts])
        return TimedSteps(float(now[0]), np.concatenate([s for s, _ in parts]), times[:, 0],
                          times[:, 1], np.concatenate(events))

    def _run_until_python(self, until_ms: float, now_ms: float, step_ms) -> TimedSteps:
        rows, starts, durations, events = [], [], [], []
        idle, now = 0, float(now_ms)
        while now < until_ms and self.has_work():
            record = self.step()
            count = int(self.G[L.G_NEV])
            events.append(self.EV[:count].copy())
            if record is None:
                idle += 1
                if idle > STUCK_CALLS:
                    raise RuntimeError(STUCK_MESSAGE)
                continue
            idle = 0
            rows.append(np.concatenate((self.REC[_STEP_FIELDS], record.extra)))
            duration = float(step_ms(record))
            starts.append(now)
            durations.append(duration)
            now += duration
        steps = np.array(rows, np.int64).reshape(-1, self.width)
        return TimedSteps(now, steps, np.array(starts, np.float64),
                          np.array(durations, np.float64),
                          np.concatenate(events) if events else np.zeros((0, 3), np.int64))
