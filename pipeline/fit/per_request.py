"""Measured against predicted TTFT per request from a committed fitted file, for the report.

``fitted_requests(path)`` reads a fitted step-time JSON (``fit --output``), loads the
``measure --trace`` files it was fitted on (its ``source``, relative to the checkout),
simulates every run with the file's coefficients on the engine model it records, queueing
included (``pipeline.fit.evaluate.predictions``; with the file's ``machine_load``, each
run's step times scaled by its load average as ``fit`` did) and returns the per-request
frame with the figure's provenance: fitted, which file, engine, served model, hardware, the
schedule source, and whether the requests were in the fit: the committed file is fitted on
all of them (in-sample); a ``fit --holdout`` file's held-out requests are marked
(``held_out``) from what its ``holdout`` records.
At one sequence with token-level prefix reuse (llama.cpp's model) the schedule comes from
``serial_schedule``, which gives the engine simulation's schedule exactly at 1/200 of the
cost (``serial_equal``; tested on the committed measurement).
The report only draws what this returns (``pipeline.charts.fitted_ttft``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.base.config import ROOT
from pipeline.base.errors import CLIError
from pipeline.fit.evaluate import holdout_masks, predictions
from pipeline.base.fitted_step_time import read_fitted
from pipeline.fit.inputs import Run, load_runs
from pipeline.fit.schedule import FEATURES, EngineModel, serial_schedule, simulate_run

__all__ = ["FITTED_FILE", "HOLDOUT_FILE", "FittedRequests", "fitted_requests", "serial_equal"]

#: The committed fit of the llama.cpp calibration's second campaign (a quiet machine, a
#: speed probe per run; docs/calibration.md).
FITTED_FILE = ROOT / "data" / "measured" / "llamacpp_calib2.fitted.json"
#: The committed fit of that campaign without its two highest loads (held out).
HOLDOUT_FILE = ROOT / "reports" / "calibration2" / "holdout-load" / "fitted.json"


@dataclass(frozen=True)
class FittedRequests:
    """Per-request measured vs predicted TTFT (``predictions``' columns) and its provenance
    (``str`` values: fitted_file, engine, served_model, hardware, schedule, fit, sources,
    in_sample: a sentence)."""

    frame: pl.DataFrame
    provenance: dict[str, str]


def serial_equal(engine: EngineModel, runs: list[Run]) -> bool:
    """True when ``serial_schedule`` gives the engine simulation's schedule of ``runs``
    exactly: one sequence at a time, token-level prefix reuse (block size 1), chunked
    prefill, and KV room for the longest request (about 5 ms against 1 s of CPU for the
    committed runs)."""
    longest = max(int(max(p.size for p in r.prompts) + r.max_tokens.max()) for r in runs)
    return (engine.max_num_seqs == 1 and engine.block_size == 1 and engine.chunked_prefill
            and (engine.num_gpu_blocks == 0 or engine.num_gpu_blocks > longest))


def _held(runs: list[Run], holdout: dict) -> list[np.ndarray] | None:
    """The held-out requests of each run as the file's ``holdout`` states them: the runs
    (by load) or prompt lengths (by length) it lists, or, by request, its seeded draw
    again (kept only when it draws as many requests as the file says); all False without a
    holdout, None when the file does not say which."""
    by, which = holdout.get("by"), holdout.get("held_out")
    if not holdout:
        return [np.zeros(run.n, dtype=bool) for run in runs]
    if by == "load" and isinstance(which, list):
        named = {(Path(str(f)).name, str(label)) for f, label in which}
        return [np.full(run.n, (Path(run.file).name, run.label) in named) for run in runs]
    if by == "length" and isinstance(which, list):
        return [np.isin(run.prompt_tokens, which) for run in runs]
    if by == "request" and isinstance(holdout.get("seed"), int):
        masks = holdout_masks(runs, float(holdout.get("fraction") or 0), by, holdout["seed"])
        if sum(int(m.sum()) for m in masks) == holdout.get("requests"):
            return masks
    return None


def _root_relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def fitted_requests(path: str | Path = FITTED_FILE, root: Path = ROOT) -> FittedRequests:
    """The frame and provenance described above; ValueError naming the file when it, or a
    measurement it names, cannot be read."""
    path = Path(path)
    document = read_fitted(path)
    sources = [root / s if not Path(s).is_absolute() else Path(s)
               for s in document.get("source") or []]
    if not sources:
        raise ValueError(f"{path}: names no measured file (source)")
    try:
        runs = load_runs(sources)
    except CLIError as exc:
        raise ValueError(str(exc)) from None
    speeds = {(Path(r["file"]).name, r["run"]): float(r["speed"])
              for r in (document.get("speed_probe") or {}).get("runs") or []}
    runs = [replace(r, speed=speeds.get((Path(r.file).name, r.label), 1.0)) for r in runs]
    coefficients = document["coefficients"]
    beta = np.array([float(coefficients.get(name) or 0.0) for name in FEATURES])
    engines = [EngineModel.from_dict(document.get("engine_model") or run.engine_model)
               for run in runs]
    holdout = document.get("holdout") or {}
    held = _held(runs, holdout)
    per_load = float((document.get("machine_load") or {}).get("per_load_average") or 0.0)
    source = serial_schedule if all(serial_equal(e, runs) for e in engines) else simulate_run
    frame = predictions(runs, engines, beta, held or [np.zeros(r.n, dtype=bool) for r in runs],
                        per_load, source).with_columns(
        pl.col("file").map_elements(lambda f: Path(f).name, return_dtype=pl.String))
    sidecar = runs[0].sidecar
    engine = sidecar.get("engine") or {}
    machine = sidecar.get("hardware") or {}
    hardware = ", ".join(str(part) for part in (
        machine.get("described"), machine.get("cpu"),
        machine.get("logical_cpus") and f"{machine['logical_cpus']} logical CPUs",
        machine.get("memory_gib") and f"{machine['memory_gib']} GiB") if part) or "not recorded"
    return FittedRequests(frame, {
        "fitted_file": _root_relative(path),
        "engine": " ".join(str(engine[k]) for k in ("name", "package", "version") if k in engine)
        or str(document.get("engine")),
        "served_model": str(document.get("served_model")),
        "hardware": str(hardware),
        "schedule": (
            "the fit's, computed by the serial one-sequence schedule, which equals "
            "pipeline.engine's at max_num_seqs 1" if source is serial_schedule
            else source(runs[0], engines[0], beta).source),
        "fit": str(document.get("provenance") or "fitted step time"),
        "sources": ", ".join(Path(s).name for s in document["source"]),
        "in_sample": (f"in-sample: all {frame.height} requests were in the fit"
                      if not holdout else
                      f"held out: {int(frame['held_out'].sum())} requests by "
                      f"{holdout.get('by')} (squares), fitted without them"
                      if held is not None else
                      f"the fit held out {holdout.get('requests')} requests by "
                      f"{holdout.get('by')}, not marked here (the file does not say which)"),
    })
