"""Least squares on the simulated schedule: step-time coefficients with standard errors.

On a fixed schedule, a request's TTFT is linear in the coefficients: the engine's busy
period that serves it starts at a known time ``b`` (an arrival: an idle engine starts when a
request comes; in a closed loop the request itself arrives as a step ends, and its window
starts there), and every step from there to the step that samples its first token takes
``features @ coefficients``, so ``TTFT - (b - arrival) = (sum of those steps' features) @
coefficients``; the same holds for the end time with the finishing step. ``fit_runs``
simulates every run with the current coefficients, solves the weighted least squares of
these rows (weights 1 / measured: relative errors count, as the target is a relative one),
and repeats until the schedule's busy periods no longer change; coefficients that come out
negative are set to 0 and the rest refitted. Standard errors are the usual
``sigma^2 (X'WX)^-1`` of the final solve.

With ``machine_load=True`` every run's step times are also scaled by ``1 + per_load x L``,
``L`` the machine's 1-minute load average when the run started (its sidecar's; the
machine's other work slowing the engine down): on fixed rows the model is then bilinear,
``y = (1 + per_load L) rows @ coefficients``: for each ``per_load`` the coefficients are
the weighted least squares of the scaled rows, and ``per_load >= 0`` is the value whose
solution has the smallest weighted error (a one-dimensional search). The coefficients are
then those of an idle machine (``L = 0``). ``per_load`` needs runs at two or more loads.

A run's ``speed`` (``fit --speed-probe``: its speed probe over the reference probe, known
before fitting) scales its step times the same way, with nothing fitted: its rows are
multiplied by it, and the coefficients are those of a machine at the reference probe.

What the data cannot identify (``identifiability``): a coefficient whose feature is zero in
every row (no reload from a CPU tier, say), and coefficients tied together by a null-space
direction of the design (they could trade against each other without changing any
prediction). Those are held at 0, named, and said why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pipeline.fit.inputs import Run
from pipeline.fit.schedule import FEATURES, EngineModel, Schedule, simulate_run
from pipeline.steptime.regression import identifiable, null_space, scaled_least_squares

__all__ = ["Fit", "FitError", "design_rows", "fit_runs", "identifiability", "load_scale"]

MAX_ITERATIONS = 30


class FitError(ValueError):
    """The data cannot give a fit (too few requests)."""


@dataclass
class Fit:
    """A fitted step-time model and how it was obtained."""

    coefficients: dict[str, float]
    stderr: dict[str, float]
    unidentified: dict[str, str]        # name -> why
    iterations: int
    converged: bool
    rows: int
    clamped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: step-time scale per unit of load average (``machine_load``; 0 without it)
    per_load: float = 0.0
    per_load_stderr: float = math.nan
    machine_load: bool = False
    #: the coefficients' names, in the form's order (``FEATURES``: the linear form)
    names: tuple[str, ...] = FEATURES

    def vector(self) -> np.ndarray:
        return np.array([self.coefficients[name] for name in self.names])


def load_scale(run: Run, per_load: float) -> float:
    """The run's step-time scale: its ``speed`` (``fit --speed-probe``; 1 without) x ``1 +
    per_load x`` its load average (1 when it has none or per_load is 0)."""
    return run.speed * ((1.0 + per_load * (run.machine_load or 0.0)) if per_load else 1.0)


def design_rows(schedule: Schedule, step_of: np.ndarray, local: bool = False,
                after: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, offsets, first steps): for each request, the summed features of the steps
    from its busy period's start to ``step_of``, ``busy start - arrival``, and the busy
    period's first step (see the module docstring). In a closed loop a request arrives as
    a step ends, so its window starts with the next step and its offset is 0. ``local``:
    every window starts with the first step that starts after the request arrived, the
    rest of the step then running a known offset (exact on the true schedule; far better
    conditioned than a busy period when the engine is never idle). ``after``: the windows
    are the steps after these (each request's first-token step) up to ``step_of``, with no
    arrival in them (a request's time from its first token to its end)."""
    steps = schedule.features.shape[0]
    cumulative = np.vstack([np.zeros((1, schedule.features.shape[1])),
                            np.cumsum(schedule.features, axis=0)])
    if after is not None:
        begin = np.minimum(after + 1, step_of)
        return (cumulative[step_of + 1] - cumulative[begin],
                np.zeros(step_of.size) + _known(schedule, begin, step_of), begin)
    if local:
        begin = np.searchsorted(schedule.start_ms, schedule.arrival_ms - 1e-9, side="left")
        begin = np.minimum(begin, step_of)
        return (cumulative[step_of + 1] - cumulative[begin],
                schedule.start_ms[begin] - schedule.arrival_ms
                + _known(schedule, begin, step_of), begin)
    if schedule.closed_loop:
        begin = np.searchsorted(schedule.end_ms, schedule.arrival_ms + 1e-9, side="right")
        begin = np.minimum(begin, step_of)
        return (cumulative[step_of + 1] - cumulative[begin],
                np.zeros(step_of.size) + _known(schedule, begin, step_of), begin)
    gap = np.ones(steps, dtype=bool)
    gap[1:] = schedule.start_ms[1:] > schedule.end_ms[:-1] + 1e-9
    period_first = np.maximum.accumulate(np.where(gap, np.arange(steps), 0))
    begin = period_first[step_of]
    rows = cumulative[step_of + 1] - cumulative[begin]
    return rows, schedule.start_ms[begin] - schedule.arrival_ms + _known(schedule, begin,
                                                                          step_of), begin


def _known(schedule: Schedule, begin: np.ndarray, step_of: np.ndarray) -> np.ndarray | float:
    """The summed ``offset_ms`` (milliseconds no coefficient scales) of the steps ``begin ..
    step_of`` (0 when the schedule has none)."""
    if schedule.offset_ms is None:
        return 0.0
    cumulative = np.concatenate([[0.0], np.cumsum(schedule.offset_ms)])
    return cumulative[step_of + 1] - cumulative[begin]


def _overlaps_held(schedule: Schedule, begin: np.ndarray, step_of: np.ndarray,
                   held: np.ndarray) -> np.ndarray:
    """Rows whose window (busy period start .. step_of) contains a held-out request's step."""
    if not held.any():
        return np.zeros(begin.size, dtype=bool)
    first, last = schedule.first_step[held], schedule.finish_step[held]
    return ((first[None, :] <= step_of[:, None]) & (last[None, :] >= begin[:, None])).any(axis=1)


def _system(runs: list[Run], schedules: list[Schedule], masks: list[np.ndarray],
            use_e2e: bool, held: list[np.ndarray] | None = None, local: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, targets, weights, each row's run load average, 0 where none); ``local``:
    ``design_rows``', the second rows then a request's first token to its end."""
    xs, ys, ws, ls = [], [], [], []
    held = held or [np.zeros(r.n, dtype=bool) for r in runs]
    for run, schedule, mask, out in zip(runs, schedules, masks, held):
        targets = [(schedule.first_token_step, run.ttft_ms, None)]
        if use_e2e and local:         # first token to end: no arrival phase in the window
            targets.append((schedule.finish_step, run.e2e_ms - run.ttft_ms,
                            schedule.first_token_step))
        elif use_e2e:
            targets.append((schedule.finish_step, run.e2e_ms, None))
        for step_of, measured, after in targets:
            rows, offset, begin = design_rows(schedule, step_of, local, after)
            keep = mask & (measured > 0) & ~_overlaps_held(schedule, begin, step_of, out)
            xs.append(rows[keep] * run.speed)
            ys.append(measured[keep] - offset[keep])
            ws.append(1.0 / measured[keep])
            ls.append(np.full(int(keep.sum()), run.machine_load or 0.0))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws), np.concatenate(ls)


def identifiability(x: np.ndarray, names: tuple[str, ...] = FEATURES) -> dict[str, str]:
    """Coefficients (``names``, the columns of ``x``) the rows ``x`` cannot identify, each
    with the reason."""
    reasons: dict[str, str] = {}
    if x.shape[0] == 0:
        return {name: "no rows" for name in names}
    ok, _ = identifiable(x)
    norms, rank, null = null_space(x)
    for j, name in enumerate(names):
        if norms[j] == 0:
            reasons[name] = {
                "reload_token_ms": "no step reloaded tokens from a CPU tier",
                "decode_seq_ms": "no step decoded (every request generated one token)",
                "prefill_token_ms": "no step prefilled tokens",
                "attention_pair_ms": "no step attended anything",
                "compute_scale": "no simulated step is compute-bound",
                "memory_scale": "no simulated step is memory-bound",
            }.get(name, "its feature is zero in every step")
    for vector in null:
        tied = [names[j] for j in range(len(names)) if abs(vector[j]) > 1e-6
                and norms[j] > 0]
        for name in tied:
            others = [t for t in tied if t != name]
            if others:
                reasons.setdefault(name, "moves together with " + ", ".join(others)
                                   + " in every measured step (one can trade against the "
                                     "other without changing any prediction)")
    for j, name in enumerate(names):
        if not ok[j]:
            reasons.setdefault(name, "not identifiable from these steps")
    return reasons


def _solve(x: np.ndarray, y: np.ndarray, w: np.ndarray, active: list[int]
           ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Weighted least squares over the ``active`` columns; negatives set to 0 and refitted.
    Returns (coefficients, standard errors, columns clamped to 0)."""
    clamped: list[int] = []
    active = list(active)
    while True:
        coef = np.zeros(x.shape[1])
        se = np.full(x.shape[1], math.nan)
        if not active:
            return coef, se, clamped
        solution, errors = scaled_least_squares(x[:, active] * w[:, None], y * w,
                                                np.linalg.pinv)
        negative = [c for c, v in zip(active, solution) if v < 0]
        if negative:
            worst = min(negative, key=lambda c: solution[active.index(c)])
            active.remove(worst)
            clamped.append(worst)
            continue
        coef[active] = solution
        if errors is not None:
            se[active] = errors
        return coef, se, clamped


def _solve_absolute(x: np.ndarray, y: np.ndarray, w: np.ndarray, active: list[int],
                    rounds: int = 30) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``_solve`` minimising the sum of absolute weighted errors instead of their squares:
    iteratively reweighted least squares, each row's weight divided by the square root of
    its last absolute error (at least 0.1 %)."""
    scale = np.ones_like(w)
    for _ in range(rounds):
        coef, se, clamped = _solve(x, y, w * scale, active)
        residual = np.abs(w * (y - x @ coef))
        scale = 1.0 / np.sqrt(np.maximum(residual, 1e-3))
    return coef, se, clamped


def _solve_loaded(x: np.ndarray, y: np.ndarray, w: np.ndarray, loads: np.ndarray,
                  active: list[int], solve=_solve
                  ) -> tuple[np.ndarray, np.ndarray, list[int], float, float]:
    """``_solve`` with the rows scaled by ``1 + per_load x load``, ``per_load >= 0`` chosen
    to minimise the weighted squared error (the coefficients solved again for each value: a
    grid, then golden-section search around its best point). Returns (coefficients, standard
    errors, clamped columns, per_load, its standard error)."""
    def loss(per_load: float) -> float:
        scale = 1.0 + per_load * loads
        coef, _, _ = solve(x * scale[:, None], y, w, active)
        residual = w * (y - scale * (x @ coef))
        return float(residual @ residual)

    grid = np.concatenate([[0.0], np.geomspace(1e-4, 10.0, 41)])
    losses = [loss(value) for value in grid]
    best = int(np.argmin(losses))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    loss_a, loss_b = loss(a), loss(b)
    for _ in range(120):
        if high - low <= 1e-12 * max(1.0, high):
            break
        if loss_a <= loss_b:
            high, b, loss_b = b, a, loss_a
            a = high - ratio * (high - low)
            loss_a = loss(a)
        else:
            low, a, loss_a = a, b, loss_b
            b = low + ratio * (high - low)
            loss_b = loss(b)
    per_load = min((grid[best], losses[best]), (a, loss_a), (b, loss_b), key=lambda t: t[1])[0]
    scale = 1.0 + per_load * loads
    coef, se, clamped = solve(x * scale[:, None], y, w, active)
    p = x @ coef
    kept = [c for c in active if c not in clamped]
    jacobian = np.column_stack([(x * scale[:, None])[:, kept], loads * p]) * w[:, None]
    residual = w * (y - scale * p)
    n, k = jacobian.shape
    per_load_se = math.nan
    if n > k:
        sigma2 = float(residual @ residual) / (n - k)
        cov = sigma2 * np.linalg.pinv(jacobian.T @ jacobian)
        per_load_se = float(np.sqrt(max(cov[-1, -1], 0.0)))
    return coef, se, clamped, float(per_load), per_load_se


def _initial(runs: list[Run], masks: list[np.ndarray]) -> np.ndarray:
    """A start: every millisecond of the median TTFT spent on prefilled tokens."""
    ratios = np.concatenate([(r.ttft_ms / r.prompt_tokens)[m] for r, m in zip(runs, masks)])
    start = np.zeros(len(FEATURES))
    start[FEATURES.index("prefill_token_ms")] = float(np.median(ratios)) if ratios.size else 1.0
    return start


def _structure(schedules: list[Schedule]) -> tuple:
    """What the rows depend on: the steps and where busy periods start."""
    parts = []
    for s in schedules:
        gap = np.ones(s.features.shape[0], dtype=bool)
        gap[1:] = s.start_ms[1:] > s.end_ms[:-1] + 1e-9
        parts.append((s.features.tobytes(), gap.tobytes(), s.first_token_step.tobytes()))
    return tuple(parts)


def _loss(runs: list[Run], schedules: list[Schedule], masks: list[np.ndarray],
          use_e2e: bool) -> float:
    """Sum of squared relative errors of the simulated TTFT (and end times) on ``masks``."""
    total = 0.0
    for run, schedule, mask in zip(runs, schedules, masks):
        pairs = [(schedule.ttft_ms(), run.ttft_ms)]
        if use_e2e:
            pairs.append((schedule.e2e_ms(), run.e2e_ms))
        for predicted, measured in pairs:
            keep = mask & (measured > 0)
            total += float(np.sum(((predicted[keep] - measured[keep]) / measured[keep]) ** 2))
    return total


def fit_runs(runs: list[Run], engine_of: list[EngineModel], masks: list[np.ndarray],
             use_e2e: bool = True, held: list[np.ndarray] | None = None,
             machine_load: bool = False, form=None, absolute: bool = False) -> Fit:
    """Fit the coefficients on the requests selected by ``masks`` (one per run).

    ``held``: held-out requests; a row whose waiting includes one of their steps is left
    out too, so that nothing of a held-out request's cost enters the fit. Each iteration
    simulates with the last solution; when the schedule repeats one seen before (a fixed
    point, or a cycle between schedules) the iteration stops, and the solution whose
    simulation has the smallest relative error on the fitted requests is kept.
    ``machine_load``: fit the load-average scale too (see the module docstring).
    ``absolute``: least absolute (relative) errors instead of least squares.
    ``form``: another step-time form than the linear one (its ``names``, ``simulate(run,
    engine, coefficients)``, ``initial()`` and ``local_rows``, ``design_rows``' ``local``:
    ``pipeline.fit.roofline_form``).
    """
    names = FEATURES if form is None else form.names
    simulate = simulate_run if form is None else form.simulate
    if sum(int(m.sum()) for m in masks) < 2:
        raise FitError("fewer than 2 measured requests to fit on")
    notes: list[str] = []
    if machine_load:
        missing = [r for r in runs if r.machine_load is None]
        if missing:
            raise FitError(f"{missing[0].file}: its sidecar records no load average for run "
                           f"{missing[0].label!r} (--machine-load needs one per run)")
        if len({r.machine_load for r, m in zip(runs, masks) if m.any()}) < 2:
            machine_load = False
            notes.append("machine load: every fitted run was measured at the same load "
                         "average, so its effect cannot be identified: not fitted")
    per_load, per_load_se = 0.0, math.nan
    coef = _initial(runs, masks) if form is None else form.initial()
    seen: list[tuple] = []
    best: tuple | None = None       # (loss, coef, se, unidentified, clamped, rows, per_load, se)
    pending: tuple | None = None
    converged, cycled = False, 0
    iteration = 0
    for iteration in range(1, MAX_ITERATIONS + 1):
        schedules = [simulate(r, e, coef * load_scale(r, per_load))
                     for r, e in zip(runs, engine_of)]
        if pending is not None:                # score the last solution on its own schedule
            loss = _loss(runs, schedules, masks, use_e2e)
            if best is None or loss < best[0]:
                best = (loss, *pending)
        structure = _structure(schedules)
        if structure in seen:
            cycled = len(seen) - seen.index(structure)
            converged = cycled == 1
            break
        seen.append(structure)
        x, y, w, loads = _system(runs, schedules, masks, use_e2e, held,
                                 getattr(form, "local_rows", False))
        if x.shape[0] < 2:
            raise FitError(f"{x.shape[0]} row(s) left to fit on (held-out requests delay the "
                           f"others): hold out less")
        unidentified = identifiability(x * w[:, None], names)
        active = [j for j, name in enumerate(names) if name not in unidentified]
        if not active:
            raise FitError("no coefficient is identifiable from these requests")
        if machine_load:
            coef, se, clamped_columns, per_load, per_load_se = _solve_loaded(
                x, y, w, loads, active, _solve_absolute if absolute else _solve)
        else:
            coef, se, clamped_columns = (_solve_absolute if absolute else _solve)(
                x, y, w, active)
        pending = (coef, se, unidentified, [names[j] for j in clamped_columns], x.shape[0],
                   per_load, per_load_se)
    else:
        schedules = [simulate(r, e, coef * load_scale(r, per_load))
                     for r, e in zip(runs, engine_of)]
        loss = _loss(runs, schedules, masks, use_e2e)
        if best is None or loss < best[0]:
            best = (loss, *pending)
    _, coef, se, unidentified, clamped, rows, per_load, per_load_se = best
    notes += [f"{name}: least squares gives it a negative value, so it is held at 0 and the "
             f"others refitted" for name in clamped]
    if not converged:
        notes.append(f"the simulated schedule alternates between {cycled} schedules (queueing "
                     f"depends on the coefficients): the solution with the smallest error is "
                     f"kept" if cycled else
                     f"the schedule still changed after {MAX_ITERATIONS} iterations: the "
                     f"solution with the smallest error is kept")
    return Fit(dict(zip(names, coef.tolist())), dict(zip(names, se.tolist())),
               unidentified, iteration, converged, int(rows), clamped, notes, per_load,
               per_load_se, machine_load, tuple(names))
