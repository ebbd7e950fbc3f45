"""TTFT of a request alone on the engine under a model, and planning with a latency model.

``request_ttft(model, chunk)`` is the one TTFT of a request alone (no queueing): a polars
expression on ``gpu_tokens``, ``cpu_tokens`` and ``miss_tokens``. A request-level TTFT
model (the lab's per-tier regressions, ``pipeline.ttft.model``) is its own ``expression``.
For a step-time model the request keeps its ``gpu + cpu`` cached prefix, reloads the
CPU-served part, and prefills the ``miss`` tokens (at least one: an engine recomputes the
last prompt token to sample) in chunks of ``chunk`` tokens, the last one sampling the first
token. With ``k = ceil(m / chunk)`` chunks after ``h`` cached tokens the steps' totals are

    one k, prefill m, context k h + chunk k (k-1)/2 + m, reload min(cpu, h),
    attention pairs m h + m (m + 1) / 2

so the fitted linear form (``Linear``, ``fitted_file.TERMS``) is a closed form of them; any
other model (the roofline, a registered one) is priced step by step by its ``step_ms``.

``plan_with_latency`` is every planner's one check of a latency model (``--latency``, read by
``registry.step_time_model``): ``backing_problem`` says why its TTFT cannot back a plan
(another served model, another KV size per token, prompts outside a fitted range), and a
TTFT target is then refused.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
import polars as pl

from pipeline.base.errors import CLIError
from pipeline.steptime.cost import StepCost, StepTimeModel
from pipeline.steptime.fitted import Linear
from pipeline.steptime.fitted_file import TERMS

__all__ = ["request_ttft", "AloneTTFT", "backing_problem", "plan_with_latency"]

TOKEN_COLUMNS = ("gpu_tokens", "cpu_tokens", "miss_tokens")


def request_ttft(model: Any, chunk: int | None = None) -> pl.Expr:
    """TTFT (ms) of a request alone under ``model`` (see the module docstring), prefilled in
    chunks of ``chunk`` tokens (a step-time model needs it)."""
    if hasattr(model, "expression"):                  # a request-level TTFT model
        return model.expression()
    if isinstance(model, Linear):
        return _linear_ttft(model.coefficients, chunk)
    return pl.struct(*TOKEN_COLUMNS).map_batches(
        lambda tokens: pl.Series(_stepped_ttft(model, tokens.struct.unnest(), chunk)),
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


def _stepped_ttft(model: StepTimeModel, tokens: pl.DataFrame, chunk: int) -> np.ndarray:
    """Each row's chunks as ``StepCost`` records, summed by ``model.step_ms``."""
    out = np.zeros(tokens.height)
    for row, (gpu, cpu, miss) in enumerate(tokens.iter_rows()):
        context = gpu + cpu + miss
        m = max(miss, min(context, 1))
        before, reload = context - m, min(cpu, context - m)
        while m > 0:
            new = min(chunk, m)
            m -= new
            out[row] += model.step_ms(StepCost(new, 0, before + new, reload,
                                               new * before + new * (new + 1) // 2,
                                               0 if m else 1))
            before, reload = before + new, 0
    return out


@dataclass(frozen=True)
class AloneTTFT:
    """A step-time model as plan's per-request TTFT model (``request_ttft``)."""

    model: StepTimeModel
    chunk: int
    config: str = "step time"
    method: str = "step time"

    def expression(self) -> pl.Expr:
        """Predicted TTFT (ms) from gpu_tokens, cpu_tokens, miss_tokens."""
        return request_ttft(self.model, self.chunk)

    def unpriced_tiers(self) -> list[str]:
        return []

    def monotone(self) -> bool:
        """True when moving a prompt token from recompute to a cache never raises TTFT
        (unknown for a model other than the fitted linear form: False, plan scans). For the
        linear form the pairs, prefill and chunk terms only fall, but the context term can
        rise (a later first chunk attends more), so it must be 0, and a reload must cost no
        more than a prefilled token."""
        c = getattr(self.model, "coefficients", None)
        return (isinstance(self.model, Linear) and c["context_token_ms"] == 0
                and c["reload_token_ms"] <= c["prefill_token_ms"])

    def describe(self) -> str:
        describe = getattr(self.model, "describe", None)
        return describe() if describe is not None else (
            f"{self.model.label}, chunks of {self.chunk} tokens, one request at a time")

    def fields(self, path: str) -> dict:
        """The JSON of the model in plan's document."""
        if not isinstance(self.model, Linear):
            return {"path": path, "label": self.model.label,
                    "provenance": self.model.provenance, "chunk": self.chunk}
        m = self.model
        return {"path": path, "served_model": m.served_model,
                "kv_bytes_per_token": m.kv_bytes_per_token,
                "prompt_tokens_range": list(m.prompt_tokens_range), "chunk": self.chunk,
                "coefficients": dict(m.coefficients)}


def backing_problem(model: StepTimeModel, kv_bytes_per_token: int | None, prompts: Any,
                    served_model: str | None = None) -> str | None:
    """Why ``model``'s TTFT cannot back a plan of ``served_model`` at ``kv_bytes_per_token``
    over ``prompts`` (lengths); None when it can."""
    source = getattr(model, "source", model.label)
    fitted_on = getattr(model, "served_model", None)
    if served_model is not None and fitted_on not in (None, served_model):
        return f"{source} was fitted on {fitted_on}, not {served_model}"
    theirs = getattr(model, "kv_bytes_per_token", None)
    if kv_bytes_per_token is not None and theirs is not None and theirs != kv_bytes_per_token:
        verb = "was fitted" if isinstance(model, Linear) else "prices steps"
        return (f"{source} {verb} with {theirs:,} KV bytes per token, this plan sizes "
                f"{kv_bytes_per_token:,}")
    outside, count = (model.outside(prompts) if isinstance(model, Linear) else (0, 0))
    if outside:
        lo, hi = model.prompt_tokens_range
        return f"{outside} of {count} prompts lie outside the {lo}..{hi} tokens {source} was " \
               f"fitted on"
    return None


def plan_with_latency(model: StepTimeModel, kv_bytes_per_token: int | None, prompts: Any,
                      *, served_model: str | None = None,
                      ttft_target: str | None = None) -> str | None:
    """Plan with ``model``'s TTFT: None when it backs the plan, else why not
    (``backing_problem``; the plan's figures are then hit ratios only). With
    ``ttft_target`` (the option of a TTFT target) a reason is a CLIError naming it."""
    withheld = backing_problem(model, kv_bytes_per_token, prompts, served_model)
    if withheld is not None and ttft_target is not None:
        raise CLIError(f"{ttft_target}: TTFT withheld: {withheld}; ask for "
                       f"--target-hit-ratio instead")
    return withheld
