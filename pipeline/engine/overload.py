"""Is a run's answer queueing? Offered and served request rates and the waiting queue.

``overload(arrival, started, finished, unit)`` reads a run's per-request arrival,
first-scheduled and finish times (``overload_of(requests)`` picks them from a requests
frame: ``*_ms`` on the time clock, rates per second; ``*_step`` on the step clock, rates
per step). The waiting queue at a moment is the requests that have arrived and not yet been
scheduled for the first time (a preempted request waiting again is not counted); it only
grows at arrivals, so it is read at each arrival.

* offered rate = requests / (last arrival - first arrival);
* served rate = requests / (last finish - first finish);
* the queue at the last arrival, and the peak queue;
* ``overloaded``: the queue grows over the run. All three of: the offered rate exceeds the
  served rate by more than ``RATE_MARGIN`` (5 %); at least ``QUEUE_MIN`` (10) requests and
  ``QUEUE_SHARE`` (1 %) of them wait when the last one arrives; and over the second half of
  the arrival window the queue's least-squares trend rises by at least ``GROWTH_SHARE``
  (a quarter) of that final queue. A burst that drains before arrivals end fails the
  second test, a steady queue (a closed loop of more requests than the engine runs at
  once) the third, a noisy but stable queue the first and third; an open-loop rate above
  what the configuration serves passes all three. A run whose requests all arrive at one
  moment (a batch at step 0) has no arrival window: not overloaded.

The queue at the end of the run is not reported: every simulated run serves every request,
so it is always 0; ``drain`` (last finish - last arrival) says how long the queue took to
empty instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

__all__ = ["Overload", "overload", "overload_of", "warning_line", "warning_lines",
           "RATE_MARGIN", "QUEUE_MIN", "QUEUE_SHARE", "GROWTH_SHARE", "METRIC_KEYS",
           "POINT_LINES"]

RATE_MARGIN = 0.05      # offered > (1 + margin) x served
QUEUE_MIN = 10          # requests waiting at the last arrival, at least ...
QUEUE_SHARE = 0.01      # ... and this share of the run's requests
GROWTH_SHARE = 0.25     # the second half's trend rises by this share of the final queue
#: overloaded points of a sweep printed one line each; more are one line with the worst
POINT_LINES = 3
#: the keys a metrics dict (metrics.json, --json, fleet's rows) gets
METRIC_KEYS = ("overloaded", "offered_rate", "served_rate", "rate_unit",
               "queue_at_last_arrival", "peak_queue")


@dataclass(frozen=True)
class Overload:
    """A run's load figures; rates in requests per ``unit`` (s or step), None without a
    span (one arrival moment, one finish moment)."""

    requests: int
    unit: str
    offered_rate: float | None
    served_rate: float | None
    queue_at_last_arrival: int
    peak_queue: int
    queue_growth: float
    drain: float
    overloaded: bool

    def metrics(self) -> dict[str, object]:
        """The figures under ``METRIC_KEYS`` (the metrics dict's names)."""
        figures = asdict(self)
        figures["rate_unit"] = f"requests/{self.unit}"
        return {key: figures[key] for key in METRIC_KEYS}


def _rate(count: int, times: np.ndarray) -> float | None:
    span = float(times.max() - times.min()) if times.size else 0.0
    return count / span if span > 0 else None


def _growth(times: np.ndarray, queue: np.ndarray) -> float:
    """The least-squares rise of ``queue`` over the second half of the arrival window."""
    first, last = float(times[0]), float(times[-1])
    half = times >= (first + last) / 2
    t, q = times[half], queue[half].astype(np.float64)
    if t.size < 2 or float(np.ptp(t)) == 0.0:
        return 0.0
    slope = float(np.cov(t, q, bias=True)[0, 1] / np.var(t))
    return slope * (last - first) / 2


def overload(arrival, started, finished, unit: str) -> Overload:
    """The load figures of a run (see the module docstring): per-request arrival, first
    scheduled and finish times, same order and unit; a request never scheduled (null, NaN)
    waits to the end."""
    arrival = np.asarray(arrival, dtype=np.float64)
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order]
    started = np.nan_to_num(np.asarray(started, dtype=np.float64)[order], nan=np.inf)
    finished = np.asarray(finished, dtype=np.float64)
    finished = finished[np.isfinite(finished)]
    n = arrival.size
    if n == 0:
        return Overload(0, unit, None, None, 0, 0, 0.0, 0.0, False)
    arrived = np.searchsorted(arrival, arrival, side="right")
    queue = arrived - np.searchsorted(np.sort(started), arrival, side="right")
    offered, served = _rate(n, arrival), _rate(finished.size, finished)
    at_last, growth = int(queue[-1]), _growth(arrival, queue)
    overloaded = (offered is not None and served is not None
                  and offered > (1 + RATE_MARGIN) * served
                  and at_last >= max(QUEUE_MIN, QUEUE_SHARE * n)
                  and growth >= GROWTH_SHARE * at_last)
    drain = float(finished.max() - arrival[-1]) if finished.size else 0.0
    return Overload(n, unit, offered, served, at_last, int(queue.max()), growth, drain,
                    bool(overloaded))


def overload_of(requests: pl.DataFrame) -> Overload:
    """``overload`` of a requests frame: ``arrival_ms``, ``first_scheduled_ms``,
    ``finish_ms`` (time clock: rates per second), else ``arrival_step`` (or
    ``first_scheduled_step``), ``first_scheduled_step``, ``finish_step`` (per step)."""
    if "arrival_ms" in requests.columns:
        seconds = requests.select(pl.col("arrival_ms", "first_scheduled_ms", "finish_ms")
                                  / 1000.0)
        return overload(*(seconds[c].to_numpy() for c in seconds.columns), unit="s")
    arrival = "arrival_step" if "arrival_step" in requests.columns else "first_scheduled_step"
    steps = requests.select(pl.col(arrival, "first_scheduled_step", "finish_step")
                            .cast(pl.Float64))
    return overload(*(steps[c].to_numpy() for c in steps.columns), unit="step")


def warning_line(figures: dict, where: str = "") -> str:
    """``warning: overloaded: [WHERE: ]offered R req/s, served R req/s; N requests still
    queued when the last arrived (of M)`` from a metrics dict (``METRIC_KEYS`` and
    ``requests``; per second without ``rate_unit``)."""
    unit = "req/step" if figures.get("rate_unit", "").endswith("/step") else "req/s"

    def rate(value) -> str:
        return "n/a" if value is None else f"{value:,.2f} {unit}"

    return (f"warning: overloaded: {where + ': ' if where else ''}offered "
            f"{rate(figures['offered_rate'])}, served {rate(figures['served_rate'])}; "
            f"{figures['queue_at_last_arrival']:,} requests still queued when the last "
            f"arrived (of {figures['requests']:,})")


def warning_lines(points: list[dict], where: Callable[[dict], str]) -> list[str]:
    """``warning: overloaded:`` lines of a sweep's points (metrics dicts, ``where(point)``
    naming one): one per overloaded point, or, past ``POINT_LINES`` of them, one line with
    how many and the worst (the largest offered / served rate)."""
    over = sorted((p for p in points if p["overloaded"]),
                  key=lambda p: p["offered_rate"] / p["served_rate"], reverse=True)
    if len(over) > POINT_LINES:
        return [warning_line(over[0], f"{len(over)} of {len(points)} points; the worst, "
                                      f"{where(over[0])}")]
    return [warning_line(p, where(p)) for p in over]
