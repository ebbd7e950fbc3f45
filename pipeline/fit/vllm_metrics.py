"""vLLM's Prometheus metrics (one ``/metrics`` scrape, or what a run added between two) as
the histograms and counters ``fit --vllm-metrics`` fits to.

Names, kinds and buckets as vLLM 0.33.0's ``PrometheusStatLogger`` creates them
(``vllm/v1/metrics/loggers.py``; buckets from ``vllm/v1/metrics/buckets.py``), labelled
``model_name`` and ``engine`` (one value per data-parallel engine: summed here; one
``model_name`` per file). prometheus_client writes a histogram as ``NAME_bucket{le=...}``
(cumulative), ``NAME_sum``, ``NAME_count`` and a counter as ``NAME_total``. Each request's
times are those of ``vllm/v1/metrics/stats.py`` (``update_from_finished_request``):
prefill = first token - first scheduled, decode = last token - first token, queue = first
scheduled - queued, all engine-core timestamps; TTFT and e2e from the API server's arrival.

Every problem is a ``UsageError`` (exit 2) naming the option, the file and the metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeline.base.errors import UsageError
from pipeline.fit.prometheus_text import Sample, read_samples

__all__ = ["REQUIRED", "OPTIONAL", "COUNTERS", "Histogram", "Scrape", "read_scrape",
           "read_delta"]

#: histograms the fit needs (``iteration_tokens_total``: one observation per engine step
#: that emitted a token, of its computed prompt + generated tokens)
REQUIRED = ("vllm:request_prefill_time_seconds", "vllm:inter_token_latency_seconds",
            "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
            "vllm:iteration_tokens_total")
#: histograms read when present (checks, and the computed share of the prompts)
OPTIONAL = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
            "vllm:request_queue_time_seconds", "vllm:request_decode_time_seconds",
            "vllm:request_prefill_kv_computed_tokens",
            "vllm:request_time_per_output_token_seconds")
#: the counters read (prometheus_client's ``_total`` names of vLLM's ``vllm:prompt_tokens``,
#: ...)
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
#: the inter-token latency histogram's name before vLLM 0.11 (removed by
#: vllm-project/vllm#32661), read in its place when the new one is absent
OLDER_NAMES = {"vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds"}


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over engines: ``bounds`` (upper bounds, the last ``inf``),
    ``cumulative`` counts per bound, ``total`` (``_sum``) and ``count``."""

    name: str
    bounds: np.ndarray
    cumulative: np.ndarray
    total: float
    count: float

    @property
    def mean(self) -> float:
        """``_sum / _count``."""
        return self.total / self.count

    def quantile(self, q: float) -> float:
        """Prometheus' ``histogram_quantile``: linear within the bucket holding rank
        ``q x count`` (the first bucket from 0; the ``+Inf`` bucket gives the last finite
        bound)."""
        rank = q * self.cumulative[-1]
        index = int(np.searchsorted(self.cumulative, rank, side="left"))
        index = min(index, len(self.bounds) - 1)
        if not math.isfinite(self.bounds[index]):
            return float(self.bounds[index - 1]) if index else 0.0
        low = float(self.bounds[index - 1]) if index else min(0.0, float(self.bounds[0]))
        below = float(self.cumulative[index - 1]) if index else 0.0
        inside = float(self.cumulative[index]) - below
        if inside <= 0:
            return float(self.bounds[index])
        return low + (float(self.bounds[index]) - low) * (rank - below) / inside

    def points(self, n: int) -> np.ndarray:
        """``n`` values at the quantiles ``(k + 0.5) / n``: the distribution rebuilt from
        the buckets."""
        return np.array([self.quantile((k + 0.5) / n) for k in range(n)])

    def like(self, values: np.ndarray) -> Histogram:
        """A histogram of ``values`` on these buckets (to compare quantiles alike)."""
        data = np.asarray(values, dtype=np.float64)
        return replace(self, cumulative=np.array([(data <= b).sum() for b in self.bounds],
                                                 dtype=np.float64),
                       total=float(data.sum()), count=float(data.size))

    def minus(self, before: Histogram) -> Histogram:
        """What was observed after ``before`` (same buckets)."""
        return replace(self, cumulative=self.cumulative - before.cumulative,
                       total=self.total - before.total, count=self.count - before.count)


@dataclass(frozen=True)
class Scrape:
    """The vLLM metrics of one file (or the delta of two): histograms and counters by
    name, the served ``model_name``, the engines summed, and where it came from."""

    source: str
    model_name: str | None
    engines: int
    histograms: dict[str, Histogram]
    counters: dict[str, float]

    def histogram(self, name: str) -> Histogram | None:
        """``name``'s histogram (None when the scrape has none)."""
        return self.histograms.get(name)


def _histogram(samples: list[Sample], name: str, where: str) -> Histogram | None:
    buckets = [s for s in samples if s.name == f"{name}_bucket"]
    if not buckets:
        return None
    per_engine: dict[str | None, dict[float, float]] = {}
    for sample in buckets:
        le = sample.label("le")
        bound = None if le is None else _float(le)
        if bound is None or math.isnan(bound) or not math.isfinite(sample.value) \
                or sample.value < 0:
            raise UsageError(f"{where}:{sample.line}: {name}_bucket needs an le label and a "
                             f"count >= 0")
        per_engine.setdefault(sample.label("engine"), {})[bound] = sample.value
    layouts = {tuple(sorted(b)) for b in per_engine.values()}
    if len(layouts) > 1:
        raise UsageError(f"{where}: {name}: its engines have different buckets")
    bounds = np.array(sorted(next(iter(layouts))), dtype=np.float64)
    if bounds[-1] != math.inf:
        raise UsageError(f"{where}: {name}: no le=\"+Inf\" bucket")
    cumulative = sum(np.array([b[x] for x in bounds]) for b in per_engine.values())
    if np.any(np.diff(cumulative) < 0):
        raise UsageError(f"{where}: {name}: its bucket counts are not cumulative")
    parts = {}
    for suffix in ("sum", "count"):
        found = [s for s in samples if s.name == f"{name}_{suffix}"]
        if not found or not all(math.isfinite(s.value) for s in found):
            raise UsageError(f"{where}: {name}: no finite {name}_{suffix}")
        parts[suffix] = sum(s.value for s in found)
    if abs(parts["count"] - cumulative[-1]) > 1e-6 * max(1.0, parts["count"]):
        raise UsageError(f"{where}: {name}: _count {parts['count']:g} is not its +Inf "
                         f"bucket {cumulative[-1]:g}")
    return Histogram(name, bounds, cumulative, parts["sum"], parts["count"])


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def read_scrape(path: Path, option: str) -> Scrape:
    """The vLLM metrics of one scrape (module docstring)."""
    where = f"{option} {path}"
    samples = [s for s in read_samples(path, option) if s.name.startswith("vllm:")]
    if not samples:
        raise UsageError(f"{where}: no vllm: metrics (not a vLLM server's /metrics)")
    models = sorted({s.label("model_name") for s in samples
                     if s.label("model_name") is not None})
    if len(models) > 1:
        raise UsageError(f"{where}: several model_name labels ({', '.join(models)}): fit one "
                         f"served model at a time")
    engines = {s.label("engine") for s in samples if s.label("engine") is not None}
    histograms = {}
    for name in REQUIRED + OPTIONAL:
        found = _histogram(samples, name, where)
        if found is None and name in OLDER_NAMES:
            found = _histogram(samples, OLDER_NAMES[name], where)
            found = found and replace(found, name=name)
        if found is not None:
            histograms[name] = found
    counters = {name: sum(s.value for s in samples if s.name == name)
                for name in COUNTERS if any(s.name == name for s in samples)}
    return Scrape(str(path), models[0] if models else None, max(len(engines), 1),
                  histograms, counters)


def read_delta(after: Path, before: Path | None, option: str = "--vllm-metrics",
               before_option: str = "--vllm-metrics-before") -> Scrape:
    """The scrape at ``after``, less the one at ``before`` when given (what the run between
    them added); refuses a pair from different servers or models, a missing required
    histogram and one with no observations."""
    scrape = read_scrape(after, option)
    where = f"{option} {after}"
    missing = [name for name in REQUIRED if name not in scrape.histograms]
    if missing:
        raise UsageError(f"{where}: no {missing[0]} histogram (fit needs "
                         f"{', '.join(REQUIRED)})")
    if before is not None:
        scrape = _minus(scrape, read_scrape(before, before_option), f"{before_option} {before}")
        where = f"{option} {after} less {before_option} {before}"
    for name in REQUIRED:
        if scrape.histograms[name].count <= 0:
            raise UsageError(f"{where}: {name} has no observations (no request finished"
                             + (" between the scrapes)" if before is not None else ")"))
    return scrape


def _minus(after: Scrape, before: Scrape, where: str) -> Scrape:
    if before.model_name != after.model_name:
        raise UsageError(f"{where}: model_name {before.model_name!r}, the other scrape's is "
                         f"{after.model_name!r}: not the same server")
    histograms = {}
    for name, histogram in after.histograms.items():
        earlier = before.histograms.get(name)
        if earlier is None:
            if name in REQUIRED:
                raise UsageError(f"{where}: no {name} histogram")
            continue
        if not np.array_equal(earlier.bounds, histogram.bounds):
            raise UsageError(f"{where}: {name} has other buckets than the other scrape's")
        delta = histogram.minus(earlier)
        if np.any(delta.cumulative < 0) or delta.count < 0:
            raise UsageError(f"{where}: {name} counts more than the later scrape (a server "
                             f"restart between them, or the files swapped)")
        histograms[name] = delta
    counters = {}
    for name, value in after.counters.items():
        if name in before.counters:
            if value < before.counters[name]:
                raise UsageError(f"{where}: {name} is higher than in the later scrape (a "
                                 f"server restart between them, or the files swapped)")
            counters[name] = value - before.counters[name]
    return Scrape(f"{after.source} - {before.source}", after.model_name, after.engines,
                  histograms, counters)
