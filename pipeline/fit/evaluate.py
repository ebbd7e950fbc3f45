"""How well a fit predicts: per-request predictions, residuals by band and load, held-out error.

``predictions`` simulates every run with the fitted coefficients (queueing included: a
request's predicted TTFT waits for the predicted steps ahead of it) and lists, per request,
measured against predicted TTFT and end-to-end time, the prefix tokens the simulation found
cached against what the server reported, and whether it was held out. ``residuals`` groups
the relative TTFT errors by prompt-length band (powers of two) and load level (the run's
timing). ``holdout_masks`` picks the held-out requests: a seeded FRACTION of the requests,
of the distinct prompt lengths, or of the runs (load levels).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from pipeline.fit.inputs import Run
from pipeline.fit.schedule import EngineModel, Schedule, simulate_run
from pipeline.fit.solve import load_scale

__all__ = ["HOLDOUT_BY", "band", "error_summary", "holdout_masks", "predictions", "residuals"]

HOLDOUT_BY = ("request", "length", "load")


def band(tokens: pl.Expr) -> pl.Expr:
    """Prompt-length band: ``[2^k, 2^(k+1))`` tokens, written like ``4096-8191``."""
    low = (2 ** tokens.cast(pl.Float64).log(2).floor()).cast(pl.Int64)
    return pl.format("{}-{}", low, 2 * low - 1)


def holdout_masks(runs: list[Run], fraction: float, by: str, seed: int) -> list[np.ndarray]:
    """Held-out requests per run (all False for fraction 0)."""
    rng = np.random.default_rng(seed)
    if fraction <= 0:
        return [np.zeros(r.n, dtype=bool) for r in runs]
    if by == "request":
        masks = [rng.random(r.n) < fraction for r in runs]
        if not any(m.any() for m in masks):       # at least one held out
            masks[0][rng.integers(runs[0].n)] = True
        return masks
    if by == "length":
        lengths = np.unique(np.concatenate([r.prompt_tokens for r in runs]))
        chosen = rng.choice(lengths, size=max(1, round(fraction * lengths.size)), replace=False)
        return [np.isin(r.prompt_tokens, chosen) for r in runs]
    chosen = set(rng.choice(len(runs), size=max(1, round(fraction * len(runs))),
                            replace=False).tolist())
    return [np.full(r.n, index in chosen) for index, r in enumerate(runs)]


def predictions(runs: list[Run], engines: list[EngineModel], coefficients: np.ndarray,
                held: list[np.ndarray], per_load: float = 0.0,
                source: Callable[..., Schedule] = simulate_run) -> pl.DataFrame:
    """One row per measured request (see the module docstring); ``per_load``: each run's
    coefficients scaled by ``1 + per_load x`` its load average (``fit --machine-load``);
    ``source``: the schedule (``simulate_run``, the engine simulation, unless told)."""
    frames = []
    for run, engine, out in zip(runs, engines, held):
        schedule = source(run, engine, coefficients * load_scale(run, per_load))
        frames.append(pl.DataFrame({
            "file": run.file, "load": run.label, "line": run.lines,
            "arrival_ms": run.arrival_ms, "prompt_tokens": run.prompt_tokens,
            "sim_cached_tokens": schedule.hit_tokens.astype(np.int64),
            "server_cached_tokens": run.cached_tokens,
            "measured_ttft_ms": run.ttft_ms, "predicted_ttft_ms": schedule.ttft_ms(),
            "measured_e2e_ms": run.e2e_ms, "predicted_e2e_ms": schedule.e2e_ms(),
            "held_out": out}, strict=False))
    frame = pl.concat(frames, how="vertical_relaxed")
    return frame.with_columns(
        server_cached_tokens=pl.when(pl.col("server_cached_tokens") >= 0)
        .then(pl.col("server_cached_tokens")),
        band=band(pl.col("prompt_tokens")),
        error_pct=100 * (pl.col("predicted_ttft_ms") - pl.col("measured_ttft_ms"))
        / pl.col("measured_ttft_ms"))


def residuals(frame: pl.DataFrame) -> pl.DataFrame:
    """Relative TTFT error per (held_out, band, load): n, median, p90 of |error|."""
    return (frame.group_by("held_out", "band", "load")
            .agg(n=pl.len(), median_error_pct=pl.col("error_pct").median(),
                 p90_abs_error_pct=pl.col("error_pct").abs().quantile(0.9, "linear"),
                 min_tokens=pl.col("prompt_tokens").min())
            .sort("held_out", "min_tokens", "load").drop("min_tokens"))


def error_summary(frame: pl.DataFrame) -> dict:
    """p50 and p90 of |relative TTFT error| (percent) over ``frame``'s rows."""
    errors = frame["error_pct"].abs()
    if errors.len() == 0:
        return {"requests": 0, "p50_pct": None, "p90_pct": None}
    return {"requests": errors.len(), "p50_pct": round(float(errors.quantile(0.5, "linear")), 2),
            "p90_pct": round(float(errors.quantile(0.9, "linear")), 2)}
