"""``fit --vllm-bench --profile DIR``: one scale on a measured profile's GPU milliseconds.

A vidur-format profile (``--latency profile:DIR``, ``steptime.profile``) prices a step as
``overhead + GPU milliseconds (layers, embedding, attention, all-reduce) + reloads``, the
GPU part measured on another machine. ``ProfileForm`` makes ``scale x GPU milliseconds``
the one regressor (the overhead and reloads are known milliseconds), so ``fit_runs`` fits
the scale as it fits the roofline's factors (``roofline_form``); ``scale_document`` is the
``profile-scale`` JSON that ``--latency FILE`` reads (``steptime.efficiency_file``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.base.errors import CLIError
from pipeline.fit.inputs import Run
from pipeline.fit.schedule import EngineModel, Schedule, engine_schedule
from pipeline.fit.solve import Fit, FitError, fit_runs
from pipeline.steptime.cost import step_cost
from pipeline.steptime.efficiency_file import PROFILE_SCALE_KIND
from pipeline.steptime.profile import Profiled

__all__ = ["ProfileForm", "fit_scale", "scale_document"]


@dataclass(frozen=True)
class ProfileForm:
    """``profile`` (unscaled) with its GPU milliseconds times the fitted ``profile_scale``."""

    profile: Profiled
    names: tuple[str, ...] = ("profile_scale",)
    local_rows: bool = True                 # as the roofline's: rows from each arrival

    def step(self, record, coefficients: np.ndarray) -> tuple[tuple[float, ...], float]:
        """(the step's GPU milliseconds as measured,), its overhead and reloads."""
        total = self.profile.step_ms(record)
        cost = step_cost(record)
        if cost.tokens == 0:                        # nothing on the GPU: overhead, reloads
            return (0.0,), total
        known = self.profile.overhead_ms + self.profile.reload_ms_per_token * cost.reload_tokens
        return (total - known,), known

    def simulate(self, run: Run, engine: EngineModel, coefficients: np.ndarray) -> Schedule:
        """The run through the engine simulation, each step priced by this form."""
        return engine_schedule(run, engine, coefficients, form=self)

    def initial(self) -> np.ndarray:
        """The iteration's start: the profile as measured."""
        return np.ones(1)


def fit_scale(runs: list[Run], engines: list[EngineModel], train: list[np.ndarray],
              held: list[np.ndarray], form: ProfileForm, use_e2e: bool,
              absolute: bool) -> Fit:
    """The fitted scale; CLIError when the requests cannot give one."""
    try:
        fit = fit_runs(runs, engines, train, use_e2e=use_e2e, held=held, form=form,
                       absolute=absolute)
    except FitError as exc:
        raise CLIError(f"fit: {exc}") from None
    if fit.unidentified or fit.clamped:
        raise CLIError("fit: the requests cannot identify the profile's scale ("
                       + "; ".join(fit.unidentified.values() or ["not positive"]) + ")")
    return fit


def scale_document(*, fit: Fit, form: ProfileForm, provenance: str, common: dict) -> dict:
    """The ``profile-scale`` JSON (version 1): ``scale`` (value, stderr), ``directory``,
    ``step_overhead_ms``, ``fitted_on`` and ``common`` (source, bench, engine_model,
    holdout, fit, figures)."""
    value, se = fit.coefficients["profile_scale"], fit.stderr["profile_scale"]
    profile = form.profile
    return {"kind": PROFILE_SCALE_KIND, "version": 1,
            "scale": {"value": float(f"{value:.4g}"),
                      "stderr": None if not math.isfinite(se) else float(f"{se:.2g}")},
            "directory": profile.directory, "step_overhead_ms": profile.overhead_ms,
            "fitted_on": {"profile": profile.label, "profile_provenance": profile.provenance},
            "provenance": provenance, **common}
