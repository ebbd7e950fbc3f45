"""SGLang 0.5.23's scheduler settings and constants, shared by the compiled scheduler
(``sglang_ksched``), the engine and the radix GPU model."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCHEDULE_POLICIES", "SGLANG_POLICIES", "SchedulerSettings"]

#: The schedule policies modelled here (SGLang 0.5.23 also has the next ones).
SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight", "lof", "random")
#: Every ``--schedule-policy`` SGLang 0.5.23 accepts (``arg_groups/fields/schedule.py``).
SGLANG_POLICIES = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key",
                   "hrrn", "shortest-prefill-first")
CLIP_MAX_NEW_TOKENS = 4096                    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
WAITING_QUEUE_PREFIX_MATCH_MAX = 128
WAITING_PREFIX_REFRESH_INTERVAL = 32
IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE = 32, 32
INIT_NEW_TOKEN_RATIO, MIN_RATIO_FACTOR, DECAY_STEPS, RETRACT_DECODE_STEPS = 0.7, 0.14, 600, 20


@dataclass(frozen=True)
class SchedulerSettings:
    """SGLang's server arguments that the loop reads (their names and defaults)."""

    max_total_tokens: int
    page_size: int = 1
    schedule_policy: str = "fcfs"
    max_running_requests: int = 256
    chunked_prefill_size: int | None = 8192          # None: -1, chunked prefill off
    max_prefill_tokens: int = 16384
    schedule_conservativeness: float = 1.0
    radix_eviction_policy: str = "lru"
    seed: int = 0                                    # the random policy's shuffle

    def __post_init__(self) -> None:
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(f"schedule_policy {self.schedule_policy!r}: modelled are "
                             f"{', '.join(SCHEDULE_POLICIES)}")
        if self.max_total_tokens < self.page_size:
            raise ValueError(f"max_total_tokens {self.max_total_tokens} is less than a page")
