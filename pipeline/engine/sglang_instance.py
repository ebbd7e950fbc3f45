"""``SGLangInstance``: one SGLang engine over the compiled scheduler
(``pipeline.components.sglang_ksched``; with HiCache over its compiled tree,
``sglang_khiradix``), with ``EngineSim``'s interface for ``fleet`` and ``simulate``
(``pipeline.engine.sglang``): requests in, one loop turn per ``step``, the cache queries a
router asks, the request rows of the frames (``gpu_hit_tokens`` is the radix-tree prefix at
a request's first admission, ``preemptions`` its retractions, ``free_blocks`` the free and
evictable pages).

Tokens: a token-id trace's own ids (outputs: the sampled ids, else placeholders no prompt
has); a trace of block keys (Mooncake) gives token ``j`` of a block with key ``k`` a symbol of
its own, shared by every prompt with that block, and the tokens past the last full block
fresh ones. So ``--page-size`` must divide ``--block-size``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.components import engine_layout as L
from pipeline.components import sglang_ksched as K
from pipeline.components.sglang_kradix import T_EVICT, T_PROT
from pipeline.components.sglang_ksched import SGLangState
from pipeline.engine.loop import STEP_COLUMNS
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang_hicache import HOST_COLUMNS, key_symbols, request_symbols
from pipeline.engine.sglang_options import SGLangConfig
from pipeline.engine.step import StepRecord, TimedSteps, timed_batches

__all__ = ["OUT_OF_MEMORY", "SGLangInstance"]

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
