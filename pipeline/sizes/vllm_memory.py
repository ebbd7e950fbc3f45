"""``--gpu-memory-utilization F``: the GPU KV capacity vLLM 0.33.0 would allocate.

vLLM's worker (``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``, and
``vllm/v1/worker/utils.py``, ``request_memory``) computes::

    requested_memory = ceil(total_memory x gpu_memory_utilization)
    available_kv_cache_memory = requested_memory - non_kv_cache_memory

where ``non_kv_cache_memory`` (``vllm/utils/mem_utils.py``, ``memory_profiling``) is what the
weights and a profile run consumed plus the run's transient torch peak. The KV cache then
holds ``num_blocks = available // bytes_per_block`` blocks
(``vllm/v1/core/kv_cache_planning.py``), ``bytes_per_block`` = block size x KV bytes per
token over all layers; block 0 of them is the null block (``num_gpu_blocks`` counts it).

Here: ``total_memory`` is the ``--gpu-type`` preset's datasheet memory taken as GiB (CUDA
reports a little less: the driver keeps some), weights are the ``--model`` shape's
parameters x the weight dtype's bytes, and the profile run's activations are an
**estimate** (vLLM measures them on the device): the dummy batch of
``max_num_batched_tokens`` tokens through one layer's largest live tensors (the MLP's
gate+up output, its activation and four hidden-state buffers) plus the sampler's dummy
logits for ``max_num_seqs`` sequences (fp32, twice: logits and their softmax), or the
flat ``--activation-reserve GIB`` when given. CUDA graphs' memory is left out, as vLLM
0.33 leaves it out unless ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is set.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pipeline.base.arguments import derive, non_negative_float, unit_ratio
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.model_presets import KVSize, ModelShape

__all__ = ["VllmMemory", "vllm_kv_memory", "add_memory_arguments", "gpu_from_utilization",
           "resolve_with_utilization"]

GIB = 2**30
#: vLLM's scheduler defaults the commands also use (max_num_batched_tokens, max_num_seqs)
DEFAULT_BATCHED_TOKENS, DEFAULT_SEQS = 8192, 256


@dataclass(frozen=True)
class VllmMemory:
    """The arithmetic of one ``--gpu-memory-utilization``: every term in bytes."""

    gpu: str
    total: int
    utilization: float
    requested: int
    parameters: int
    weight_bytes: int
    weights: int
    activations: int
    activation_note: str
    available: int
    block_size: int
    bytes_per_token: int
    num_blocks: int
    tensor_parallel: int = 1

    @property
    def tokens(self) -> int:
        """KV tokens of the pool (null block included, as ``num_gpu_blocks`` counts it)."""
        return self.num_blocks * self.block_size

    def line(self) -> str:
        """``--gpu-memory-utilization 0.9 on H100 (80 GiB = ... B): 0.9 x 80 GiB = ...``."""
        def g(size: int) -> str:
            return f"{size / GIB:.2f} GiB"
        return (f"--gpu-memory-utilization {self.utilization:g} on {self.gpu} "
                f"({self.total / GIB:g} GiB = {self.total:,} B, datasheet): "
                f"{self.utilization:g} x {self.total / GIB:g} GiB = {g(self.requested)} - weights "
                f"{g(self.weights)} ({self.parameters / 1e9:.2f}B params x {self.weight_bytes} B{self._split})"
                f" - activations {g(self.activations)} ({self.activation_note}) = "
                f"{g(self.available)} KV = {self.tokens:,} tokens = {self.num_blocks:,} blocks "
                f"of {self.block_size} (vLLM's num_gpu_blocks, null block included; "
                f"{self.bytes_per_token:,} bytes per token)")

    @property
    def _split(self) -> str:
        return f" / {self.tensor_parallel} GPUs" if self.tensor_parallel > 1 else ""

    def as_dict(self) -> dict[str, object]:
        """JSON form: every term, and the printed line."""
        return {"gpu": self.gpu, "total_bytes": self.total, "utilization": self.utilization,
                "requested_bytes": self.requested, "weights_bytes": self.weights,
                "parameters": self.parameters, "activations_bytes": self.activations,
                "activations": self.activation_note, "kv_bytes": self.available,
                "num_gpu_blocks": self.num_blocks, "tokens": self.tokens,
                "block_size": self.block_size, "line": self.line()}


def activation_estimate(shape: ModelShape, batched_tokens: int, seqs: int,
                        dtype_bytes: int = 2) -> int:
    """Bytes of the profile run's transient peak, an estimate: ``batched_tokens`` x (3 x
    intermediate + 4 x hidden) x dtype bytes + ``seqs`` x vocab x 4 B x 2."""
    hidden = batched_tokens * (3 * shape.intermediate_size + 4 * shape.hidden_size) * dtype_bytes
    return hidden + seqs * shape.vocab_size * 4 * 2


def vllm_kv_memory(gpu: str, total: int, utilization: float, shape: ModelShape, kv: KVSize,
                   block_size: int, weight_bytes: int = 2,
                   batched_tokens: int = DEFAULT_BATCHED_TOKENS, seqs: int = DEFAULT_SEQS,
                   reserve_gib: float | None = None, tensor_parallel: int = 1) -> VllmMemory:
    """vLLM's KV allocation for these figures, on one GPU of ``tensor_parallel`` (its share
    of the weights: 1/N, rounded up; ``kv`` per GPU; the activation estimate is not split, an
    upper bound); ValueError when nothing is left for KV."""
    requested = math.ceil(total * utilization)
    weights = -(-shape.parameters * weight_bytes // tensor_parallel)
    if reserve_gib is not None:
        activations = int(Decimal(str(reserve_gib)) * GIB)
        note = "--activation-reserve"
    else:
        activations = activation_estimate(shape, batched_tokens, seqs)
        note = (f"estimate: profile run of {batched_tokens:,} batched tokens and "
                f"{seqs} sequences' logits; vLLM measures it")
    available = requested - weights - activations
    if available <= 0:
        raise ValueError(f"{utilization:g} x {total / GIB:g} GiB = {requested / GIB:.2f} GiB "
                         f"leaves no KV memory after weights {weights / GIB:.2f} GiB and "
                         f"activations {activations / GIB:.2f} GiB")
    num_blocks = available // (block_size * kv.bytes_per_token)
    return VllmMemory(gpu, total, utilization, requested, shape.parameters, weight_bytes,
                      weights, activations, note, available, block_size, kv.bytes_per_token,
                      num_blocks, tensor_parallel)


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpu-memory-utilization and --activation-reserve (and --gpu-type when the command has
    no roofline options)."""
    from pipeline.sizes.gpus import GPU_NAMES
    group = parser.add_argument_group(
        "vLLM's allocation (--gpu-memory-utilization with --gpu-type and --model)")
    group.add_argument("--gpu-memory-utilization", type=unit_ratio, default=None, metavar="F",
                       help="--gpu is the KV capacity vLLM 0.33 would allocate: device memory "
                            "x F - weights - activations (0 < F <= 1; the arithmetic is "
                            "printed); needs --gpu-type and --model, not with --gpu")
    group.add_argument("--activation-reserve", type=non_negative_float, default=None,
                       metavar="GIB",
                       help="with --gpu-memory-utilization: the profile run's activation "
                            "peak in GiB (default: an estimate from the model shape, "
                            "--max-num-batched-tokens and --max-num-seqs)")
    if "--gpu-type" not in parser._option_string_actions:
        group.add_argument("--gpu-type", default=None, metavar="NAME",
                           help=f"GPU preset: {', '.join(GPU_NAMES[:-1])}")


def gpu_from_utilization(args: argparse.Namespace, block_size: int | None
                         ) -> tuple[Any, dict[str, object]]:
    """(a frozen copy of ``args`` whose ``gpu`` is the pool ``--gpu-memory-utilization``
    gives, a one-item list in tokens; the pool's ``as_dict``); a usage error with --gpu or
    without --gpu-type / --model."""
    from pipeline.sizes.model_presets import DTYPE_BYTES, model_shape, preset
    from pipeline.sizes.gpus import gpu_preset
    flag = "--gpu-memory-utilization"
    if getattr(args, "gpu", None) is not None:
        raise UsageError(f"{flag} gives --gpu: give one of them")
    if getattr(args, "gpu_type", None) is None:
        raise UsageError(f"{flag} needs --gpu-type NAME (the device's memory)")
    config = getattr(args, "model_config", None) is not None
    if getattr(args, "model", None) is None and not config:
        raise UsageError(f"{flag} needs --model PRESET (weights and KV bytes per token)")
    if getattr(args, "kv_bytes_per_token", None) or getattr(args, "kv_shape", None):
        raise UsageError(f"{flag} takes the KV size from --model")
    from pipeline.sizes.model_options import shape_from_args, tensor_parallel
    from pipeline.sizes.units import kv_from_args
    try:
        gpu = gpu_preset(args.gpu_type)
        shape = shape_from_args(args) if config else model_shape(args.model)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    kv = kv_from_args(args) if config or tensor_parallel(args) > 1 or getattr(
        args, "kv_cache_dtype", "auto") != "auto" else preset(args.model)
    if gpu.memory_gb is None:
        raise UsageError(f"{flag}: --gpu-type {args.gpu_type} has no memory size")
    size = block_size or 16
    weights = DTYPE_BYTES[getattr(args, "weights", None) or "bf16"]
    try:
        memory = vllm_kv_memory(
            gpu.name, int(gpu.memory_gb * GIB), args.gpu_memory_utilization, shape,
            kv, size, weights,
            getattr(args, "max_num_batched_tokens", None) or DEFAULT_BATCHED_TOKENS,
            getattr(args, "max_num_seqs", None) or DEFAULT_SEQS, args.activation_reserve,
            tensor_parallel(args))
    except ValueError as exc:
        raise CLIError(f"{flag}: {exc}") from None
    longest = getattr(args, "max_model_len", None)
    if longest and (memory.num_blocks - 1) * size < longest:
        raise CLIError(f"{flag}: {memory.tokens:,} KV tokens cannot hold one request of "
                       f"--max-model-len {longest} (vLLM refuses to start)")
    return derive(args, gpu=[memory.tokens]), memory.as_dict()


def resolve_with_utilization(args: argparse.Namespace, *dests: str,
                             block_size: int | None = None) -> tuple[Any, dict[str, object]]:
    """``resolve_capacities``, after ``--gpu-memory-utilization`` (when given) set ``--gpu``;
    its arithmetic is then the answer's ``gpu_memory_utilization`` (``size_lines`` prints
    it first)."""
    from pipeline.sizes.units import resolve_capacities
    memory, key = None, "gpu_memory_utilization"
    utilization = getattr(args, "gpu_memory_utilization", None)
    if utilization is not None and getattr(args, "engine", None) == "sglang":
        raise UsageError("--gpu-memory-utilization is vLLM's: with --engine sglang give "
                         "--mem-fraction-static [F]")
    if utilization is not None:
        args, memory = gpu_from_utilization(args, block_size)
    elif getattr(args, "mem_fraction_static", None) is not None:
        from pipeline.sizes.sglang_memory import gpu_from_fraction
        args, memory = gpu_from_fraction(args)
        key = "mem_fraction_static"
    args, sizes = resolve_capacities(args, *dests, block_size=block_size)
    return args, sizes if memory is None else {**sizes, key: memory}
