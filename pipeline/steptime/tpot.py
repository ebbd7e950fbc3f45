"""Time per output token, inter-token latency and goodput of a timed run, as ``vllm bench
serve`` defines them (vLLM 0.33.0, ``vllm/benchmarks/serve.py``, ``calculate_metrics``).

* TPOT per request = (finish - first token) / (output tokens - 1); a request of one output
  token has none (vLLM leaves it out of the TPOT figures, and counts it as 0 for goodput).
* ITL: the gaps between a request's consecutive tokens. vLLM pools every gap of every
  request (``itls += outputs[i].itl``) and reports their percentiles. The engine model
  samples at most one token per request per step, at the step's end, and only in a step
  that decodes (``decode_seqs > 0``). A request that was never preempted and whose
  ``first_token_step .. finish_step`` holds exactly ``output tokens - 1`` decoding steps
  after the first sampled in each of them (it sampled ``output tokens - 1`` times there,
  each time in a decoding step): its gaps are the ends of those steps minus the end of the
  one before (the first: minus its first token's step). This resolves vLLM's requests that
  sampled every step and SGLang's, whose prefill batches decode nothing in between. Any
  other request (preempted, or left out of a decoding batch whose token budget a chunked
  prefill took) has gaps the run's tables do not tell apart: its ``itl_max_ms`` is null and
  the run counts it in ``itl_unresolved_requests``.
* Goodput: requests with TTFT <= ``--slo-ttft-ms`` and TPOT (0 below two output tokens) <=
  ``--slo-tpot-ms`` (each only when given); ``goodput_fraction`` of the requests and
  ``request_goodput`` per second of the run (vLLM: ``good_completed / dur_s``).

Percentiles are linear (``np.percentile``'s default, as vLLM's), ITL's over the pooled gaps
(each step's gap weighted by the requests it separates two tokens of).
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["TPOT_COLUMNS", "tpot_ms", "tpot_quantiles", "token_times", "token_metrics",
           "good_request", "goodput", "weighted_percentile"]

TPOT_COLUMNS = ("first_token_ms", "finish_ms", "output_tokens")
PERCENTILES = (50, 90, 99)


def tpot_ms() -> pl.Expr:
    """Per request: (finish_ms - first_token_ms) / (output_tokens - 1), null below 2 tokens."""
    return (pl.when(pl.col("output_tokens") > 1)
            .then((pl.col("finish_ms") - pl.col("first_token_ms"))
                  / (pl.col("output_tokens") - 1))
            .otherwise(None))


def tpot_quantiles(requests: pl.DataFrame) -> dict[str, float | None]:
    """``tpot_ms_p50`` and ``tpot_ms_p90`` of ``requests`` (None when not modelled: no finish
    or first-token times, or no request with two output tokens)."""
    empty = {"tpot_ms_p50": None, "tpot_ms_p90": None}
    if not set(TPOT_COLUMNS) <= set(requests.columns):
        return empty
    values = requests.select(tpot_ms().alias("tpot")).drop_nulls()["tpot"]
    if values.is_empty():
        return empty
    return {f"tpot_ms_p{p}": float(values.quantile(p / 100, "linear")) for p in (50, 90)}


def _timeline(steps: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step number s: (its end, whether it decodes, the end of the last decoding step
    before it; a missing step counts as not decoding, before every step: the first start)."""
    step = steps["step"].to_numpy()
    size = int(step.max()) + 1 if step.size else 0
    first = float(steps["start_ms"].min()) if step.size else 0.0
    end = np.full(size, first)
    end[step] = (steps["start_ms"] + steps["duration_ms"]).to_numpy()
    decodes = np.zeros(size, bool)
    decodes[step] = steps["decode_seqs"].to_numpy() > 0 if "decode_seqs" in steps.columns \
        else True
    last = np.maximum.accumulate(np.where(decodes, np.arange(size), -1))
    before = np.concatenate(([-1], last[:-1]))
    previous_end = np.where(before >= 0, end[np.maximum(before, 0)], first)
    return end, decodes, previous_end


def _resolved(requests: pl.DataFrame, decodes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mask of requests with every gap known, their first token step, their finish step)."""
    first = requests["first_token_step"].fill_null(-1).to_numpy()
    finish = requests["finish_step"].fill_null(-1).to_numpy()
    tokens = requests["output_tokens"].to_numpy()
    preempted = (requests["preemptions"].fill_null(0).to_numpy() > 0
                 if "preemptions" in requests.columns else np.zeros(requests.height, bool))
    size = decodes.size
    counted = np.concatenate(([0], np.cumsum(decodes)))      # decoding steps before each
    between = (counted[np.clip(finish + 1, 0, size)]         # decoding steps in (first,
               - counted[np.clip(first + 1, 0, size)])       # finish]
    every_step = (first >= 0) & (finish - first == tokens - 1)
    ok = (tokens > 1) & (first >= 0) & (finish < size) \
        & (every_step | (~preempted & (between == tokens - 1)))
    return ok, first, finish


def _request_gaps(first: np.ndarray, finish: np.ndarray, end: np.ndarray, decodes: np.ndarray,
                  previous_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Resolved requests' gaps as (per-step values, their weights, the first gaps): a
    decoding step after a request's first decoding step contributes ``end - previous_end``
    once per request it separates two tokens of; each request's first gap is apart."""
    index = np.flatnonzero(decodes)
    lo = np.searchsorted(index, first, side="right")        # the first decoding step after
    hi = np.searchsorted(index, finish, side="right")
    first_gaps = end[index[lo]] - end[first]
    cover = np.zeros(index.size + 1, np.int64)
    np.add.at(cover, lo + 1, 1)
    np.add.at(cover, hi, -1)
    weights = np.cumsum(cover)[:-1]
    return (end - previous_end)[index], weights, first_gaps


def token_times(requests: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``requests`` (a timed run's) plus ``tpot_ms`` and ``itl_max_ms`` (module docstring)."""
    end, decodes, previous_end = _timeline(steps)
    ok, first, finish = _resolved(requests, decodes)
    itl_max = np.full(requests.height, np.nan)
    if ok.any():
        index = np.flatnonzero(decodes)
        values = np.append((end - previous_end)[index], 0.0)   # a sentinel: reduceat's bound
        lo = np.searchsorted(index, first[ok], side="right")
        hi = np.searchsorted(index, finish[ok], side="right")
        later = np.where(hi > lo + 1, np.maximum.reduceat(
            values, np.ravel(np.column_stack((np.minimum(lo + 1, index.size),
                                              hi))))[::2], -np.inf)
        itl_max[ok] = np.maximum(end[index[lo]] - end[first[ok]], later)
    return requests.with_columns(tpot_ms=tpot_ms(),
                                 itl_max_ms=pl.Series(itl_max).fill_nan(None))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` (linear) without the repeat."""
    order = np.argsort(values, kind="stable")
    values, counts = values[order], np.cumsum(weights[order])
    rank = q / 100 * (counts[-1] - 1)
    below, above = np.searchsorted(counts, [np.floor(rank), np.ceil(rank)], side="right")
    return float(values[below] + (rank - np.floor(rank)) * (values[above] - values[below]))


def token_metrics(requests: pl.DataFrame, steps: pl.DataFrame) -> dict[str, object]:
    """TPOT (``tpot_ms_mean``, ``tpot_ms_p50/p90/p99``) and pooled ITL (``itl_ms_mean``,
    ``itl_ms_p50/p90/p99``) of a timed run, ``itl_unresolved_requests``; None where no
    request has two output tokens (ITL: none resolved)."""
    tpot = requests.select(tpot_ms().alias("t")).drop_nulls()["t"]
    out: dict[str, object] = {"tpot_ms_mean": float(tpot.mean()) if tpot.len() else None}
    out.update({f"tpot_ms_p{p}": float(tpot.quantile(p / 100, "linear")) if tpot.len()
                else None for p in PERCENTILES})
    end, decodes, previous_end = _timeline(steps)
    ok, first, finish = _resolved(requests, decodes)
    gaps, weights, first_gaps = _request_gaps(first[ok], finish[ok], end, decodes, previous_end)
    values = np.concatenate((gaps, first_gaps))
    weights = np.concatenate((weights, np.ones(first_gaps.size, np.int64)))
    keep = weights > 0
    out["itl_ms_mean"] = (float(np.dot(values[keep], weights[keep]) / weights.sum())
                          if keep.any() else None)
    out.update({f"itl_ms_p{p}": weighted_percentile(values[keep], weights[keep], p)
                if keep.any() else None for p in PERCENTILES})
    out["itl_unresolved_requests"] = int(((requests["output_tokens"] > 1).to_numpy()
                                          & ~ok).sum())
    return out


def good_request(slo_ttft_ms: float | None, slo_tpot_ms: float | None,
                 tpot: pl.Expr | None = None) -> pl.Expr:
    """True for a request meeting every SLO given (TPOT 0 below two output tokens);
    ``tpot`` the per-request TPOT (default ``tpot_ms()``)."""
    good = pl.lit(True)
    if slo_ttft_ms is not None:
        good = good & (pl.col("ttft_ms") <= slo_ttft_ms)
    if slo_tpot_ms is not None:
        good = good & ((tpot_ms() if tpot is None else tpot).fill_null(0.0) <= slo_tpot_ms)
    return good


def goodput(requests: pl.DataFrame, duration_s: float | None, slo_ttft_ms: float | None,
            slo_tpot_ms: float | None) -> dict[str, object]:
    """The requests meeting every SLO given (module docstring): ``goodput_requests``,
    ``goodput_fraction``, ``request_goodput`` (per second of ``duration_s``), and the SLOs."""
    count = int(requests.select(good_request(slo_ttft_ms, slo_tpot_ms).sum())[0, 0]) \
        if requests.height else 0
    return {"slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms, "goodput_requests": count,
            "goodput_fraction": count / requests.height if requests.height else None,
            "request_goodput": count / duration_s if duration_s else None}
