"""Cross-check: every policy libCacheSim also has gives identical hits per access (random
traces, the shared Mooncake trace at object level, several capacities). libCacheSim's PyPI
wheel (0.3.5) does not ship MRU; MRU is checked against a literal model in
test_policy_contract.py. OPT is compared without bypass (libCacheSim's Belady always stores)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_trace
from pipeline.policies import OPT
from pipeline.catalog import make_policy
from pipeline.policies.reference import LCS_NAMES, lcs_hits
from pipeline.workloads.mooncake import read_mooncake
from policy_traces import random_traces

pytest.importorskip("libcachesim", reason="libCacheSim (a dev dependency) not installed")

FEW = settings(max_examples=min(50, settings.default.max_examples))  # per policy: x9


def ours(name, keys, sizes, capacity):
    keys = [int(k) for k in keys]
    cache = OPT(capacity, keys, bypass=False) if name == "opt" else make_policy(name, capacity)
    return np.array([cache.access(k, int(s)) for k, s in zip(keys, sizes)], dtype=bool)


@st.composite
def traces(draw):
    """Keys with a size of their own (0 included), or any size per access."""
    n_keys = draw(st.integers(1, 12))
    keys = draw(st.lists(st.integers(0, n_keys - 1), max_size=80))
    if draw(st.booleans()):
        size_of = draw(st.lists(st.integers(0, 20), min_size=n_keys, max_size=n_keys))
        sizes = [size_of[k] for k in keys]
    else:
        sizes = draw(st.lists(st.integers(0, 20), min_size=len(keys), max_size=len(keys)))
    return keys, sizes


@FEW
@pytest.mark.parametrize("name", list(LCS_NAMES))
@given(capacity=st.integers(0, 120), trace=traces())
def test_per_access_hits_equal_libcachesim(name, capacity, trace):
    # libCacheSim refuses an S3-FIFO whose small queue is 0 bytes (capacity < 10)
    capacity = max(capacity, 10) if name == "s3fifo" else capacity
    keys, sizes = trace
    np.testing.assert_array_equal(ours(name, keys, sizes, capacity),
                                  lcs_hits(name, keys, sizes, capacity))


@pytest.fixture(scope="module")
def mooncake():
    keys, tokens = read_mooncake(shared_trace()).items()
    return keys[:6_000], tokens[:6_000]         # the first ~200 requests keep this fast


@pytest.mark.parametrize("name", list(LCS_NAMES))
@pytest.mark.parametrize("unit, capacity", [(True, 200), (True, 2000), (False, 300_000)])
def test_mooncake_items_equal_libcachesim(mooncake, name, unit, capacity):
    keys, tokens = mooncake
    sizes = np.ones_like(tokens) if unit else tokens
    hits = ours(name, keys, sizes, capacity)
    np.testing.assert_array_equal(hits, lcs_hits(name, keys, sizes, capacity))
    assert 0 < hits.sum() < hits.size


@pytest.fixture(scope="module")
def mooncake_file(tmp_path_factory):
    from pipeline.policies.reference import write_oracle_trace
    keys, _ = read_mooncake(shared_trace()).items(unit=True)
    path = tmp_path_factory.mktemp("lcs") / "mooncake.oracleGeneral.bin"
    write_oracle_trace(str(path), keys, np.ones_like(keys))
    return keys, str(path)


@pytest.mark.parametrize("name", list(LCS_NAMES))
def test_whole_mooncake_trace_hit_counts_equal_libcachesim(mooncake_file, name):
    """The compiled replays over all 121,877 block accesses, at a small and a large cache."""
    from pipeline.policies.reference import lcs_hit_count
    from pipeline.catalog import entry
    from pipeline.catalog.policy_replay import encode
    keys, path = mooncake_file
    codes = encode(keys)
    for capacity in (878, 8784):
        ours_hits = int(entry(name).replay_kernel(codes, np.ones_like(codes), capacity,
                                                   bypass=False).sum())
        assert ours_hits == lcs_hit_count(name, path, keys.size, capacity), capacity


@pytest.mark.parametrize("name", list(LCS_NAMES))
def test_random_evicting_traces_equal_libcachesim(name):
    for keys, sizes, capacity in random_traces(20261130):
        capacity = max(capacity, 10) if name == "s3fifo" else capacity
        np.testing.assert_array_equal(ours(name, keys, sizes, capacity),
                                      lcs_hits(name, keys, sizes, capacity))
