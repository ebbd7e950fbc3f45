"""pipeline.ttft.latency: tier latencies from attributed measurements -> predicted TTFT."""

import statistics

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT
from pipeline.ttft import latency
from pipeline.ttft.attribution import attribute_tiers
from pipeline.workloads.measured_file import load_measured


def attributed():
    return attribute_tiers(load_measured(str(ROOT / "data" / "ttft.jsonl")))


def test_latencies_are_per_config_medians_with_fallback():
    frame = attributed()
    model = latency.latency_model(frame)
    lmcache_cpu = frame.filter(pl.col("config") == "lmcache", pl.col("tier") == "cpu")
    assert model["lmcache"]["cpu"] == statistics.median(lmcache_cpu["ttft_ms"])
    assert model["baseline"]["cpu"] == model["lmcache"]["cpu"]     # baseline never reloads
    assert 570 < model["baseline"]["miss"] < model["lmcache"]["miss"] < 610
    assert 25 < model["baseline"]["gpu"] < 35


def test_model_reproduces_measured_pass_means_on_the_bundled_data():
    check = latency.model_check(attributed(), latency.latency_model(attributed()))
    assert check.height == 6
    assert check["error_pct"].abs().max() < 2       # synthetic data: tiers explain everything


def test_unknown_tier_latency_gives_null_only_where_that_tier_occurs():
    model = {"baseline": {"gpu": 30.0, "cpu": None, "miss": 500.0},
             "lmcache": {"gpu": 30.0, "cpu": None, "miss": 520.0}}
    rows = pl.DataFrame({"cpu_capacity": [0, 100, 100], "accesses": [2, 2, 2],
                         "gpu_hits": [1, 1, 2], "cpu_hits": [0, 1, 0], "misses": [1, 0, 0]})
    assert latency.predict(rows, model)["predicted_ttft_ms"].to_list() == [265.0, None, 30.0]


counts = st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20)).filter(
    lambda c: sum(c) > 0)
ms = st.floats(1, 2000, allow_nan=False)


@given(rows=st.lists(st.tuples(st.sampled_from([0, 56000]), counts), min_size=1, max_size=8),
       gpu_only=st.tuples(ms, ms, ms), offload=st.tuples(ms, ms, ms))
def test_predict_is_the_weighted_mean_of_tier_latencies(rows, gpu_only, offload):
    model = {"baseline": dict(zip(("gpu", "cpu", "miss"), gpu_only)),
             "lmcache": dict(zip(("gpu", "cpu", "miss"), offload))}
    frame = pl.DataFrame([(cpu, sum(c), *c) for cpu, c in rows], orient="row", schema=[
        "cpu_capacity", "accesses", "gpu_hits", "cpu_hits", "misses"])
    got = latency.predict(frame, model)["predicted_ttft_ms"].to_list()
    for (cpu, c), value in zip(rows, got):
        table = model["baseline" if cpu == 0 else "lmcache"]
        expected = (c[0] * table["gpu"] + c[1] * table["cpu"] + c[2] * table["miss"]) / sum(c)
        assert abs(value - expected) <= 0.05 + 1e-9 * expected
