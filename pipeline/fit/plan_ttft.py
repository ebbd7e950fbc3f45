"""TTFT from a fitted step-time file, for ``plan --latency FILE``, and when it is backed.

``StepTimeTTFT`` prices one request alone on the engine (no queueing, as plan's other TTFT
model): its ``gpu_tokens + cpu_tokens`` cached prefix is kept, the CPU-served part reloaded
(``reload_token_ms`` each), and the ``miss_tokens`` (at least one: an engine recomputes the
last prompt token to sample) prefilled in chunks of ``chunk`` tokens (the fitted engine
model's ``max_num_batched_tokens``). With ``k = ceil(m / chunk)`` chunks after ``h`` cached
tokens, the chunks attend ``k h + chunk k (k - 1) / 2 + m`` context tokens in all, so

    TTFT = k fixed + m prefill + (k h + chunk k (k-1)/2 + m) context + cpu reload
           + (m h + m (m + 1) / 2) attention_pair

(the query-key pairs of the new tokens do not depend on the chunking)
with the fitted coefficients in ms: the linear step form (``steptime``'s ``TERMS``) of the
request's steps' totals (``expression``: a polars expression on plan's token columns). A ``fit --machine-load`` file's coefficients are an idle machine's; ``describe`` says so.
``fitted_problem`` says why a fitted file cannot back a workload's TTFT: a
different served model, a different KV size per token, or prompts outside the fitted
``prompt_tokens_range``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

import polars as pl

from pipeline.steptime.fitted_file import TERMS, read_fitted

__all__ = ["StepTimeTTFT", "fitted_problem", "load_step_time_ttft"]


@dataclass(frozen=True)
class StepTimeTTFT:
    """A fitted step-time file as plan's per-request TTFT model (see the module docstring)."""

    coefficients: dict[str, float]
    chunk: int
    source: str
    served_model: str | None
    kv_bytes_per_token: int | None
    prompt_tokens_range: tuple[int, int]
    config: str = "fitted step time"
    method: str = "step time"
    #: ``machine_load.per_load_average`` of a ``fit --machine-load`` file (0: none): the
    #: coefficients are then an idle machine's
    per_load: float = 0.0

    def expression(self) -> pl.Expr:
        """Predicted TTFT (ms) from gpu_tokens, cpu_tokens, miss_tokens."""
        c = self.coefficients
        gpu, cpu, miss = (pl.col(n).cast(pl.Float64) for n in ("gpu_tokens", "cpu_tokens",
                                                                 "miss_tokens"))
        context = gpu + cpu + miss
        m = pl.max_horizontal(miss, pl.min_horizontal(context, pl.lit(1.0)))
        h = context - m
        k = (m / self.chunk).ceil()                # the request's steps' totals:
        totals = {"one": k, "prefill_tokens": m, "decode_seqs": pl.lit(0.0),
                  "context_tokens": k * h + self.chunk * k * (k - 1) / 2 + m,
                  "reload_tokens": pl.min_horizontal(cpu, h),
                  "attention_pairs": m * h + m * (m + 1) / 2}
        return reduce(operator.add, (totals[q] * c.get(name, 0.0) for name, q in TERMS))

    def unpriced_tiers(self) -> list[str]:
        return []

    def monotone(self) -> bool:
        """True when moving a prompt token from recompute to a cache never raises TTFT: the
        pairs, prefill and chunk terms only fall, but the context term can rise (a later
        first chunk attends more), so it must be 0, and a reload must cost no more than a
        prefilled token."""
        c = self.coefficients
        return c["context_token_ms"] == 0 and c["reload_token_ms"] <= c["prefill_token_ms"]

    def describe(self) -> str:
        lo, hi = self.prompt_tokens_range
        idle = (f", an idle machine's step times: x (1 + {self.per_load:.3g} x load average) "
                f"on a loaded one" if self.per_load else "")
        return (f"fitted step time ({self.source}: {self.served_model}, prompts {lo}..{hi} "
                f"tokens, one request at a time{idle})")


def load_step_time_ttft(path: str | Path) -> StepTimeTTFT:
    """The fitted file at ``path``; ValueError (one line naming it) when it is not one."""
    path = Path(path)
    document = read_fitted(path)
    chunk = (document.get("engine_model") or {}).get("max_num_batched_tokens")
    if chunk is None:
        raise ValueError(f"{path}: engine_model.max_num_batched_tokens is missing")
    lo, hi = document["prompt_tokens_range"]
    per_load = (document.get("machine_load") or {}).get("per_load_average") or 0.0
    return StepTimeTTFT({k: float(v or 0.0) for k, v in document["coefficients"].items()}, chunk,
                        path.name, document.get("served_model"),
                        document.get("kv_bytes_per_token"), (lo, hi),
                        per_load=float(per_load))


def fitted_problem(model: StepTimeTTFT, served_model: str | None,
                   kv_bytes_per_token: int | None, prompt_tokens: pl.Series) -> str | None:
    """Why ``model`` cannot back TTFT for this workload (None when it can)."""
    if served_model is not None and model.served_model not in (None, served_model):
        return (f"{model.source} was fitted on {model.served_model}, not {served_model}")
    if (kv_bytes_per_token is not None and model.kv_bytes_per_token is not None
            and kv_bytes_per_token != model.kv_bytes_per_token):
        return (f"{model.source} was fitted with {model.kv_bytes_per_token:,} KV bytes per "
                f"token, this plan sizes {kv_bytes_per_token:,}")
    lo, hi = model.prompt_tokens_range
    outside = int(((prompt_tokens < lo) | (prompt_tokens > hi)).sum())
    if outside:
        return (f"{outside} of {prompt_tokens.len()} prompts lie outside the {lo}..{hi} "
                f"tokens {model.source} was fitted on")
    return None
