"""Exact TTFT statistics: Python's ``statistics.median`` and ``statistics.mean`` as polars
expressions, the one definition every TTFT statistic uses.

polars' own ``median`` and ``mean`` can differ from ``statistics`` in the last bit (its mean
sums in floating point; its median interpolates), which would break the byte-for-byte match
with ``kvlab/summarize.py``. These run the standard library on each group's values instead:
the median is the middle value or ``(lower + upper) / 2``, the mean the correctly rounded
exact mean. Use them in ``select`` or ``group_by(...).agg``; an empty input gives null.

>>> frame = pl.DataFrame({"ttft_ms": [78.9, 9.4, 2.8, 83.6]})
>>> frame.select(exact_median(), pl.col("ttft_ms").median().alias("polars")).row(0)
(44.150000000000006, 44.15)
>>> frame = pl.DataFrame({"g": [1, 1, 1, 2], "ttft_ms": [13.4, 84.7, 76.4, 30.0]})
>>> means = exact_mean(), pl.col("ttft_ms").mean().alias("polars")
>>> frame.group_by("g", maintain_order=True).agg(*means).rows()
[(1, 58.16666666666667, 58.166666666666664), (2, 30.0, 30.0)]
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import polars as pl

__all__ = ["exact_median", "exact_mean"]


def _exact(function: Callable[[list[float]], float], column: str | pl.Expr) -> pl.Expr:
    """``function`` over each group's non-null values of ``column``, as a Float64 scalar."""
    expr = pl.col(column) if isinstance(column, str) else column

    def apply(values: pl.Series) -> pl.Series:
        present = values.drop_nulls().to_list()
        return pl.Series([float(function(present)) if present else None], dtype=pl.Float64)

    return expr.map_batches(apply, return_dtype=pl.Float64, returns_scalar=True)


def exact_median(column: str | pl.Expr = "ttft_ms") -> pl.Expr:
    """``statistics.median`` of ``column`` (per group in an aggregation)."""
    return _exact(statistics.median, column)


def exact_mean(column: str | pl.Expr = "ttft_ms") -> pl.Expr:
    """``statistics.mean`` of ``column`` (per group in an aggregation)."""
    return _exact(statistics.mean, column)
