"""What a fleet configuration costs: the price file, the arithmetic, the cheapest point
(against a brute force), and ``fleet`` / ``plan --fleet`` with ``--cost`` end to end."""

from __future__ import annotations

import json
import subprocess

import polars as pl
import pytest

from conftest import cli_in_process
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.fleet.cost import PRICES_FILE, Prices, cheapest, prices_for, read_prices, \
    with_cost
from pipeline.fleet.plan import Memory



def test_bundled_prices_name_their_sources():
    document = read_prices(PRICES_FILE)
    entries = [*document["gpu_per_hour"].values(), document["cpu_memory_per_gib_hour"],
               document["disk_per_gib_hour"]]
    for entry in entries:
        assert entry["usd"] > 0
        assert entry["source"].startswith("https://") and entry["read"]
    h100 = prices_for("h100")
    assert h100.gpu_per_hour == document["gpu_per_hour"]["H100"]["usd"]
    assert "pricegpu" in h100.sources["gpu"]


def test_options_override_the_file_and_a_missing_gpu_is_named(tmp_path):
    given_prices = prices_for("L4", gpu_per_hour=0.8, cpu_per_gib_hour=0.01,
                              disk_per_gib_hour=0.0)
    assert (given_prices.gpu_per_hour, given_prices.cpu_per_gib_hour) == (0.8, 0.01)
    assert given_prices.sources["gpu"] == "given on the command line"
    with pytest.raises(ValueError, match=r"no price for GPU L4 .*--gpu-cost-per-hour"):
        prices_for("L4")
    bad = tmp_path / "prices.json"
    bad.write_text('{"kind": "kvlab-prices",\n "gpu_per_hour": {,}}')
    with pytest.raises(ValueError, match=rf"{bad}:2: not JSON"):
        prices_for("H100", bad)
    bad.write_text(json.dumps({"kind": "kvlab-prices", "gpu_per_hour": {},
                               "cpu_memory_per_gib_hour": {"usd": 1}}))
    with pytest.raises(ValueError, match="no \"disk_per_gib_hour\" section"):
        prices_for("H100", bad)
    bad.write_text(json.dumps({"kind": "kvlab-prices",
                               "gpu_per_hour": {"H100": {"usd": -1}},
                               "cpu_memory_per_gib_hour": {"usd": 1},
                               "disk_per_gib_hour": {"usd": 1}}))
    with pytest.raises(ValueError, match="expected a price >= 0"):
        prices_for("H100", bad)


def _fleet(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, orient="row", schema={
        "router": pl.String, "instances": pl.Int64, "gpu_blocks": pl.Int64,
        "load": pl.Float64, "ttft_p90_ms": pl.Float64, "hit_ratio": pl.Float64,
        "output_tokens": pl.Int64, "requests": pl.Int64, "throughput_rps": pl.Float64})


def test_cost_arithmetic():
    fleet = _fleet([("rr", 3, 100, 1.0, 50.0, 0.5, 3600, 10, 2.0)])
    memory = Memory(kv_bytes_per_token=1 << 20, block_size=16, cpu_tokens=1024)
    prices = Prices("H100", 2.0, 0.5, 0.0)
    row = with_cost(fleet, memory, prices, kv_tokens_per_gpu=1600).row(0, named=True)
    # 3 GPUs x $2 + 3 instances x 1 GiB of CPU tier x $0.5
    assert row["gpu_usd_per_hour"] == 6.0 and row["memory_usd_per_hour"] == 1.5
    assert row["usd_per_hour"] == 7.5
    # 3600 output tokens over 10 requests at 2 requests/s: 720 tokens/s
    assert row["usd_per_million_output_tokens"] == pytest.approx(7.5 / (720 * 3600) * 1e6)
    assert row["fits_gpu"] is True                          # 100 blocks x 16 = 1600 tokens
    assert not with_cost(fleet, memory, prices, 1599)["fits_gpu"][0]
    shared = with_cost(fleet, Memory(1 << 20, 16, 1024, cpu_shared=True), prices)
    assert shared["memory_usd_per_hour"][0] == 0.5          # one pool for the fleet


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 4),
                          st.sampled_from([50, 100, 200]), st.floats(1, 500),
                          st.floats(0, 1)), min_size=1, max_size=12),
       st.floats(1, 500), st.integers(800, 3200), st.floats(0.1, 4))
def test_cheapest_equals_a_brute_force(points, target, kv_cap, gpu_price):
    unique = {(r, n, b): (t, h) for r, n, b, t, h in points}
    fleet = _fleet([(r, n, b, 1.0, t, h, 100, 10, 1.0) for (r, n, b), (t, h) in unique.items()])
    memory = Memory(kv_bytes_per_token=1 << 17, block_size=16, cpu_tokens=0)
    priced = with_cost(fleet, memory, Prices("X", gpu_price, 0.1), kv_tokens_per_gpu=kv_cap)
    answer = {row["router"]: row for row in cheapest(priced, ttft_p90_ms=target)
              .iter_rows(named=True)}
    for router in ("a", "b"):
        fitting = [(n * gpu_price, n, n * b * 16) for (r, n, b), (t, h) in unique.items()
                   if r == router and t <= target and b * 16 <= kv_cap]
        if router not in answer:
            assert not any(r == router for r, *_ in unique)
            continue
        row = answer[router]
        if not fitting:
            assert row["usd_per_hour"] is None
            continue
        best = min(fitting)
        assert (row["usd_per_hour"], row["instances"], row["total_tokens"]) == \
            pytest.approx(best)


def _run(*args: str) -> subprocess.CompletedProcess:
    return cli_in_process(*args)


WORKLOAD = ("--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "1000",
            "--repeat-count", "2", "--model", "llama-3.1-8b", "--jobs", "1")


def test_fleet_and_plan_with_cost(tmp_path):
    done = _run("fleet", *WORKLOAD, "--instances", "1,2", "--gpu", "200blocks",
                "--gpu-cost-per-hour", "3", "--out", str(tmp_path / "f"), "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["usd_per_hour"] for row in rows] == pytest.approx([3.0, 6.0])
    assert pl.read_parquet(tmp_path / "f" / "fleet.parquet")["usd_per_hour"].to_list() == \
        pytest.approx([3.0, 6.0])
    plan = _run("plan", "--fleet", *WORKLOAD, "--instances", "1,2", "--cost",
                "--target-hit-ratio", "0.01", "--json")
    assert plan.returncode == 0, plan.stderr
    document = json.loads(plan.stdout)
    answer = document["answers"][0]
    assert answer["instances"] == 1                     # the cheapest point meets a tiny target
    assert answer["usd_per_hour"] == pytest.approx(prices_for("H100").gpu_per_hour)
    assert document["cost"]["gpu"] == "H100"


def test_a_gpu_without_a_price_is_one_line_before_anything_runs(tmp_path):
    done = _run("fleet", *WORKLOAD, "--gpu-type", "L4", "--cost", "--out", str(tmp_path / "f"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--gpu-cost-per-hour" in done.stderr
    assert not (tmp_path / "f").exists()
    done = _run("fleet", *WORKLOAD, "--gpu-cost-per-hour", "-1", "--out", str(tmp_path / "f"))
    assert done.returncode == 2 and "--gpu-cost-per-hour" in done.stderr


def test_a_tensor_parallel_instance_pays_for_every_gpu(tmp_path):
    done = _run("fleet", *WORKLOAD, "--instances", "1", "--gpu", "200blocks",
                "--tensor-parallel-size", "2", "--gpu-cost-per-hour", "3",
                "--out", str(tmp_path / "f"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["usd_per_hour"] == pytest.approx(6.0)
