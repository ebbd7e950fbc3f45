"""Time per output token of a timed run: TPOT = (finish - first token) / (output tokens - 1).

``tpot_ms()`` is the per-request expression (null for a request of one output token, as
``vllm bench serve`` leaves those out); ``tpot_quantiles(requests)`` gives p50 and p90
(linear, as the run's other percentiles), None where the run has no finish times.
"""

from __future__ import annotations

import polars as pl

__all__ = ["TPOT_COLUMNS", "tpot_ms", "tpot_quantiles"]

TPOT_COLUMNS = ("first_token_ms", "finish_ms", "output_tokens")


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
