"""``vllm``: the engine registry's built-in entry, vLLM 0.33.0's v1 engine loop (its
scheduler, ``BlockPool`` and optional CPU tier: ``EngineSim``, compiled), proven equal to
vLLM's own scheduler (tests/test_engine_vllm_equal.py). ``pipeline.engine.engines`` says
what an engine class provides."""

from __future__ import annotations

from pipeline.base.arguments import (non_negative_float, non_negative_int, positive_float,
                                     positive_int)
from pipeline.engine.config import EngineOption, SchedulerConfig
from pipeline.engine.core import EngineSim
from pipeline.engine.loop import simulate
from pipeline.engine.native_tier import NativeSpec, NativeTier
from pipeline.engine.simple_offload_tier import (DEFAULT_BUFFER_SLOTS, DEFAULT_DISK_GIB,
                                                 SimpleOffloadTier, SimpleSpec)

__all__ = ["VLLM"]


class VLLM:
    """vLLM's engine: ``SchedulerConfig``, ``EngineSim`` per instance, ``loop.simulate``."""

    NAME = "vllm"
    SUMMARY = "vLLM 0.33.0's scheduler and block pool, compiled"
    COMPILED = True
    OPTIONS = (
        EngineOption("--no-chunked-prefill", dict(
            action="store_true",
            help="schedule a prompt only whole (vLLM's --no-enable-chunked-prefill)")),
        EngineOption("--long-prefill-token-threshold", dict(
            type=non_negative_int, default=0,
            help="cap on a prefill chunk when other requests wait (default 0)")),
        EngineOption("--async-scheduling", dict(
            action="store_true",
            help="two batches in flight (vLLM 0.33's default on CUDA; off here unless given)")),
        EngineOption("--kv-offloading-size", dict(
            type=positive_float, metavar="GiB",
            help="vLLM's KV offloading buffer in GiB (needs the KV bytes per token: "
                 "--model, --kv-bytes-per-token or --kv-shape)")),
        EngineOption("--kv-offloading-backend", dict(
            choices=("native", "lmcache"), default=None,
            help="native: vLLM's OffloadingConnector (the default with a size, as in vLLM); "
                 "lmcache: LMCache's CPU backend of that size")),
        EngineOption("--offload-eviction-policy", dict(
            choices=("lru", "arc"), default=None,
            help="the native CPU manager's eviction_policy (default lru)")),
        EngineOption("--offload-block-size", dict(
            type=positive_int, metavar="TOKENS",
            help="tokens per offloaded chunk, a multiple of --block-size (default: "
                 "--block-size)")),
        EngineOption("--offload-store-threshold", dict(
            type=non_negative_int, metavar="N",
            help="store a chunk once offered N times (default 0: always)")),
        EngineOption("--offload-sync-load-budget", dict(
            type=non_negative_int, metavar="BYTES",
            help="vLLM's sync_load_budget_bytes: loads within it run before the step "
                 "(default 0: every load asynchronous)")),
        EngineOption("--simple-kv-offload", dict(
            action="store_true", default=None,
            help="native backend: vLLM's SimpleCPUOffloadConnector (VLLM_USE_SIMPLE_KV_OFFLOAD"
                 "=1) instead of the OffloadingConnector: a second block pool of offload "
                 "slots, blocks stored as computed, every load asynchronous")),
        EngineOption("--lazy-offload", dict(
            action="store_true", default=None,
            help="--simple-kv-offload's lazy_offload: store blocks as the GPU needs room "
                 "(walking its free queue), not as they are computed")),
        EngineOption("--offload-medium", dict(
            choices=("cpu", "disk"), default=None,
            help="--simple-kv-offload's kv_offload_backend: cpu (default; --kv-offloading-size "
                 "of CPU memory) or disk (--disk-capacity of disk slots)")),
        EngineOption("--disk-capacity", dict(
            type=positive_float, metavar="GiB",
            help=f"--offload-medium disk: vLLM's disk_capacity_bytes in GiB (default "
                 f"{DEFAULT_DISK_GIB}, vLLM's)")),
        EngineOption("--disk-bandwidth", dict(
            type=positive_float, metavar="GB/S",
            help="--offload-medium disk: the disk's read and write GB/s (required: the "
                 "disk's own figure)")),
        EngineOption("--disk-latency-ms", dict(
            type=non_negative_float, metavar="MS",
            help="--offload-medium disk: ms per block read or written (required)")),
        EngineOption("--disk-buffer-slots", dict(
            type=positive_int, metavar="N",
            help=f"--offload-medium disk: vLLM's disk_buffer_slots, staging buffers per "
                 f"direction (default {DEFAULT_BUFFER_SLOTS}, vLLM's)")),
    )

    @staticmethod
    def config(args, num_gpu_blocks: int, max_model_len: int) -> SchedulerConfig:
        """vLLM's scheduler and cache settings from the engine options (ValueError as
        vLLM's ``SchedulerConfig`` refuses them)."""
        return SchedulerConfig(num_gpu_blocks=num_gpu_blocks, max_model_len=max_model_len,
                               block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                               max_num_batched_tokens=args.max_num_batched_tokens,
                               chunked_prefill=not args.no_chunked_prefill,
                               long_prefill_token_threshold=args.long_prefill_token_threshold,
                               async_scheduling=args.async_scheduling)

    @staticmethod
    def instance(config: SchedulerConfig, cpu_tier=None) -> EngineSim:
        """One engine; ``cpu_tier`` a CPU tier or a ``NativeSpec`` / ``SimpleSpec`` (vLLM's
        offloading)."""
        if isinstance(cpu_tier, NativeSpec):
            return EngineSim(config, offload=NativeTier(cpu_tier, config.block_size, True))
        if isinstance(cpu_tier, SimpleSpec):
            return EngineSim(config, offload=SimpleOffloadTier(cpu_tier, config, True))
        return EngineSim(config, cpu_tier)

    simulate = staticmethod(simulate)
