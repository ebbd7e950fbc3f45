"""The scheduler knobs the engine model honours (vLLM's names and defaults), and
``EngineOption``: a command-line option one engine owns (``pipeline.engine.engines``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SchedulerConfig", "EngineOption"]


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's scheduler and cache settings, as ``vllm serve`` takes them.

    ``num_gpu_blocks`` counts vLLM's ``num_gpu_blocks`` (block 0 is the null block, so
    ``num_gpu_blocks - 1`` hold KV). ``max_num_batched_tokens`` is the token budget of one
    step; ``async_scheduling`` runs vLLM's two-deep batch queue (``step_with_batch_queue``).
    """

    num_gpu_blocks: int
    max_model_len: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        for name in ("num_gpu_blocks", "max_model_len", "block_size", "max_num_seqs",
                     "max_num_batched_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (block 0 is the null block), "
                             f"got {self.num_gpu_blocks}")
        threshold = self.long_prefill_token_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"long_prefill_token_threshold must be an integer >= 0, "
                             f"got {threshold!r}")
        if not self.chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # vLLM's SchedulerConfig refuses this too (a prompt could never be scheduled)
            raise ValueError(f"without chunked prefill max_num_batched_tokens "
                             f"({self.max_num_batched_tokens}) must be >= max_model_len "
                             f"({self.max_model_len})")

    @property
    def usable_blocks(self) -> int:
        """Blocks that can hold KV (the null block excluded)."""
        return self.num_gpu_blocks - 1


@dataclass(frozen=True)
class EngineOption:
    """A command-line option one engine owns: ``flag`` and argparse's keywords (``dest``
    derived from the flag; ``default`` the value that counts as not given)."""

    flag: str
    kwargs: dict = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.kwargs.get("dest", self.flag.lstrip("-").replace("-", "_"))

    @property
    def default(self):
        return self.kwargs.get("default", False if self.kwargs.get("action") == "store_true"
                               else None)
