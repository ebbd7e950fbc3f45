"""One duration formatter for every page and command line: ms below 1 s, s below 10 min,
min above (never "1,234,567 ms"). No dependencies, so command lines may use it freely."""

from __future__ import annotations

import math

__all__ = ["format_duration"]


def _sig(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures, without a trailing ``.0``."""
    if value == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:,.{decimals}f}"


def format_duration(ms: float | None) -> str:
    """``812 ms``, ``2.92 ms``, ``12.4 s``, ``122 s``, ``62.3 min``; ``n/a`` for None or
    NaN."""
    if ms is None or not math.isfinite(ms):
        return "n/a"
    if abs(ms) < 1_000:
        return f"{_sig(ms)} ms"
    if abs(ms) < 600_000:
        return f"{_sig(ms / 1e3)} s"
    return f"{ms / 60e3:,.1f} min"
