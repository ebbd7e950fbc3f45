"""``simulate`` and ``fleet`` with vLLM's offloading options: the native connector runs
(its columns written), ``lmcache`` is LMCache's CPU backend of that size, and bad input is
one line naming the option, exit 2, nothing written."""

from __future__ import annotations

import polars as pl
import pytest
from test_cli_bad_arguments import usage_error

from pipeline.cli import main

PATTERN = ["--pattern", "long-doc-qa", "--num-documents", "4", "--document-length", "256",
           "--gpu", "40blocks", "--model", "qwen2.5-1.5b"]


@pytest.mark.parametrize("command", ["simulate", "fleet"])
@pytest.mark.parametrize("argv, message", [
    (["--kv-offloading-backend", "native"], "--kv-offloading-backend needs "
     "--kv-offloading-size GiB"),
    (["--offload-eviction-policy", "arc"], "--offload-eviction-policy needs "
     "--kv-offloading-size GiB"),
    (["--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache",
      "--offload-store-threshold", "2"],
     "--offload-store-threshold applies to --kv-offloading-backend native, not lmcache"),
    (["--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache",
      "--offload-block-size", "32"],
     "--offload-block-size applies to --kv-offloading-backend native, not lmcache"),
    (["--kv-offloading-size", "-1"], "--kv-offloading-size: expected a number > 0"),
    (["--kv-offloading-size", "0"], "--kv-offloading-size: expected a number > 0"),
    (["--kv-offloading-size", "1", "--offload-block-size", "24"],
     "--offload-block-size 24: must be a multiple of --block-size 16"),
    (["--kv-offloading-size", "1", "--cpu-model", "lru", "--cpu", "1000"],
     "--cpu-model: --kv-offloading-size already sets the engine's CPU tier"),
    (["--kv-offloading-size", "1", "--cpu", "1000"],
     "--cpu: --kv-offloading-size already sets the engine's CPU tier"),
    (["--kv-offloading-size", "1e-9"], "--kv-offloading-size 1e-09: less than one chunk"),
    (["--kv-offloading-size", "1", "--kv-offloading-backend", "disk"],
     "--kv-offloading-backend: invalid choice: 'disk'"),
])
def test_offloading_usage_errors(tmp_path, capsys, command, argv, message):
    from conftest import folder_snapshot
    usage_error(capsys, [command, *PATTERN, *argv, "--out", str(tmp_path / "out")], message)
    assert folder_snapshot(tmp_path) == {}


def test_a_size_needs_the_bytes_per_token(tmp_path, capsys):
    usage_error(capsys, ["simulate", *PATTERN[:-2], "--kv-offloading-size", "1", "--out",
                         str(tmp_path / "out")], "--kv-offloading-size needs --model")
    assert not (tmp_path / "out").exists()


def test_native_and_lmcache_backends_run(tmp_path, capsys):
    """Native: its load and transfer columns, CPU hits; lmcache: LMCache's tier of the
    same size (1 GiB / 28 KiB per token of Qwen2.5-1.5B = 37,449 tokens), the plain
    columns."""
    out = tmp_path / "native"
    assert main(["simulate", *PATTERN, "--kv-offloading-size", "1", "--out", str(out)]) == 0
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert requests["cpu_hit_tokens"].sum() > 0
    assert {"load_step", "load_done_step"} <= set(requests.columns)
    assert steps["cpu_load_bytes"].sum() == requests["cpu_hit_tokens"].sum() * 28672
    assert "vllm-native" in capsys.readouterr().out
    out = tmp_path / "lmcache"
    assert main(["simulate", *PATTERN, "--kv-offloading-size", "1", "--kv-offloading-backend",
                 "lmcache", "--out", str(out)]) == 0
    lmcache = pl.read_parquet(out / "requests.parquet")
    assert "load_step" not in lmcache.columns and lmcache["cpu_hit_tokens"].sum() > 0
    plain = tmp_path / "plain"
    assert main(["simulate", *PATTERN, "--cpu", "37449", "--out", str(plain)]) == 0
    assert pl.read_parquet(plain / "requests.parquet").equals(lmcache)


def test_native_runs_with_async_scheduling(tmp_path):
    """``--async-scheduling`` with the native backend runs (vLLM's AsyncScheduler with the
    connector: tests/test_engine_native_offload.py proves it equal) and hits the CPU."""
    out = tmp_path / "async"
    assert main(["simulate", *PATTERN, "--kv-offloading-size", "1", "--async-scheduling",
                 "--out", str(out)]) == 0
    requests = pl.read_parquet(out / "requests.parquet")
    assert requests["cpu_hit_tokens"].sum() > 0 and requests["finish_step"].null_count() == 0


def test_fleet_runs_one_connector_per_instance(tmp_path):
    """Both of fleet's paths (the compiled one for an oblivious router, the stepped one for
    a cache-aware router) run the native tier, timed by the fleet's roofline, with sync and
    async scheduling; it hits."""
    for extra in ([], ["--async-scheduling"]):
        out = tmp_path / f"fleet{len(extra)}"
        assert main(["fleet", *PATTERN, "--kv-offloading-size", "1", "--router",
                     "round-robin,prefix-precise", *extra, "--out", str(out)]) == 0
        fleet = pl.read_parquet(out / "fleet.parquet")
        assert fleet.height == 2 and (fleet["hit_ratio"] > 0).all()


def test_tier_stack_and_native_offloading_are_one_or_the_other(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pipeline", "simulate", "--pattern",
                           "long-doc-qa", "--model", "llama-3.1-8b", "--gpu", "1GiB",
                           "--tier", "cpu:1GiB", "--kv-offloading-size", "1", "--out",
                           str(tmp_path / "o")], cwd=root, text=True, capture_output=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--tier" in done.stderr and "--kv-offloading-size" in done.stderr
    assert not (tmp_path / "o").exists()


def test_native_offloading_on_the_time_clock_ends_with_its_summary(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pipeline", "simulate", "--pattern",
                           "long-doc-qa", "--num-documents", "4", "--document-length", "2000",
                           "--model", "llama-3.1-8b", "--gpu", "300blocks", "--latency",
                           "roofline", "--rate", "20", "--kv-offloading-size", "1", "--out",
                           str(tmp_path / "o")], cwd=root, text=True, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "TTFT p50" in done.stdout and (tmp_path / "o" / "requests.parquet").is_file()
