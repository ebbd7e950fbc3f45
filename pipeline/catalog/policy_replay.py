"""Hits of any policy over a whole trace, at many capacities, by the fast paths its registry
entry declares: one pass where exact (``onepass``: LRU, MRU, OPT; ``stack_passes.py``), else
compiled per-capacity replays (``replay_kernel``: ``pipeline/policies/kernels``), fanned out
over the machine's cores; the Python classes are the reference engine (and the engine of a
policy that declares no fast path)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pipeline.catalog import POLICIES, make_policy
from pipeline.cache.tiers import access_tiers
from pipeline.catalog import entry as _entry
from pipeline.catalog import names as _names

__all__ = ["METHODS", "onepass_policies", "encode", "policy_hits", "hit_matrix", "hit_counts",
           "tiered_codes", "class_hits"]

#: auto: one pass where exact (an entry's ``onepass`` on sizes it allows), else the
#: compiled replay; replay: compiled per capacity; classes: the Python classes (slow, the
#: reference); onepass: only where exact.
METHODS = ("auto", "onepass", "replay", "classes")


def onepass_policies() -> list[str]:
    """The policies whose entry declares a one-pass engine (lru needs one fixed size per key,
    mru and opt one size for every access)."""
    return _names(policy=True, onepass=True)


def _one_pass(name: str, method: str, codes: np.ndarray, sizes: np.ndarray,
              points: int) -> bool:
    """True when ``method`` takes the one-pass engine; raises when onepass cannot be exact.
    auto replays MRU and OPT at a single capacity (the compiled replay is the cheaper one)."""
    fast = _entry(name).onepass
    if method == "onepass" and fast is None:
        raise ValueError(f"method onepass is exact only for {', '.join(onepass_policies())}, "
                         f"not {name}")
    if method == "onepass" and not fast.applies(codes, sizes):
        raise ValueError(f"method onepass for {name} needs {fast.rule}; this "
                         "trace's sizes differ (use --method auto or replay)")
    if method == "auto" and points < 2 and not (fast is not None and fast.one_capacity):
        return False
    return method in ("auto", "onepass") and fast is not None and fast.applies(codes, sizes)


def encode(keys: Sequence) -> np.ndarray:
    """Dense int64 codes 0..K-1 in order of first appearance."""
    keys = np.asarray(keys)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]


def class_hits(name: str, codes: np.ndarray, sizes: np.ndarray, capacity: int) -> np.ndarray:
    """Hits per access of the policy's Python class at ``capacity``: the reference engine."""
    keys = codes.tolist()
    cache = make_policy(name, capacity, keys)
    access = cache.access
    return np.fromiter((access(k, s) for k, s in zip(keys, sizes.tolist())), dtype=bool,
                       count=len(keys))


def policy_hits(name: str, codes: np.ndarray, sizes: np.ndarray, capacity: int,
                method: str = "auto") -> np.ndarray:
    """Per-access hits (bool) of policy ``name`` at one ``capacity``."""
    return hit_matrix(name, codes, sizes, [capacity], method)[0]


def _inputs(name: str, codes: np.ndarray, sizes: np.ndarray, capacities: Sequence[int]
            ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The policy checked; codes and sizes as contiguous int64, capacities as ints."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}")
    return (np.ascontiguousarray(codes, dtype=np.int64),
            np.ascontiguousarray(sizes, dtype=np.int64), [int(c) for c in capacities])


def _per_capacity(run: Callable[[int], object], capacities: list[int],
                  workers: int | None) -> list:
    """``run(capacity)`` for every capacity, on a thread pool (the kernels release the GIL)."""
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(capacities)))) as pool:
        return list(pool.map(run, capacities))


def hit_matrix(name: str, codes: np.ndarray, sizes: np.ndarray, capacities: Sequence[int],
               method: str = "auto", workers: int | None = None) -> np.ndarray:
    """Per-access hits, one row per capacity (bool array, capacities x accesses)."""
    codes, sizes, capacities = _inputs(name, codes, sizes, capacities)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
    if _one_pass(name, method, codes, sizes, len(capacities)):
        return _entry(name).onepass.hits(codes, sizes, capacities)
    kernel = _entry(name).replay_kernel
    if method == "classes" or kernel is None:
        run = class_hits
    else:
        def run(name, codes, sizes, capacity):
            return kernel(codes, sizes, capacity)
    if len(capacities) == 1:
        return run(name, codes, sizes, capacities[0])[None, :]
    return np.vstack(_per_capacity(lambda c: run(name, codes, sizes, c), capacities, workers))


def hit_counts(name: str, codes: np.ndarray, sizes: np.ndarray, capacities: Sequence[int],
               method: str = "auto", workers: int | None = None) -> np.ndarray:
    """Hits per capacity (int64), without keeping per-access rows: one pass where exact, else
    one compiled replay per capacity on a thread pool (the kernels release the GIL)."""
    codes, sizes, capacities = _inputs(name, codes, sizes, capacities)
    if _one_pass(name, method, codes, sizes, len(capacities)):
        return _entry(name).onepass.counts(codes, sizes, capacities)
    kernel = _entry(name).replay_kernel
    if method not in ("auto", "replay") or kernel is None:
        return hit_matrix(name, codes, sizes, capacities, method, workers).sum(axis=1)
    return np.array(_per_capacity(lambda c: int(kernel(codes, sizes, c).sum()), capacities,
                                  workers), dtype=np.int64)


def tiered_codes(gpu: str, cpu: str, codes: np.ndarray, sizes: np.ndarray, gpu_capacity: int,
                 cpu_capacity: int, method: str = "auto") -> np.ndarray:
    """kvlab's two tiers with any policy per tier: 0 = GPU hit, 1 = CPU hit, 2 = miss.

    As in ``TwoTierCache``, the GPU tier sees every access and the CPU tier exactly the GPU
    misses; the GPU tier never depends on the CPU tier, so two passes are exact (and give OPT
    the future of its own input)."""
    gpu_hit = policy_hits(gpu, codes, sizes, gpu_capacity, method)
    missed = np.flatnonzero(~gpu_hit)
    cpu_hit = policy_hits(cpu, codes[missed], sizes[missed], cpu_capacity, method)
    return access_tiers(gpu_hit, cpu_hit)
