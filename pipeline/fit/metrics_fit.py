"""``fit --vllm-metrics``: the roofline's factors (or a profile's scale) from vLLM's
Prometheus histograms, which hold aggregates, not requests.

What the scrape (``pipeline.fit.vllm_metrics``) identifies, and what is fitted from it:

* the **mean prefill time** (``vllm:request_prefill_time_seconds`` ``_sum / _count``: first
  scheduled to first token) is priced as each request's prefill chunks, the requests
  rebuilt from ``vllm:request_prompt_tokens`` (``REBUILT`` points at its quantiles,
  interpolated within the buckets and scaled to the exact mean ``_sum / _count``; the
  uncached part from ``vllm:request_prefill_kv_computed_tokens``, else the prefix-cache
  counters' hit share). A chunk is at most ``--max-num-batched-tokens`` less the decodes
  scheduled before it (vLLM v1 schedules running requests first), and carries them;
* the **mean inter-token latency** (``vllm:inter_token_latency_seconds`` ``_sum / _count``:
  one observation per request per decoding step) is priced as a mix of a decode step and
  the chunk steps: ``steps`` = ``vllm:iteration_tokens_total``'s count (engine steps that
  emitted a token), ``decoders`` = ITL observations / steps (at least 1: a request sees
  itself), each at the mean context of a decoding request (mean prompt + the mean of
  ``G (G - 1) / 2 / (G - 1)`` over the rebuilt output lengths). A chunk meets
  ``decoders`` too and the chunk steps' share of the observations is chunk steps / steps,
  unless the run's length is given (``fit --vllm-metrics-seconds``): then a chunk, arriving
  at a random time, meets the time average ITL ``_sum`` / seconds (Little's law), and
  the chunk steps hold chunk steps x that of the ITL observations.

On those steps each mean is linear in the factors' scales (``1 / MFU``, ``1 / MBU``; the
binding roof of each step fixed by the current values, as ``roofline_form``): two means, two
scales, solved exactly (relative errors; one scale, ``--profile``, by least squares) and
again until the binding roofs stop changing. A scale whose roof binds no step of either
mean is not identified and held at the GPU's profiled factor; there is no standard error
(two numbers, two unknowns). The mix is an approximation: batch composition is a mean,
chunks of different requests never share a step, and prompt and output lengths are taken
independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from pipeline.base.errors import CLIError
from pipeline.fit.profile_scale import ProfileForm
from pipeline.fit.roofline_form import RooflineForm
from pipeline.fit.schedule import EngineModel
from pipeline.fit.solve import Fit
from pipeline.fit.vllm_metrics import Scrape

__all__ = ["REBUILT", "Workload", "Mean", "workload", "means", "fit_means", "figures"]

#: what prices the steps: the roofline at its peaks, or a profile
Form = RooflineForm | ProfileForm
#: points the rebuilt distributions have (fewer when fewer requests finished)
REBUILT = 200
#: the means fitted: (name in figures, histogram)
FITTED = (("mean prefill time ms", "vllm:request_prefill_time_seconds"),
          ("mean inter-token latency ms", "vllm:inter_token_latency_seconds"))


@dataclass(frozen=True)
class Workload:
    """What the histograms say about the run (module docstring)."""

    requests: float
    prompts: np.ndarray          # rebuilt prompt lengths
    computed: np.ndarray         # their uncached tokens
    outputs: np.ndarray          # rebuilt output lengths
    steps: float
    decoders: float
    chunk_decoders: float        # the decodes beside a prefill chunk
    chunk_share: float           # the chunk steps' share of the ITL observations
    context: float
    budget: int
    computed_from: str


def _rebuilt(scrape: Scrape, name: str, n: int) -> np.ndarray:
    histogram = scrape.histograms[name]
    points = histogram.points(n)
    if points.mean() > 0:
        points = points * (histogram.mean / points.mean())
    return np.maximum(np.rint(points), 1).astype(np.int64)


def workload(scrape: Scrape, engine: EngineModel, seconds: float | None = None) -> Workload:
    """The run as the histograms give it (module docstring); ``seconds``: how long the
    scraped window lasted (else the server is taken as never idle)."""
    requests = scrape.histograms["vllm:request_prefill_time_seconds"].count
    n = int(min(max(requests, 1), REBUILT))
    prompts = _rebuilt(scrape, "vllm:request_prompt_tokens", n)
    if "vllm:request_prefill_kv_computed_tokens" in scrape.histograms:
        computed = np.minimum(_rebuilt(scrape, "vllm:request_prefill_kv_computed_tokens", n),
                              prompts)
        source = "vllm:request_prefill_kv_computed_tokens"
    elif scrape.counters.get("vllm:prefix_cache_queries_total"):
        hit = scrape.counters.get("vllm:prefix_cache_hits_total", 0.0) \
            / scrape.counters["vllm:prefix_cache_queries_total"]
        computed = np.maximum(np.rint(prompts * (1 - hit)), 1).astype(np.int64)
        source = f"the prefix cache's hit share ({100 * hit:.1f} %)"
    else:
        computed, source = prompts, "the prompts (no cache metric: nothing taken as cached)"
    outputs = _rebuilt(scrape, "vllm:request_generation_tokens", n)
    steps = scrape.histograms["vllm:iteration_tokens_total"].count
    decoders = max(scrape.histograms["vllm:inter_token_latency_seconds"].count / steps, 1.0)
    tail = np.maximum(outputs - 1, 0)
    grown = float((tail * (tail + 1) / 2).sum() / max(tail.sum(), 1))
    itl = scrape.histograms["vllm:inter_token_latency_seconds"]
    # what a prefill chunk meets: the per-step mean when the server is never idle, else the
    # time average (an arrival sees it: Little's law over the scraped window)
    beside = decoders if seconds is None else itl.total / seconds
    budget = max(engine.max_num_batched_tokens - int(round(beside)), 1)
    chunks = requests * float(np.mean(-(-computed // budget)))
    share = min(chunks / steps if seconds is None else chunks * beside / itl.count, 1.0)
    return Workload(requests, prompts, computed, outputs, steps, decoders, beside, share,
                    float(prompts.mean()) + grown, budget, source)


def _step(decoders: int, context: float, chunk: tuple[int, int] | None = None,
          first: bool = False) -> SimpleNamespace:
    """A step record (``pipeline.engine``'s fields) of ``decoders`` decodes over ``context``
    tokens each and maybe one prefill chunk (new, computed before)."""
    scheduled = [(1 + i, 1, context - 1) for i in range(decoders)]
    prefill = 0
    if chunk is not None:
        prefill = chunk[0]
        scheduled.insert(0, (0, chunk[0], chunk[1]))
    return SimpleNamespace(prefill_tokens=prefill, decode_seqs=decoders,
                           context_tokens=sum(new + before for _, new, before in scheduled),
                           reload_tokens=0, scheduled=scheduled,
                           first_tokens=[0] if first else [])


def _with_decoders(w: Workload, chunk: tuple[int, int] | None = None, first: bool = False
                   ) -> list[tuple[float, SimpleNamespace]]:
    """The step at the mean decodes (beside a chunk: ``chunk_decoders``): a mix of the two
    whole numbers around it."""
    decoders = w.decoders if chunk is None else w.chunk_decoders
    low = int(math.floor(decoders))
    high = decoders - low
    mix = [(1.0 - high, low)] + ([(high, low + 1)] if high > 0 else [])
    return [(weight, _step(count, w.context, chunk, first)) for weight, count in mix]


def _chunks(w: Workload, prompt: int, computed: int) -> list[tuple[float, SimpleNamespace]]:
    """One request's prefill steps (weighted records), each with the mean decodes beside
    it."""
    steps, done = [], prompt - computed
    while done < prompt:
        new = min(w.budget, prompt - done)
        steps += _with_decoders(w, (new, done), done + new == prompt)
        done += new
    return steps


@dataclass(frozen=True)
class Mean:
    """A measured mean (ms) and the steps it is priced on: ``(weight, step)`` pairs."""

    name: str
    measured_ms: float
    terms: tuple[tuple[float, SimpleNamespace], ...]

    def priced(self, form: Form, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        """(its regressors, its known milliseconds) under ``form`` at ``coefficients``."""
        row, known = np.zeros(len(form.names)), 0.0
        for weight, step in self.terms:
            terms, offset = form.step(step, coefficients)
            row += weight * np.asarray(terms, dtype=np.float64)
            known += weight * offset
        return row, known


def means(scrape: Scrape, w: Workload) -> list[Mean]:
    """The two fitted means (module docstring)."""
    per_request = [_chunks(w, int(p), int(c)) for p, c in zip(w.prompts, w.computed)]
    n = len(per_request)
    prefill = tuple((weight / n, step) for steps in per_request for weight, step in steps)
    steps_per_request = sum(weight for steps in per_request for weight, _ in steps) / n
    share = w.chunk_share / steps_per_request
    itl = tuple((share * weight, step) for weight, step in prefill) + tuple(
        ((1 - w.chunk_share) * weight, step) for weight, step in _with_decoders(w))
    return [Mean(label, 1e3 * scrape.histograms[name].mean, terms)
            for (label, name), terms in zip(FITTED, (prefill, itl))]


def fit_means(items: list[Mean], form: Form, iterations: int = 30) -> tuple[Fit, dict[str, str]]:
    """The scales of ``form`` that price ``items`` at their measured means (module
    docstring): (the fit, the names no step identifies with why)."""
    measured = np.array([m.measured_ms for m in items])
    coefficients = form.initial()
    for iteration in range(1, iterations + 1):
        priced = [m.priced(form, coefficients) for m in items]
        rows = np.array([row for row, _ in priced]) / measured[:, None]
        target = (measured - np.array([known for _, known in priced])) / measured
        lost = {name: f"no step of either mean is on its roof (the {name.split('_')[0]} roof "
                      f"binds none)" for j, name in enumerate(form.names)
                if not np.any(rows[:, j])}
        if lost:
            return _fit(form, coefficients, iteration, False), lost
        solved, *_ = np.linalg.lstsq(rows, target, rcond=None)
        if not np.all(np.isfinite(solved)) or np.any(solved <= 0):
            raise CLIError("fit: the measured means cannot be priced by positive factors on "
                           "these steps (the steps' fixed milliseconds exceed them): check "
                           "--model, --gpu-type, --step-overhead-ms")
        settled = np.allclose(solved, coefficients, rtol=1e-10, atol=0)
        coefficients = solved
        if settled:
            return _fit(form, coefficients, iteration, True), {}
    return _fit(form, coefficients, iterations, False), {}


def _fit(form: Form, coefficients: np.ndarray, iterations: int, converged: bool) -> Fit:
    names = tuple(form.names)
    return Fit(coefficients=dict(zip(names, map(float, coefficients))),
               stderr={name: math.nan for name in names}, unidentified={},
               iterations=iterations, converged=converged, rows=len(FITTED), names=names)


def figures(scrape: Scrape, w: Workload, items: list[Mean], form: Form, fit: Fit) -> list[dict]:
    """Measured against predicted: the two fitted means, then checks not fitted, where the
    scrape has their histograms: TTFT (mean, and p50/p90 interpolated in its buckets, the
    predicted values put in the same buckets) as the queue's mean plus each rebuilt
    request's prefill (a real server's TTFT also holds
    its API server's time, which is not modelled), and the mean TPOT per request."""
    vector = fit.vector()
    rows = []
    for m in items:
        row, known = m.priced(form, vector)
        rows.append((m.name, m.measured_ms, known + float(row @ vector), True))
    prefill_ms, itl_ms = rows[0][2], rows[1][2]
    per_request = np.array([sum(weight * _step_ms(form, step, vector)
                                for weight, step in _chunks(w, int(p), int(c)))
                            for p, c in zip(w.prompts, w.computed)])
    queue = scrape.histograms.get("vllm:request_queue_time_seconds")
    queue_ms = 1e3 * queue.mean if queue is not None and queue.count else 0.0
    ttft = scrape.histograms.get("vllm:time_to_first_token_seconds")
    if ttft is not None and ttft.count:
        rows.append(("mean TTFT ms", 1e3 * ttft.mean, queue_ms + prefill_ms, False))
        predicted = ttft.like((queue_ms + per_request) / 1e3)
        for q, label in ((0.5, "p50"), (0.9, "p90")):
            rows.append((f"{label} TTFT ms (in its buckets)", 1e3 * ttft.quantile(q),
                         1e3 * predicted.quantile(q), False))
    tpot = scrape.histograms.get("vllm:request_time_per_output_token_seconds")
    if tpot is not None and tpot.count:
        rows.append(("mean TPOT per request ms", 1e3 * tpot.mean, itl_ms, False))
    return [{"figure": name, "measured": measured, "predicted": predicted,
             "error_pct": 100 * (predicted - measured) / measured if measured else None,
             "fitted": fitted} for name, measured, predicted, fitted in rows]


def _step_ms(form: Form, step: SimpleNamespace, vector: np.ndarray) -> float:
    row, known = form.step(step, vector)
    return known + float(np.dot(row, vector))
