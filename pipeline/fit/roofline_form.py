"""The roofline as a form ``fit`` can solve: its efficiency factors from measured requests.

The roofline prices a step as ``overhead + max(a x C, b x M) + reload + all-reduce``, ``C``
and ``M`` the compute and memory roofs at the GPU's peaks (``Roofline.parts`` with MFU and
MBU 1), ``a = 1 / MFU`` (``compute_scale``) and ``b = 1 / MBU`` (``memory_scale``). On a
fixed schedule the roof that binds each step is fixed too, so the step is linear in
``(a, b)``: its regressors are ``(C, 0)`` on a compute-bound step and ``(0, M)`` on a
memory-bound one, and the overhead, reloads and all-reduces are milliseconds no factor
scales (the schedule's ``offset_ms``). ``fit_runs`` then solves it as it solves the linear
form: simulate with the current factors, least squares of the requests' TTFT and end
times (each window from the first step after the request arrived: ``solve.design_rows``'
``local``), again until the schedule (and so each step's binding roof) stops changing. A factor
``held`` at a value (``--mfu-prefill``/``--mbu-decode`` given to ``fit``) is part of the
known milliseconds and not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.fit.inputs import Run
from pipeline.fit.schedule import EngineModel, Schedule, engine_schedule
from pipeline.steptime.roofline import Roofline

__all__ = ["SCALES", "RooflineForm"]

#: the two factors' coefficients: 1 / MFU and 1 / MBU
SCALES = ("compute_scale", "memory_scale")
#: where the iteration starts: vidur's H100 medians (``steptime.efficiency.EFFICIENCY``)
START = (1 / 0.691, 1 / 0.754)


@dataclass(frozen=True)
class RooflineForm:
    """``peak`` (a roofline with MFU and MBU 1) with its factors fitted, or ``held`` (a
    scale per factor, None where fitted)."""

    peak: Roofline
    held: tuple[float | None, float | None] = (None, None)
    names: tuple[str, ...] = field(init=False)
    #: rows from each request's arrival, not its busy period (``solve.design_rows``): a
    #: batching GPU engine under load is never idle
    local_rows: bool = True

    def __post_init__(self) -> None:
        if self.peak.mfu != 1 or self.peak.mbu != 1:
            raise ValueError("the roofline to fit must be at its peaks (MFU and MBU 1)")
        object.__setattr__(self, "names", tuple(
            name for name, held in zip(SCALES, self.held) if held is None))

    def scales(self, coefficients: np.ndarray) -> tuple[float, float]:
        """(a, b): the fitted coefficients where fitted, the held scales elsewhere."""
        fitted = iter(np.asarray(coefficients, dtype=np.float64).tolist())
        a, b = (next(fitted) if held is None else held for held in self.held)
        return a, b

    def step(self, record, coefficients: np.ndarray) -> tuple[tuple[float, ...], float]:
        """One step's regressors (the binding roof's peak milliseconds, per fitted factor)
        and its known milliseconds (overhead, reloads, all-reduces, held factors' roofs)."""
        parts = self.peak.parts(record)
        a, b = self.scales(coefficients)
        compute, memory = parts["compute_ms"], parts["memory_ms"]
        bound = a * compute >= b * memory
        terms = (compute if bound else 0.0, 0.0 if bound else memory)
        known = parts["overhead_ms"] + parts["reload_ms"] + parts["comm_ms"]
        row = []
        for term, held in zip(terms, self.held):
            if held is None:
                row.append(term)
            else:
                known += held * term
        return tuple(row), known

    def step_ms(self, record, coefficients: np.ndarray) -> float:
        """The step's milliseconds under ``coefficients`` (``Roofline.step_ms`` of the
        roofline with those factors)."""
        row, known = self.step(record, coefficients)
        return known + float(np.dot(row, np.asarray(coefficients, dtype=np.float64)))

    def simulate(self, run: Run, engine: EngineModel, coefficients: np.ndarray) -> Schedule:
        """The run through the engine simulation, each step priced by this form."""
        return engine_schedule(run, engine, coefficients, form=self)

    def initial(self) -> np.ndarray:
        """The iteration's start (``START`` for each fitted factor)."""
        return np.array([start for start, held in zip(START, self.held) if held is None])
