"""The policy family as block-mode GPU and CPU models (``pipeline.catalog.model_api``' API).

Per capacity, one policy instance holds ``capacity // block_size`` unit blocks and sees
the block model's rules: a request's prefix hit is its leading cacheable blocks present
before it (looked up first); then ``Policy.place`` reads its cacheable blocks in the tier's
order (tail-first: tail .. head; head-first: head .. tail) and evicts other blocks until it
fits. The CPU tier places blocks g.. of each request (g its GPU hit) and looks up all of
them. OPT is given the future of the tier's own placements, which never depends on its
hits, so it is exact as a replay (a reference for prefix hits, not a bound). The ``lru``
model equals the block model's ``block-lru`` engine (tests/test_policies_blocks.py).

``place`` is a request-level step (look up the whole prefix, read every block, then evict
with the request's own blocks set aside and put back), so a policy's models run the
request-level block kernel its entry declares (``block_kernel``: ``kernels/blocks.py``,
proven equal to the classes; S3-FIFO, ARC and policies registered from outside replay
their classes per capacity); ``lru``'s models are the one-pass ``block-lru``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.workloads.stream import TAIL_FIRST, BlockStream, capacity_blocks, check_order

__all__ = ["policy_gpu_model", "policy_cpu_model"]


def _requests(stream: BlockStream) -> list[list[int]]:
    codes = stream.codes.tolist()
    return [codes[int(s):int(s) + int(n)] for s, n in zip(stream.starts[:-1], stream.cacheable)]


def _replay(cls: type, requests: list[list[int]], starts: list[int], capacity: int,
            order: str) -> np.ndarray:
    """Prefix hits (blocks) per request, by the tier class ``cls``; request r places
    ``requests[r][starts[r]:]``."""
    touches = [keys[start:][::-1] if order == TAIL_FIRST else keys[start:]
               for keys, start in zip(requests, starts)]
    if getattr(cls, "needs_future", False):
        tier = cls(capacity, [k for t in touches if len(t) <= capacity for k in t])
    else:
        tier = cls(capacity)
    out = np.zeros(len(requests), np.int64)
    for r, keys in enumerate(requests):
        out[r] = tier.lookup(keys)
        tier.place(touches[r], 1)
    return out


def _ranges(lo: np.ndarray, lengths: np.ndarray, step: int = 1) -> np.ndarray:
    """Concatenated ``lo[r], lo[r] + step, ...`` (``lengths[r]`` of each)."""
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    within = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    return np.repeat(lo, lengths) + step * within, offsets


def _compiled(kernel: Callable, stream: BlockStream, starts: np.ndarray, blocks: np.ndarray,
              order: str) -> list[np.ndarray]:
    """Prefix hits per capacity by a block kernel of ``kernels/blocks.py``."""
    codes = np.ascontiguousarray(stream.codes, dtype=np.int64)
    first = np.asarray(stream.starts[:-1], np.int64)
    lengths = np.asarray(stream.cacheable, np.int64)
    index, l_off = _ranges(first, lengths)
    lookup = codes[index]
    if order == TAIL_FIRST:
        index, t_off = _ranges(first + lengths - 1, lengths - starts, -1)
    else:
        index, t_off = _ranges(first + starts, lengths - starts)
    touches = codes[index]
    k = int(codes.max()) + 1 if codes.size else 1
    return [kernel(touches, t_off, lookup, l_off, capacity, k) for capacity in blocks.tolist()]


def _model_rows(cls: type, kernel: Callable | None, stream: BlockStream, starts: np.ndarray,
                blocks: np.ndarray, order: str) -> np.ndarray:
    if kernel is not None:
        rows = _compiled(kernel, stream, starts, blocks, order)
    else:
        requests = _requests(stream)
        rows = [_replay(cls, requests, starts.tolist(), int(c), order) for c in blocks]
    return np.array(rows, np.int64).reshape(blocks.size, stream.requests) * stream.block_size


def policy_gpu_model(name: str, cls: type, kernel: Callable | None = None) -> Callable:
    """GPU model of policy ``name`` (tier class ``cls``): prefix hit tokens per (capacity,
    request); compiled by its block ``kernel`` (``kernels/blocks.py``) when given, else the
    class replay (the reference)."""
    def gpu_model(stream: BlockStream, capacities: object, order: str) -> np.ndarray:
        check_order(order)
        blocks = capacity_blocks(capacities, stream.block_size)
        starts = np.zeros(stream.requests, np.int64)
        return _model_rows(cls, kernel, stream, starts, blocks, order)
    gpu_model.__doc__ = f"{name} as a block-mode GPU model (pipeline.policies.blockmode)."
    return gpu_model


def policy_cpu_model(name: str, cls: type, kernel: Callable | None = None) -> Callable:
    """CPU model of policy ``name``: CPU prefix hit tokens (from block 0) per (capacity,
    request), placing blocks g.. of each request; ``kernel`` as in the GPU model."""
    def cpu_model(stream: BlockStream, gpu_hit_tokens: np.ndarray, capacities: object,
                  order: str) -> np.ndarray:
        check_order(order)
        blocks = capacity_blocks(capacities, stream.block_size)
        starts = np.minimum(np.asarray(gpu_hit_tokens, np.int64) // stream.block_size,
                            np.asarray(stream.cacheable, np.int64))
        return _model_rows(cls, kernel, stream, starts, blocks, order)
    cpu_model.__doc__ = f"{name} as a block-mode CPU model (pipeline.policies.blockmode)."
    return cpu_model
