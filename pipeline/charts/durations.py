"""Time on the report pages: one duration formatter (``format_duration``, from
``pipeline.base.durations``, which command lines use too) and one axis rule for every time
chart (``needs_log``, ``scale_for``, ``time_axis``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import altair as alt

from pipeline.base.durations import format_duration

__all__ = ["LOG_SPAN", "SECONDS_ABOVE_MS", "format_duration", "needs_log", "scale_for",
           "TimeAxis", "time_axis"]

LOG_SPAN = 100.0                # max / min of the positive values above which axes are log
SECONDS_ABOVE_MS = 10_000.0     # an axis whose values exceed 10 s is drawn in seconds


def _positive(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values
            if v is not None and math.isfinite(float(v)) and float(v) > 0]


def needs_log(values: Iterable[float | None]) -> bool:
    """True when the positive, finite values span more than ``LOG_SPAN`` (max / min)."""
    positive = _positive(values)
    return bool(positive) and max(positive) > LOG_SPAN * min(positive)


def scale_for(values: Iterable[float | None], zero: bool = True) -> tuple[alt.Scale, str]:
    """The scale of an axis over ``values`` and the suffix of its title: log and
    ``" (log scale)"`` when they span more than 100x, else linear (from 0 when ``zero``)."""
    if needs_log(values):
        return alt.Scale(type="log"), " (log scale)"
    return alt.Scale(type="linear", zero=zero), ""


@dataclass(frozen=True)
class TimeAxis:
    """A time axis: its unit (``ms`` or ``s``), the divisor from milliseconds, its scale and
    title."""

    unit: str
    divisor: float
    scale: alt.Scale
    title: str
    log: bool

    def y(self, field: str, **kwargs) -> alt.Y:
        return alt.Y(f"{field}:Q", title=self.title, scale=self.scale, **kwargs)

    def x(self, field: str, **kwargs) -> alt.X:
        return alt.X(f"{field}:Q", title=self.title, scale=self.scale, **kwargs)


def time_axis(values_ms: Iterable[float | None], title: str) -> TimeAxis:
    """The axis for durations ``values_ms``: seconds when one exceeds 10 s, log when they
    span more than 100x; ``title`` gets the unit and, if log, "(log scale)"."""
    values = [float(v) for v in values_ms
              if v is not None and math.isfinite(float(v))]
    seconds = bool(values) and max(values) > SECONDS_ABOVE_MS
    unit, divisor = ("s", 1e3) if seconds else ("ms", 1.0)
    scale, suffix = scale_for(values)
    return TimeAxis(unit, divisor, scale, f"{title} ({unit}){suffix}", bool(suffix))
