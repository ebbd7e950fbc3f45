"""The roofline step-time model: a model's shape on a GPU's peaks, scaled by measured
efficiency (``steptime.efficiency``: vidur's profiles by default; at factors 1, a lower bound).

For one batch of T tokens (prefill tokens + decodes) over a dense model (``ModelShape``)::

    FLOPs  = 2 x layer weights x T + 2 x vocab x hidden x sampled + 4 x layers x heads x
             head_dim x attention pairs
    bytes  = weight bytes (layers + LM head) + KV bytes per token x attended context
    step   = overhead + max(FLOPs / (peak FLOP/s x MFU), bytes / (HBM bandwidth x MBU))
             + reloaded tokens x KV bytes per token / host-link bandwidth
             + T x all-reduce bytes per token / peer bandwidth      (tensor parallel)

A mixture of experts counts the experts a token goes through in its FLOPs and every
expert in the weight bytes (a bound: a small batch reads fewer). With tensor parallelism N
(``--tensor-parallel-size``) each GPU holds 1/N of the weights, does 1/N of the FLOPs and
holds ``max(1, KV heads / N)`` KV heads, and every layer ends its attention and its MLP
with an all-reduce of T x hidden x 2 bytes (bf16 activations): a ring moves 2 (N-1)/N of
them each way per GPU, over NVLink where the preset has it, else the host link (PCIe).
The all-reduces are added, not overlapped, and their per-call latency is left out.

A prefill-heavy batch lands on the compute roof, a decode batch on the memory roof (every
weight read once per step, plus each sequence's KV); CPU-tier reloads cross the host link
before the forward pass (not overlapped). The per-step overhead (scheduling, sampling,
launch) is a fixed assumption. Every figure this gives is a roofline, labelled so.

>>> from pipeline.sizes.units import model_shape
>>> from pipeline.sizes.gpus import gpu_preset
>>> model = Roofline(model_shape("Llama-3.1-8B"), gpu_preset("H100"), overhead_ms=0.0)
>>> round(model.step_ms(StepCost(0, 1, 1)), 2)   # one decode: 15.0 GB of weights / 3.35 TB/s
4.48
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.units import ModelShape, model_shape, parse_model_shape
from pipeline.steptime.cost import StepCost, step_cost  # noqa: F401 (StepCost: doctest)
from pipeline.base.step_vectors import Rates
from pipeline.sizes.gpus import GpuPreset, custom_gpu, gpu_preset

__all__ = ["Roofline", "Rates", "WEIGHT_BYTES", "DEFAULT_OVERHEAD_MS", "PROFILED",
           "check_roofline_model", "roofline_caveat"]

WEIGHT_BYTES = {"bf16": 2, "fp8": 1}
#: ``--mfu-prefill`` / ``--mbu-decode`` given without a value: the GPU's profiled factor
PROFILED = "profiled"
#: fixed per-step overhead (scheduler, sampler, kernel launches): an assumption, not a fit
DEFAULT_OVERHEAD_MS = 2.0


def roofline_caveat(label: str) -> str:
    """What a step-time label's figures are, in parentheses: a roofline at the peaks is a
    lower bound, one scaled by efficiency (its label names MFU/MBU) an estimate; others
    nothing."""
    if not label.startswith("roofline"):
        return ""
    if "MFU" in label or "MBU" in label:
        return (" (a roofline at measured efficiency, not a measurement)" if _profiled(label)
                else " (a roofline at assumed or given efficiency, not a measurement)")
    return " (a lower bound from peak figures, not a measurement)"


def _profiled(label: str) -> bool:
    """Whether a roofline label's MFU and MBU are its GPU's profiled ones (the default
    factors of ``pipeline.steptime.efficiency``; not the mean assumed for another GPU)."""
    from pipeline.steptime.efficiency import default_efficiency
    try:
        gpu = gpu_preset(label.removeprefix("roofline (").split(",")[0])
    except ValueError:                                  # a custom GPU: nothing profiled
        return False
    for index, name in enumerate(("MFU", "MBU")):
        value, source = default_efficiency(gpu, index)
        if source.startswith("assumed") or f", {name} {value:g}" not in label:
            return False
    return True


@dataclass(frozen=True)
class Roofline:
    """Roofline step time of ``model`` on ``gpu``, weights in ``weights`` (bf16 or fp8), KV
    cache in ``kv_dtype``, plus ``overhead_ms`` per step."""

    model: ModelShape
    gpu: GpuPreset
    overhead_ms: float = DEFAULT_OVERHEAD_MS
    weights: str = "bf16"
    kv_dtype: str = "bf16"
    tensor_parallel: int = 1
    mfu: float = 1.0                     # share of peak FLOP/s (--mfu-prefill)
    mbu: float = 1.0                     # share of peak memory bandwidth (--mbu-decode)
    efficiency_source: str = ""

    def __post_init__(self) -> None:
        if self.weights not in WEIGHT_BYTES:
            raise ValueError(f"unknown weight dtype {self.weights!r}: expected bf16 or fp8")
        if not (0 < self.mfu <= 1 and 0 < self.mbu <= 1):
            raise ValueError(f"efficiency factors must be in (0, 1], got {self.mfu}, "
                             f"{self.mbu}")
        if not self.overhead_ms >= 0:
            raise ValueError(f"the step overhead must be >= 0 ms, got {self.overhead_ms}")
        self.gpu.flops(self.weights)                 # fp8 on a chip without it: refused now
        self.model.kv_heads_per_gpu(self.tensor_parallel)   # heads that do not split: now

    file_kind: ClassVar[str | None] = None           # --latency roofline: from the options

    @classmethod
    def from_args(cls, args: Any) -> Roofline:
        """``--latency roofline``: ``--model-shape`` or ``--model`` on ``--gpu-type`` (H100
        by default) and its overrides; CLIError (or UsageError) naming the option."""
        name = args.gpu_type or "H100"
        gpu = _option("--gpu-type", lambda: custom_gpu(
            None if name.lower() == "custom" else gpu_preset(name),
            bf16_tflops=args.gpu_tflops, fp8_tflops=args.gpu_fp8_tflops,
            hbm_gbps=args.gpu_hbm_gbps, host_link_gbps=args.host_link_gbps))
        check_roofline_model(args)
        from pipeline.sizes.model_options import kv_dtype, shape_from_args, tensor_parallel
        if getattr(args, "model_shape", None) and getattr(args, "model_config", None):
            raise UsageError("--model-shape: give it or --model-config, not both")
        if getattr(args, "model_shape", None):
            shape = _option("--model-shape", parse_model_shape, args.model_shape)
        elif getattr(args, "model_config", None):
            shape = shape_from_args(args)
        else:
            shape = _option("--model", model_shape, args.model)
        tp = tensor_parallel(args)
        try:
            shape.kv_heads_per_gpu(tp)
        except ValueError as exc:
            raise UsageError(f"--tensor-parallel-size {tp}: {exc}") from None
        factors, given, profiled, sources = [], [], [], {}
        for index, option in enumerate(("--mfu-prefill", "--mbu-decode")):
            value = getattr(args, option[2:].replace("-", "_"), None)
            if value == PROFILED:
                from pipeline.steptime.efficiency import efficiency_of
                try:
                    value, source = efficiency_of(gpu, index)
                except ValueError as exc:
                    raise UsageError(f"{option}: {exc}") from None
            elif value is None:
                from pipeline.steptime.efficiency import default_efficiency
                value, source = default_efficiency(gpu, index)
            else:
                given.append(f"{option} {value:g} given")
                factors.append(value)
                continue
            profiled.append(f"{option} {value:g}")
            sources.setdefault(source, []).append(f"{option} {value:g}")
            factors.append(value)
        sources = given + [f"{' and '.join(names)} from {source}"
                           for source, names in sources.items()]
        return _option("--weights", cls, shape, gpu, args.step_overhead_ms, args.weights,
                       kv_dtype(args), tp, *factors, "; ".join(sources))

    @property
    def kv_bytes_per_token(self) -> int:
        """Per GPU (``ModelShape.kv``)."""
        return self.model.kv(self.kv_dtype, self.tensor_parallel).bytes_per_token

    @property
    def weight_bytes(self) -> float:
        """Bytes one GPU reads per step: every decoder-layer weight (every expert) and the LM
        head, once, split ``tensor_parallel`` ways."""
        return (self.model.layer_parameters + self.model.lm_head_parameters) \
            * WEIGHT_BYTES[self.weights] / self.tensor_parallel

    @property
    def allreduce_bytes_per_token(self) -> float:
        """Bytes one GPU sends per token through the layers: 2 all-reduces per layer of
        hidden x 2 bytes, 2 (N-1)/N of them in a ring (0 without tensor parallelism)."""
        n, m = self.tensor_parallel, self.model
        return 2 * m.layers * m.hidden_size * 2 * 2 * (n - 1) / n

    @property
    def peak(self) -> bool:
        """At the datasheet peaks (both factors 1): a lower bound."""
        return self.mfu == 1 and self.mbu == 1

    @property
    def label(self) -> str:
        extra = "".join(part for part in (
            f", TP {self.tensor_parallel}" if self.tensor_parallel > 1 else "",
            f", {self.kv_dtype} KV" if self.kv_dtype != "bf16" else "",
            f", MFU {self.mfu:g}" if self.mfu != 1 else "",
            f", MBU {self.mbu:g}" if self.mbu != 1 else ""))
        return (f"roofline ({self.gpu.name.split()[0]}, {self.model.name}, {self.weights} "
                f"weights{extra})")

    @property
    def provenance(self) -> str:
        parts = self.efficiency_source.split("; ")
        kind = ("roofline lower bound (the peaks), not measured" if self.peak else
                "roofline at assumed or given efficiency, not a measurement of this setup"
                if any(part.endswith(" given") or " from assumed:" in part for part in parts)
                else "roofline at measured efficiency, not a measurement of this setup")
        return (f"{kind}: {self.gpu.describe(self.weights)} "
                f"[{self.gpu.source}]; {self.model.name} shape ({self.model.layers} layers, "
                f"hidden {self.model.hidden_size}, intermediate {self.model.intermediate_size},"
                f" {self.model.attention_heads}/{self.model.kv_heads} heads, vocab "
                f"{self.model.vocab_size}) [{self.model.source or 'given'}]; "
                f"{self.kv_bytes_per_token:,} KV bytes per token; fixed overhead "
                f"{self.overhead_ms:g} ms per step (assumed)" + self._more())

    def _more(self) -> str:
        """The provenance of a mixture of experts and of tensor parallelism (empty
        otherwise, so a dense single-GPU roofline reads as it always has)."""
        m, parts = self.model, []
        if m.experts:
            parts.append(f"{m.experts} experts of intermediate {m.moe_intermediate_size}, "
                         f"{m.experts_per_token} per token (FLOPs) and all of them read "
                         f"(bytes)" + (f", shared expert {m.shared_intermediate_size}"
                                       if m.shared_intermediate_size else ""))
        if self.efficiency_source:
            parts.append(f"the peaks scaled: {self.efficiency_source} (still a roofline)")
        if self.tensor_parallel > 1:
            parts.append(f"tensor parallel {self.tensor_parallel}: weights, FLOPs and KV "
                         f"heads split {self.tensor_parallel} ways, 2 all-reduces per layer "
                         f"over {self.gpu.peer_link} [{self.gpu.source}], added")
        return "".join(f"; {part}" for part in parts)

    def parts(self, record: Any) -> dict[str, float]:
        """compute_ms, memory_ms, reload_ms and overhead_ms of one step."""
        cost = step_cost(record)
        if cost.tokens == 0 and cost.reload_tokens == 0:
            return {"compute_ms": 0.0, "memory_ms": 0.0, "reload_ms": 0.0, "comm_ms": 0.0,
                    "overhead_ms": self.overhead_ms}
        pairs = cost.attention_pairs if cost.attention_pairs is not None else cost.context_tokens
        sampled = cost.sampled_seqs if cost.sampled_seqs is not None else cost.decode_seqs
        m = self.model
        flops = (2 * m.active_layer_parameters * cost.tokens
                 + 2 * m.lm_head_parameters * sampled
                 + 4 * m.layers * m.attention_heads * m.head_dim * pairs) / self.tensor_parallel
        memory = self.weight_bytes + self.kv_bytes_per_token * cost.context_tokens
        return {"compute_ms": 1e3 * flops / (self.gpu.flops(self.weights) * self.mfu),
                "memory_ms": 1e3 * memory / (self.gpu.hbm_gbps * 1e9 * self.mbu),
                "reload_ms": 1e3 * cost.reload_tokens * self.kv_bytes_per_token
                / (self.gpu.host_link_gbps * 1e9),
                "comm_ms": 1e3 * cost.tokens * self.allreduce_bytes_per_token
                / (self.gpu.peer_gbps * 1e9),
                "overhead_ms": self.overhead_ms}

    def decode_run_ms(self, num_running: int, context_base: int, count: int) -> np.ndarray:
        """Milliseconds of ``count`` consecutive pure decode steps (an engine DecodeRun):
        step j has ``num_running`` decodes over ``context_base + num_running x j`` context
        tokens, no prefill, no reload; equal to ``step_ms`` of each of those records."""
        r = self.rates
        context = (context_base + num_running * np.arange(count)).astype(np.float64)
        # step_ms's arithmetic in its order, so every element equals it bit for bit
        compute = r.per_token * num_running + r.per_sample * num_running + r.per_pair * context
        return (r.overhead_ms + np.maximum(compute, r.weights + r.per_context * context)
                + r.per_comm * num_running)

    @cached_property
    def rates(self) -> Rates:
        """``step_ms``'s constants (``Rates``), folded once."""
        m, gpu, n = self.model, self.gpu, self.tensor_parallel
        peak, hbm = gpu.flops(self.weights) / 1e3 * n * self.mfu, gpu.hbm_gbps * 1e6 * self.mbu
        return Rates(self.overhead_ms, 2 * m.active_layer_parameters / peak,
                     2 * m.lm_head_parameters / peak,
                     4 * m.layers * m.attention_heads * m.head_dim / peak,
                     self.weight_bytes / hbm, self.kv_bytes_per_token / hbm,
                     self.kv_bytes_per_token / (gpu.host_link_gbps * 1e6),
                     self.allreduce_bytes_per_token / (gpu.peer_gbps * 1e6))

    def kernel_coefficients(self) -> tuple[str, tuple[float, ...]]:
        """("roofline", ``rates``): the compiled loop's vector, in ``Rates``' field order."""
        return "roofline", tuple(self.rates)

    def step_ms(self, record: Any) -> float:
        """Milliseconds of one executed batch (see the module docstring); the same sum as
        ``parts`` with the constants folded once (the engine calls it every step)."""
        scheduled = getattr(record, "scheduled", None)
        if scheduled is None or isinstance(record, StepCost):
            p = self.parts(record)
            return (p["overhead_ms"] + max(p["compute_ms"], p["memory_ms"]) + p["reload_ms"]
                    + p["comm_ms"])
        decodes = record.decode_seqs
        if record.prefill_tokens:
            pairs = 0
            for _, new, before in scheduled:
                pairs += new * before + new * (new + 1) // 2
        else:
            pairs = record.context_tokens        # decodes only: one query over its context
        tokens = record.prefill_tokens + decodes
        if tokens == 0 and record.reload_tokens == 0:
            return self.overhead_ms
        r = self.rates
        compute = (r.per_token * tokens + r.per_sample * (decodes + len(record.first_tokens))
                   + r.per_pair * pairs)
        memory = r.weights + r.per_context * record.context_tokens
        return (r.overhead_ms + max(compute, memory) + r.per_reload * record.reload_tokens
                + r.per_comm * tokens)


def _option(option: str, build: Any, *values: Any) -> Any:
    """``build(*values)``; its ValueError as a CLIError naming ``option``."""
    try:
        return build(*values)
    except ValueError as exc:
        raise CLIError(f"{option}: {exc}") from None


def check_roofline_model(args: Any) -> None:
    """The roofline's model is named: --model-shape, or --model (a usage error naming
    --model otherwise: a TTFT for an unnamed model is never assumed)."""
    if getattr(args, "model_shape", None) or getattr(args, "model_config", None):
        return
    if getattr(args, "kv_shape", None) or getattr(args, "kv_bytes_per_token", None):
        raise CLIError("--latency roofline: --kv-shape/--kv-bytes-per-token give no model "
                       "shape; use --model PRESET or --model-shape")
    if getattr(args, "model", None) is None:
        raise UsageError("--latency roofline needs --model PRESET (or --model-shape): TTFT "
                         "depends on the model, none is assumed")
