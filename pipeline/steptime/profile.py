"""``--latency profile:DIR``: step time from measured per-operation profiles in vidur's CSV
format (``DIR/mlp.csv``, ``DIR/attention.csv``, and ``DIR/all_reduce.csv`` under tensor
parallelism: microsoft/vidur's ``data/profiling/`` files and its profiler's output).

One batch of T tokens (prefill tokens + decodes) costs::

    overhead + layers x (sum of mlp.csv's per-layer operations at T tokens
                         + attention prefill + attention decode
                         + 2 x all-reduce of T x hidden x 2 bytes, tensor parallel only)
             + emb at T tokens + reloaded tokens x KV bytes per token / host link

The per-layer operations (``LAYER_OPERATIONS``: norms, q/k/v, rope, o, gate/up, activation,
down, residual add) are interpolated linearly in T between the profile's measured token
counts at the model's tensor parallel size (the median per count). Attention is vidur's
features, fitted by least squares to the profile's rows (as vidur's linear predictor):
prefill ``a + b x KV before + c x sum of chunk^2`` over the batch's prefill chunks, decode
``a + b x decodes + c x decodes x mean context`` over its decodes (a one-token chunk is
priced as a decode: one query). The all-reduce is interpolated in bytes. CPU overheads
(scheduler, sampler) are ``--step-overhead-ms``; the LM head is not in vidur's profiles and
is left out. A batch outside the profile's measured range (more tokens, a longer chunk or
context than measured) is refused, never extrapolated silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import polars as pl

from pipeline.base.errors import UsageError
from pipeline.steptime.cost import step_cost

__all__ = ["Profiled", "LAYER_OPERATIONS", "PREFIX", "read_profile"]

PREFIX = "profile:"
LAYER_OPERATIONS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                    "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj",
                    "add")
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")
ATTENTION = ("batch_size", "prefill_chunk_size", "kv_cache_size",
             "time_stats.attn_prefill.median", "time_stats.attn_decode.median")


def _median(column: str) -> str:
    return f"time_stats.{column}.median"


def _read(path: Path, needed: tuple[str, ...], option: str) -> pl.DataFrame:
    if not path.is_file():
        raise UsageError(f"{option}: {path.parent} lacks {path.name} (vidur's profile of it)")
    try:
        frame = pl.read_csv(path)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: {path}: not a CSV ({str(exc).splitlines()[0]})") from None
    missing = [name for name in needed if name not in frame.columns]
    if missing:
        raise UsageError(f"{option}: {path} lacks the column {missing[0]}")
    return frame


def _least_squares(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    design = np.column_stack((np.ones(len(y)), x))
    return np.linalg.lstsq(design, y, rcond=None)[0]


@dataclass(frozen=True)
class Profiled:
    """Step time from a vidur-format profile (module docstring)."""

    directory: str
    layers: int
    hidden: int
    tokens: np.ndarray                  # measured token counts (ascending)
    layer_ms: np.ndarray                # per-layer operations' ms at those counts
    emb_ms: np.ndarray
    prefill: np.ndarray                 # (a, b, c): ms of attention prefill per layer
    decode: np.ndarray                  # (a, b, c): ms of attention decode per layer
    limits: dict                        # most tokens, chunk, KV before, context measured
    allreduce: tuple[np.ndarray, np.ndarray] | None = None     # (bytes, ms)
    overhead_ms: float = 0.0
    reload_ms_per_token: float = 0.0
    label: str = "profile"
    provenance: str = ""
    notes: tuple[str, ...] = field(default=())
    #: the profile's GPU milliseconds x scale (fit --vllm-bench --profile DIR; 1: as measured)
    scale: float = 1.0
    file_kind: ClassVar[str | None] = None

    def _check(self, what: str, value: float, limit: str) -> None:
        if value > self.limits[limit]:
            raise UsageError(f"--latency {PREFIX}{self.directory}: a batch with {what} "
                             f"{value:,.0f} is outside the profile's measured range (at most "
                             f"{self.limits[limit]:,.0f}); not extrapolated")

    def step_ms(self, record: Any) -> float:
        """Milliseconds of one executed batch (module docstring)."""
        cost = step_cost(record)
        tokens = cost.tokens
        if tokens == 0 and cost.reload_tokens == 0:
            return self.overhead_ms
        self._check("tokens", tokens, "tokens")
        scheduled = list(getattr(record, "scheduled", None) or ())
        chunks = [(new, before) for _, new, before in scheduled if new > 1]
        decodes = [before + 1 for _, new, before in scheduled if new == 1]
        if not scheduled:                               # totals only: decodes over context
            decodes = [cost.context_tokens / max(cost.decode_seqs, 1)] * cost.decode_seqs
        attention = 0.0
        if chunks:
            for new, before in chunks:
                self._check("a prefill chunk of", new, "chunk")
                self._check("KV before a chunk of", before, "kv")
            a, b, c = self.prefill
            attention += a + b * sum(before for _, before in chunks) \
                + c * sum(new * new for new, _ in chunks)
        if decodes:
            mean = sum(decodes) / len(decodes)
            self._check("decode context", mean, "context")
            a, b, c = self.decode
            attention += a + b * len(decodes) + c * len(decodes) * mean
        layer = float(np.interp(tokens, self.tokens, self.layer_ms)) + attention
        if self.allreduce is not None:
            size = tokens * self.hidden * 2
            self._check("all-reduce bytes", size, "allreduce")
            layer += 2 * float(np.interp(size, *self.allreduce))
        if self.scale != 1.0:
            return (self.overhead_ms + self.scale * (
                self.layers * layer + float(np.interp(tokens, self.tokens, self.emb_ms)))
                + self.reload_ms_per_token * cost.reload_tokens)
        return (self.overhead_ms + self.layers * layer
                + float(np.interp(tokens, self.tokens, self.emb_ms))
                + self.reload_ms_per_token * cost.reload_tokens)


def read_profile(directory: str, args: Any) -> Profiled:
    """The ``Profiled`` model of ``--latency profile:DIR`` for the model of ``--model`` /
    ``--model-config`` at ``--tensor-parallel-size``; a usage error naming the option, the
    file and the column or the mismatch."""
    from pipeline.sizes.gpus import gpu_preset
    from pipeline.sizes.model_options import kv_dtype, shape_from_args, tensor_parallel
    option = f"--latency {PREFIX}{directory}"
    shape = shape_from_args(args)
    if shape is None:
        raise UsageError(f"{option} needs --model PRESET or --model-config PATH (its layers "
                         f"and shape)")
    tp = tensor_parallel(args)
    folder = Path(directory)
    mlp = _read(folder / "mlp.csv", (*SHAPE, "num_tokens", "num_tensor_parallel_workers",
                                     _median("emb"), *map(_median, LAYER_OPERATIONS)), option)
    theirs = mlp.row(0, named=True)
    ours = {"n_head": shape.attention_heads, "n_kv_head": shape.kv_heads,
            "n_embd": shape.hidden_size,
            "n_expanded_embd": shape.moe_intermediate_size or shape.intermediate_size}
    for name, value in ours.items():
        if theirs[name] != value:
            raise UsageError(f"{option}: mlp.csv profiles {name} {theirs[name]}, the model "
                             f"({shape.name}) has {value}: a profile of another model")
    rows = mlp.filter(pl.col("num_tensor_parallel_workers") == tp)
    if rows.is_empty():
        raise UsageError(f"{option}: mlp.csv has no rows at --tensor-parallel-size {tp}")
    per = (rows.group_by("num_tokens")
           .agg(layer=pl.sum_horizontal(*map(_median, LAYER_OPERATIONS)).median(),
                emb=pl.col(_median("emb")).median()).sort("num_tokens"))
    attention = _read(folder / "attention.csv", (*ATTENTION, "num_tensor_parallel_workers"),
                      option).filter(pl.col("num_tensor_parallel_workers") == tp)
    prefill = attention.filter(pl.col("prefill_chunk_size") > 0)
    decode = attention.filter(pl.col("prefill_chunk_size") == 0)
    if prefill.height < 3 or decode.height < 3:
        raise UsageError(f"{option}: attention.csv needs prefill and decode rows at "
                         f"--tensor-parallel-size {tp} (3 of each at least)")
    limits = {"tokens": float(per["num_tokens"].max()),
              "chunk": float(prefill["prefill_chunk_size"].max()),
              "kv": float(prefill["kv_cache_size"].max()),
              "context": float(decode["kv_cache_size"].max()), "allreduce": np.inf}
    batched = getattr(args, "max_num_batched_tokens", None) or 8192
    if batched > limits["tokens"]:
        raise UsageError(f"{option}: --max-num-batched-tokens {batched} is beyond the "
                         f"profile's {limits['tokens']:,.0f} tokens (not extrapolated): give "
                         f"--max-num-batched-tokens {limits['tokens']:.0f}")
    chunk = prefill["prefill_chunk_size"].to_numpy().astype(float)
    prefill_fit = _least_squares(np.column_stack(
        (prefill["kv_cache_size"].to_numpy(), chunk * chunk)),
        prefill["time_stats.attn_prefill.median"].to_numpy())
    size = decode["batch_size"].to_numpy().astype(float)
    decode_fit = _least_squares(np.column_stack(
        (size, size * decode["kv_cache_size"].to_numpy())),
        decode["time_stats.attn_decode.median"].to_numpy())
    reduce = None
    if tp > 1:
        frame = _read(folder / "all_reduce.csv", ("num_workers", "size",
                                                  "time_stats.all_reduce.median"), option)
        frame = (frame.filter(pl.col("num_workers") == tp).group_by("size")
                 .agg(pl.col("time_stats.all_reduce.median").median()).sort("size"))
        if frame.is_empty():
            raise UsageError(f"{option}: all_reduce.csv has no rows of {tp} workers")
        reduce = (frame["size"].to_numpy().astype(float),
                  frame["time_stats.all_reduce.median"].to_numpy())
        limits["allreduce"] = float(reduce[0][-1])
    gpu = gpu_preset(getattr(args, "gpu_type", None) or "H100")
    kv = shape.kv(kv_dtype(args), tp).bytes_per_token
    return Profiled(
        directory, shape.layers, shape.hidden_size, per["num_tokens"].to_numpy().astype(float),
        per["layer"].to_numpy(), per["emb"].to_numpy(), prefill_fit, decode_fit, limits,
        reduce, float(getattr(args, "step_overhead_ms", 0.0) or 0.0),
        kv / (gpu.host_link_gbps * 1e6),
        f"profile ({folder.name}, {shape.name}, TP {tp})",
        f"measured per-operation profile {folder} (vidur format): {len(per)} token counts "
        f"1..{limits['tokens']:,.0f} interpolated, attention fitted to {prefill.height} "
        f"prefill and {decode.height} decode rows, "
        + (f"all-reduce of {tp} workers interpolated, " if reduce is not None else "")
        + f"{shape.layers} layers of {shape.name}; overhead {getattr(args, 'step_overhead_ms', 0)}"
        f" ms per step (assumed); LM head not profiled (left out); reloads over the "
        f"{gpu.name} host link")
