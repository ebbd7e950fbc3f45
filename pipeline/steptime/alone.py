"""TTFT of a request alone on the engine under a step-time model (``request_ttft``) and the
one check of a latency model that every planner makes (``plan_with_latency``).

The request keeps its cached prefix (``gpu + cpu`` tokens, the CPU part reloaded) and
prefills the ``miss`` tokens (at least one: the engine recomputes the last prompt token) in
chunks of ``chunk``, the last chunk sampling.
With ``k = ceil(m / chunk)`` chunks after ``h`` cached tokens its steps' totals are: one k,
prefill m, context ``k h + chunk k (k-1)/2 + m``, reload ``min(cpu, h)``, attention pairs
``m h + m (m+1)/2``; the fitted linear form (``TERMS``) is a closed form of them, any other
model is priced chunk by chunk by its ``step_ms``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl

from pipeline.base.errors import CLIError
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.fitted import Linear
from pipeline.base.fitted_step_time import TERMS

__all__ = ["request_ttft", "alone_ms", "AloneTTFT", "plan_with_latency"]

TOKEN_COLUMNS = ("gpu_tokens", "cpu_tokens", "miss_tokens")


def request_ttft(model: StepTimeModel, chunk: int) -> pl.Expr:
    """TTFT (ms) of a request alone under ``model``, from TOKEN_COLUMNS (module docstring)."""
    if isinstance(model, Linear):
        return _linear_ttft(model.coefficients, chunk)
    return pl.struct(*TOKEN_COLUMNS).map_batches(
        lambda tokens: pl.Series(alone_ms(model, *tokens.struct.unnest(), chunk)),
        return_dtype=pl.Float64)


def _linear_ttft(c: Any, chunk: int) -> pl.Expr:
    gpu, cpu, miss = (pl.col(n).cast(pl.Float64) for n in TOKEN_COLUMNS)
    context = gpu + cpu + miss
    m = pl.max_horizontal(miss, pl.min_horizontal(context, pl.lit(1.0)))
    h = context - m
    k = (m / chunk).ceil()                             # the request's steps' totals:
    totals = {"one": k, "prefill_tokens": m, "decode_seqs": pl.lit(0.0),
              "context_tokens": k * h + chunk * k * (k - 1) / 2 + m,
              "reload_tokens": pl.min_horizontal(cpu, h),
              "attention_pairs": m * h + m * (m + 1) / 2}
    return reduce(operator.add, (totals[q] * c.get(name, 0.0) for name, q in TERMS))


def alone_ms(model: StepTimeModel, gpu: Any, cpu: Any, miss: Any, chunk: int) -> np.ndarray:
    """TTFT of each request alone (token counts per tier), its chunks priced one by one by
    ``model.step_ms`` (as the engine's records: the roofline's and the fitted form's fast
    path)."""
    out = np.zeros(len(miss))
    for row, (g, c, m) in enumerate(zip(map(int, gpu), map(int, cpu), map(int, miss))):
        context = g + c + m
        m = max(m, min(context, 1))
        before, reload = context - m, min(c, context - m)
        while m > 0:
            new = min(chunk, m)
            m -= new
            out[row] += model.step_ms(SimpleNamespace(
                scheduled=[(0, new, before)], prefill_tokens=new, decode_seqs=0,
                context_tokens=before + new, reload_tokens=reload,
                first_tokens=[] if m else [0]))
            before, reload = before + new, 0
    return out


@dataclass(frozen=True)
class AloneTTFT:
    """A step-time model as plan's per-request TTFT model (``request_ttft``)."""

    model: StepTimeModel
    chunk: int

    def expression(self) -> pl.Expr:
        """Predicted TTFT (ms) from gpu_tokens, cpu_tokens, miss_tokens."""
        return request_ttft(self.model, self.chunk)

    def monotone(self) -> bool:
        """True when moving a prompt token from recompute to a cache never raises TTFT (False:
        unknown, plan scans). The linear form's pairs, prefill and chunk terms only fall, but
        its context term can rise (a later first chunk attends more): 0 it must be, and a
        reload must cost no more than a prefilled token."""
        c = self.model.coefficients if isinstance(self.model, Linear) else {}
        return bool(c) and c["context_token_ms"] == 0 and \
            c["reload_token_ms"] <= c["prefill_token_ms"]


def plan_with_latency(model: StepTimeModel, kv_bytes_per_token: int | None, prompts: Any,
                      *, served_model: str | None = None,
                      ttft_target: str | None = None) -> str | None:
    """Plan with ``model``'s TTFT: None when it backs a plan of ``served_model`` at
    ``kv_bytes_per_token`` over ``prompts`` (lengths), else why not (the plan's figures are
    then hit ratios only; with ``ttft_target``, the option of a TTFT target, a CLIError)."""
    withheld = _problem(model, kv_bytes_per_token, prompts, served_model)
    if withheld is not None and ttft_target is not None:
        raise CLIError(f"{ttft_target}: TTFT withheld: {withheld}; ask for "
                       f"--target-hit-ratio instead")
    return withheld


def _problem(model: StepTimeModel, kv_bytes_per_token: int | None, prompts: Any,
             served_model: str | None) -> str | None:
    fitted = isinstance(model, Linear)
    source = model.source if fitted else model.label
    if fitted and served_model is not None and model.served_model not in (None, served_model):
        return f"{source} was fitted on {model.served_model}, not {served_model}"
    theirs = getattr(model, "kv_bytes_per_token", None)
    if kv_bytes_per_token is not None and theirs is not None and theirs != kv_bytes_per_token:
        return (f"{source} {'was fitted' if fitted else 'prices steps'} with {theirs:,} KV "
                f"bytes per token, this plan sizes {kv_bytes_per_token:,}")
    outside, count = model.outside(prompts) if fitted else (0, 0)
    if outside:
        lo, hi = model.prompt_tokens_range
        return f"{outside} of {count} prompts lie outside the {lo}..{hi} tokens {source} was " \
               f"fitted on"
    return None
