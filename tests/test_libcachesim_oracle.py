"""An independent oracle: libCacheSim's LRU agrees with kvlab's LRUCache per access."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvlab.kvsim import LRUCache

lcs = pytest.importorskip("libcachesim", reason="libCacheSim (a dev dependency) not installed")


@st.composite
def traces(draw):
    n_keys = draw(st.integers(1, 10))
    size_of = draw(st.lists(st.integers(1, 20), min_size=n_keys, max_size=n_keys))
    keys = draw(st.lists(st.integers(0, n_keys - 1), max_size=60))
    return [(key, size_of[key]) for key in keys]


@given(capacity=st.integers(1, 60), trace=traces())
def test_per_access_hits_equal_libcachesim(capacity, trace):
    # hashpower 12: 4096 hash buckets for at most 10 keys (the default, 2**24 buckets, took
    # 45 ms to allocate per example; the table's size does not change what LRU keeps)
    ours, theirs = LRUCache(capacity), lcs.LRU(cache_size=capacity, hashpower=12)
    request = lcs.Request()
    for key, size in trace:
        request.obj_id, request.obj_size = key, size
        assert ours.access(key, size) == theirs.get(request), (key, size)
