"""The many-bands pass (``pipeline.onepass.bands``) equals one Fenwick pass per size band,
and the curves built on it equal the per-band passes they replace."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.onepass import bands, lru_depths
from pipeline.workloads.stream import ORDERS, block_stream
from pipeline.trace import engine
from pipeline.workloads.blocks import BLOCK_SCHEMA
from test_blocks import block_frames


def streams():
    """Block streams of up to 24 requests walking a small trie (``test_blocks``' frames):
    shared prefixes of many lengths, partial last blocks, so bands, hits and evictions all
    occur."""
    return block_frames(max_requests=24, max_blocks=12).map(lambda case: block_stream(*case))


def _touch_from(draw, stream):
    if not draw(st.booleans()):
        return None
    return np.array([draw(st.integers(0, 13)) for _ in range(stream.requests)], np.int64)


@settings(max_examples=150)
@given(streams(), st.sampled_from(ORDERS), st.data())
def test_bands_equal_one_fenwick_pass_per_band(stream, order, data):
    touch_from = _touch_from(data.draw, stream)
    limits = data.draw(st.lists(st.integers(0, 14), min_size=1, max_size=5))
    tops = [limit + data.draw(st.integers(0, 6)) for limit in limits]
    caps = [data.draw(st.integers(0, top)) for top in tops for _ in range(2)]
    cap_band = np.repeat(np.arange(len(limits)), 2)
    hist, counts = bands.band_counts(stream, order, np.array(limits), np.array(tops),
                                     touch_from, np.array(caps), cap_band)
    for band, (limit, top) in enumerate(zip(limits, tops)):
        prefix = lru_depths.block_distances(stream, order, touch_from, limit).prefix
        within = prefix[prefix <= top]
        assert hist[band].tolist() == np.bincount(within, minlength=hist.shape[1]).tolist()
        for k in np.flatnonzero(cap_band == band):
            expected = lru_depths.prefix_counts(stream, prefix, np.array([caps[k]]))[0]
            assert counts[k].tolist() == expected.tolist()


def _fixed_stream(copies: int = 1):
    """Three requests sharing a two-block prefix (``copies`` times over)."""
    rows = [(r, i, key, 2) for c in range(copies)
            for r, keys in enumerate(([1, 2, 3], [1, 2], [1, 2, 4, 5]), start=3 * c)
            for i, key in enumerate(keys)]
    return block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), 2)


def test_bands_refuse_a_top_below_the_limit_or_above_the_small_top():
    stream = _fixed_stream()
    with pytest.raises(ValueError, match="limit <= top"):
        bands.band_counts(stream, "tail-first", np.array([3]), np.array([2]))
    with pytest.raises(ValueError, match="limit <= top"):
        bands.band_counts(stream, "tail-first", np.array([1]),
                          np.array([bands.SMALL_TOP + 1]))


@settings(max_examples=60)
@given(streams(), st.sampled_from(ORDERS), st.data())
def test_curves_equal_the_per_band_passes(stream, order, data):
    capacities = np.array(sorted(set(data.draw(st.lists(st.integers(0, 30), max_size=12)))),
                          np.int64)
    touch_from = _touch_from(data.draw, stream)
    fast_blocks = lru_depths.prefix_blocks(stream, capacities, order, touch_from)
    fast_curve = engine.gpu_curve(stream, capacities * stream.block_size, order)
    hit, low, high = data.draw(st.integers(0, 40)), data.draw(st.integers(-1, 8)), \
        data.draw(st.integers(0, 30))
    fast_crossing = engine.gpu_crossing(stream, order, hit, low, high)
    with pytest.MonkeyPatch.context() as patch:        # every band its own Fenwick pass
        patch.setattr(lru_depths, "SMALL_TOP", -1)
        patch.setattr(engine, "SMALL_TOP", -1)
        assert fast_blocks.tolist() == lru_depths.prefix_blocks(stream, capacities, order,
                                                             touch_from).tolist()
        assert fast_curve.tolist() == engine.gpu_curve(stream, capacities * stream.block_size,
                                                       order).tolist()
        assert fast_crossing == engine.gpu_crossing(stream, order, hit, low, high)


def test_the_unlimited_pass_is_computed_once_per_stream_and_read_only():
    stream = _fixed_stream(copies=2)
    first = lru_depths.block_distances(stream, "head-first")
    assert lru_depths.block_distances(stream, "head-first") is first
    widest = int(stream.cacheable.max())
    assert lru_depths.block_distances(stream, "head-first", np.zeros(stream.requests, np.int64),
                                   widest) is first               # the same pass, said twice
    with pytest.raises(ValueError):
        first.depth[0] = 1
    cold = lru_depths.COLD
    assert first.prefix.tolist() == [cold, cold, cold, 3, 3, 2, 2, cold, cold,
                                     4, 4, 5, 3, 3, 2, 2, 5, 5]
    banded = lru_depths.block_distances(stream, "head-first", size_limit=widest - 1)
    assert banded is not first and banded.depth.flags.writeable
    other = _fixed_stream(copies=2)                      # equal, but another stream
    assert lru_depths.block_distances(other, "head-first") is not first
