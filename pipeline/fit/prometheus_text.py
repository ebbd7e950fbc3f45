"""Prometheus' text exposition format (what a ``/metrics`` scrape returns), read into samples.

Each sample line is ``name{label="value",...} value [timestamp]``; ``# HELP`` and ``# TYPE``
lines and other comments (OpenMetrics' ``# EOF`` too) are skipped; label values may escape
``\\\\``, ``\\"`` and ``\\n``; values are floats (``+Inf``, ``-Inf``, ``NaN`` included). A
line that is none of these is a ``UsageError`` naming ``file:line``, as is a file with no
sample at all (not a scrape). ``prometheus_client``'s parser would do the same; it is not
a dependency and this is the part of the format a scrape uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.base.errors import UsageError, read_text

__all__ = ["Sample", "read_samples"]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One sample line: its metric name, labels, value and line number (from 1)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    line: int

    def label(self, key: str) -> str | None:
        """The value of label ``key`` (None when absent)."""
        return dict(self.labels).get(key)


def _labels(text: str) -> tuple[tuple[str, str], ...] | None:
    pairs, position = [], 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None or match.end() == position:
            return None
        value = re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], match.group(2))
        pairs.append((match.group(1), value))
        position = match.end()
    return tuple(sorted(pairs))


def _value(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_samples(path: Path, option: str) -> list[Sample]:
    """Every sample of the scrape at ``path`` (module docstring); ``option`` names the
    command-line option in errors."""
    where = f"{option} {path}"
    text = read_text(path, where)
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SAMPLE.match(stripped)
        labels = None if match is None else _labels(match.group(2) or "")
        value = None if match is None else _value(match.group(3))
        if match is None or labels is None or value is None:
            raise UsageError(f"{option} {path}:{number}: not Prometheus text exposition "
                             f"(expected name{{label=\"value\"}} value)")
        samples.append(Sample(match.group(1), labels, value, number))
    if not samples:
        raise UsageError(f"{where}: no Prometheus samples (not a /metrics scrape)")
    return samples

