"""``fit --speed-probe``: each run's step times scaled by its measured speed probe.

``measure --speed-probe`` times the same fixed prompts on the server before and after every
run (``pipeline.measure.probe``). A run whose probe took 10 % longer ran on a machine 10 %
slower, so its step times are the model's x 1.1: ``with_speeds`` sets each run's ``speed``
to its probe median over the reference (the median of the fitted runs' probes). Nothing is
fitted and no run's TTFTs are looked at: a held-out run's speed comes from its probe alone.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from pipeline.base.errors import CLIError
from pipeline.fit.inputs import Run

__all__ = ["speed_document", "with_speeds"]


def with_speeds(runs: list[Run], train: list[np.ndarray]) -> tuple[list[Run], float]:
    """(the runs with ``speed`` set, the reference probe in ms); CLIError naming a run
    without a probe."""
    for run in runs:
        if run.speed_probe_ms is None:
            raise CLIError(f"{run.file}: its sidecar records no speed probe for run "
                           f"{run.label!r} (measure --speed-probe; --speed-probe needs one "
                           f"per run)")
    fitted = [r.speed_probe_ms for r, t in zip(runs, train) if t.any()]
    reference = statistics.median(fitted or [r.speed_probe_ms for r in runs])
    return [replace(r, speed=r.speed_probe_ms / reference) for r in runs], reference


def speed_document(runs: list[Run], reference: float) -> dict:
    """The fitted file's ``speed_probe`` part."""
    return {"reference_ms": round(reference, 3),
            "runs": [{"file": r.file, "run": r.label, "probe_ms": round(r.speed_probe_ms, 3),
                      "speed": round(r.speed, 6)} for r in runs],
            "meaning": "each run's step times = speed x the linear model of coefficients, "
                       "speed = its speed probe's median TTFT (measure --speed-probe: fixed "
                       "prompts before and after the run) / reference_ms (the median over the "
                       "fitted runs): the coefficients are a machine's at the reference probe"}
