"""The policy family's registry entries (``pipeline.cache.registry``'s interface; collected by
``pipeline.catalog``): each policy's class is its tier and the reference of every fast path
it declares. A new policy is one module plus one line in ``ENTRIES``."""

from __future__ import annotations

from collections.abc import Callable

import pipeline.policies.kernels as kernels
from pipeline.cache.registry import CacheModel
from pipeline.policies.arc import ARC
from pipeline.policies.blockmode import policy_cpu_model, policy_gpu_model
from pipeline.policies.clock import Clock
from pipeline.policies.kernels import blocks as block_kernels
from pipeline.policies.lfu import LFU
from pipeline.policies.opt import OPT
from pipeline.policies.s3fifo import S3FIFO
from pipeline.policies.sieve import Sieve
from pipeline.policies.simple import FIFO, LRU, MRU

__all__ = ["policy_entry", "ENTRIES"]


def policy_entry(name: str, cls: type, summary: str, onepass: object | None = None,
                 replay_kernel: Callable | None = None,
                 block_kernel: Callable | None = None) -> CacheModel:
    """The entry of a policy of the family: its class is its tier and the reference of
    every fast path it declares (``onepass``: a ``pipeline.onepass.stack_passes.OnePass``;
    ``replay_kernel``: ``pipeline.policies.kernels``; ``block_kernel``:
    ``pipeline.policies.kernels.blocks``). Without a fast path the class is replayed."""
    return CacheModel(name, summary, "block", tier=cls,
                      gpu=policy_gpu_model(name, cls, block_kernel),
                      cpu=policy_cpu_model(name, cls, block_kernel), onepass=onepass,
                      replay_kernel=replay_kernel, block_kernel=block_kernel, policy=True)


k, b = kernels, block_kernels
#: the built-in policies, in display order (their one-pass engines: ``pipeline.onepass.entries``)
ENTRIES = (
    policy_entry("lru", LRU, "least recently used", None, k.replay_lru),
    policy_entry("fifo", FIFO, "first in, first out", None, k.replay_fifo, b.block_fifo),
    policy_entry("mru", MRU, "most recently used", None, k.replay_mru, b.block_mru),
    policy_entry("lfu", LFU, "least frequently used", None, k.replay_lfu, b.block_lfu),
    policy_entry("clock", Clock, "CLOCK (second chance)", None, k.replay_clock, b.block_clock),
    policy_entry("sieve", Sieve, "SIEVE", None, k.replay_sieve, b.block_sieve),
    policy_entry("s3fifo", S3FIFO, "S3-FIFO", None, k.replay_s3fifo),
    policy_entry("arc", ARC, "ARC", None, k.replay_arc),
    policy_entry("opt", OPT, "Belady's OPT (the ceiling)", None, k.replay_opt, b.block_opt),
)
del k, b
