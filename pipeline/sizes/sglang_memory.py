"""``--mem-fraction-static [F]``: the KV pool SGLang 0.5.23 would allocate (``--engine sglang``).

SGLang's KV budget (``srt/mem_cache/kv_cache_configurator.py``, ``_profile_available_bytes``)
is the GPU memory still free once the weights are loaded minus the non-static slack, the
memory before loading x (1 - ``mem_fraction_static``)::

    budget = total x mem_fraction_static - weights
    max_total_num_tokens = budget // KV bytes per token, down to a multiple of page_size

(``calculate_pool_sizes``), capped by ``--max-total-tokens`` (``_apply_token_constraints``).
Given without a value, ``mem_fraction_static`` is SGLang's own default
(``srt/arg_groups/memory_hook.py``, ``_handle_gpu_memory_settings``) for a dense model on one
CUDA GPU, not disaggregated, without data-parallel attention:
``round((gpu_mem - reserved) / gpu_mem, 3)`` in MiB, where ``reserved`` = 512 + 1.5 x
max(chunked_prefill_size, 2048) + tp / 8 x 1024 + the CUDA graphs' reserve
(``reserve_for_graph_mb``: decode max_bs x 2, plus 8 per captured prefill size up to the
chunk) and at least 10,240 above 60 GiB; chunked_prefill_size and decode max_bs by memory
(8,192 and 256 on an 80 GiB GPU below tp 4). Here ``total`` is the ``--gpu-type`` preset's
datasheet memory taken as GiB (SGLang reads nvidia-smi and the free memory, a little less),
weights are the shape's parameters x the weight dtype's bytes / tp, and CUDA's own context
is left out.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from pipeline.base.arguments import derive
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.model_presets import KVSize, ModelShape

__all__ = ["SGLangMemory", "default_fraction", "default_chunk", "sglang_kv_memory",
           "gpu_from_fraction"]

GIB, MIB = 2**30, 2**20
FLAG = "--mem-fraction-static"


def _capacity_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max_bs) SGLang picks by GPU memory."""
    brackets = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160),
                (90, 8192, 256, 512), (160, 8192, 256, 512))
    for below_gib, chunk, small, large in brackets:
        if gpu_mib < below_gib * 1024:
            return chunk, small if tp < 4 else large
    return 16384, 512


def default_chunk(gpu_type: str | None, tp: int = 1) -> int:
    """SGLang's default ``chunked_prefill_size`` on the ``--gpu-type`` preset (8192 without
    one: an 80 GiB GPU's)."""
    from pipeline.sizes.gpus import gpu_preset
    gpu = gpu_preset(gpu_type) if gpu_type else None
    if gpu is None or gpu.memory_gb is None:
        return 8192
    return _capacity_defaults(gpu.memory_gb * 1024, tp)[0]


def _prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill sizes SGLang captures up to ``max_bs`` tokens
    (``generate_prefill_cuda_graph_batch_sizes``)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32),
             *range(576, 1025, 64), *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return sum(size <= max_bs for size in sizes)


def default_fraction(gpu_mib: float, tp: int = 1, chunked_prefill_size: int | None = None,
                     max_running_requests: int | None = None) -> tuple[float, str]:
    """(SGLang's default ``mem_fraction_static``, the arithmetic) (module docstring)."""
    chunk_default, decode_bs = _capacity_defaults(gpu_mib, tp)
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk_default
    if max_running_requests is not None:
        decode_bs = min(decode_bs, max_running_requests)
    activation = max(chunk, 2048) if chunk > 0 else 2048
    graphs = decode_bs * 2 + 8 * _prefill_graph_sizes(chunk if chunk > 0 else 0)
    reserved = 512 + activation * 1.5 + tp / 8 * 1024 + graphs
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    return fraction, (f"SGLang's default: ({gpu_mib:,.0f} MiB - {reserved:,.0f} MiB reserved "
                      f"for the activations of a chunk of {chunk:,} tokens and CUDA graphs) / "
                      f"{gpu_mib:,.0f} MiB")


@dataclass(frozen=True)
class SGLangMemory:
    """The arithmetic of one ``--mem-fraction-static``: every term in bytes."""

    gpu: str
    total: int
    fraction: float
    fraction_note: str
    weights: int
    budget: int
    bytes_per_token: int
    page_size: int
    tokens: int
    tensor_parallel: int = 1

    @property
    def line(self) -> str:
        """``--mem-fraction-static 0.83 on H100 SXM (...): 0.83 x 80 GiB - weights ...``."""
        per = f" per GPU of {self.tensor_parallel}" if self.tensor_parallel > 1 else ""
        return (f"{FLAG} {self.fraction:g} on {self.gpu} ({self.total / GIB:g} GiB, "
                f"datasheet; {self.fraction_note}): {self.fraction:g} x "
                f"{self.total / GIB:g} GiB - weights {self.weights / GIB:.2f} GiB{per} = "
                f"{self.budget / GIB:.2f} GiB KV = {self.tokens:,} tokens (SGLang's "
                f"max_total_num_tokens; {self.bytes_per_token:,} bytes per token, pages of "
                f"{self.page_size})")

    def as_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "total_bytes": self.total, "mem_fraction_static": self.fraction,
                "fraction_source": self.fraction_note, "weight_bytes": self.weights,
                "kv_bytes": self.budget, "bytes_per_token": self.bytes_per_token,
                "page_size": self.page_size, "tokens": self.tokens,
                "tensor_parallel": self.tensor_parallel, "line": self.line}


def sglang_kv_memory(gpu: str, total: int, fraction: float, note: str, shape: ModelShape,
                     kv: KVSize, page_size: int = 1, weight_bytes: int = 2,
                     tensor_parallel: int = 1) -> SGLangMemory:
    """SGLang's KV pool for these figures (module docstring); ValueError when the weights
    leave nothing (SGLang's "Loaded weights leave no GPU memory for the KV cache")."""
    weights = -(-shape.parameters * weight_bytes // tensor_parallel)
    budget = int(total * fraction) - weights
    if budget <= 0:
        raise ValueError(f"{fraction:g} x {total / GIB:g} GiB leaves no KV memory after "
                         f"weights {weights / GIB:.2f} GiB (SGLang refuses to start)")
    tokens = budget // kv.bytes_per_token // page_size * page_size
    return SGLangMemory(gpu, total, fraction, note, weights, budget, kv.bytes_per_token,
                        page_size, tokens, tensor_parallel)


def gpu_from_fraction(args: argparse.Namespace) -> tuple[Any, dict[str, object]]:
    """(a copy of ``args`` whose ``gpu`` is SGLang's pool, in tokens; its ``as_dict``); a
    usage error with --gpu, without --gpu-type / --model, or with vLLM's sizing."""
    from pipeline.sizes.gpus import gpu_preset
    from pipeline.sizes.model_options import shape_from_args, tensor_parallel
    from pipeline.sizes.model_presets import DTYPE_BYTES
    from pipeline.sizes.units import kv_from_args
    if getattr(args, "gpu", None) is not None:
        raise UsageError(f"{FLAG} gives --gpu: give one of them")
    if getattr(args, "gpu_type", None) is None:
        raise UsageError(f"{FLAG} needs --gpu-type NAME (the device's memory)")
    if getattr(args, "model", None) is None and getattr(args, "model_config", None) is None:
        raise UsageError(f"{FLAG} needs --model PRESET (weights and KV bytes per token)")
    try:
        gpu = gpu_preset(args.gpu_type)
        shape = shape_from_args(args)
    except ValueError as exc:
        raise UsageError(f"{FLAG}: {exc}") from None
    if gpu.memory_gb is None or shape is None:
        raise UsageError(f"{FLAG}: --gpu-type {args.gpu_type} / --model {args.model}: no "
                         f"memory size or model shape")
    tp, total = tensor_parallel(args), int(gpu.memory_gb * GIB)
    fraction, note = args.mem_fraction_static, "given"
    if fraction == "default":
        fraction, note = default_fraction(total / MIB, tp,
                                          getattr(args, "chunked_prefill_size", None),
                                          getattr(args, "max_running_requests", None))
    try:
        memory = sglang_kv_memory(gpu.name, total, fraction, note, shape, kv_from_args(args),
                                  getattr(args, "page_size", None) or 1,
                                  DTYPE_BYTES[getattr(args, "weights", None) or "bf16"], tp)
    except ValueError as exc:
        raise CLIError(f"{FLAG}: {exc}") from None
    return derive(args, gpu=[memory.tokens]), memory.as_dict()
