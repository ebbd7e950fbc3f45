"""The rules every stage shares, each defined once: tiers, config names, exact statistics."""

from __future__ import annotations

import statistics

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from kvlab.kvsim import TIERS as KVLAB_TIERS
from kvlab.summarize import CONFIGS
from pipeline.base.config import BASELINE, OFFLOADED
from pipeline.base.stats import exact_mean, exact_median
from pipeline.sweeps import AGGREGATE_SCHEMA
from pipeline.cache.tiers import COUNT_COLUMNS, COUNT_NAMES, TIER, TIER_CODES, TIERS


def test_tiers_are_kvlab_s_and_sort_fastest_first():
    assert TIERS == KVLAB_TIERS == ("gpu", "cpu", "miss")
    shuffled = pl.Series(["miss", "gpu", "cpu", "gpu"], dtype=TIER)
    assert shuffled.sort().to_list() == ["gpu", "gpu", "cpu", "miss"]
    assert [TIERS[TIER_CODES[tier]] for tier in TIERS] == list(TIERS)
    assert set(COUNT_COLUMNS) == set(COUNT_NAMES) == set(TIERS)
    assert set(COUNT_COLUMNS.values()) <= set(AGGREGATE_SCHEMA)


def test_config_names_are_kvlab_s():
    assert (BASELINE, OFFLOADED) == CONFIGS == ("baseline", "lmcache")


ttfts = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@given(groups=st.lists(st.lists(ttfts, min_size=1, max_size=9), min_size=1, max_size=5))
def test_exact_statistics_are_python_s_per_group(groups):
    frame = pl.DataFrame({"g": [g for g, values in enumerate(groups) for _ in values],
                          "ttft_ms": [value for values in groups for value in values]})
    got = (frame.group_by("g", maintain_order=True)
           .agg(p50=exact_median(), mean=exact_mean()).rows())
    assert got == [(g, statistics.median(values), statistics.mean(values))
                   for g, values in enumerate(groups)]


def test_exact_statistics_of_nothing_are_null():
    empty = pl.DataFrame({"ttft_ms": [None]}, schema={"ttft_ms": pl.Float64})
    assert empty.select(exact_median(), exact_mean().alias("mean")).row(0) == (None, None)
