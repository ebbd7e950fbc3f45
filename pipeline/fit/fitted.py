"""The fitted step-time JSON (the engine contract's ``fitted-step-time``, version 1).

``fitted_document`` builds it from a fit: ``kind``, ``version``, ``engine``, ``served_model``,
``kv_bytes_per_token``, ``coefficients`` and ``stderr`` (``steptime.fitted_file.TERMS``, in
ms), ``unidentified`` (names) with ``unidentified_why``, ``held_at_zero`` (coefficients whose
least-squares value came out negative), ``prompt_tokens_range`` (the fitted prompt lengths:
the range the figures are backed on), ``source`` (files), ``holdout``, ``engine_model`` (the
scheduler settings simulated), ``provenance``, the residuals and, with ``fit
--machine-load``, ``machine_load`` (the step-time scale per unit of load average; the
coefficients are then an idle machine's), with ``fit --speed-probe``, ``speed_probe`` (each
run's measured speed; the coefficients are then the reference probe's machine's). Read by ``steptime.fitted_file.read_fitted``."""

from __future__ import annotations

import math

from pipeline.fit.schedule import FEATURES
from pipeline.fit.solve import Fit
from pipeline.base.fitted_step_time import FITTED_KIND, VERSION

__all__ = ["fitted_document"]


def _number(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.6g}")


def fitted_document(fit: Fit, *, engine: str, served_model: str | None,
                    kv_bytes_per_token: int | None, prompt_range: tuple[int, int],
                    sources: list[str], holdout: dict, engine_model: dict, schedule_source: str,
                    residuals: list[dict], requests: int,
                    machine_loads: list[float] = (), speed_probe: dict | None = None) -> dict:
    """The fitted JSON (see the module docstring)."""
    extra = {} if not fit.machine_load else {"machine_load": {
        "per_load_average": _number(fit.per_load), "stderr": _number(fit.per_load_stderr),
        "covariate": "the machine's 1-minute load average when each run started (its "
                     "sidecar's sessions[].load_average[0])",
        "fitted_loads": [float(v) for v in machine_loads],
        "meaning": "step times = (1 + per_load_average x load average) x the linear model of "
                   "coefficients: the coefficients are an idle machine's (load 0)"}}
    if speed_probe:
        extra["speed_probe"] = speed_probe
    return {
        "kind": FITTED_KIND, "version": VERSION, "engine": engine, "served_model": served_model,
        "kv_bytes_per_token": kv_bytes_per_token,
        "coefficients": {name: _number(fit.coefficients[name]) or 0.0 for name in FEATURES},
        "stderr": {name: _number(fit.stderr[name]) for name in FEATURES},
        "unidentified": [name for name in FEATURES if name in fit.unidentified],
        "unidentified_why": {name: fit.unidentified[name] for name in FEATURES
                             if name in fit.unidentified},
        "held_at_zero": list(fit.clamped),
        "prompt_tokens_range": [int(prompt_range[0]), int(prompt_range[1])],
        "source": sources, "holdout": holdout, "engine_model": engine_model,
        "provenance": (f"fitted: weighted least squares (relative errors) of {requests} "
                       f"measured requests' TTFT and end times on their simulated schedule "
                       f"({schedule_source}), {fit.iterations} iteration(s)"
                       + ("" if fit.converged else ", not converged")
                       + ("" if not fit.machine_load else
                          f"; step times scaled by 1 + {fit.per_load:.3g} x each run's load "
                          f"average (coefficients at load 0)")
                       + ("" if not speed_probe else
                          "; each run's step times scaled by its speed probe (coefficients "
                          "at the reference probe)")),
        "fit": {"rows": fit.rows, "iterations": fit.iterations, "converged": fit.converged,
                "notes": fit.notes},
        "residuals": residuals, **extra,
    }
