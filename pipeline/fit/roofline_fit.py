"""``fit --vllm-bench``: the roofline's efficiency factors from measured requests.

``peak_form(args)`` builds the roofline of the options (``--model``/``--model-config``/
``--model-shape``, ``--gpu-type``, ``--tensor-parallel-size``, ``--weights``,
``--step-overhead-ms``) at its peaks, with ``--mfu-prefill``/``--mbu-decode`` (a number,
or given alone: the GPU's profiled factor) held instead of fitted. ``fit_factors`` runs
``fit_runs`` on that form (``pipeline.fit.roofline_form``); a factor the requests cannot
identify (no simulated step on its roof) or whose least squares is not positive is held at
its default (the GPU's profiled factor, else the peak) and the other refitted, saying so.
``efficiency_document`` is the JSON ``--latency FILE`` reads
(``steptime.efficiency.roofline_from_fit``). ``bench_figures`` compares each run's measured
median and p90 TTFT and TPOT (as vllm bench serve computes them) with the fit's.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import polars as pl

from pipeline.base.errors import CLIError, UsageError
from pipeline.fit.inputs import Run
from pipeline.fit.roofline_form import SCALES, RooflineForm
from pipeline.fit.schedule import EngineModel
from pipeline.fit.solve import Fit, FitError, fit_runs
from pipeline.steptime.efficiency import EFFICIENCY_KIND, FACTORS, efficiency_of
from pipeline.steptime.roofline import PROFILED, Roofline

__all__ = ["peak_form", "bench_engine", "fit_factors", "hold_lost", "check_scales",
           "factors_of", "factor_lines", "efficiency_document", "bench_figures",
           "bench_fields", "bench_provenance", "schedule_of"]


def peak_form(args: argparse.Namespace, option: str = "--vllm-bench") -> RooflineForm:
    """The options' roofline at its peaks, factors given as options held (module
    docstring); usage errors name the option (``option``: the input fitted)."""
    if not any(getattr(args, key, None) for key in ("model", "model_shape", "model_config")):
        raise UsageError(f"{option} needs --model PRESET (or --model-shape, --model-config):"
                         " the roofline fitted is the model's, none is assumed")
    options = argparse.Namespace(**{**vars(args), "mfu_prefill": 1.0, "mbu_decode": 1.0})
    peak = Roofline.from_args(options)
    held = []
    for index, (key, option) in enumerate(FACTORS):
        value = getattr(args, key, None)
        if value == PROFILED:
            try:
                value, _ = efficiency_of(peak.gpu, index)
            except ValueError as exc:
                raise UsageError(f"{option}: {exc}") from None
        held.append(None if value is None else 1.0 / float(value))
    if all(h is not None for h in held):
        raise UsageError("--mfu-prefill and --mbu-decode both given: nothing left to fit "
                         "(give at most one, to hold it)")
    return RooflineForm(peak, tuple(held))


def bench_engine(args: argparse.Namespace, gpu_memory_gb: float | None, gpu_name: str
                 ) -> EngineModel:
    """The scheduler simulated: the options, else vLLM 0.33.0's defaults for the OpenAI
    server on that GPU (``vllm/engine/arg_utils.py``,
    ``_set_default_max_num_seqs_and_batched_tokens_args``: 16,384 tokens from 160 GiB,
    8,192 from 70 GiB except an A100, else 2,048; 1,024 sequences from 70 GiB, else 256)."""
    gib = (gpu_memory_gb or 0) * 1e9 / 2**30
    big = gib >= 70 and "a100" not in gpu_name.lower()
    tokens = 16384 if gib >= 160 else 8192 if big else 2048
    return EngineModel(max_num_seqs=args.max_num_seqs or (1024 if big else 256),
                       max_num_batched_tokens=args.max_num_batched_tokens or tokens,
                       block_size=args.block_size or 16)


def _default_scale(form: RooflineForm, index: int) -> tuple[float, str]:
    """(scale, where it comes from) a factor falls back to when not fitted."""
    try:
        value, source = efficiency_of(form.peak.gpu, index)
        return 1.0 / value, f"the GPU's profiled factor ({source.split(' (')[0]})"
    except ValueError:
        return 1.0, "the peak (no profile for this GPU)"


def hold_lost(form: RooflineForm, lost: dict[str, str], why: dict[str, str]) -> RooflineForm:
    """``form`` with each factor of ``lost`` (name -> why the data lost it) held at its
    default (the GPU's profiled factor, else the peak), ``why`` updated; CLIError when no
    factor is left to fit."""
    scales = list(form.held)
    for name, reason in lost.items():
        index = SCALES.index(name)
        scales[index], default = _default_scale(form, index)
        why[FACTORS[index][0]] = f"{reason}: held at {default}"
    if all(s is not None for s in scales):
        raise CLIError("fit: the requests identify neither factor ("
                       + "; ".join(why.values()) + ")")
    return RooflineForm(form.peak, tuple(scales))


def check_scales(coefficients: dict[str, float]) -> None:
    """CLIError when a fitted factor comes out above 1 (faster than the GPU's peaks)."""
    for name, value in coefficients.items():
        if value < 1:
            option = FACTORS[SCALES.index(name)][1]
            raise CLIError(f"fit: {option} comes out {1 / value:.3g}: the measured steps are "
                           f"faster than the roofline at the GPU's peaks; check --model, "
                           f"--gpu-type, --tensor-parallel-size and --weights")


def fit_factors(runs: list[Run], engines: list[EngineModel], train: list[np.ndarray],
                held: list[np.ndarray], form: RooflineForm, use_e2e: bool,
                absolute: bool = False) -> tuple[Fit, RooflineForm, dict[str, str]]:
    """(the fit, the form it ended on, why each factor not fitted was held) (module
    docstring); ``absolute``: least absolute errors (``fit --loss absolute``)."""
    why: dict[str, str] = {}
    while True:
        try:
            fit = fit_runs(runs, engines, train, use_e2e=use_e2e, held=held, form=form,
                           absolute=absolute)
        except FitError as exc:
            raise CLIError(f"fit: {exc}") from None
        lost = {name: fit.unidentified.get(name) or "its least squares is not positive"
                for name in form.names if name in fit.unidentified or name in fit.clamped}
        if not lost:
            break
        form = hold_lost(form, lost, why)
    check_scales(fit.coefficients)
    return fit, form, why


def factors_of(fit: Fit, form: RooflineForm, given: argparse.Namespace,
               why: dict[str, str]) -> dict[str, dict]:
    """Per factor (``mfu_prefill``, ``mbu_decode``): value, stderr (1/scale's, by the delta
    method), whether fitted, and why not."""
    out = {}
    for index, (key, option) in enumerate(FACTORS):
        name, scale = SCALES[index], form.held[index]
        if scale is None:
            value, se = fit.coefficients[name], fit.stderr[name]
            se = None if not math.isfinite(se) else float(f"{se / value**2:.2g}")
            out[key] = {"value": float(f"{1.0 / value:.4g}"), "fitted": True, "stderr": se}
        else:
            out[key] = {"value": float(f"{1.0 / scale:.4g}"), "fitted": False, "stderr": None,
                        "why": why.get(key, f"held at {option} {getattr(given, key)}")}
    return out


def factor_lines(factors: dict[str, dict]) -> list[str]:
    """``factors_of``' factors as printed: value, standard error, fitted or why not."""
    return [f"  {option:<14} {factors[key]['value']:.4g}"
            + ("" if factors[key]["stderr"] is None else f" ± {factors[key]['stderr']:.3g}")
            + (" (fitted)" if factors[key]["fitted"] else
               f" (not fitted: {factors[key]['why']})") for key, option in FACTORS]


#: the fit's loss, in words (``absolute``: ``fit --loss absolute``, --vllm-bench's default)
LOSSES = {False: "weighted least squares (relative errors)",
          True: "least absolute relative errors (reweighted least squares; standard errors of "
                "its last weighted solve)"}


def schedule_of(engine: EngineModel) -> str:
    """The simulated scheduler, in words."""
    return (f"pipeline.engine, vLLM v1's scheduler: max_num_seqs {engine.max_num_seqs}, "
            f"max_num_batched_tokens {engine.max_num_batched_tokens}")


def bench_provenance(model: str, overhead_ms: float, engine: EngineModel, fit: Fit,
                     requests: int, absolute: bool) -> str:
    """How a --vllm-bench fit was obtained, in words (``model``: what was fitted)."""
    return (f"fitted: {LOSSES[absolute]} of {requests} measured requests' TTFT and "
            f"first-token-to-end times (vllm bench serve --save-detailed) on their simulated "
            f"schedule ({schedule_of(engine)}), {model} with {overhead_ms:g} ms overhead per "
            f"step (assumed), {fit.iterations} iteration(s)"
            + ("" if fit.converged else ", not converged"))


def bench_fields(runs: list[Run], sources: list[str], engine: EngineModel, fit: Fit,
                 holdout: dict, figures: list[dict]) -> dict:
    """What every --vllm-bench output records beside its fitted values: ``source``,
    ``bench`` (each result's setup), ``engine_model``, ``holdout``, ``fit``, ``figures``."""
    return {"source": sources,
            "bench": [dict(r.sidecar.get("bench", {}), file=r.file, requests=r.n,
                           failed_requests=r.failures) for r in runs],
            "engine_model": engine.__dict__, "holdout": holdout,
            "fit": {"rows": fit.rows, "iterations": fit.iterations,
                    "converged": fit.converged, "notes": fit.notes},
            "figures": figures}


def efficiency_document(*, factors: dict, form: RooflineForm, provenance: str,
                        common: dict) -> dict:
    """The fitted factors' JSON (kind ``roofline-efficiency``, version 1)."""
    peak = form.peak
    return {"kind": EFFICIENCY_KIND, "version": 1, **factors,
            "step_overhead_ms": peak.overhead_ms,
            "fitted_on": {"gpu": peak.gpu.name, "model": peak.model.name,
                          "tensor_parallel": peak.tensor_parallel, "weights": peak.weights,
                          "kv_cache_dtype": peak.kv_dtype, "roofline": peak.provenance},
            "provenance": provenance, **common}


def bench_figures(runs: list[Run], frame: pl.DataFrame) -> pl.DataFrame:
    """Per run: measured against predicted median and p90 TTFT and TPOT (vllm bench serve's
    definitions: TPOT = (latency - TTFT) / (output tokens - 1), requests of 2+ tokens;
    linear percentiles)."""
    outputs = np.concatenate([r.max_tokens for r in runs])
    labels = np.concatenate([[f"{r.file}: {r.label}"] * r.n for r in runs])
    data = frame.with_columns(run=pl.Series(labels), output_tokens=pl.Series(outputs))
    tpot = {side: pl.when(pl.col("output_tokens") > 1).then(
        (pl.col(f"{side}_e2e_ms") - pl.col(f"{side}_ttft_ms")) / (pl.col("output_tokens") - 1))
        for side in ("measured", "predicted")}
    rows = []
    for metric, columns in (("TTFT", ("measured_ttft_ms", "predicted_ttft_ms")),
                            ("TPOT", (tpot["measured"], tpot["predicted"]))):
        measured, predicted = (pl.col(c) if isinstance(c, str) else c for c in columns)
        for q, name in ((0.5, "median"), (0.9, "p90")):
            rows.append(data.group_by("run", maintain_order=True).agg(
                figure=pl.lit(f"{name} {metric} ms"),
                measured=measured.quantile(q, "linear"),
                predicted=predicted.quantile(q, "linear"),
                held_out=pl.col("held_out").all()))
    table = pl.concat(rows).with_columns(
        error_pct=100 * (pl.col("predicted") - pl.col("measured")) / pl.col("measured"))
    return table.sort("run", maintain_order=True)
