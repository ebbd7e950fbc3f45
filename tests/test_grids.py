"""The capacity-grid builders: whole numbers, the ends included, spacing as documented."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline.sizes import grids


@given(top=st.integers(0, 10 ** 9), points=st.integers(2, 300))
def test_even_runs_from_zero_to_the_top_in_equal_steps(top, points):
    grid = grids.even(top, points)
    assert grid.dtype == np.int64 and grid.size == points
    assert grid[0] == 0 and grid[-1] == top
    assert np.all(np.abs(np.diff(grid) - top / (points - 1)) <= 1)


@given(low=st.integers(1, 1000), span=st.integers(1, 10 ** 6), points=st.integers(1, 200))
def test_log_spaced_is_distinct_ascending_between_the_ends(low, span, points):
    top = low * span
    grid = grids.log_spaced(low, top, points)
    assert grid.dtype == np.int64 and np.all(np.diff(grid) > 0)
    assert grid[0] == low and (grid[-1] == top or points == 1)


def test_fractions_are_rounded_then_scaled_and_distinct():
    assert grids.fractions_of(10, [0, 1 / 4, 1 / 4, 1], 16) == [0, 32, 160]
