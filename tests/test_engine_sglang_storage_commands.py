"""HiCache's L3 store in the commands: ``simulate`` and ``fleet`` with
``--hicache-storage-backend`` write the storage columns and name the store; on the time
clock a request waiting for its prefetch is admitted when the transfer lands; the storage
options without HiCache or without a backend, an unknown backend, a link that is not a
positive bandwidth, an extra config that is not SGLang's are one line naming the option,
exit 2, nothing written."""

from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import refused
from pipeline.cli import main
from pipeline.components.sglang_storage_spec import StorageSpec
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang import SGLangConfig, simulate
from pipeline.engine.sglang_hicache import HiCacheSpec
from test_engine_sglang_equal import scheduler_settings

WORKLOAD = ["--pattern", "long-doc-qa", "--num-documents", "6", "--document-length", "600",
            "--model", "qwen2.5-1.5b", "--gpu", "64blocks", "--engine", "sglang", "--rate",
            "20"]
HICACHE = ["--enable-hierarchical-cache", "--hicache-ratio", "1"]


def test_simulate_writes_the_storage_columns(tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, *HICACHE, "--hicache-storage-backend", "file",
                 "--hicache-storage-prefetch-policy", "wait_complete", "--latency",
                 "roofline", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "L3 store file (prefetch wait_complete, 5 GB/s, 0.1 ms a call assumed" in shown
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert requests["storage_hit_tokens"].sum() > 0                  # documents come back
    assert (requests["storage_hit_tokens"] <= requests["prompt_tokens"]).all()
    assert steps["storage_write_bytes"].sum() > 0 and steps["storage_read_bytes"].sum() > 0
    models = json.loads((out / "metrics.json").read_text())["models"]
    assert models["hicache_storage_backend"] == "file"


def test_without_a_store_the_columns_are_absent(tmp_path):
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, *HICACHE, "--out", str(out)]) == 0
    assert "storage_hit_tokens" not in pl.read_parquet(out / "requests.parquet").columns
    assert "storage_read_bytes" not in pl.read_parquet(out / "steps.parquet").columns


def test_fleet_runs_a_store_per_instance(tmp_path):
    workload = [w if w != "6" else "2" for w in WORKLOAD]
    assert main(["fleet", *workload, *HICACHE, "--hicache-storage-backend", "file",
                 "--latency", "roofline", "--out", str(tmp_path / "fleet")]) == 0


def _stem_returns(prefetch: str, link: tuple[float, float], timeout_s: float = 1.0
                  ) -> pl.DataFrame:
    """A 40-token stem pushed off a 60-token pool and a 100-token host pool by two
    others comes back, on the time clock (10 ms a batch)."""
    stems = [list(range(k, k + 40)) for k in (100, 200, 300, 100)]
    runs = [SimRequest(i, stem + [i], 3, arrival_s=0.1 * i, output_token_ids=[9, 9, 9])
            for i, stem in enumerate(stems)]
    options = dict(policy="fcfs", max_running=4, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=1)
    storage = StorageSpec(prefetch_policy=prefetch, threshold=8, latency_ms=link[0],
                          bandwidth=link[1], page_bytes=1000, timeout_base=timeout_s)
    config = SGLangConfig(2, 10 ** 6, 1, scheduler_settings(60, options),
                          HiCacheSpec("write_through", 100, 1000, storage))
    return simulate(runs, config, clock="time", step_ms=lambda record: 10.0).requests


@pytest.mark.parametrize("prefetch", ["wait_complete", "timeout"])
def test_a_request_waits_for_its_prefetch_on_the_time_clock(prefetch):
    """Its hit query (2 ms) and its 40 pages of 1000 bytes at 1000 bytes/ms after a 2 ms
    call land 44 ms after it arrives on an idle engine: it is admitted then, with them
    (transfers that take no time: at once)."""
    slow = _stem_returns(prefetch, (2.0, 1e3))
    fast = _stem_returns(prefetch, (0.0, float("inf")))
    assert slow["storage_hit_tokens"].to_list() == [0, 0, 0, 40]
    assert fast["storage_hit_tokens"].to_list() == [0, 0, 0, 40]
    assert fast["queue_ms"][3] == 0.0
    assert slow["queue_ms"][3] == pytest.approx(44.0)


def test_the_timeout_policy_stops_waiting():
    """A 10 ms budget (plus 40 pages x 0.25 s / 1024) from the first blocked poll: the
    request is admitted when it runs out, before its pages land, without them."""
    budget = 10.0 + 40 * 0.25 / 1024 * 1e3
    frame = _stem_returns("timeout", (2.0, 1e3), timeout_s=0.01)
    assert frame["storage_hit_tokens"].to_list() == [0, 0, 0, 0]
    assert frame["queue_ms"][3] == pytest.approx(budget)
    assert frame["queue_ms"][3] < 44.0


def test_best_effort_does_not_wait():
    slow = _stem_returns("best_effort", (2.0, 1e3))
    assert slow["storage_hit_tokens"].to_list() == [0, 0, 0, 0]
    assert slow["queue_ms"][3] < 10.0 + 1e-9


@pytest.mark.parametrize("given, message", [
    (["--hicache-storage-backend", "file"],
     "--hicache-storage-backend: needs --enable-hierarchical-cache"),
    (["--hicache-storage-prefetch-policy", "best_effort"],
     "--hicache-storage-prefetch-policy: needs --enable-hierarchical-cache"),
    ([*HICACHE, "--hicache-storage-prefetch-policy", "best_effort"],
     "--hicache-storage-prefetch-policy: needs --hicache-storage-backend"),
    ([*HICACHE, "--hicache-storage-link", "2"],
     "--hicache-storage-link: needs --hicache-storage-backend"),
    ([*HICACHE, "--hicache-storage-backend", "s3"],
     "argument --hicache-storage-backend: invalid choice: 's3'"),
    ([*HICACHE, "--hicache-storage-backend", "file", "--hicache-storage-link", "0"],
     "argument --hicache-storage-link: GBPS must be > 0, got '0'"),
    ([*HICACHE, "--hicache-storage-backend", "file", "--hicache-storage-link", "-3:1"],
     "argument --hicache-storage-link: GBPS must be > 0, got '-3'"),
    ([*HICACHE, "--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config",
      "{\"prefetch_threshold\": \"big\"}"],
     "argument --hicache-storage-backend-extra-config: prefetch_threshold must be int"),
    ([*HICACHE, "--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config",
      "{\"max_size\": \"200G\"}"],
     "argument --hicache-storage-backend-extra-config: max_size: a capped store is not "
     "modelled"),
    ([*HICACHE, "--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config",
      "[1]"], "argument --hicache-storage-backend-extra-config: expected a JSON object"),
])
@pytest.mark.parametrize("command", ["simulate", "fleet"])
def test_bad_storage_input_is_one_line(command, given, message, tmp_path):
    out = tmp_path / "out"
    refused([command, *WORKLOAD, *given, "--out", str(out)], message, out)



def test_the_models_line_names_the_plain_python_engine_in_either_loop_flag(tmp_path, capsys):
    """An L3 store runs the plain-Python HiCache engine (its own, non-overlap loop), with or
    without --disable-overlap-schedule: the models line says so either way."""
    from pipeline.engine.sglang_options import HICACHE_SUMMARY
    for flag in ([], ["--disable-overlap-schedule"]):
        assert main(["simulate", *WORKLOAD, *HICACHE, "--hicache-storage-backend", "file",
                     *flag, "--out", str(tmp_path / f"s{len(flag)}")]) == 0
        models = next(line for line in capsys.readouterr().out.splitlines()
                      if line.startswith("models:"))
        assert HICACHE_SUMMARY in models and "loop), compiled" not in models, models
