"""The capacity-grid builders every command's default axes are made of (tokens or blocks).

Each command picks its own points (a cliff's edges, the spec's points, a trace's distinct
blocks); the spacing comes from here: evenly spaced from 0, log-spaced, or fractions of a
total. Every builder returns whole numbers, rounded half to even as numpy does.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["even", "log_spaced", "fractions_of"]


def even(top: float, points: int) -> np.ndarray:
    """``points`` capacities evenly spaced over 0..``top``, rounded (int64)."""
    return np.linspace(0, top, points).round().astype(np.int64)


def log_spaced(low: float, top: float, points: int) -> np.ndarray:
    """The distinct capacities among ``points`` log-spaced over ``low``..``top``, rounded
    (int64, ascending)."""
    return np.unique(np.geomspace(low, top, points).round().astype(np.int64))


def fractions_of(total: int, fractions: Iterable[float], unit: int = 1) -> list[int]:
    """The distinct ``round(total * f) * unit`` for each fraction ``f``, ascending."""
    return sorted({int(round(total * f)) * unit for f in fractions})
