"""A TTFT model fitted per engine config: milliseconds from tokens served by each tier.

For a request whose prompt has ``gpu`` tokens served from the GPU cache, ``cpu`` reloaded
from the CPU tier and ``miss`` recomputed (context = gpu + cpu + miss tokens)::

    TTFT = overhead + a [miss > 0] + b miss + c miss context + r cpu + g gpu

``a + b n + c n context`` is the recompute cost (``c`` the superlinear attention term),
``r`` the reload cost per CPU-served token (reported as an effective bandwidth, bytes per
token / r, in GB/s) and ``g`` the cost per GPU-hit token. Least squares (numpy) on the
measured requests joined with the simulator's tiers gives each parameter with a standard
error. Parameters whose column is all zero are *not exercised* (e.g. ``r`` in a config with
no CPU tier). A parameter is *identifiable* iff its unit vector lies in the row space of the
design matrix (no null-space direction moves it; ``pipeline.steptime.regression``). When the full model is rank-deficient the
linear model (``a = c = 0``) is tried; when that is rank-deficient too, the model falls back
to the per-tier medians of ``pipeline.ttft.latency`` (what the bundled lab file allows: one
document length, so no per-token cost is identifiable), interpolated by token share for
partial hits::

    TTFT = t_gpu + (t_cpu - t_gpu) cpu / context + (t_miss - t_gpu) miss / context
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from kvlab.kvsim import TIERS
from kvlab.summarize import CONFIGS
from pipeline.base.arguments import plural
from pipeline.steptime.regression import identifiable, scaled_least_squares
from pipeline.ttft.latency import tier_medians

__all__ = ["PARAMETERS", "TOKEN_COLUMNS", "FitError", "TTFTModel", "design_matrix",
           "fit_config", "fit_configs", "tokens_by_tier", "residuals_by_pass",
           "predicted_ttft", "predict_pass_ttft", "model_for_capacity", "measured_requests"]

PARAMETERS = ("overhead_ms", "recompute_fixed_ms", "recompute_ms_per_token",
              "attention_ms_per_token2", "cpu_ms_per_token", "gpu_ms_per_token")
LINEAR = ("overhead_ms", "recompute_ms_per_token", "cpu_ms_per_token", "gpu_ms_per_token")
TOKEN_COLUMNS = ("gpu_tokens", "cpu_tokens", "miss_tokens")
MEDIAN_SE = math.sqrt(math.pi / 2)      # se(median) ~ 1.2533 sd / sqrt(n) for normal noise
GPU_ONLY, OFFLOAD = CONFIGS


class FitError(ValueError):
    """The data cannot give a model (no points, fewer points than parameters)."""


def _columns() -> dict[str, pl.Expr]:
    gpu, cpu, miss = (pl.col(name).cast(pl.Float64) for name in TOKEN_COLUMNS)
    context = gpu + cpu + miss
    return {"overhead_ms": pl.lit(1.0), "recompute_fixed_ms": (miss > 0).cast(pl.Float64),
            "recompute_ms_per_token": miss, "attention_ms_per_token2": miss * context,
            "cpu_ms_per_token": cpu, "gpu_ms_per_token": gpu}


def design_matrix(frame: pl.DataFrame) -> np.ndarray:
    """The design matrix of ``frame`` (columns TOKEN_COLUMNS), one column per PARAMETERS."""
    return frame.select(**_columns()).to_numpy().astype(np.float64).reshape(frame.height, -1)


@dataclass(frozen=True)
class TTFTModel:
    """One config's model: least squares parameters, or per-tier medians (``tier_ms``)."""

    config: str
    method: str                                   # "least squares" or "per-tier medians"
    n: int
    params: dict[str, float] = field(default_factory=dict)
    stderr: dict[str, float] = field(default_factory=dict)
    tier_ms: dict[str, float] = field(default_factory=dict)
    tier_stderr: dict[str, float] = field(default_factory=dict)
    reference_tokens: int | None = None           # the medians' prompt length
    not_exercised: tuple[str, ...] = ()
    not_identifiable: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def expression(self) -> pl.Expr:
        """Predicted TTFT (ms) from the columns gpu_tokens, cpu_tokens, miss_tokens."""
        columns = _columns()
        if self.method == "least squares":
            return pl.sum_horizontal(columns[name] * self.params.get(name, 0.0)
                                     for name in PARAMETERS)
        gpu, cpu, miss = (pl.col(name).cast(pl.Float64) for name in TOKEN_COLUMNS)
        context = gpu + cpu + miss
        share = pl.when(context > 0)
        t = {tier: self.tier_ms.get(tier, math.nan) for tier in TIERS}
        return (t["gpu"] + share.then((t["cpu"] - t["gpu"]) * cpu / context).otherwise(0.0)
                + share.then((t["miss"] - t["gpu"]) * miss / context).otherwise(0.0))

    def unpriced_tiers(self) -> list[str]:
        """Tiers this model has no figure for (no measured request was served by them)."""
        if self.method == "least squares":
            cost = {"gpu": "gpu_ms_per_token", "cpu": "cpu_ms_per_token",
                    "miss": "recompute_ms_per_token"}
            return [tier for tier in TIERS if cost[tier] not in self.params]
        return [tier for tier in TIERS if not math.isfinite(self.tier_ms.get(tier, math.nan))]

    def whole_request_ms(self, tokens: int) -> dict[str, float]:
        """TTFT of a ``tokens``-token request served wholly by each tier."""
        frame = pl.DataFrame({name: [tokens if name == f"{tier}_tokens" else 0
                                     for tier in TIERS] for name in TOKEN_COLUMNS})
        values = frame.select(self.expression()).to_series().to_list()
        return dict(zip(TIERS, values))

    def reload_bandwidth_gbps(self, bytes_per_token: int) -> tuple[float, float] | None:
        """Effective CPU reload bandwidth (GB/s) and its standard error, or None.

        Least squares: bytes per token / r. Medians: bytes of a reference-length request
        / (t_cpu - t_gpu), i.e. whatever a CPU hit costs beyond a GPU hit.
        """
        if self.method == "least squares":
            r, se = self.params.get("cpu_ms_per_token", 0.0), self.stderr.get("cpu_ms_per_token")
            if "cpu_ms_per_token" in self.not_exercised or r <= 0:
                return None
            value = bytes_per_token / (r * 1e-3) / 1e9
            return value, value * (se / r if se is not None else math.nan)
        extra = self.tier_ms.get("cpu", math.nan) - self.tier_ms.get("gpu", math.nan)
        if not extra > 0 or not self.reference_tokens:
            return None
        value = bytes_per_token * self.reference_tokens / (extra * 1e-3) / 1e9
        se = math.hypot(self.tier_stderr.get("cpu", math.nan), self.tier_stderr.get("gpu", math.nan))
        return value, value * se / extra


def tokens_by_tier(attributed: pl.DataFrame) -> pl.DataFrame:
    """The fit input of whole-document attribution (``tier``, ``doc_tokens``): the requests
    with a tier, as config, pass, doc, ttft_ms and TOKEN_COLUMNS."""
    return attributed.filter(pl.col("tier").is_not_null()).select(
        "config", "pass", "doc", "ttft_ms",
        **{f"{tier}_tokens": pl.when(pl.col("tier") == tier).then(pl.col("doc_tokens"))
           .otherwise(0).cast(pl.Int64) for tier in TIERS})


def _least_squares(config: str, x: np.ndarray, y: np.ndarray, names: list[str],
                   notes: list[str], skipped: tuple[str, ...]) -> TTFTModel:
    n, p = x.shape
    coef, se = scaled_least_squares(x, y)
    if se is None:
        se = np.full(p, math.nan)
        notes.append(f"{n} points for {p} parameters: an exact fit, no uncertainty")
    loose = [name for name, value, error in zip(names, coef, se) if abs(error) > abs(value)]
    if loose:
        notes.append(f"poorly determined (standard error above the value): {', '.join(loose)}")
    return TTFTModel(config, "least squares", n, params=dict(zip(names, coef.tolist())),
                     stderr=dict(zip(names, se.tolist())), not_exercised=skipped,
                     notes=tuple(notes))


def _whole_tier(frame: pl.DataFrame) -> pl.Expr:
    """The tier of a request served wholly by one tier (null for a partial hit)."""
    parts = [pl.when(pl.col(f"{tier}_tokens") > 0).then(1).otherwise(0) for tier in TIERS]
    whole = pl.sum_horizontal(parts) == 1
    tier = pl.coalesce(pl.when(pl.col(f"{t}_tokens") > 0).then(pl.lit(t)) for t in TIERS)
    return pl.when(whole).then(tier)


def _medians(config: str, frame: pl.DataFrame, notes: list[str],
             unidentified: tuple[str, ...], skipped: tuple[str, ...]) -> TTFTModel:
    """The per-tier medians fallback (tiers from whole-tier requests)."""
    tiered = frame.with_columns(tier=_whole_tier(frame))
    partial = tiered["tier"].null_count()
    if partial:
        notes.append(f"{partial} partial-hit request(s) left out of the per-tier medians")
    stats = tier_medians(tiered)
    se = {row["tier"]: MEDIAN_SE * row["sd"] / math.sqrt(row["n"]) if row["n"] > 1
          else math.nan for row in stats.iter_rows(named=True)}
    context = tiered.filter(pl.col("tier").is_not_null()).select(
        pl.sum_horizontal(TOKEN_COLUMNS).median()).item()
    notes.append("per-token costs are not identifiable from these requests: falling back to "
                 "the per-tier medians (pipeline.ttft.latency), interpolated by token share")
    return TTFTModel(config, "per-tier medians", frame.height,
                     tier_ms={row["tier"]: row["ttft_ms"] for row in stats.iter_rows(named=True)},
                     tier_stderr=se, reference_tokens=None if context is None else int(context),
                     not_exercised=skipped, not_identifiable=unidentified, notes=tuple(notes))


def fit_config(config: str, frame: pl.DataFrame) -> TTFTModel:
    """Fit one config's requests (columns ttft_ms and TOKEN_COLUMNS); FitError if impossible."""
    if frame.height == 0:
        raise FitError(f"config {config}: no requests to fit")
    x, y = design_matrix(frame), frame["ttft_ms"].to_numpy().astype(np.float64)
    used = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
    skipped = tuple(PARAMETERS[j] for j in range(x.shape[1]) if j not in used)
    names = [PARAMETERS[j] for j in used]
    if frame.height < len(names):
        raise FitError(f"config {config}: {plural(frame.height, 'request')} for {len(names)} "
                       f"parameters "
                       f"({', '.join(names)}): fewer points than parameters")
    ok, rank = identifiable(x[:, used])
    unidentified = tuple(name for name, good in zip(names, ok) if not good)
    notes = [f"not exercised by these requests: {', '.join(skipped)}"] if skipped else []
    if rank == len(used):
        return _least_squares(config, x[:, used], y, names, notes, skipped)
    notes.append(f"not identifiable: {', '.join(unidentified)} (design rank {rank} of "
                 f"{len(used)})")
    lengths = frame.select(pl.sum_horizontal(TOKEN_COLUMNS).unique())
    if lengths.height == 1:
        notes.append(f"every request has {lengths.item():,} prompt tokens: per-token costs "
                     f"cannot be told apart from fixed costs")
    linear = [j for j in used if PARAMETERS[j] in LINEAR]
    if linear != used and identifiable(x[:, linear])[1] == len(linear):
        notes.append("fitted the linear model instead (recompute_fixed_ms = "
                     "attention_ms_per_token2 = 0)")
        model = _least_squares(config, x[:, linear], y, [PARAMETERS[j] for j in linear],
                               notes, skipped)
        return replace(model, not_identifiable=unidentified)
    return _medians(config, frame, notes, unidentified, skipped)


def fit_configs(requests: pl.DataFrame) -> dict[str, TTFTModel]:
    """One model per config in ``requests`` (columns config, ttft_ms, TOKEN_COLUMNS).

    A per-tier medians model missing a tier takes the other modelled config's figure (as
    ``pipeline.ttft.latency.latency_model``) and says so.
    """
    models = {config: fit_config(config, group.drop("config"))
              for (config,), group in requests.group_by("config", maintain_order=True)}
    for config, other in ((GPU_ONLY, OFFLOAD), (OFFLOAD, GPU_ONLY)):
        model, donor = models.get(config), models.get(other)
        if model is None or donor is None or model.method != "per-tier medians":
            continue
        borrowed = {tier: donor.tier_ms[tier] for tier in TIERS
                    if tier not in model.tier_ms and tier in donor.tier_ms}
        if borrowed:
            models[config] = replace(
                model, tier_ms={**model.tier_ms, **borrowed},
                tier_stderr={**model.tier_stderr, **{t: donor.tier_stderr.get(t, math.nan)
                                                     for t in borrowed}},
                notes=model.notes + (f"{', '.join(borrowed)} tier not measured: {other}'s "
                                     f"median used",))
    return models


def model_for_capacity(models: dict[str, TTFTModel], cpu_capacity: int) -> TTFTModel:
    """The config a setup runs as: GPU only (baseline) at CPU 0, offload (lmcache) above."""
    wanted, other = (GPU_ONLY, OFFLOAD) if cpu_capacity == 0 else (OFFLOAD, GPU_ONLY)
    model = models.get(wanted) or models.get(other)
    if model is None:
        raise FitError(f"no model for config {wanted} or {other}")
    return model


def predicted_ttft(models: dict[str, TTFTModel] | TTFTModel) -> pl.Expr:
    """Per-request predicted TTFT (ms) from TOKEN_COLUMNS; with a dict of models, rows with
    ``cpu_capacity`` 0 use the GPU-only config's and the others the offload config's."""
    if isinstance(models, TTFTModel):
        return models.expression()
    return (pl.when(pl.col("cpu_capacity") == 0)
            .then(model_for_capacity(models, 0).expression())
            .otherwise(model_for_capacity(models, 1).expression()))


def residuals_by_pass(requests: pl.DataFrame, models: dict[str, TTFTModel]) -> pl.DataFrame:
    """Predicted vs measured per (config, pass): n, measured/predicted p50 and mean, errors %."""
    frames = [group.with_columns(predicted_ms=models[config].expression())
              for (config,), group in requests.group_by("config", maintain_order=True)
              if config in models]
    pct = lambda p, m: (100 * (pl.col(p) - pl.col(m)) / pl.col(m))  # noqa: E731
    return (pl.concat(frames).group_by("config", "pass", maintain_order=True)
            .agg(n=pl.len(), measured_p50_ms=pl.col("ttft_ms").median(),
                 predicted_p50_ms=pl.col("predicted_ms").median(),
                 measured_mean_ms=pl.col("ttft_ms").mean(),
                 predicted_mean_ms=pl.col("predicted_ms").mean())
            .with_columns(error_p50_pct=pct("predicted_p50_ms", "measured_p50_ms"),
                          error_mean_pct=pct("predicted_mean_ms", "measured_mean_ms")))


def _p50_from_counts(values: list[tuple[float, str]]) -> pl.Expr:
    """Median of a multiset given as (value, count column) pairs, values ascending."""
    total = pl.sum_horizontal(pl.col(column) for _, column in values)

    def nth(k: pl.Expr) -> pl.Expr:
        expr, seen = pl.lit(None, pl.Float64), pl.lit(0)
        chain = None
        for value, column in values:
            seen = seen + pl.col(column)
            chain = (pl.when(k < seen).then(pl.lit(value)) if chain is None
                     else chain.when(k < seen).then(pl.lit(value)))
        return chain.otherwise(expr)

    lower, upper = nth((total - 1) // 2), nth(total // 2)
    return pl.when(total > 0).then((lower + upper) / 2)


def predict_pass_ttft(aggregates: pl.DataFrame, models: dict[str, TTFTModel],
                      tokens: int) -> pl.DataFrame:
    """``aggregates`` (document mode: gpu_hits, cpu_hits, misses, cpu_capacity per row)
    plus predicted_p50_ms and predicted_mean_ms, each document ``tokens`` tokens long.

    Rows at CPU 0 use the GPU-only config's model, the others the offload config's.
    """
    counts = {"gpu": "gpu_hits", "cpu": "cpu_hits", "miss": "misses"}
    exprs = {}
    for side, capacity in (("gpu_only", 0), ("offload", 1)):
        whole = model_for_capacity(models, capacity).whole_request_ms(tokens)
        ordered = sorted((whole[tier], counts[tier]) for tier in TIERS)
        total = pl.sum_horizontal(pl.col(column) for column in counts.values())
        mean = pl.sum_horizontal(pl.col(column) * value for value, column in ordered) / total
        exprs[side] = (_p50_from_counts(ordered), pl.when(total > 0).then(mean))
    offload = pl.col("cpu_capacity") > 0
    return aggregates.with_columns(
        predicted_p50_ms=pl.when(offload).then(exprs["offload"][0])
        .otherwise(exprs["gpu_only"][0]),
        predicted_mean_ms=pl.when(offload).then(exprs["offload"][1])
        .otherwise(exprs["gpu_only"][1]))


def measured_requests(path: str, gpu_capacity: int, cpu_capacity: int,
                      tokens: int, docs: int | None = None) -> pl.DataFrame:
    """A measured JSONL joined with the simulator's tiers (``pipeline.measured``) as fit input:
    config, pass, ttft_ms and TOKEN_COLUMNS (a whole document in its tier, ``doc_tokens``).
    The file is read as ``run --measured`` reads it (``pipeline.ttft.inputs``), ``docs``
    the measured setup's documents (None: the sidecar's or the lab's).

    ValueError (one line) when the file is bad or none of its requests can be matched to a
    simulated config (kvlab models baseline = GPU only and lmcache = GPU + CPU).
    """
    import sys

    from pipeline.ttft.attribution import attribute_tiers
    from pipeline.base.errors import CLIError
    from pipeline.ttft.configs import as_roles
    from pipeline.ttft.inputs import read_measured
    from pipeline.ttft.measured_setup import sidecar_configs

    try:                # run's reader and checks: empty files, documents outside the setup
        frame = read_measured(path, {"docs": docs},
                              lambda line: print(line, file=sys.stderr)).requests
    except CLIError as exc:
        raise ValueError(str(exc)) from None
    configs = sidecar_configs(path)          # a sidecar's per-config models, their roles
    attributed = as_roles(attribute_tiers(frame, gpu_capacity, cpu_capacity, tokens, configs,
                                          path), configs)
    requests = tokens_by_tier(attributed)
    if requests.height == 0:
        found = ", ".join(frame["config"].unique(maintain_order=True).to_list()) or "none"
        raise ValueError(f"{path}: no request can be matched to a simulated scenario (configs "
                         f"found: {found}; kvlab models {' and '.join(CONFIGS)})")
    return requests
