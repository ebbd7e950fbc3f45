"""SGLang's command-line options for ``--engine sglang``: their argparse types, the checks
(vLLM's limits refused, HiCache options only with ``--enable-hierarchical-cache``) and
``sglang_config``, the engine's config from them (the pool, the chunk per GPU, HiCache's host
pool as SGLang sizes it, which loop runs)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace

from pipeline.base.arguments import positive_int
from pipeline.base.errors import UsageError
from pipeline.components.sglang_kradix_layout import POLICIES as EVICTION_POLICIES
from pipeline.components.sglang_settings import SCHEDULE_POLICIES, SGLANG_POLICIES, \
    SchedulerSettings
from pipeline.components.sglang_storage_spec import PREFETCH_POLICIES, STORAGE_BACKENDS, \
    StorageSpec
from pipeline.engine.config import EngineOption
from pipeline.engine.sglang_hicache import HiCacheSpec, host_pool_tokens
from pipeline.engine.sglang_intake import clip_request
from pipeline.engine.tier_options import _number
from pipeline.sizes.vllm_memory import DEFAULT_BATCHED_TOKENS, DEFAULT_SEQS

__all__ = ["SGLangConfig", "OPTIONS", "HICACHE_SUMMARY", "HICACHE_WRITE_POLICY",
           "STORAGE_FLAGS", "sglang_config", "storage_clause"]


@dataclass(frozen=True)
class SGLangConfig:
    """The engine's config: the registry's three fields and SGLang's settings."""

    num_gpu_blocks: int
    max_model_len: int
    block_size: int
    settings: SchedulerSettings
    hicache: HiCacheSpec | None = None          # --enable-hierarchical-cache
    overlap: bool = False                       # event_loop_overlap (the command's default)
    context_len: int | None = None              # --max-model-len (None: the pool bounds)
    pool_cap: int | None = None                 # --max-total-tokens
    host_sizing: tuple[float, int] = (2.0, 0)   # --hicache-ratio, --hicache-size

    def with_blocks(self, blocks: int) -> SGLangConfig:
        """The config of a pool of ``blocks`` (a fleet point's ``--gpu``): the device pool
        and HiCache's host pool sized again, as ``sglang_config`` sizes them."""
        s = self.settings
        pool = blocks * self.block_size
        pool = pool if self.pool_cap is None else min(pool, self.pool_cap)
        pool = pool // s.page_size * s.page_size
        hicache = self.hicache
        if hicache is not None:
            hicache = replace(hicache, host_tokens=host_pool_tokens(
                pool, s.page_size, *self.host_sizing, hicache.kv_bytes_per_token))
        return replace(self, num_gpu_blocks=blocks, hicache=hicache,
                       settings=replace(s, max_total_tokens=pool))

    def intake(self, request):
        """The request as SGLang's intake queues it (``sglang_intake.clip_request``)."""
        s = self.settings
        return clip_request(request, s.max_total_tokens, s.page_size, self.context_len)


def _policy(text: str) -> str:
    """argparse type of ``--schedule-policy``: SGLang's names; the modelled ones only."""
    if text not in SGLANG_POLICIES:
        raise _argument_error(f"SGLang 0.5.23 has no schedule policy {text!r} (it has "
                              f"{', '.join(SGLANG_POLICIES)})")
    if text not in SCHEDULE_POLICIES:
        raise _argument_error(f"{text!r} is SGLang's but not modelled (modelled: "
                              f"{', '.join(SCHEDULE_POLICIES)})")
    return text


def _argument_error(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def _conservativeness(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise _argument_error(f"expected a number > 0, got {text!r}")
    return value


def _gigabytes(text: str) -> int:
    """``--hicache-size``: whole gigabytes >= 0 (0: sized by ``--hicache-ratio``), as SGLang."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise _argument_error(f"expected whole gigabytes >= 0, got {text!r}")
    return value


def _mem_fraction(text: str) -> float | str:
    """argparse type of ``--mem-fraction-static``: a share in (0, 1), or ``default`` (the
    option given alone: SGLang's own default, ``pipeline.sizes.sglang_memory``)."""
    if text == "default":
        return text
    try:
        value = float(text)
    except ValueError:
        raise _argument_error(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise _argument_error(f"{text}: SGLang's static fraction is in (0, 1)")
    return value


def _chunk(text: str) -> int:
    """``--chunked-prefill-size``: tokens >= 1, or -1 (off), as SGLang."""
    if text.strip() == "-1":
        return -1
    return positive_int(text)


#: vLLM's limits in the engine options (``options.add_scheduler_limits``): dest -> (flag,
#: default, SGLang's options instead)
_VLLM_LIMITS = {
    "max_num_seqs": ("--max-num-seqs", DEFAULT_SEQS, "--max-running-requests"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", DEFAULT_BATCHED_TOKENS,
                               "--chunked-prefill-size / --max-prefill-tokens")}


#: ``--hicache-write-policy``'s choices (``arg_groups/fields/memory.py:121-127``)
HICACHE_WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


#: the L3 store's options beside ``--hicache-storage-backend``
STORAGE_FLAGS = ("--hicache-storage-prefetch-policy", "--hicache-storage-backend-extra-config",
                 "--hicache-storage-link")


def _check_hicache(args) -> None:
    """A HiCache option without ``--enable-hierarchical-cache`` (a storage option without
    ``--hicache-storage-backend``) is a usage error naming it (SGLang ignores it silently)."""
    def given(flags):
        return [f for f in flags if getattr(args, f[2:].replace("-", "_"), None) is not None]

    named = given(("--hicache-ratio", "--hicache-size", "--hicache-write-policy",
                   "--hicache-storage-backend") + STORAGE_FLAGS)
    if named and not getattr(args, "enable_hierarchical_cache", False):
        raise UsageError(f"{named[0]}: needs --enable-hierarchical-cache")
    named = given(STORAGE_FLAGS)
    if named and getattr(args, "hicache_storage_backend", None) is None:
        raise UsageError(f"{named[0]}: needs --hicache-storage-backend")


#: the store's link without ``--hicache-storage-link``: GB/s, ms per storage call
STORAGE_LINK = (5.0, 0.1)
STORAGE_LINK_SOURCE = ("assumed, not measured: a local PCIe 4.0 NVMe SSD (the file "
                       "backend's directory); give --hicache-storage-link for yours")
#: the extra config's keys SGLang reads for HiCache (``parse_storage_backend_extra_config``,
#: ``hybrid_cache_controller.py:378-437``) and their types
_EXTRA_KEYS = {"prefetch_threshold": (int,), "prefetch_timeout_base": (int, float),
               "prefetch_timeout_per_ki_token": (int, float),
               "hicache_storage_pass_prefix_keys": (bool,)}
#: the file backend's size cap (``LRUFileEvictor``): not modelled, refused
_CAP_KEYS = ("max_size", "min_free", "eviction_ratio")


def _storage_link(text: str) -> tuple[float, float]:
    """``--hicache-storage-link GBPS[:LATENCY_MS]`` (``--tier``'s numbers): the store's
    bandwidth (> 0) and its latency per storage call (>= 0, default 0)."""
    parts = text.split(":")
    if len(parts) > 2:
        raise _argument_error(f"{text!r}: expected GBPS[:LATENCY_MS]")
    gbps = _number(parts[0], "GBPS", ("gb/s", "gbps"), positive=True)
    latency = _number(parts[1], "LATENCY_MS", ("ms",), positive=False) \
        if len(parts) == 2 else 0.0
    return gbps, latency


def _extra_config(text: str) -> dict:
    """``--hicache-storage-backend-extra-config``: a JSON object, SGLang's HiCache keys
    checked as SGLang checks them, a size cap refused (not modelled)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _argument_error(f"not JSON ({exc.msg})") from None
    if not isinstance(config, dict):
        raise _argument_error("expected a JSON object")
    for key, types in _EXTRA_KEYS.items():
        value = config.get(key)
        if value is not None and (not isinstance(value, types) or
                                  (bool not in types and isinstance(value, bool))):
            raise _argument_error(f"{key} must be {' or '.join(t.__name__ for t in types)}")
    cap = [key for key in _CAP_KEYS if config.get(key)]
    if cap:
        raise _argument_error(f"{cap[0]}: a capped store is not modelled (the store holds "
                              "every page written, as the file backend without a cap)")
    return config


def storage_clause(args) -> str:
    """The models line's words for the L3 store ('' without one)."""
    if getattr(args, "hicache_storage_backend", None) is None:
        return ""
    link = args.hicache_storage_link
    gbps, latency = link or STORAGE_LINK
    return (f", L3 store {args.hicache_storage_backend} (prefetch "
            f"{args.hicache_storage_prefetch_policy or STORAGE_PREFETCH_POLICY}, "
            f"{gbps:g} GB/s, {latency:g} ms a call"
            f"{'' if link else ' ' + STORAGE_LINK_SOURCE.split(':')[0]})")


def _storage(args, page: int, kv_bytes: int) -> StorageSpec | None:
    """The L3 store's settings, or None without ``--hicache-storage-backend``."""
    if args.hicache_storage_backend is None:
        return None
    extra = args.hicache_storage_backend_extra_config or {}
    gbps, latency = args.hicache_storage_link or STORAGE_LINK
    return StorageSpec(
        backend=args.hicache_storage_backend,
        prefetch_policy=args.hicache_storage_prefetch_policy or STORAGE_PREFETCH_POLICY,
        threshold=extra.get("prefetch_threshold", 256),
        timeout_base=float(extra.get("prefetch_timeout_base", 1.0)),
        timeout_per_ki_token=float(extra.get("prefetch_timeout_per_ki_token", 0.25)),
        latency_ms=latency, bandwidth=gbps * 1e6, page_bytes=page * kv_bytes)


#: SGLang's HiCache defaults (``arg_groups/fields/memory.py``): ratio 2.0 in cache mode,
#: the storage prefetch stopping at a timeout
HICACHE_RATIO, HICACHE_WRITE_POLICY, STORAGE_PREFETCH_POLICY = 2.0, "write_through", "timeout"
HICACHE_SUMMARY = ("SGLang 0.5.23's scheduler over HiCache (host tier; non-overlap loop), "
                   "in plain Python: "
                   "some 50-65x slower than the compiled engine without HiCache")


def _hicache(args, pool: int, page: int) -> HiCacheSpec | None:
    """HiCache's settings as SGLang sizes them, or None without it; ``--hicache-size`` and
    the step's byte columns take the KV bytes of the model options (the lab's model
    without them)."""
    if not args.enable_hierarchical_cache:
        return None
    from pipeline.sizes.units import kv_from_args
    try:
        kv = kv_from_args(args, "--hicache-size" if args.hicache_size else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ratio = HICACHE_RATIO if args.hicache_ratio is None else args.hicache_ratio
    host = host_pool_tokens(pool, page, ratio, args.hicache_size or 0, kv.bytes_per_token)
    return HiCacheSpec(args.hicache_write_policy or HICACHE_WRITE_POLICY, host,
                       int(kv.bytes_per_token),
                       _storage(args, page, int(kv.bytes_per_token)))


#: SGLang's options, its names and defaults (each ``[sglang only]`` in --help)
OPTIONS = (
    EngineOption("--page-size", dict(type=positive_int, default=1,
                                     help="SGLang's page_size: tokens per KV page, "
                                          "dividing --block-size (default 1)")),
    EngineOption("--schedule-policy", dict(
        type=_policy, default="fcfs", metavar="POLICY",
        help=f"SGLang's waiting-queue order: {', '.join(SCHEDULE_POLICIES)} (default "
             f"fcfs)")),
    EngineOption("--chunked-prefill-size", dict(
        type=_chunk, default=None, help="tokens per prefill chunk, -1 off (default: "
                                        "SGLang's for --gpu-type's memory, 8192 on 80 "
                                        "GiB and without one)")),
    EngineOption("--max-running-requests", dict(
        type=positive_int, default=256, help="running requests at most (default 256)")),
    EngineOption("--mem-fraction-static", dict(
        type=_mem_fraction, nargs="?", const="default", default=None, metavar="F",
        help="--gpu is the KV pool SGLang would allocate: device memory x F - weights "
             "(0 < F < 1; given alone: SGLang's default for the GPU and chunk; needs "
             "--gpu-type and --model, not with --gpu)")),
    EngineOption("--max-total-tokens", dict(
        type=positive_int, default=None, help="KV pool in tokens, capping --gpu "
                                              "(default: --gpu)")),
    EngineOption("--max-prefill-tokens", dict(
        type=positive_int, default=16384, help="tokens per prefill batch (default "
                                               "16384)")),
    EngineOption("--schedule-conservativeness", dict(
        type=_conservativeness, default=1.0,
        help="scales the new-token ratio that reserves the running requests' outputs "
             "(default 1.0)")),
    EngineOption("--enable-hierarchical-cache", dict(
        action="store_true", help="SGLang's HiCache (a host tier beside the device "
                                  "pool)")),
    EngineOption("--hicache-ratio", dict(
        type=_conservativeness, default=None,
        help="host pool / device pool, with --enable-hierarchical-cache (SGLang's "
             "default 2.0)")),
    EngineOption("--hicache-size", dict(
        type=_gigabytes, default=None,
        help="host pool in GB, overriding --hicache-ratio, with "
             "--enable-hierarchical-cache")),
    EngineOption("--hicache-write-policy", dict(
        choices=HICACHE_WRITE_POLICIES, default=None,
        help="when the host gets a copy, with --enable-hierarchical-cache (SGLang's "
             "default write_through)")),
    EngineOption("--hicache-storage-backend", dict(
        choices=STORAGE_BACKENDS, default=None, metavar="BACKEND",
        help="HiCache's L3 store behind the host pool, with --enable-hierarchical-cache: "
             f"one of SGLang's ({', '.join(STORAGE_BACKENDS)}), each modelled as a store "
             "that keeps every page written (the file backend without a cap)")),
    EngineOption("--hicache-storage-prefetch-policy", dict(
        choices=PREFETCH_POLICIES, default=None,
        help="when a request stops waiting for its storage prefetch, with "
             "--hicache-storage-backend (SGLang's default timeout)")),
    EngineOption("--hicache-storage-backend-extra-config", dict(
        type=_extra_config, default=None, metavar="JSON",
        help="SGLang's JSON object for the store: prefetch_threshold (tokens, default "
             "256), prefetch_timeout_base (s, 1), prefetch_timeout_per_ki_token (s, 0.25)")),
    EngineOption("--hicache-storage-link", dict(
        type=_storage_link, default=None, metavar="GBPS[:LATENCY_MS]",
        help=f"the store's bandwidth and latency per storage call on the time clock "
             f"(default {STORAGE_LINK[0]:g}:{STORAGE_LINK[1]:g}, {STORAGE_LINK_SOURCE})")),
    EngineOption("--disable-overlap-schedule", dict(
        action="store_true",
        help="run SGLang's non-overlap loop (event_loop_normal); by default the overlap "
             "loop, SGLang's default (event_loop_overlap); both compiled and exact, "
             "with or without HiCache")),
    EngineOption("--radix-eviction-policy", dict(
        choices=EVICTION_POLICIES, default="lru",
        help="the radix cache's eviction order (default lru)")),
)


def sglang_config(args, num_gpu_blocks: int, max_model_len: int) -> SGLangConfig:
    """SGLang's settings from the options; a usage error naming an option vLLM owns
    given here or a page size off the block grid."""
    _check_hicache(args)
    args = argparse.Namespace(**{**vars(args), **{
        o.dest: o.default for o in OPTIONS if getattr(args, o.dest, None) is None}})
    for dest, (flag, default, instead) in _VLLM_LIMITS.items():
        if getattr(args, dest, None) not in (None, default):
            raise UsageError(f"{flag} is vLLM's: with --engine sglang give {instead}")
    if getattr(args, "cpu", 0):
        raise UsageError("--cpu: the sglang engine has no CPU tier (its host tier: "
                         "--enable-hierarchical-cache)")
    page = args.page_size
    if args.block_size % page:
        raise UsageError(f"--page-size {page}: must divide the block size "
                         f"{args.block_size} (--block-size)")
    pool = num_gpu_blocks * args.block_size
    if args.max_total_tokens is not None:
        pool = min(pool, args.max_total_tokens)
    pool = pool // page * page                  # whole pages: pool_configurator.py:651-652
    if args.chunked_prefill_size is None:
        from pipeline.sizes.model_options import tensor_parallel
        from pipeline.sizes.sglang_memory import default_chunk
        args.chunked_prefill_size = default_chunk(getattr(args, "gpu_type", None),
                                                  tensor_parallel(args))
    chunk = None if args.chunked_prefill_size == -1 else args.chunked_prefill_size
    if chunk is not None and chunk % page:
        raise UsageError(f"--chunked-prefill-size {chunk}: must be a multiple of "
                         f"--page-size {page}")
    settings = SchedulerSettings(
        max_total_tokens=pool, page_size=page, schedule_policy=args.schedule_policy,
        max_running_requests=args.max_running_requests, chunked_prefill_size=chunk,
        max_prefill_tokens=args.max_prefill_tokens,
        schedule_conservativeness=args.schedule_conservativeness,
        radix_eviction_policy=args.radix_eviction_policy,
        seed=getattr(args, "seed", None) or 0)
    ratio = HICACHE_RATIO if args.hicache_ratio is None else args.hicache_ratio
    return SGLangConfig(num_gpu_blocks, max_model_len, args.block_size, settings,
                        _hicache(args, pool, page),
                        not args.disable_overlap_schedule,
                        getattr(args, "max_model_len", None), args.max_total_tokens,
                        (ratio, args.hicache_size or 0))
