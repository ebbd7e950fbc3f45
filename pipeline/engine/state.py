"""The scheduler-side state of one request in the engine simulation (the fields of vLLM's
``vllm/v1/request.py`` ``Request`` that scheduling and the KV cache manager read)."""

from __future__ import annotations

from pipeline.engine.hashing import request_keys
from pipeline.engine.request import SimRequest

__all__ = ["RequestState", "WAITING", "RUNNING", "PREEMPTED", "FINISHED"]

WAITING, RUNNING, PREEMPTED, FINISHED = range(4)


class RequestState:
    """Scheduler-side state of one request (vLLM's ``Request`` fields that matter)."""

    __slots__ = ("sim", "index", "num_prompt", "max_tokens", "num_tokens", "keys", "blocks",
                 "num_cached_block", "computed", "placeholders", "in_flight", "stale",
                 "status", "is_prefill_chunk", "preemptions", "gpu_hit", "cpu_hit",
                 "first_scheduled_step", "first_token_step", "finish_step", "stored",
                 "cpu_state", "limit")

    def __init__(self, sim: SimRequest, block_size: int, keys: list[int] | None = None) -> None:
        self.sim = sim
        self.index = sim.index
        self.num_prompt = len(sim.prompt_token_ids)
        self.max_tokens = sim.max_tokens
        self.num_tokens = self.num_prompt
        self.keys = request_keys(sim, block_size) if keys is None else keys
        self.blocks: list[int] = []
        self.num_cached_block: int | None = None
        self.computed = self.placeholders = self.in_flight = self.stale = 0
        self.status = WAITING
        self.is_prefill_chunk = False
        self.preemptions = 0
        self.gpu_hit = self.cpu_hit = 0
        self.first_scheduled_step = self.first_token_step = self.finish_step = None
        self.stored = False
        self.cpu_state = None                         # the CPU tier's own per-request data
        self.limit = self.num_prompt + self.max_tokens  # tokens at which it finishes
